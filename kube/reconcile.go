package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/z5labs/humus/kube/internal/sharding"
	ktel "github.com/z5labs/humus/kube/internal/telemetry"
)

// worker takes keys from the queue until it shuts down, and reconciles
// each one, unless the controller has begun to stop or its replica's Lease
// deadline has passed (mayWork): a key taken after that is marked done
// unreconciled, and left for the next leader. A key not reconciled, so or
// because another member owns it (takeKey), leaves the outage.
func (c *Controller) worker(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], lister cache.Indexer, stopping <-chan struct{}) {
	for {
		key, shutdown := queue.Get()
		if shutdown {
			return
		}
		reconciled := false
		select {
		case <-stopping:
		default:
			if mayWork(ctx) == nil {
				// With Sharding on, only a key of the member's own
				// (sharding.go).
				if rctx, done, ok := takeKey(ctx, queue, key); ok {
					c.reconcile(rctx, queue, lister, key)
					done()
					reconciled = true
				}
			}
		}
		if !reconciled && c.outage != nil {
			// If key is the outage's probe, another held key probes in
			// its place (internal/outage).
			c.outage.Left(key)
		}
		queue.Done(key)
	}
}

// reconcile reconciles the object under key inside the reconcile's root
// span, and settles key by the outcome.
func (c *Controller) reconcile(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], lister cache.Indexer, key string) {
	ctx, rec := c.tel.StartReconcile(withReconciling(ctx, c, key), c.kind, key)
	after, err := c.reconcileKey(ctx, lister, key)
	c.settle(ctx, queue, lister, key, rec, after, err)
}

// settle records the reconcile's outcome and settles key in the queue: a
// recovered panic is recorded and not retried; an error once the replica
// may no longer work (mayWork) is forgotten with a DEBUG record only; an
// error is retried with backoff unless it is Terminal; and a success
// forgets key's backoff and queues it again after after, if after is
// positive. Both go through the outage, which holds
// rather than backs off a key that failed as every key does while the API
// server refuses the controller, and queues each again at once once a
// reconcile succeeds after it (internal/outage).
func (c *Controller) settle(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], lister cache.Indexer, key string, rec *ktel.Reconcile, after time.Duration, err error) {
	var panicked *panicError
	switch {
	case errors.As(err, &panicked):
		rec.Panicked(ctx, panicked.value, panicked.stack)
		c.recordFailure(lister, key, err, true)
		queue.Forget(key)
		if c.outage != nil {
			// A probe that panics fails on its own: another held key probes.
			c.outage.Left(key)
		}
	case err != nil && (mayWork(ctx) != nil || errors.Is(context.Cause(ctx), sharding.ErrKeyMoved)):
		// The replica may no longer work (its Lease is no longer valid:
		// a write the lease's check refused, or a reconcile cancelled by
		// the lost Lease): it is on its way out, and the object is its
		// next owner's. Or the key moved to another shard member, which
		// cancelled this reconcile once it outlasted the view change:
		// the key is that member's now. Not the object's failure, nor an
		// outage's: no record but a DEBUG one, and key is forgotten.
		rec.Stopped(ctx, err)
		queue.Forget(key)
		if c.outage != nil {
			c.outage.Left(key)
		}
	case IsTerminal(err):
		// As controller-runtime's reconcile.TerminalError: recorded, and
		// not retried; and, as a panic, a probe that fails on its own.
		rec.Failed(ctx, err)
		c.recordFailure(lister, key, err, false)
		queue.Forget(key)
		if c.outage != nil {
			c.outage.Left(key)
		}
	case err != nil:
		rec.Failed(ctx, err)
		c.recordFailure(lister, key, err, false)
		if c.outage != nil {
			c.outage.Failed(key, err)
		} else {
			queue.AddRateLimited(key)
		}
	default:
		rec.Succeeded()
		queue.Forget(key)
		if c.outage != nil {
			c.outage.Succeeded()
		}
		if after > 0 {
			queue.AddAfter(key, after)
		}
	}
}

// reconcileKey looks key up in the cache and reconciles the object it
// names. An object that is gone needs nothing: its owned resources are
// garbage collected. A panic is recovered as a *panicError.
func (c *Controller) reconcileKey(ctx context.Context, lister cache.Indexer, key string) (after time.Duration, err error) {
	defer func() {
		if v := recover(); v != nil {
			after, err = 0, &panicError{value: v, stack: debug.Stack()}
		}
	}()
	item, exists, err := lister.GetByKey(key)
	if err != nil {
		return 0, fmt.Errorf("kube: looking up %s %s in the cache: %w", c.kind, key, err)
	}
	if !exists {
		return 0, nil
	}
	u, ok := item.(*cachedObject)
	if !ok {
		return 0, fmt.Errorf("kube: the cache holds a %T for %s %s", item, c.kind, key)
	}
	after, err = c.typed.reconcileObject(ctx, u)
	if err == nil {
		// Only a reconcile that succeeded prunes (prune.go).
		err = c.pruneAfter(ctx, u)
	}
	return after, err
}

// panicError is a recovered panic and the stack it was raised on.
type panicError struct {
	value any
	stack []byte
}

func (p *panicError) Error() string { return fmt.Sprintf("panic: %v", p.value) }

// typedReconciler is the part of a reconcile that knows the object's Go
// type: objectType[T] of the controller's T.
type typedReconciler interface {
	// reconcileObject reconciles the cached object u: it decodes u,
	// handles the controller's finalizer, calls the Reconciler, and
	// applies the status it returns.
	reconcileObject(ctx context.Context, u *cachedObject) (after time.Duration, err error)
}

// objectType is what the controller knows of one Go type of object: an
// Object[Spec, Status] of a Resource, or a Kind's T.
type objectType[T any] struct {
	c *Controller // set by build

	// callReconciler calls the end user's Reconciler on obj, whose status
	// encodes to before (encodeStatus). status is the status to apply, or
	// nil to leave it alone.
	callReconciler func(ctx context.Context, obj T, before []byte) (after time.Duration, status any, err error)

	// status returns obj's status as decoded; nil for a Kind, whose status
	// isn't the controller's.
	status func(obj *T) any

	// finalize is Finalize's f; nil without Finalize.
	finalize func(ctx context.Context, obj T) error

	// fastDecode is fastDecodable(T), found once by build.
	fastDecode bool
}

// reconcileObject decodes u, handles the controller's finalizer by where
// u stands with it, and otherwise calls the Reconciler and applies the
// status it returns, whether or not it returned an error, so a failure
// can be a condition.
func (t objectType[T]) reconcileObject(ctx context.Context, u *cachedObject) (time.Duration, error) {
	c := t.c
	obj, err := t.decode(ctx, u)
	if err != nil {
		return 0, err
	}
	switch c.finalizerState(u) {
	case finalizerNotOurs, finalizerOurs:
	case finalizerToAdd:
		if err := c.addFinalizer(ctx, u); err != nil {
			return 0, err
		}
	case finalizerDeleting:
		if err := t.finalize(ctx, obj); err != nil {
			return 0, err
		}
		return 0, c.removeFinalizer(ctx, u)
	case finalizerFinalized:
		return 0, nil
	}

	before, err := t.encodeStatus(u, &obj)
	if err != nil {
		return 0, err
	}
	after, status, err := t.callReconciler(ctx, obj, before)
	statusChanged := false
	if status != nil {
		changed, applyErr := c.applyStatus(ctx, u, before, status)
		if applyErr != nil {
			err = errors.Join(err, applyErr)
		}
		statusChanged = changed
	}
	if err == nil && t.status != nil {
		c.reportUnseenCreations(ctx, u, statusChanged)
	}
	return after, err
}

// decode decodes u into a new T. The decode is the copy, so nothing the
// Reconciler does changes the cache. An object that is being deleted and
// waits on the controller's finalizer, which can't run on an object that
// doesn't decode, is annotated with why (blockedFinalizer), where kubectl
// shows it.
func (t objectType[T]) decode(ctx context.Context, u *cachedObject) (T, error) {
	var obj T
	if err := u.DecodeAs(&obj, t.fastDecode); err != nil {
		err = fmt.Errorf("kube: decoding %s: %w", t.c.describe(u), err)
		if t.c.finalizerState(u) == finalizerDeleting {
			err = errors.Join(err, t.c.blockedFinalizer(ctx, u, err))
		}
		return obj, err
	}
	return obj, nil
}

// encodeStatus returns the JSON encoding of obj's status, or nil for a
// Kind. It is encoded before Reconcile runs: the Reconciler may change
// obj's slices and maps in place, as meta.SetStatusCondition does on a
// copy of Conditions.
func (t objectType[T]) encodeStatus(u *cachedObject, obj *T) ([]byte, error) {
	if t.status == nil {
		return nil, nil
	}
	b, err := json.Marshal(t.status(obj))
	if err != nil {
		return nil, fmt.Errorf("kube: encoding the status of %s: %w", t.c.describe(u), err)
	}
	return b, nil
}

// applyStatus applies status to u's status subresource with server-side
// apply, under the controller's field manager and forced, since the
// controller owns the status whole, unless its JSON encoding is before's,
// or ctx is done. It reports whether the status differs from before's.
func (c *Controller) applyStatus(ctx context.Context, u *cachedObject, before []byte, status any) (bool, error) {
	b, err := json.Marshal(status)
	if err != nil {
		return true, fmt.Errorf("kube: encoding the status of %s: %w", c.describe(u), err)
	}
	if bytes.Equal(before, b) {
		return false, nil
	}
	// A cancelled reconcile, on a lost Lease or at Shutdown's deadline,
	// applies nothing: another replica may hold the Lease by now.
	if err := errors.Join(ctx.Err(), mayWork(ctx)); err != nil {
		return true, fmt.Errorf("kube: not applying the status of %s: the reconcile was cancelled: %w", c.describe(u), err)
	}
	apply, err := c.applyBody(u, nil, "status", b)
	if err != nil {
		return true, fmt.Errorf("kube: encoding the status of %s: %w", c.describe(u), err)
	}
	if err := c.sendApply(ctx, u, "status", apply); err != nil {
		return true, fmt.Errorf("kube: applying the status of %s: %w", c.describe(u), err)
	}
	return true, nil
}
