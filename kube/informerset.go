package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/z5labs/humus/kube/internal/echoes"
	"github.com/z5labs/humus/kube/internal/priorityqueue"
	ktel "github.com/z5labs/humus/kube/internal/telemetry"
	"github.com/z5labs/humus/kube/internal/watchhealth"
)

// informerSet is a controller's informers, the resource's and each owned
// resource's, with the work queue they fill, their sync checks, what each
// knows of its watch, the gauge of the objects each caches, and their
// stop.
type informerSet struct {
	queue    *priorityqueue.Queue[string]
	resource cache.SharedIndexInformer
	all      []cache.SharedIndexInformer
	names    []string // each informer's resource, in all's order
	synced   []cache.DoneChecker
	health   []*watchhealth.Health // one per informer, in all's order

	// refused holds, for each informer in all's order, the last error of
	// its list or watch, as client-go's reflector hands it to the
	// informer's watch error handler, for Synced to name while the
	// caches haven't synced: an API server's 403 names the verb, the
	// resource and the namespace the controller may not read.
	refusedMu sync.Mutex
	refused   []error

	// cacheGauge observes the objects each informer's cache holds
	// (humus.kube.controller.cache.objects) from the informers' start to
	// their stop.
	cacheGauge metric.Registration

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startInformers builds the informers and their queue, and runs them until
// stop, with ctx's values. The resource's watch, found unserved for
// Settings.WatchTimeout, sends the error that ends Serve on unserved.
func (c *Controller) startInformers(ctx context.Context, unserved chan<- error) (*informerSet, error) {
	ns := c.settings.Namespace
	cs := &informerSet{queue: c.newQueue()}
	ctx, cs.cancel = context.WithCancel(ctx)

	rw := watchhealth.New(c.gvr.String(), c.settings.WatchTimeout, func(err error) {
		// Confirmed as at the start, with the resource's own error.
		if err := c.checkServed(context.WithoutCancel(ctx)); err != nil {
			select {
			case unserved <- err:
			default:
			}
		}
	})
	add := func(name string, inf cache.SharedIndexInformer, err error, h *watchhealth.Health, handler cache.ResourceEventHandler) error {
		if err != nil {
			return err
		}
		reg, err := c.addHandler(inf, handler)
		if err != nil {
			return err
		}
		cs.all = append(cs.all, inf)
		cs.names = append(cs.names, name)
		cs.health = append(cs.health, h)
		cs.synced = append(cs.synced, reg.HasSyncedChecker())
		return nil
	}
	var err error
	cs.resource, err = newResourceInformer(c.clients, rw, c.gvr, ns, selectors{label: c.settings.LabelSelector, field: c.settings.FieldSelector}, c.settings.Resync)
	if err == nil {
		c.publishInformer(c.gvr, cs.resource)
	}
	errs := []error{add(c.gvr.String(), cs.resource, err, rw, c.objectHandler(cs.queue))}
	for _, o := range c.owns {
		h := watchhealth.New(o.gvr.String(), c.settings.WatchTimeout, nil)
		inf, err := c.ownsInformer(o, ns, h)
		if err == nil {
			c.publishInformer(o.gvr, inf)
		}
		errs = append(errs, add(o.gvr.String(), inf, err, h, c.ownerHandler(cs.queue, o.gvr.GroupResource())))
	}
	if err := errors.Join(errs...); err == nil {
		// Watches' informers keep no watch health: nil.
		watched, handlers, err := c.mappedInformers(cs.resource, cs.queue)
		errs = append(errs, err)
		for i, inf := range watched {
			errs = append(errs, add(c.watches[i].gvr.String(), inf, nil, nil, handlers[i]))
		}
	}
	if err := errors.Join(errs...); err != nil {
		cs.stop()
		return nil, err
	}
	cs.refused = make([]error, len(cs.all))
	for i, inf := range cs.all {
		// The informers haven't started, so this can't fail.
		_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			cs.refusedMu.Lock()
			cs.refused[i] = err
			cs.refusedMu.Unlock()
			cache.DefaultWatchErrorHandler(ctx, r, err)
		})
	}
	if cs.cacheGauge, err = c.tel.ObserveCaches(cs.names, cacheStores(cs.all)); err != nil {
		cs.stop()
		return nil, err
	}
	for _, inf := range cs.all {
		cs.wg.Go(func() { inf.RunWithContext(ctx) })
	}
	return cs, nil
}

// cacheStores returns each informer's cache, for the cache gauge.
func cacheStores(infs []cache.SharedIndexInformer) []ktel.Cache {
	out := make([]ktel.Cache, len(infs))
	for i, inf := range infs {
		out[i] = inf.GetIndexer()
	}
	return out
}

// unsynced returns an error naming each informer that hasn't synced yet
// with the last error of its list or watch, such as the API server's 403
// naming the permission the controller lacks, or nil if none has one.
func (cs *informerSet) unsynced() error {
	cs.refusedMu.Lock()
	defer cs.refusedMu.Unlock()
	var errs []error
	for i, err := range cs.refused {
		if err == nil {
			continue
		}
		select {
		case <-cs.synced[i].Done():
			continue
		default:
		}
		errs = append(errs, fmt.Errorf("the cache of %s: %w", cs.names[i], err))
	}
	return errors.Join(errs...)
}

// waitForSync waits until every informer has synced, and returns false if
// ctx ends first.
func (cs *informerSet) waitForSync(ctx context.Context) bool {
	return cache.WaitFor(ctx, "", cs.synced...)
}

// waitCaughtUp waits, until ctx ends or for at most timeout, until every
// informer's watch is open: opened before now and not broken since, or
// opened after. An informer in client-go's watch-retry backoff, as after
// an outage of the API server, holds a cache of the time its watch broke;
// one with its watch open receives every change as the API server's watch
// cache does. It returns an error naming the informers still behind.
func (cs *informerSet) waitCaughtUp(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		var behind []string
		var changed []<-chan struct{}
		for _, h := range cs.health {
			if h == nil {
				continue
			}
			if open, ch := h.Open(); !open {
				behind = append(behind, h.Name())
				changed = append(changed, ch)
			}
		}
		if len(behind) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube: the caches of %s have not caught up with the API server within %v: their watches are not open", strings.Join(behind, ", "), timeout)
		case <-changed[0]:
		}
	}
}

// stale returns an error naming every informer whose watch has been broken
// for longer than its bound, or nil.
func (cs *informerSet) stale() error {
	var errs []error
	for _, h := range cs.health {
		if h != nil {
			errs = append(errs, h.Stale())
		}
	}
	return errors.Join(errs...)
}

// stop shuts the queue down, stops the informers, and waits for them.
// Serve calls it once, last (teardown); startInformers, on a failure.
func (cs *informerSet) stop() {
	if cs.cacheGauge != nil {
		// The SDK's Unregister returns nil; a meter's that fails leaves a
		// callback that reads stopped caches, which is harmless.
		_ = cs.cacheGauge.Unregister()
	}
	cs.queue.ShutDown()
	cs.cancel()
	cs.wg.Wait()
	for _, h := range cs.health {
		if h != nil {
			h.Stop()
		}
	}
}

// catchUp waits, for at most Settings.CatchUpTimeout in all, until every
// informer's watch is open (waitCaughtUp) and the resource's cache holds
// what the API server holds now (waitCurrent): a replica that starts work
// on a cache it knows is behind can undo newer writes. Errors: either
// wait's, naming what hasn't caught up.
func (c *Controller) catchUp(ctx context.Context, cs *informerSet) error {
	timeout := c.settings.CatchUpTimeout
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := cs.waitCaughtUp(ctx, timeout); err != nil {
		return err
	}
	return c.waitCurrent(ctx, cs.resource.GetIndexer(), timeout)
}

// waitCurrent waits, until ctx ends, until the
// resource's cache holds what the API server holds now: it lists the
// resource with a quorum read (the informer's namespace, label selector
// and field selector, 500 objects a page) and waits until the cache has passed the
// list (cachePassed): its informer has stored every event up to the
// list's resourceVersion, so it holds every listed object at that version
// or a newer one, or deleted since. Until then, it judges object by
// object: the cache is current once it holds each listed object at its
// listed resourceVersion or a newer one, and holds no object the list
// lacks unless it is newer than the list (created since). A listed object
// the cache lacks, deleted since the list (its DELETED event handled
// first), is current only once the cache has passed the list: judged by
// the version alone it never was, and under create/delete churn a new
// leader gave the Lease up after CatchUpTimeout. An open watch alone
// doesn't say it: the reflector's list may not be stored yet, or events
// may still be on their way. A refused list is tried again every second.
// resourceVersions are compared as the integers kube-apiserver makes
// them, and only for equality when either isn't one. It returns an error,
// naming timeout, with how many objects the cache still lacks.
func (c *Controller) waitCurrent(ctx context.Context, indexer cache.Indexer, timeout time.Duration) error {
	fail := func(what string) error {
		return fmt.Errorf("kube: the cache of %s has not caught up with the API server within %v: %s", c.gvr, timeout, what)
	}
	var listed map[string]string // key -> resourceVersion
	var listRV string
	for listed == nil {
		var err error
		if listed, listRV, err = c.listVersions(ctx); err != nil {
			t := time.NewTimer(time.Second)
			select {
			case <-ctx.Done():
				t.Stop()
				return fail("listing it: " + err.Error())
			case <-t.C:
			}
		}
	}
	pending := maps.Clone(listed)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if cachePassed(indexer, listRV, len(pending) > 0) {
			return nil
		}
		for key, rv := range pending {
			if newerOrSame(cachedVersion(indexer, key).ResourceVersion, rv) {
				delete(pending, key)
			}
		}
		deleted := 0
		if len(pending) == 0 {
			for _, key := range indexer.ListKeys() {
				if _, ok := listed[key]; !ok && olderThan(cachedVersion(indexer, key).ResourceVersion, listRV) {
					deleted++
				}
			}
		}
		if len(pending) == 0 && deleted == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fail(fmt.Sprintf("%d objects are older in it than on the API server, and %d deleted there are still in it", len(pending), deleted))
		case <-tick.C:
		}
	}
}

// cachePassed reports whether the informer whose cache is indexer has
// stored every event up to the list's resourceVersion listRV: its store's
// resourceVersion (client-go's LastStoreSyncResourceVersion, which each
// stored event, list and bookmark moves on) has reached listRV or, where
// the store doesn't keep one (client-go's AtomicFIFO feature gate off),
// scan is set and the cache holds an object newer than the list. An
// informer stores events in the order the API server sent them, so either
// way every change the list saw is in the cache. Both resourceVersions
// must be the integers kube-apiserver makes them, or the cache has not
// passed.
func cachePassed(indexer cache.Indexer, listRV string, scan bool) bool {
	if a, b, ok := versions(indexer.LastStoreSyncResourceVersion(), listRV); ok {
		return a >= b
	}
	if !scan {
		return false
	}
	for _, key := range indexer.ListKeys() {
		if a, b, ok := versions(cachedVersion(indexer, key).ResourceVersion, listRV); ok && a > b {
			return true
		}
	}
	return false
}

// cachedVersion is the uid and resourceVersion of the object indexer
// holds at key, or the zero echoes.Version if it holds none.
func cachedVersion(indexer cache.Indexer, key string) echoes.Version {
	item, ok, _ := indexer.GetByKey(key)
	if !ok {
		return echoes.Version{}
	}
	if o, err := meta.Accessor(item); err == nil {
		return echoes.Version{UID: o.GetUID(), ResourceVersion: o.GetResourceVersion()}
	}
	return echoes.Version{}
}

// listVersions lists the resource's objects as its informer does, and
// returns the resourceVersion of each by its cache key, and the list's.
func (c *Controller) listVersions(ctx context.Context) (map[string]string, string, error) {
	versions := map[string]string{}
	opts := metav1.ListOptions{Limit: 500, LabelSelector: c.settings.LabelSelector, FieldSelector: c.settings.FieldSelector}
	if cc := c.clients.cached; cc != nil {
		for {
			listRV, next, err := cc.Versions(ctx, c.gvr, c.settings.Namespace, opts, versions)
			if err != nil {
				return nil, "", err
			}
			if opts.Continue = next; next == "" {
				return versions, listRV, nil
			}
		}
	}
	for {
		l, err := c.clients.dynamic.Resource(c.gvr).Namespace(c.settings.Namespace).List(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		for i := range l.Items {
			key, err := cache.MetaNamespaceKeyFunc(&l.Items[i])
			if err != nil {
				return nil, "", err
			}
			versions[key] = l.Items[i].GetResourceVersion()
		}
		if opts.Continue = l.GetContinue(); opts.Continue == "" {
			return versions, l.GetResourceVersion(), nil
		}
	}
}

// newerOrSame reports whether the resourceVersion cached is listed's or,
// both being integers, a later one.
func newerOrSame(cached, listed string) bool {
	a, b, ok := versions(cached, listed)
	return cached == listed || ok && a > b
}

// olderThan reports whether the resourceVersion cached is, both being
// integers, at most the list's: an object the list lacks that was not
// created since, so deleted on the API server.
func olderThan(cached, list string) bool {
	a, b, ok := versions(cached, list)
	return ok && a <= b
}

// versions parses two resourceVersions as the integers kube-apiserver
// makes them; ok is false unless both are.
func versions(x, y string) (a, b uint64, ok bool) {
	a, errA := strconv.ParseUint(x, 10, 64)
	b, errB := strconv.ParseUint(y, 10, 64)
	return a, b, errA == nil && errB == nil
}
