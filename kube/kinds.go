package kube

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/z5labs/humus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kind names a kind whose Go type is defined elsewhere, such as one of
// Kubernetes' own, corev1.Namespace. Its objects decode into T. Its status
// belongs to whoever defines the kind, so a controller of a Kind applies no
// status.
type Kind[T any] struct {
	GVR   schema.GroupVersionResource // such as corev1.SchemeGroupVersion.WithResource("namespaces")
	Kind  string                      // such as Namespace
	Scope Scope
}

// KindReconciler brings the cluster to what an object of a Kind declares.
type KindReconciler[T any] interface {
	// Reconcile is handed obj, its own copy of the object as the cache last
	// saw it. A positive after reconciles obj again after that long, unless
	// it changes first. Zero waits for a change, or for the resync, and so
	// does a negative after. An error retries obj with backoff, in place of
	// after.
	Reconcile(ctx context.Context, obj T) (after time.Duration, err error)
}

// KindReconcilerFunc is a function that is a KindReconciler.
type KindReconcilerFunc[T any] func(ctx context.Context, obj T) (time.Duration, error)

// Reconcile calls f(ctx, obj).
func (f KindReconcilerFunc[T]) Reconcile(ctx context.Context, obj T) (time.Duration, error) {
	return f(ctx, obj)
}

// NewKindController returns a Controller of k's objects, reconciled by rec.
// It opens no connection. A Kind is reconciled as a Resource is, except
// that rec is handed client-go's own struct, no status is applied, and
// rec's after settles the key.
//
// It returns one error naming every mistake in settings, in k and in parts:
// a GVR without a Version or a Resource, a missing Kind, a Scope that is
// neither, a T whose pointer isn't a metav1.Object (as every client-go
// type's is), a cluster-scoped k with a Settings.Namespace, a Finalize or
// References whose object type isn't T, a label selector that doesn't
// parse, and two parts naming one resource among them. It also returns an error if one of
// the controller's instruments can't be created from s.Telemetry.
func NewKindController[T any](s *humus.Setup, c *Client, settings Settings, k Kind[T], rec KindReconciler[T], parts ...Part) (*Controller, error) {
	cl, err := connect(c)
	return newKindController(s, cl, err, settings, k, rec, parts...)
}

// newKindController is NewKindController with its clients given: the seam
// the package's tests set client-go's fakes through.
func newKindController[T any](s *humus.Setup, cl clients, clErr error, settings Settings, k Kind[T], rec KindReconciler[T], parts ...Part) (*Controller, error) {
	errs := []error{clErr, settings.check(), k.check()}
	if settings.MigrateStorage {
		errs = append(errs, fmt.Errorf("kube: Settings.MigrateStorage is for a Resource, whose CRD is the controller's own, not a Kind (%s)", k.Kind))
	}
	if k.Scope == Cluster && settings.Namespace != "" {
		errs = append(errs, fmt.Errorf("kube: %s is cluster-scoped, so Settings.Namespace must be \"\", not %q", k.Kind, settings.Namespace))
	}
	if isNil(rec) {
		errs = append(errs, errors.New("kube: the KindReconciler is nil"))
	}
	p, err := collectParts[T](parts)
	errs = append(errs, err)

	t := objectType[T]{
		callReconciler: func(ctx context.Context, obj T, _ []byte) (time.Duration, any, error) {
			after, err := rec.Reconcile(ctx, obj)
			return after, nil, err
		},
		finalize: p.finalize,
	}
	return build(s, cl, settings, k.GVR, k.GVR.Group, k.Kind, k.Scope, p, t, errs)
}

// check returns one error naming every mistake in k.
func (k Kind[T]) check() error {
	var errs []error
	if k.GVR.Version == "" {
		errs = append(errs, fmt.Errorf("kube: Kind.GVR %q has no Version", k.GVR.String()))
	}
	if k.GVR.Resource == "" {
		errs = append(errs, fmt.Errorf("kube: Kind.GVR %q has no Resource", k.GVR.String()))
	}
	if k.Kind == "" {
		errs = append(errs, errors.New("kube: Kind.Kind is empty"))
	}
	if k.Scope != Namespaced && k.Scope != Cluster {
		errs = append(errs, fmt.Errorf("kube: Kind.Scope %q is neither %q nor %q", k.Scope, Namespaced, Cluster))
	}
	if _, ok := any(new(T)).(metav1.Object); !ok {
		errs = append(errs, fmt.Errorf("kube: *%v is not a metav1.Object", reflect.TypeFor[T]()))
	}
	return errors.Join(errs...)
}
