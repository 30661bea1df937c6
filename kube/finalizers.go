package kube

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

// hasFinalizer reports whether u carries the controller's finalizer.
func (c *Controller) hasFinalizer(u *cachedObject) bool {
	for _, f := range u.GetFinalizers() {
		if f == c.finalizer {
			return true
		}
	}
	return false
}

// applyFinalizer adds the controller's finalizer to u, or with keep false
// removes it, by server-side apply of u's metadata under the controller's
// field manager. The field manager that set a finalizer is the only one
// that owns it, so an apply without it removes it. Once ctx is done it
// applies nothing.
func (c *Controller) applyFinalizer(ctx context.Context, u *cachedObject, keep bool) error {
	verb := "adding"
	if !keep {
		verb = "removing"
	}
	// A cancelled reconcile, on a lost Lease or at Shutdown's deadline,
	// applies nothing: another replica may hold the Lease by now.
	if err := errors.Join(ctx.Err(), mayWork(ctx)); err != nil {
		return fmt.Errorf("kube: not %s finalizer %q of %s: the reconcile was cancelled: %w", verb, c.finalizer, c.describe(u), err)
	}
	apply := c.applyObject(u)
	if keep {
		apply.Object["metadata"].(map[string]any)["finalizers"] = []any{c.finalizer}
	}
	_, err := c.own.apply(u.key(), func() (*unstructured.Unstructured, error) {
		return c.clients.dynamic.Resource(c.gvr).Namespace(u.namespace).Apply(ctx, u.name, apply,
			metav1.ApplyOptions{FieldManager: c.settings.Name, Force: true})
	})
	if !keep && (apierrors.IsNotFound(err) || apierrors.IsConflict(err)) {
		// The object is gone: the API server refuses an apply naming the
		// uid of an object that no longer exists ("uid mismatch", a
		// Conflict; the apply is forced, so no field conflicts), and there
		// is no finalizer left to remove.
		err = nil
	}
	if err != nil {
		return fmt.Errorf("kube: %s finalizer %q of %s: %w", verb, c.finalizer, c.describe(u), err)
	}
	if !keep {
		c.finalized.Store(u.GetUID(), struct{}{})
	}
	return nil
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

// applyObject is the start of an apply to u: its apiVersion, its kind,
// and its metadata's name, namespace and uid. The uid makes the apply fail
// rather than create an object deleted since the cache saw it (an apply to
// an object that doesn't exist creates it), or change another object of
// the same name: the API server's patch handler refuses "uid mismatch".
func (c *Controller) applyObject(u *cachedObject) *unstructured.Unstructured {
	md := map[string]any{"name": u.name}
	if u.namespace != "" {
		md["namespace"] = u.namespace
	}
	if u.uid != "" {
		md["uid"] = string(u.uid)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": c.gvr.GroupVersion().String(),
		"kind":       c.kind,
		"metadata":   md,
	}}
}
