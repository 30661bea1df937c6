package kube

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/z5labs/humus/kube/internal/echoes"
	kevents "github.com/z5labs/humus/kube/internal/events"
	"github.com/z5labs/humus/kube/internal/storagemigration"
)

// Storage migration (Settings.MigrateStorage): the leader rewrites every
// object of the controller's resource with a write that changes nothing,
// which the API server encodes at the CRD's storage version, then reduces
// the CRD's status.storedVersions to that version alone, so that an old
// version can be removed from the CRD. The job, its condition on the CRD,
// its records and instruments are internal/storagemigration's (see its
// package doc for why kube writes the objects itself rather than creating
// a StorageVersionMigration); the leader starts it once its caches caught
// up (serve.go).

// newStorageMigration returns the migration job of the controller named
// settings.Name, of gvr's objects, with its instruments from tel's meter,
// or an error naming each that can't be created. Its rewrites are told to
// writes, whose controller build sets.
func newStorageMigration(tel *telemetry, settings Settings, gvr schema.GroupVersionResource, cl clients, writes *migrationWrites) (*storagemigration.Migration, error) {
	return storagemigration.New(storagemigration.Config{
		Name:                settings.Name,
		ControllerAttribute: attribute.String(attrController, settings.Name),
		Resource:            gvr,
		Dynamic:             cl.dynamic,
		Metadata:            cl.metadata,
		Log:                 tel.Log(),
		Meter:               tel.Meter(),
		Writes:              writes,
		Note:                kevents.TruncateNote,
	})
}

// migrationWrites tells the controller's echo filter of the migration's
// rewrites, so that the object isn't reconciled again for one
// (internal/echoes).
type migrationWrites struct{ c *Controller }

// Writing holds the events of key while its rewrite is in flight.
func (w *migrationWrites) Writing(key string) { w.c.echoes.Writing(key) }

// Wrote keeps the version got of key until its event comes. A write the
// API server skipped has no event to come, nor has one of an object the
// controller's cache doesn't hold (holds): the migration rewrites every
// object of the resource, and the controller's informer sees only those
// its label and field selectors select (an object deleted meanwhile is
// gone from it too). So neither version is kept, where it would wait for
// the life of the process. An object the cache doesn't hold yet, created
// as the migration passed it, has its rewrite's event queue its key, and
// nothing worse.
func (w *migrationWrites) Wrote(key string, got *metav1.PartialObjectMetadata, skipped bool) {
	var v *echoes.Version
	if got != nil {
		v = &echoes.Version{UID: got.UID, ResourceVersion: got.ResourceVersion}
	}
	w.c.echoes.WroteUnless(key, v, echoes.Scope{}, func(v echoes.Version) bool { return skipped || !w.c.holds(key, v.UID) })
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
