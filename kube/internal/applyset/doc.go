// Package applyset prunes a controller's children as a kubectl ApplySet
// (KEP-3659; k8s.io/kubectl/pkg/cmd/apply, applyset.go), the work behind
// kube's Prune and PruneDryRun: each child carries the label PartOfLabel,
// whose value is its parent's ID, and the parent, the reconciled object,
// carries that id as its IDLabel and the tooling and contains-group-kinds
// annotations (ParentMetadata, GroupKinds), so that kubectl sees the set.
// After a reconcile that succeeds, each child of a pruned resource that
// the reconcile didn't write (Written) is deleted (Prune).
//
// It owns the ApplySet's names and id, the record of a reconcile's
// writes, the parent's metadata, and the deletion. Its invariants, so
// that another owner's child, and an object the controller didn't make,
// are never touched:
//
//   - a child is deleted only if a fresh GET finds it with the uid the
//     cache saw, still controlled by the parent's uid, and labelled part of
//     the parent's ApplySet;
//   - its DELETE carries a precondition on that uid and the
//     resourceVersion the GET read, so a child adopted, unlabelled or
//     replaced since is left alone (the conflict is no error);
//   - the "prune preview" record naming what is about to go comes before
//     any deletion, and a dry run stops there;
//   - no DELETE is sent once the reconcile's context is done or its Lease
//     has lapsed (Pruner.MayWork).
package applyset
