package kube

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Serve runs the controller until ctx is done:
//
//  1. It lists the resource once, with a limit of 1. An error, such as a
//     CRD that isn't installed, ends Serve with an error naming the
//     resource.
//  2. It starts an informer on the resource, through the dynamic client,
//     one on each owned resource, through the metadata client, and one on
//     each watched resource, all limited to Settings.Namespace and their
//     label selectors, with client-go's logger in their context.
//  3. It waits for the caches to sync, then marks Synced healthy.
//  4. It campaigns for the Lease named Settings.Name. Every replica keeps
//     its caches warm and its work queue filled.
//  5. While it holds the Lease, Settings.Workers workers reconcile. The
//     queue never hands one key to two workers at once.
//
// Once ctx is done, or Shutdown is called, it stops taking keys, lets the
// reconciles in flight finish, shuts the queue down (leaving its backlog to
// the next leader), releases the Lease, stops its informers, and returns
// nil. If the Lease is lost, it stops taking keys, cancels the reconciles in
// flight, and returns ErrLostLeadership. Serve runs once: a second call
// returns an error.
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
	ctx = klog.NewContext(ctx, c.tel.klog)
	keep := context.WithoutCancel(ctx)
	workCtx = klog.NewContext(workCtx, c.tel.klog)
	// Events are sent until the workers are done (events.go).
	defer c.startEvents(keep)()

	// 1. Check the resource is served.
	ns := c.settings.Namespace
	if _, err := c.clients.dynamic.Resource(c.gvr).Namespace(ns).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("kube: listing %s: %w", c.gvr, err)
	}

	// 2. Start the informers, which fill the work queue.
	queue := c.newQueue()
	informerCtx, stopInformers := context.WithCancel(keep)
	var informers sync.WaitGroup
	stop := func() {
		queue.ShutDown()
		stopInformers()
		informers.Wait()
	}
	resource, err := newResourceInformer(c.clients.dynamic, c.gvr, ns, c.settings.LabelSelector, c.settings.Resync)
	if err != nil {
		stop()
		return err
	}
	c.cache(c.gvr, resource)
	all := []cache.SharedIndexInformer{resource}
	handlers := []cache.ResourceEventHandler{c.objectHandler(queue)}
	for _, o := range c.owns {
		inf, err := newMetadataInformer(c.clients.metadata, o.gvr, ns, o.selector, compactMetadata)
		if err != nil {
			stop()
			return err
		}
		c.cache(o.gvr, inf)
		all = append(all, inf)
		handlers = append(handlers, c.ownerHandler(queue))
	}
	watched, watchHandlers, err := c.watchInformers(resource, queue)
	if err != nil {
		stop()
		return err
	}
	all = append(all, watched...)
	handlers = append(handlers, watchHandlers...)
	var checkers []cache.DoneChecker
	for i, inf := range all {
		reg, err := c.watch(inf, handlers[i])
		if err != nil {
			stop()
			return err
		}
		checkers = append(checkers, reg.HasSyncedChecker())
	}
	for _, inf := range all {
		informers.Go(func() { inf.RunWithContext(informerCtx) })
	}

	// 3. Wait for the caches to sync.
	if !cache.WaitFor(ctx, "", checkers...) {
		stop()
		return nil
	}
	c.synced.Store(true)

	// 4. Campaign for the Lease.
	started := make(chan context.Context, 1)
	elector, err := c.newElector(started)
	if err != nil {
		stop()
		return err
	}
	electionCtx, endElection := context.WithCancel(keep)
	var election sync.WaitGroup
	election.Go(func() { elector.Run(electionCtx) })

	// 5. Reconcile while the Lease is held.
	stopping := make(chan struct{})
	var workers sync.WaitGroup
	var lead <-chan struct{} // done when the Lease is lost
	lost := false
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case leadCtx := <-started:
			lead = leadCtx.Done()
			for range c.settings.Workers {
				workers.Go(func() { c.worker(workCtx, queue, resource.GetIndexer(), stopping) })
			}
		case <-lead:
			lost = true
			break loop
		}
	}

	// Stop taking keys, and let the reconciles in flight finish; a lost
	// Lease cancels them, as Shutdown's context does.
	close(stopping)
	if lost {
		c.forceStop()
	}
	queue.ShutDown()
	workers.Wait()

	// Only then release the Lease, as ReleaseOnCancel requires: no code it
	// guards may still run. Then stop the informers.
	endElection()
	election.Wait()
	stop()

	if lost {
		return ErrLostLeadership
	}
	return nil
}

// watch adds h to inf with the controller's logger.
func (c *Controller) watch(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	reg, err := inf.AddEventHandlerWithOptions(h, cache.HandlerOptions{Logger: &c.tel.klog})
	if err != nil {
		return nil, fmt.Errorf("kube: adding an informer's handler: %w", err)
	}
	return reg, nil
}

// objectHandler queues the key, namespace/name or name, of every object of
// the resource that is added, updated (or resynced) or deleted, except an
// add or update that is the controller's own write (ownwrites.go).
func (c *Controller) objectHandler(queue workqueue.TypedInterface[string]) cache.ResourceEventHandler {
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			queue.Add(key)
		}
	}
	changed := func(old, obj any) {
		n, ok := obj.(*cachedObject)
		if !ok {
			enqueue(obj)
			return
		}
		onlyOurs := func() bool { return true }
		if o, ok := old.(*cachedObject); ok {
			onlyOurs = func() bool { return onlyStatusOrFinalizersChanged(o, n) }
		}
		c.own.changedFrom(n.key(), objectVersion{uid: n.uid, resourceVersion: n.resourceVersion}, onlyOurs, queue.Add)
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { changed(nil, obj) },
		UpdateFunc: func(old, obj any) {
			// An update that keeps the resourceVersion is a resync, or a
			// relist that found the object unchanged: it always queues.
			if o, ok := old.(*cachedObject); ok {
				if n, ok := obj.(*cachedObject); ok && o.resourceVersion == n.resourceVersion {
					enqueue(obj)
					return
				}
			}
			changed(old, obj)
		},
		DeleteFunc: func(obj any) {
			c.forgetFinalized(obj)
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				c.own.deleted(key)
			}
			enqueue(obj)
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

// newQueue returns the controller's work queue, named Settings.Name, with
// rateLimiter's backoff, the controller's instruments, and its delaying
// queue's records (a recovered panic) on client-go's logger, not on klog's
// global one, which writes to the real stderr.
func (c *Controller) newQueue() workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(c.rateLimiter(),
		workqueue.TypedRateLimitingQueueConfig[string]{
			DelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{
				Logger:          &c.tel.klog,
				Name:            c.settings.Name,
				MetricsProvider: metricsProvider{c.tel.inst},
			}),
		})
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
