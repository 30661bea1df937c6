package kube

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"
)

// Finalize keeps every object until f has cleaned up after it. The
// controller adds the finalizer name to each object before its first
// reconcile, by server-side apply of metadata.finalizers under its field
// manager. Once an object is being deleted, it calls f in place of the
// Reconciler until f returns nil, and then removes name by applying the
// object's metadata without it, so the API server completes the deletion.
// An error from f retries the object with backoff; a panic is recovered,
// recorded and not retried, and the object keeps its finalizer.
//
// name is a qualified name, such as cache.example.com/finalizer. T is the
// Controller's object type: Object[Spec, Status] for a Resource, and T for
// a Kind[T]. NewController and NewKindController check both, and that a
// controller has at most one Finalize.
func Finalize[T any](name string, f func(ctx context.Context, obj T) error) Part {
	return finalizePart{name: name, f: f, typ: reflect.TypeFor[T]()}
}

type finalizePart struct {
	name string
	f    any // func(context.Context, T) error
	typ  reflect.Type
}

func (finalizePart) part() {}

// finalizeOf returns p's f if it takes the controller's object type T.
func finalizeOf[T any](p finalizePart) (func(context.Context, T) error, error) {
	var errs []string
	if p.name == "" {
		errs = append(errs, "its name is empty")
	} else if msgs := validation.IsQualifiedName(p.name); len(msgs) > 0 {
		errs = append(errs, "its name is not a qualified name: "+strings.Join(msgs, "; "))
	}
	f, ok := p.f.(func(context.Context, T) error)
	switch {
	case !ok:
		errs = append(errs, fmt.Sprintf("f takes a %v, not the controller's %v", p.typ, reflect.TypeFor[T]()))
	case f == nil:
		errs = append(errs, "f is nil")
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("Finalize %q: %s", p.name, strings.Join(errs, ", and "))
	}
	return f, nil
}

// finalizerState is where an object stands with the controller's
// finalizer, as kube-rs's FinalizerState: what the reconcile does with it
// is one switch, in objectType.reconcileObject.
type finalizerState int

const (
	// finalizerNotOurs: the controller has no Finalize, and the object
	// isn't being deleted. Reconcile it.
	finalizerNotOurs finalizerState = iota
	// finalizerToAdd: the object isn't being deleted and doesn't carry the
	// finalizer yet. Add it, then reconcile.
	finalizerToAdd
	// finalizerOurs: the object isn't being deleted and carries the
	// finalizer. Reconcile it.
	finalizerOurs
	// finalizerDeleting: the object is being deleted and carries the
	// finalizer, which the controller hasn't removed yet. Call Finalize's
	// f in place of the Reconciler, then remove the finalizer.
	finalizerDeleting
	// finalizerFinalized: the object is being deleted and nothing of the
	// controller's holds it: the controller has no Finalize, the object
	// doesn't carry the finalizer, or the controller has removed it and
	// the cache doesn't show that yet. Leave it alone.
	finalizerFinalized
)

// finalizerState returns where u stands with the controller's finalizer.
func (c *Controller) finalizerState(u *cachedObject) finalizerState {
	deleting := u.GetDeletionTimestamp() != nil
	switch {
	case c.finalizer == "" && !deleting:
		return finalizerNotOurs
	case c.finalizer == "":
		return finalizerFinalized
	case !deleting && !c.hasFinalizer(u):
		return finalizerToAdd
	case !deleting:
		return finalizerOurs
	case c.hasFinalizer(u) && !c.wasFinalized(u):
		return finalizerDeleting
	default:
		return finalizerFinalized
	}
}

// hasFinalizer reports whether u carries the controller's finalizer.
func (c *Controller) hasFinalizer(u *cachedObject) bool {
	return slices.Contains(u.GetFinalizers(), c.finalizer)
}

// addFinalizer adds the controller's finalizer to u, by server-side apply
// of u's metadata under the controller's field manager. Once ctx is done
// it applies nothing.
func (c *Controller) addFinalizer(ctx context.Context, u *cachedObject) error {
	// A cancelled reconcile, on a lost Lease or at Shutdown's deadline,
	// applies nothing: another replica may hold the Lease by now.
	if err := errors.Join(ctx.Err(), mayWork(ctx)); err != nil {
		return fmt.Errorf("kube: not adding finalizer %q of %s: the reconcile was cancelled: %w", c.finalizer, c.describe(u), err)
	}
	if err := c.applyMetadata(ctx, u, map[string]any{"finalizers": []any{c.finalizer}}); err != nil {
		return fmt.Errorf("kube: adding finalizer %q of %s: %w", c.finalizer, c.describe(u), err)
	}
	return nil
}

// removeFinalizer removes the controller's finalizer from u, by
// server-side apply of u's metadata without it under the controller's
// field manager: the field manager that set a finalizer is the only one
// that owns it, so an apply without it removes it. An object that is gone
// has no finalizer left to remove. Once ctx is done it applies nothing.
// It remembers u as finalized (wasFinalized) until the informer sees it
// deleted.
func (c *Controller) removeFinalizer(ctx context.Context, u *cachedObject) error {
	if err := errors.Join(ctx.Err(), mayWork(ctx)); err != nil {
		return fmt.Errorf("kube: not removing finalizer %q of %s: the reconcile was cancelled: %w", c.finalizer, c.describe(u), err)
	}
	err := c.applyMetadata(ctx, u, nil)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// The object is gone: the API server refuses an apply naming the
		// uid of an object that no longer exists ("uid mismatch", a
		// Conflict; the apply is forced, so no field conflicts).
		err = nil
	}
	if err != nil {
		return fmt.Errorf("kube: removing finalizer %q of %s: %w", c.finalizer, c.describe(u), err)
	}
	c.finalized.Store(u.GetUID(), struct{}{})
	// The DELETED event may have come first, the apply's answer and the
	// watch traveling apart, or before the removal was tried: then
	// forgetFinalized has run, and nothing else would forget u. The
	// informer drops an object from its cache before its handler hears of
	// the deletion, so a cache that holds u now will forget it later.
	if !c.holds(u.Key(), u.GetUID()) {
		c.finalized.Delete(u.GetUID())
	}
	return nil
}

// holds reports whether the controller's cache of its resource holds the
// object uid at key, or isn't started, and can't tell.
func (c *Controller) holds(key string, uid types.UID) bool {
	ch := c.listerCaches[c.gvr]
	if ch == nil {
		return true
	}
	inf := ch.informer.Load()
	if inf == nil {
		return true
	}
	return cachedVersion((*inf).GetIndexer(), key).UID == uid
}

// wasFinalized reports whether the controller has already removed its
// finalizer from u, which the cache shows only until the informer sees u
// deleted.
func (c *Controller) wasFinalized(u *cachedObject) bool {
	_, ok := c.finalized.Load(u.GetUID())
	return ok
}

// forgetFinalized forgets a deleted object's uid, which no object will
// have again.
func (c *Controller) forgetFinalized(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if m, err := meta.Accessor(obj); err == nil {
		c.finalized.Delete(m.GetUID())
		c.blocked.Delete(m.GetUID())
	}
}
