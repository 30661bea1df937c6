package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/z5labs/humus/kube/internal/echoes"
)

// Storage migration (Settings.MigrateStorage): the leader rewrites every
// object of the controller's resource with a write that changes nothing,
// which the API server encodes at the CRD's storage version, then reduces
// the CRD's status.storedVersions to that version alone, so that an old
// version can be removed from the CRD.
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

// storageMigrationCondition is the CRD condition the migration sets, the
// one kube-controller-manager's storage version migrator sets
// (apiextensionsv1.StorageMigrating): True with reason MigrationRunning
// while it runs, False with MigrationSucceeded or MigrationFailed after.
const storageMigrationCondition = string(apiextensionsv1.StorageMigrating)

// storageMigrationPage is how many objects one list page of the migration
// holds, as kube-storage-version-migrator's chunks of 500.
const storageMigrationPage = 500

// Attributes of the migration's instruments.
const (
	attrMigrationResult  = "humus.kube.controller.storage_migration.result"
	attrMigrationOutcome = "humus.kube.controller.storage_migration.outcome"
)

// The migration's results per object, and outcomes per run.
const (
	// migrationRewritten: the API server wrote the object anew.
	migrationRewritten = "rewritten"
	// migrationUnchanged: the object was stored at the storage version
	// already; the API server saw the write change no byte and skipped it.
	migrationUnchanged = "unchanged"
	// migrationGone: the object was written (a conflict) or deleted since
	// the list; a write since is stored at the storage version.
	migrationGone = "gone"

	migrationSucceeded = "succeeded"
	migrationFailed    = "failed"
	// migrationNotNeeded: status.storedVersions is the storage version
	// alone already, so no object is stored at another.
	migrationNotNeeded = "not_needed"
	// migrationStopped: the leader stopped leading (it lost the Lease, or
	// is shutting down) before the run was done; the next leader runs it.
	migrationStopped = "stopped"
)

// storageMigration is the controller's migration job.
type storageMigration struct {
	c       *Controller
	objects metric.Int64Counter // objects, by result
	runs    metric.Int64Counter // runs, by outcome
	// retryDelay and maxRetryDelay bound the wait before a failed run is
	// tried again: it doubles from the first to the second.
	retryDelay, maxRetryDelay time.Duration
}

// newStorageMigration returns the migration job of the controller named
// name, with its instruments from m, or an error naming each that can't be
// created. build sets its controller.
func newStorageMigration(m metric.Meter, name string) (*storageMigration, error) {
	objects, err1 := m.Int64Counter("humus.kube.controller.storage_migration.objects",
		metric.WithUnit("{object}"),
		metric.WithDescription("Objects the storage migration wrote, by result: rewritten, unchanged (stored at the storage version already), gone (written or deleted since the list)."))
	runs, err2 := m.Int64Counter("humus.kube.controller.storage_migration.runs",
		metric.WithUnit("{run}"),
		metric.WithDescription("Storage migration runs, by outcome: succeeded, failed, not_needed, stopped."))
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("kube: controller %s: creating the storage migration's instruments: %w", name, err)
	}
	return &storageMigration{objects: objects, runs: runs, retryDelay: time.Second, maxRetryDelay: 5 * time.Minute}, nil
}

// crdName is the name of the controller's CRD, plural.group, as the API
// server requires a CRD to be named.
func (m *storageMigration) crdName() string {
	return m.c.gvr.Resource + "." + m.c.gvr.Group
}

// crdGVR is the resource of CustomResourceDefinitions.
var crdGVR = schema.GroupVersionResource{Group: apiextensionsv1.GroupName, Version: "v1", Resource: "customresourcedefinitions"}

// run migrates until a run succeeds or finds nothing to do, or ctx ends,
// trying a failed run again after a delay that doubles from retryDelay to
// maxRetryDelay. The leader calls it once its caches caught up; a new
// leader, or a restarted one, starts it over, which is safe: an object
// stored at the storage version already is not written again.
func (m *storageMigration) run(ctx context.Context) {
	delay := m.retryDelay
	for {
		err := m.once(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(2*delay, m.maxRetryDelay)
	}
}

// migrationCounts are one run's objects, by result.
type migrationCounts struct{ rewritten, unchanged, gone int }

func (n migrationCounts) total() int { return n.rewritten + n.unchanged + n.gone }

// once is one run of the migration: it reads the CRD, and unless its
// storedVersions is the storage version alone already, marks it migrating,
// rewrites every object, and sets storedVersions to the storage version,
// provided the CRD's spec didn't change meanwhile (its generation). Its
// error, logged and counted, is why the run failed.
func (m *storageMigration) once(ctx context.Context) (err error) {
	c := m.c
	log := c.tel.log.With("controller", c.settings.Name, "crd", m.crdName())
	start := time.Now()
	crd, typed, err := m.getCRD(ctx)
	if err != nil {
		return m.failed(ctx, log, migrationCounts{}, err)
	}
	storage := storageVersionOf(typed)
	if storage == "" {
		return m.failed(ctx, log, migrationCounts{}, errors.New("the CRD names no storage version"))
	}
	if slices.Equal(typed.Status.StoredVersions, []string{storage}) {
		m.runs.Add(ctx, 1, m.outcome(migrationNotNeeded))
		log.InfoContext(ctx, "storage migration not needed: every object is stored at the storage version", "storageVersion", storage)
		return nil
	}
	generation := typed.Generation
	log.InfoContext(ctx, "storage migration started", "storageVersion", storage, "storedVersions", typed.Status.StoredVersions)
	if err := m.setCondition(ctx, crd, metav1.ConditionTrue, "MigrationRunning",
		fmt.Sprintf("%s rewrites every %s so that it is stored at %s", c.settings.Name, c.gvr.Resource, storage), nil); err != nil {
		return m.failed(ctx, log, migrationCounts{}, err)
	}

	n, err := m.rewriteAll(ctx, log)
	if err != nil {
		return m.failed(ctx, log, n, err)
	}

	// Every object listed is now stored at storage, or was written or
	// deleted since: unless the spec changed meanwhile, as a storage version
	// changed again would, no object is stored at another version.
	done := fmt.Sprintf("The migration has succeeded and the stored versions have been updated: %d objects rewritten, %d stored at %s already, %d written or deleted since the list", n.rewritten, n.unchanged, storage, n.gone)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd, typed, err := m.getCRD(ctx)
		if err != nil {
			return err
		}
		if typed.Generation != generation || storageVersionOf(typed) != storage {
			return fmt.Errorf("the CRD's spec changed during the migration (generation %d, now %d; storage version %s, now %s): it runs again", generation, typed.Generation, storage, storageVersionOf(typed))
		}
		return m.setCondition(ctx, crd, metav1.ConditionFalse, "MigrationSucceeded", done, []string{storage})
	})
	if err != nil {
		return m.failed(ctx, log, n, err)
	}
	m.runs.Add(ctx, 1, m.outcome(migrationSucceeded))
	log.InfoContext(ctx, "storage migration succeeded: status.storedVersions is the storage version alone",
		"storageVersion", storage, "rewritten", n.rewritten, "unchanged", n.unchanged, "gone", n.gone,
		"duration", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// failed logs and counts a failed run, marks the CRD's condition failed,
// if it can, and returns err, naming the CRD.
func (m *storageMigration) failed(ctx context.Context, log *slog.Logger, n migrationCounts, cause error) error {
	err := fmt.Errorf("kube: migrating the storage of %s: %w", m.crdName(), cause)
	if ctx.Err() != nil {
		m.runs.Add(ctx, 1, m.outcome(migrationStopped))
		log.InfoContext(ctx, "storage migration stopped: the controller stopped leading", "rewritten", n.rewritten, "unchanged", n.unchanged, "gone", n.gone)
		return err
	}
	m.runs.Add(ctx, 1, m.outcome(migrationFailed))
	log.WarnContext(ctx, "storage migration failed; it is tried again", "error", err.Error(),
		"rewritten", n.rewritten, "unchanged", n.unchanged, "gone", n.gone)
	// Best effort: a controller that may not update the CRD's status
	// can't say so there, and its log record says so.
	_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd, _, getErr := m.getCRD(ctx)
		if getErr != nil {
			return getErr
		}
		return m.setCondition(ctx, crd, metav1.ConditionFalse, "MigrationFailed", truncateNote("The migration has failed: "+cause.Error()), nil)
	})
	return err
}

// outcome is the attributes of a run's outcome.
func (m *storageMigration) outcome(outcome string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(
		attribute.String(attrController, m.c.settings.Name),
		attribute.String(attrMigrationOutcome, outcome)))
}

// getCRD reads the controller's CRD through its status subresource, which
// answers with the whole object (so a get on customresourcedefinitions/status
// is the only read it needs), as it is and decoded.
func (m *storageMigration) getCRD(ctx context.Context) (*unstructured.Unstructured, *apiextensionsv1.CustomResourceDefinition, error) {
	u, err := m.c.clients.dynamic.Resource(crdGVR).Get(ctx, m.crdName(), metav1.GetOptions{}, "status")
	if err != nil {
		return nil, nil, fmt.Errorf("reading the CRD: %w", err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &crd); err != nil {
		return nil, nil, fmt.Errorf("decoding the CRD: %w", err)
	}
	return u, &crd, nil
}

// storageVersionOf is the name of crd's storage version, or "".
func storageVersionOf(crd *apiextensionsv1.CustomResourceDefinition) string {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return ""
}

// setCondition updates crd's status, as read, with the migration's
// condition, and storedVersions when not nil, keeping every other field as
// the API server sent it. The update carries crd's resourceVersion, so a
// CRD changed since is a conflict.
func (m *storageMigration) setCondition(ctx context.Context, crd *unstructured.Unstructured, status metav1.ConditionStatus, reason, message string, storedVersions []string) error {
	crd = crd.DeepCopy()
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	cond := map[string]any{
		"type":               storageMigrationCondition,
		"status":             string(status),
		"lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339),
		"reason":             reason,
		"message":            message,
		"observedGeneration": crd.GetGeneration(),
	}
	i := slices.IndexFunc(conds, func(c any) bool {
		cm, ok := c.(map[string]any)
		return ok && cm["type"] == storageMigrationCondition
	})
	if i < 0 {
		conds = append(conds, cond)
	} else {
		if old, ok := conds[i].(map[string]any); ok && old["status"] == string(status) {
			cond["lastTransitionTime"] = old["lastTransitionTime"]
		}
		conds[i] = cond
	}
	if err := unstructured.SetNestedSlice(crd.Object, conds, "status", "conditions"); err != nil {
		return err
	}
	if storedVersions != nil {
		if err := unstructured.SetNestedStringSlice(crd.Object, storedVersions, "status", "storedVersions"); err != nil {
			return err
		}
	}
	if _, err := m.c.clients.dynamic.Resource(crdGVR).UpdateStatus(ctx, crd, metav1.UpdateOptions{FieldManager: m.c.settings.Name}); err != nil {
		return fmt.Errorf("updating the CRD's status: %w", err)
	}
	return nil
}

// rewriteAll lists every object of the resource, in every namespace,
// whatever the controller's selectors, a page of metadata at a time, and
// writes each (rewrite).
func (m *storageMigration) rewriteAll(ctx context.Context, log *slog.Logger) (migrationCounts, error) {
	c := m.c
	var n migrationCounts
	list := c.clients.metadata.Resource(c.gvr)
	opts := metav1.ListOptions{Limit: storageMigrationPage}
	for {
		page, err := list.List(ctx, opts)
		if err != nil {
			return n, fmt.Errorf("listing %s: %w", c.gvr.Resource, err)
		}
		for i := range page.Items {
			if err := m.rewrite(ctx, &page.Items[i], &n); err != nil {
				return n, err
			}
		}
		opts.Continue = page.Continue
		if opts.Continue == "" {
			return n, nil
		}
		log.InfoContext(ctx, "storage migration in progress", "objects", n.total(), "rewritten", n.rewritten)
	}
}

// rewrite writes obj as it is: a JSON merge patch of its resourceVersion
// alone, which changes no field, the patch kube-controller-manager's
// migrator sends. The API server reads the object, applies the patch, and
// encodes the result at the storage version: if that is byte for byte
// what it has stored, it writes nothing and answers with the object
// unchanged, its resourceVersion too; otherwise it stores it, under a new
// resourceVersion. No field changes, so no managedFields entry is added.
// A conflict (the object was written since the list, and so is stored at
// the storage version) or a NotFound (deleted since) leaves nothing to
// do. The controller's informer is told the write is its own, so the
// object isn't reconciled again for it (internal/echoes).
func (m *storageMigration) rewrite(ctx context.Context, obj *metav1.PartialObjectMetadata, n *migrationCounts) error {
	c := m.c
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": obj.ResourceVersion}})
	if err != nil {
		return err
	}
	key := obj.Name
	if obj.Namespace != "" {
		key = obj.Namespace + "/" + obj.Name
	}
	result := migrationRewritten
	// The write's event is held while it is in flight, and its version
	// kept until its event comes; a write the API server skipped has no
	// event to come, so its version isn't kept.
	c.echoes.Writing(key)
	got, err := c.clients.metadata.Resource(c.gvr).Namespace(obj.Namespace).Patch(ctx, obj.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: c.settings.Name})
	var v *echoes.Version
	if err == nil {
		v = &echoes.Version{UID: got.UID, ResourceVersion: got.ResourceVersion}
		if got.ResourceVersion == obj.ResourceVersion {
			result = migrationUnchanged
		}
	}
	c.echoes.WroteUnless(key, v, echoes.Scope{}, func(echoes.Version) bool { return result == migrationUnchanged })
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		result = migrationGone
	case err != nil:
		return fmt.Errorf("rewriting %s: %w", key, err)
	}
	switch result {
	case migrationRewritten:
		n.rewritten++
	case migrationUnchanged:
		n.unchanged++
	default:
		n.gone++
	}
	m.objects.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(
		attribute.String(attrController, c.settings.Name),
		attribute.String(attrMigrationResult, result))))
	return nil
}

// checkMigrateStorage returns an error naming each setting
// Settings.MigrateStorage can't run with.
func checkMigrateStorage(s Settings) error {
	if !s.MigrateStorage {
		return nil
	}
	var errs []error
	if s.Namespace != "" {
		errs = append(errs, fmt.Errorf("kube: Settings.MigrateStorage rewrites the objects of every namespace, so Settings.Namespace must be \"\", not %q", s.Namespace))
	}
	if s.Sharding.Enabled {
		errs = append(errs, errors.New("kube: Settings.MigrateStorage is a leader's job, and Settings.Sharding has no leader: migrate with a controller that elects one"))
	}
	return errors.Join(errs...)
}
