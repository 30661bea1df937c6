package telemetry

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// AttrInformer is the informer a humus.kube.controller.cache.objects data
// point counts: its resource as a GVR string, such as
// "apps/v1, Resource=deployments".
const AttrInformer = "humus.kube.informer"

// CacheObjectsName is the gauge of the objects each of a controller's
// informers caches.
const CacheObjectsName = "humus.kube.controller.cache.objects"

func newCacheObjects(m metric.Meter) (metric.Int64ObservableGauge, error) {
	g, err := m.Int64ObservableGauge(CacheObjectsName,
		metric.WithUnit("{object}"),
		metric.WithDescription("Objects in each of the controller's informers' caches, by informer."))
	if err != nil {
		return nil, fmt.Errorf("kube: creating the instrument %s: %w", CacheObjectsName, err)
	}
	return g, nil
}

// A Cache is what the cache gauge reads of an informer's cache: its keys,
// one per object it holds (client-go's cache.Store). client-go v0.37's
// store has no cheaper count than ListKeys, which copies the keys'
// string headers, 16 bytes an object, under the store's read lock.
type Cache interface {
	ListKeys() []string
}

// ObserveCaches registers the callback that observes
// humus.kube.controller.cache.objects: at each collection, for each of
// caches, the number of objects it holds, with
// humus.kube.controller.name and humus.kube.informer set to the name of
// the same index in names. names and caches have one entry per informer,
// in one order; ObserveCaches copies both. The caller unregisters the
// registration when the informers stop, and the gauge then reports
// nothing for them. Errors: the meter's, or names and caches of
// different lengths.
func (t *Telemetry) ObserveCaches(names []string, caches []Cache) (metric.Registration, error) {
	if len(names) != len(caches) {
		return nil, fmt.Errorf("kube: observing %d caches under %d names", len(caches), len(names))
	}
	attrs := make([]metric.ObserveOption, len(names))
	for i, name := range names {
		attrs[i] = metric.WithAttributeSet(attribute.NewSet(attribute.String(AttrController, t.name), attribute.String(AttrInformer, name)))
	}
	caches = append([]Cache(nil), caches...)
	g := t.cacheObjects
	reg, err := t.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for i, c := range caches {
			o.ObserveInt64(g, int64(len(c.ListKeys())), attrs[i])
		}
		return nil
	}, g)
	if err != nil {
		return nil, fmt.Errorf("kube: registering the callback of %s: %w", CacheObjectsName, err)
	}
	return reg, nil
}
