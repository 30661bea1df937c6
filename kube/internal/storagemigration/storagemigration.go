package storagemigration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/util/retry"
)

// condition is the CRD condition the migration sets, the one
// kube-controller-manager's storage version migrator sets
// (apiextensionsv1.StorageMigrating): True with reason MigrationRunning
// while it runs, False with MigrationSucceeded or MigrationFailed after.
const condition = string(apiextensionsv1.StorageMigrating)

// page is how many objects one list page of the migration holds, as
// kube-storage-version-migrator's chunks of 500.
const page = 500

// Attributes of the migration's instruments.
const (
	attrResult  = "humus.kube.controller.storage_migration.result"
	attrOutcome = "humus.kube.controller.storage_migration.outcome"
)

// The migration's results per object, and outcomes per run.
const (
	// rewritten: the API server wrote the object anew.
	rewritten = "rewritten"
	// unchanged: the object was stored at the storage version already;
	// the API server saw the write change no byte and skipped it.
	unchanged = "unchanged"
	// gone: the object was written (a conflict) or deleted since the
	// list; a write since is stored at the storage version.
	gone = "gone"

	succeeded = "succeeded"
	failed    = "failed"
	// notNeeded: status.storedVersions is the storage version alone
	// already, so no object is stored at another.
	notNeeded = "not_needed"
	// stopped: the leader stopped leading (it lost the Lease, or is
	// shutting down) before the run was done; the next leader runs it.
	stopped = "stopped"
)

// Writes is told of each object's rewrite, before and after it, so that
// the controller's informer takes its event for the controller's own.
type Writes interface {
	// Writing is called before the patch of the object under key
	// (namespace/name, or name).
	Writing(key string)
	// Wrote is called after it: got is the object the API server
	// answered with, nil if the patch failed; skipped reports that the API
	// server wrote nothing (got's resourceVersion is the one patched), so
	// that no event comes of it.
	Wrote(key string, got *metav1.PartialObjectMetadata, skipped bool)
}

// Config is what a Migration works with.
type Config struct {
	// Name is the controller's: its field manager and the records'
	// "controller".
	Name string
	// ControllerAttribute names the controller in the instruments'
	// attributes.
	ControllerAttribute attribute.KeyValue
	// Resource is the CRD's resource, whose objects are rewritten; the
	// CRD is named Resource.Resource + "." + Resource.Group.
	Resource schema.GroupVersionResource
	// Dynamic reads and updates the CRD's status; Metadata lists and
	// patches the objects.
	Dynamic  dynamic.Interface
	Metadata metadata.Interface
	// Log records each run; Meter makes the instruments.
	Log   *slog.Logger
	Meter metric.Meter
	// Writes is told of each rewrite; nil tells no one.
	Writes Writes
	// Note cuts a failure's message, the condition's, to the API server's
	// limit; nil keeps it whole.
	Note func(string) string
}

// Migration is a controller's migration job.
type Migration struct {
	cfg     Config
	objects metric.Int64Counter // objects, by result
	runs    metric.Int64Counter // runs, by outcome
	// retryDelay and maxRetryDelay bound the wait before a failed run is
	// tried again: it doubles from the first to the second.
	retryDelay, maxRetryDelay time.Duration
}

// New returns the migration job cfg describes, with its instruments from
// cfg.Meter, or an error naming each that can't be created.
func New(cfg Config) (*Migration, error) {
	objects, err1 := cfg.Meter.Int64Counter("humus.kube.controller.storage_migration.objects",
		metric.WithUnit("{object}"),
		metric.WithDescription("Objects the storage migration wrote, by result: rewritten, unchanged (stored at the storage version already), gone (written or deleted since the list)."))
	runs, err2 := cfg.Meter.Int64Counter("humus.kube.controller.storage_migration.runs",
		metric.WithUnit("{run}"),
		metric.WithDescription("Storage migration runs, by outcome: succeeded, failed, not_needed, stopped."))
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("kube: controller %s: creating the storage migration's instruments: %w", cfg.Name, err)
	}
	return &Migration{cfg: cfg, objects: objects, runs: runs, retryDelay: time.Second, maxRetryDelay: 5 * time.Minute}, nil
}

// crdName is the name of the controller's CRD, plural.group, as the API
// server requires a CRD to be named.
func (m *Migration) crdName() string {
	return m.cfg.Resource.Resource + "." + m.cfg.Resource.Group
}

// Run migrates until a run succeeds or finds nothing to do, or ctx ends,
// trying a failed run again after a delay that doubles from retryDelay to
// maxRetryDelay. The leader calls it once its caches caught up; a new
// leader, or a restarted one, starts it over, which is safe: an object
// stored at the storage version already is not written again.
func (m *Migration) Run(ctx context.Context) {
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

// counts are one run's objects, by result.
type counts struct{ rewritten, unchanged, gone int }

func (n counts) total() int { return n.rewritten + n.unchanged + n.gone }

// once is one run of the migration: it reads the CRD, and unless its
// storedVersions is the storage version alone already, marks it migrating,
// rewrites every object, and sets storedVersions to the storage version,
// provided the CRD's spec didn't change meanwhile (its generation). Its
// error, logged and counted, is why the run failed.
func (m *Migration) once(ctx context.Context) (err error) {
	log := m.cfg.Log.With("controller", m.cfg.Name, "crd", m.crdName())
	start := time.Now()
	crd, typed, err := m.getCRD(ctx)
	if err != nil {
		return m.failed(ctx, log, counts{}, err)
	}
	storage := storageVersionOf(typed)
	if storage == "" {
		return m.failed(ctx, log, counts{}, errors.New("the CRD names no storage version"))
	}
	if slices.Equal(typed.Status.StoredVersions, []string{storage}) {
		m.runs.Add(ctx, 1, m.outcome(notNeeded))
		log.InfoContext(ctx, "storage migration not needed: every object is stored at the storage version", "storageVersion", storage)
		return nil
	}
	generation := typed.Generation
	log.InfoContext(ctx, "storage migration started", "storageVersion", storage, "storedVersions", typed.Status.StoredVersions)
	if err := m.setCondition(ctx, crd, metav1.ConditionTrue, "MigrationRunning",
		fmt.Sprintf("%s rewrites every %s so that it is stored at %s", m.cfg.Name, m.cfg.Resource.Resource, storage), nil); err != nil {
		return m.failed(ctx, log, counts{}, err)
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
	m.runs.Add(ctx, 1, m.outcome(succeeded))
	log.InfoContext(ctx, "storage migration succeeded: status.storedVersions is the storage version alone",
		"storageVersion", storage, "rewritten", n.rewritten, "unchanged", n.unchanged, "gone", n.gone,
		"duration", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// failed logs and counts a failed run, marks the CRD's condition failed,
// if it can, and returns err, naming the CRD.
func (m *Migration) failed(ctx context.Context, log *slog.Logger, n counts, cause error) error {
	err := fmt.Errorf("kube: migrating the storage of %s: %w", m.crdName(), cause)
	if ctx.Err() != nil {
		m.runs.Add(ctx, 1, m.outcome(stopped))
		log.InfoContext(ctx, "storage migration stopped: the controller stopped leading", "rewritten", n.rewritten, "unchanged", n.unchanged, "gone", n.gone)
		return err
	}
	m.runs.Add(ctx, 1, m.outcome(failed))
	log.WarnContext(ctx, "storage migration failed; it is tried again", "error", err.Error(),
		"rewritten", n.rewritten, "unchanged", n.unchanged, "gone", n.gone)
	note := "The migration has failed: " + cause.Error()
	if m.cfg.Note != nil {
		note = m.cfg.Note(note)
	}
	// Best effort: a controller that may not update the CRD's status
	// can't say so there, and its log record says so.
	_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd, _, getErr := m.getCRD(ctx)
		if getErr != nil {
			return getErr
		}
		return m.setCondition(ctx, crd, metav1.ConditionFalse, "MigrationFailed", note, nil)
	})
	return err
}

// outcome is the attributes of a run's outcome.
func (m *Migration) outcome(outcome string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(
		m.cfg.ControllerAttribute,
		attribute.String(attrOutcome, outcome)))
}
