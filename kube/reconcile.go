package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// The outcomes of a reconcile, as humus.kube.controller.reconcile.outcome
// records them: error is a key retried with backoff, panic a recovered
// panic, and success everything else, After included.
const (
	outcomeSuccess = "success"
	outcomeError   = "error"
	outcomePanic   = "panic"
)

// worker takes keys from the queue until it shuts down, and reconciles
// each one, unless the controller has begun to stop or its replica's Lease
// deadline has passed (mayWork): a key taken after that is marked done
// unreconciled, and left for the next leader.
func (c *Controller) worker(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], lister cache.Indexer, stopping <-chan struct{}) {
	for {
		key, shutdown := queue.Get()
		if shutdown {
			return
		}
		select {
		case <-stopping:
		default:
			if mayWork(ctx) == nil {
				// With Sharding on, only a key of the member's own
				// (sharding.go).
				if done, ok := takeKey(ctx, queue, key); ok {
					c.reconcile(ctx, queue, lister, key)
					done()
				}
			}
		}
		queue.Done(key)
	}
}

// reconcile reconciles one key, steps 1 to 7 of the spec's Reconciling,
// inside the reconcile's root span, and settles the key by its outcome.
func (c *Controller) reconcile(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], lister cache.Indexer, key string) {
	ctx, rec := c.tel.startReconcile(withController(ctx, c), c.kind, key)
	ctx = c.withRecorder(ctx)

	after, err := c.reconcileKey(ctx, lister, key)

	// 7. Settle the key.
	var panicked *panicError
	switch {
	case errors.As(err, &panicked):
		rec.panicked(ctx, panicked)
		c.recordFailure(lister, key, err, true)
		queue.Forget(key)
	case err != nil:
		rec.failed(ctx, err)
		c.recordFailure(lister, key, err, false)
		queue.AddRateLimited(key)
	default:
		rec.succeeded()
		queue.Forget(key)
		if after > 0 {
			queue.AddAfter(key, after)
		}
	}
}

// reconcileKey runs steps 1 to 6 for key. A panic in them is recovered as
// a *panicError.
func (c *Controller) reconcileKey(ctx context.Context, lister cache.Indexer, key string) (after time.Duration, err error) {
	defer func() {
		if v := recover(); v != nil {
			after, err = 0, &panicError{value: v, stack: debug.Stack()}
		}
	}()

	// 1. Look it up in the cache. An object that is gone needs nothing:
	// its owned resources are garbage collected.
	item, exists, err := lister.GetByKey(key)
	if err != nil {
		return 0, fmt.Errorf("kube: looking up %s %s in the cache: %w", c.kind, key, err)
	}
	if !exists {
		return 0, nil
	}
	o, ok := item.(*cachedObject)
	if !ok {
		return 0, fmt.Errorf("kube: the cache holds a %T for %s %s", item, c.kind, key)
	}
	return c.handle(ctx, c, o)
}

// panicError is a recovered panic and the stack it was raised on.
type panicError struct {
	value any
	stack []byte
}

func (p *panicError) Error() string { return fmt.Sprintf("panic: %v", p.value) }

// objectType is what the controller knows of one Go type of object: an
// Object[Spec, Status] of a Resource, or a Kind's T.
type objectType[T any] struct {
	// reconcile calls the end user's Reconciler. status is the status to
	// apply, or nil to leave it alone.
	reconcile func(ctx context.Context, obj T) (after time.Duration, status any, err error)

	// status returns obj's status as decoded; nil for a Kind, whose status
	// isn't the controller's.
	status func(obj *T) any

	// finalize is Finalize's f; nil without Finalize.
	finalize func(ctx context.Context, obj T) error
}

// handle runs steps 2 to 6 of Reconciling for the cached object u.
func (t objectType[T]) handle(ctx context.Context, c *Controller, u *cachedObject) (time.Duration, error) {
	// 2. Decode it into a new T. The decode is the copy, so nothing the
	// Reconciler does changes the cache.
	var obj T
	if err := u.decode(&obj); err != nil {
		err = fmt.Errorf("kube: decoding %s: %w", c.describe(u), err)
		// A deletion waits on a finalizer that can't run: say why on the
		// object, where kubectl shows it.
		if u.GetDeletionTimestamp() != nil && t.finalize != nil && c.hasFinalizer(u) && !c.wasFinalized(u) {
			err = errors.Join(err, c.blockedFinalizer(ctx, u, err))
		}
		return 0, err
	}

	// 3. Handle the finalizer, and 4. leave an object that is being deleted
	// alone otherwise.
	if u.GetDeletionTimestamp() != nil {
		if t.finalize == nil || !c.hasFinalizer(u) || c.wasFinalized(u) {
			return 0, nil
		}
		if err := t.finalize(ctx, obj); err != nil {
			return 0, err
		}
		return 0, c.applyFinalizer(ctx, u, false)
	}
	if t.finalize != nil && !c.hasFinalizer(u) {
		if err := c.applyFinalizer(ctx, u, true); err != nil {
			return 0, err
		}
	}

	// The status is encoded before Reconcile runs: the Reconciler may
	// change obj's slices and maps in place, as meta.SetStatusCondition
	// does on a copy of Conditions.
	var before []byte
	if t.status != nil {
		var err error
		if before, err = json.Marshal(t.status(&obj)); err != nil {
			return 0, fmt.Errorf("kube: encoding the status of %s: %w", c.describe(u), err)
		}
	}

	// 5. Call Reconcile.
	after, status, err := t.reconcile(ctx, obj)

	// 6. Apply the status, whether or not Reconcile returned an error.
	if status != nil {
		if applyErr := c.applyStatus(ctx, u, before, status); applyErr != nil {
			err = errors.Join(err, applyErr)
		}
	}
	return after, err
}

// applyStatus applies status to u's status subresource with server-side
// apply, under the controller's field manager and forced, since the
// controller owns the status whole, unless its JSON encoding is before's,
// or ctx is done.
func (c *Controller) applyStatus(ctx context.Context, u *cachedObject, before []byte, status any) error {
	b, err := json.Marshal(status)
	if err != nil {
		return fmt.Errorf("kube: encoding the status of %s: %w", c.describe(u), err)
	}
	if bytes.Equal(before, b) {
		return nil
	}
	// A cancelled reconcile, on a lost Lease or at Shutdown's deadline,
	// applies nothing: another replica may hold the Lease by now.
	if err := errors.Join(ctx.Err(), mayWork(ctx)); err != nil {
		return fmt.Errorf("kube: not applying the status of %s: the reconcile was cancelled: %w", c.describe(u), err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("kube: encoding the status of %s: %w", c.describe(u), err)
	}
	apply := c.applyObject(u)
	apply.Object["status"] = v
	_, err = c.own.apply(u.key(), func() (*unstructured.Unstructured, error) {
		return c.clients.dynamic.Resource(c.gvr).Namespace(u.namespace).ApplyStatus(ctx, u.name, apply,
			metav1.ApplyOptions{FieldManager: c.settings.Name, Force: true})
	})
	if err != nil {
		return fmt.Errorf("kube: applying the status of %s: %w", c.describe(u), err)
	}
	return nil
}

// describe names u in errors, as its kind and namespace/name.
func (c *Controller) describe(u *cachedObject) string {
	if ns := u.GetNamespace(); ns != "" {
		return c.kind + " " + ns + "/" + u.GetName()
	}
	return c.kind + " " + u.GetName()
}
