// Package storagemigration is a CRD's storage migration, the leader's job
// behind kube's Settings.MigrateStorage: it rewrites every object of the
// CRD's resource with a write that changes nothing, which the API server
// encodes at the CRD's storage version, then reduces the CRD's
// status.storedVersions to that version alone, so that an old version can
// be removed from the CRD. It owns the run and its retries, the CRD's
// StorageMigrating condition, and the job's records and instruments
// (humus.kube.controller.storage_migration.objects and .runs).
//
// Its surface is Config, New and Migration.Run. Its invariants:
//
//   - an object is written only with a JSON merge patch of its
//     resourceVersion alone, which changes no field (a conflict or a
//     NotFound is an object written or deleted since the list: done);
//   - status.storedVersions is set only after every object listed was
//     rewritten, or written or deleted since the list, and only by an
//     update carrying the resourceVersion of a CRD whose generation and
//     storage version are those the run started with; a run that fails or
//     is stopped leaves it as it was;
//   - Run starts over until a run succeeds or finds nothing to do, or its
//     context ends; starting over is safe, since an object stored at the
//     storage version already is not written again.
//
// Why kube writes the objects itself rather than creating a
// StorageVersionMigration (storagemigration.k8s.io/v1, GA and served by
// default in Kubernetes 1.37): the API server only stores that object;
// kube-controller-manager's storage-version-migrator-controller does the
// work, and only where it runs (it needs the garbage collector, and a
// control plane that names its controllers, as kube's local one does, runs
// it only when asked); the API is served from 1.37 on (beta, off by
// default, in 1.35 and 1.36), so most clusters in use don't serve it; and
// creating one is a cluster-wide power over every resource (any
// spec.resource, rewritten with kube-controller-manager's rights), where
// kube's way needs only what the controller already has, list and patch on
// its own resource, and get and update on its CRD's status, limited by
// resourceNames to that one CRD. kube does what that controller does, with
// the same patch, and the same condition on the CRD.
package storagemigration
