package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/z5labs/humus/kube/internal/echoes"
	"github.com/z5labs/humus/kube/internal/leaderelection"
	"github.com/z5labs/humus/kube/internal/objcache"
	"github.com/z5labs/humus/kube/internal/outage"
	"github.com/z5labs/humus/kube/internal/priorityqueue"
)

// Serve runs the controller until ctx is done:
//
//  1. It lists the resource once, with a limit of 1. An error, such as a
//     CRD that isn't installed (404) or a selector refused (400), ends
//     Serve with an error naming the resource; but one a later request
//     may not get (500, such as a conversion webhook down when the
//     resource is read at a version it doesn't store, 429, 503 or a
//     timeout) is logged as a warning, and Serve goes on: its informers
//     retry until they sync.
//  2. It starts an informer on the resource, through the dynamic client,
//     and one on each owned resource, through the metadata client, all
//     limited to Settings.Namespace, with client-go's logger in their
//     context.
//  3. It waits for the caches to sync, then marks Synced healthy.
//  4. It campaigns for the Lease named Settings.Name. Every replica keeps
//     its caches warm and its work queue filled.
//  5. Once it takes the Lease, it waits, up to Settings.CatchUpTimeout,
//     for its caches to catch up with the API server (every informer's
//     watch open), then Settings.Workers workers reconcile until the
//     Lease's deadline (see LeaderElection). The queue never hands one key
//     to two workers at once.
//
// Once ctx is done, or Shutdown is called, it stops taking keys, lets the
// reconciles in flight finish, shuts the queue down (leaving its backlog to
// the next leader), releases the Lease, stops its informers, and returns
// nil. If the Lease is lost, it stops taking keys and sending applies at
// once, cancels the reconciles in flight, leaves the Lease alone, and
// returns ErrLostLeadership. If the resource stays unserved for
// Settings.WatchTimeout while it runs, it ends as in step 1. Serve runs
// once: a second call returns an error.
func (c *Controller) Serve(ctx context.Context) error {
	ctx, workCtx, err := c.begin(ctx)
	if err != nil {
		return err
	}
	defer c.end()
	// Once the watches and the Lease are done with, the connections they
	// used are idle: closing them leaves no goroutine of theirs behind
	// Serve (another Controller's watch on a shared Client keeps its own).
	defer c.clients.closeIdleConnections()

	// Every part that outlives ctx, the reconciles in flight, the
	// election and the informers, keeps its values: client-go's logger.
	ctx = klog.NewContext(ctx, c.tel.Klog())
	keep := context.WithoutCancel(ctx)
	workCtx = klog.NewContext(workCtx, c.tel.Klog())
	// Events are sent until the workers are done (events.go).
	defer c.startEvents(keep)()

	if err := c.checkServed(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		if !transient(err) {
			return err
		}
		// The informers retry, and sync once the API server answers: a
		// conversion webhook down (500) when the resource is read at a
		// version it doesn't store, or the API server busy, mustn't end
		// a Controller that would sync once it is back.
		c.tel.Log().WarnContext(ctx, "the first list failed; the caches sync once it succeeds",
			"controller", c.settings.Name, "error", err.Error())
	}
	unserved := make(chan error, 1)
	informers, err := c.startInformers(keep, unserved)
	if err != nil {
		return err
	}
	c.starting.Store(informers)
	// Whichever way Serve returns, the caches stop last (teardown).
	td := &teardown{}
	defer c.stopInformers(ctx, td, informers)
	// A ctx that ended while the caches synced (or before Serve, with
	// caches that synced at once) ends Serve here: it never campaigns.
	if !informers.waitForSync(ctx) || ctx.Err() != nil {
		return nil
	}
	c.synced.Store(true)
	c.current.Store(informers)
	return c.lead(ctx, workCtx, informers, td, unserved)
}

// transient reports whether err is the API server's answer of a kind a
// later request may not get: 429 Too Many Requests, or a 5xx, among them
// 500 StorageReadError for an object a conversion webhook failed or
// couldn't be reached to convert, 503 Service Unavailable and 504.
// client-go's reflector retries these, as every error.
func transient(err error) bool {
	var s apierrors.APIStatus
	if !errors.As(err, &s) {
		return false
	}
	code := s.Status().Code
	return code == http.StatusTooManyRequests || code >= http.StatusInternalServerError
}

// checkServed lists the resource with a limit of 1 and the settings'
// selectors, and returns an error naming it if the API server doesn't serve
// it or refuses a selector (a field it doesn't select by: 400 Bad Request).
func (c *Controller) checkServed(ctx context.Context) error {
	opts := metav1.ListOptions{Limit: 1, LabelSelector: c.settings.LabelSelector, FieldSelector: c.settings.FieldSelector}
	if _, err := c.clients.dynamic.Resource(c.gvr).Namespace(c.settings.Namespace).List(ctx, opts); err != nil {
		return fmt.Errorf("kube: listing %s: %w", c.gvr, err)
	}
	return nil
}

// lead campaigns for the Lease and works while it holds it, until ctx
// ends, the Lease is lost, or the resource is no longer served. Then it
// stops the workers and the elector, which releases the Lease unless it
// was lost, in that order, in td; Serve stops the informers after.
func (c *Controller) lead(ctx, workCtx context.Context, informers *informerSet, td *teardown, unserved <-chan error) error {
	if c.settings.Sharding.Enabled {
		return c.serveShard(ctx, workCtx, informers, td, unserved)
	}
	l := c.newLease(workCtx, c.forceStop)
	election, err := leaderelection.Campaign(ctx, l)
	if err != nil {
		return err
	}
	w := &workers{c: c, informers: informers, stopping: make(chan struct{})}
	err = w.run(ctx, withLease(workCtx, l), l, unserved)

	td.stopWork(w.stop, election.Stop)

	if cause := l.LostCause(); cause != nil {
		c.tel.Log().WarnContext(ctx, "lost the lease", "controller", c.settings.Name, "cause", cause.Error())
		return ErrLostLeadership
	}
	return err
}

// workers are the controller's Settings.Workers workers.
type workers struct {
	c         *Controller
	informers *informerSet
	stopping  chan struct{} // closed when the workers stop taking keys
	wg        sync.WaitGroup
}

// run waits for the Lease, then works (see work), with workers whose
// context carries l. Lost before it led, it returns why: another process
// holds the Lease with this replica's identity.
func (w *workers) run(ctx, workCtx context.Context, l *leaderelection.Lease, unserved <-chan error) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-unserved:
		return err
	case <-l.Context().Done():
		return context.Cause(l.Context())
	case <-l.Started():
	}
	return w.work(ctx, workCtx, l.Context(), "took the Lease", unserved)
}

// work waits for the caches to catch up, then starts the workers, and
// returns once ctx ends (nil), lost ends (nil: the caller reports the lost
// Lease), or the resource is unserved (its error). A replica that starts
// work on a stale cache could undo newer writes. what is how the replica
// came to work, "took the Lease" or "joined its members", for the error
// and the log record.
func (w *workers) work(ctx, workCtx, lost context.Context, what string, unserved <-chan error) error {
	caughtUp, cancel := context.WithCancel(ctx)
	defer context.AfterFunc(lost, cancel)()
	took := time.Now()
	err := w.c.catchUp(caughtUp, w.informers)
	cancel()
	if err != nil {
		if ctx.Err() != nil || lost.Err() != nil {
			return nil
		}
		return fmt.Errorf("kube: controller %s %s: %w", w.c.settings.Name, what, err)
	}
	w.c.tel.Log().InfoContext(ctx, strings.ToLower(what)+"; the caches caught up", "controller", w.c.settings.Name, "after", time.Since(took).Round(time.Millisecond).String())
	lister := w.informers.resource.GetIndexer()
	for range w.c.settings.Workers {
		w.wg.Go(func() { w.c.worker(workCtx, w.informers.queue, lister, w.stopping) })
	}
	if m := w.c.migration; m != nil {
		// The migration runs while the replica works: it ends as work
		// returns, and stop waits for it.
		migrating, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(lost, cancel)()
		w.wg.Go(func() { m.Run(migrating) })
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-unserved:
		return err
	case <-lost.Done():
		return nil
	}
}

// stop stops the workers taking keys, and waits for the reconciles in
// flight: Shutdown's context, or a lost Lease, cancels them.
func (w *workers) stop() {
	close(w.stopping)
	w.informers.queue.ShutDown()
	w.wg.Wait()
}

// addHandler adds h to inf with the controller's logger.
func (c *Controller) addHandler(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	logger := c.tel.Klog()
	reg, err := inf.AddEventHandlerWithOptions(h, cache.HandlerOptions{Logger: &logger})
	if err != nil {
		return nil, fmt.Errorf("kube: adding an informer's handler: %w", err)
	}
	return reg, nil
}

// objectHandler queues the key, namespace/name or name, of every object of
// the resource that is added, updated (or resynced) or deleted, except an
// add or update that is the controller's own write (internal/echoes). The
// initial list's adds and the resyncs are queued at low priority: a
// change goes ahead of them.
func (c *Controller) objectHandler(queue workqueue.TypedInterface[string]) cache.ResourceEventHandler {
	low := lowPriority(queue)
	enqueue := func(obj any, add func(string)) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			add(key)
		}
	}
	changed := func(old, obj any, add func(string)) {
		n, ok := obj.(*cachedObject)
		if !ok {
			enqueue(obj, add)
			return
		}
		onlyOurs := func(echoes.Scope) bool { return true }
		if o, ok := old.(*cachedObject); ok {
			onlyOurs = func(s echoes.Scope) bool {
				return objcache.ChangedOnlyMetadata(o, n, s.Finalizer, s.Status, s.Labels, s.Annotations)
			}
		}
		c.echoes.ChangedFrom(n.Key(), echoes.Version{UID: n.GetUID(), ResourceVersion: n.GetResourceVersion()}, onlyOurs, add)
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if initial {
				changed(nil, obj, low)
				return
			}
			changed(nil, obj, queue.Add)
		},
		UpdateFunc: func(old, obj any) {
			// An update that keeps the resourceVersion is a resync, or a
			// relist that found the object unchanged: it always queues.
			if o, ok := old.(*cachedObject); ok {
				if n, ok := obj.(*cachedObject); ok && o.GetResourceVersion() == n.GetResourceVersion() {
					enqueue(obj, low)
					return
				}
			}
			changed(old, obj, queue.Add)
		},
		DeleteFunc: func(obj any) {
			c.forgetFinalized(obj)
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				c.echoes.Deleted(key)
			}
			enqueue(obj, queue.Add)
		},
	}
}

// rateLimiter is the queue's backoff: per key, from RetryBaseDelay doubling
// to RetryMaxDelay, and for all keys together, 10 retries a second,
// bursting to 100, as client-go's DefaultTypedControllerRateLimiter.
func (c *Controller) rateLimiter() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](c.settings.RetryBaseDelay, c.settings.RetryMaxDelay),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// newQueue returns the controller's work queue (kube/internal/priorityqueue:
// a change goes ahead of the initial list, resyncs and retries), with
// rateLimiter's backoff and the outage that queues again the keys an
// outage backed off (internal/outage), and the controller's instruments.
func (c *Controller) newQueue() *priorityqueue.Queue[string] {
	q := priorityqueue.New(priorityqueue.Config[string]{
		RateLimiter: c.rateLimiter(),
		Metrics:     c.tel.QueueMetrics(),
	})
	c.outage = outage.New(q, c.settings.RetryMaxDelay)
	return q
}

// lowPriority returns how to queue a key at low priority in queue: the
// initial list's adds and resyncs go behind the changes. A queue without
// priorities (a test's) queues it as any.
func lowPriority(queue workqueue.TypedInterface[string]) func(string) {
	if q, ok := queue.(interface {
		AddWithPriority(string, priorityqueue.Priority)
	}); ok {
		return func(key string) { q.AddWithPriority(key, priorityqueue.Low) }
	}
	return queue.Add
}

// begin marks the controller serving, and returns Serve's context, which
// Shutdown also cancels, and the reconciles' context, which is cancelled
// only when Shutdown's context ends first or the Lease is lost.
func (c *Controller) begin(ctx context.Context) (context.Context, context.Context, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.serving {
		return nil, nil, fmt.Errorf("kube: controller %s: Serve was already called, and a Controller serves once", c.settings.Name)
	}
	c.serving = true
	ctx, c.cancel = context.WithCancel(ctx)
	work, force := context.WithCancel(context.WithoutCancel(ctx))
	c.force = force
	if c.stopped {
		c.cancel()
	}
	return ctx, work, nil
}

// end marks Serve returned: Synced turns unhealthy, and Shutdown returns.
func (c *Controller) end() {
	c.synced.Store(false)
	c.mu.Lock()
	c.cancel()
	c.force()
	c.mu.Unlock()
	close(c.done)
}
