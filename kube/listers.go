package kube

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/z5labs/humus/kube/internal/objcache"
)

// Lister reads the objects of one resource that a Controller watches from
// the Controller's cache, never from the API server: the Controller's own
// resource, an Owns' and a Watches'. Each object it returns is a copy,
// decoded into T, the caller's to change; the cache's own objects are
// never handed out. It reads what the informer last saw, so it may be a
// moment behind the API server, as a reconcile's object is. NewLister and
// ListerFrom return one; the zero Lister reads nothing. In a unit test,
// ListerFrom reads the caches of a NewReconcileTest, with the same copies
// and errors.
//
// What T may be is what the cache holds: for the Controller's own
// resource, and a Watches or an Owns given CacheObjects, any type the object's JSON
// decodes into whose pointer is a metav1.Object, such as Object[Spec,
// Status] or corev1.Secret; for a Watches without CacheObjects, whose
// cache holds metadata, metav1.PartialObjectMetadata, all of it but its
// managed fields; and for an Owns without CacheObjects,
// metav1.PartialObjectMetadata holding only what Owns keeps: name,
// namespace, uid, resourceVersion and owner references (no labels, so a
// List of it takes no selector). An Owns' Lister also reads an owner's
// children in one lookup (ControlledBy).
type Lister[T any] struct {
	c     *listerCache
	gvr   schema.GroupVersionResource
	scope string // the Controller's Settings.Name, for errors
	fast  bool   // fastDecodable(T), found once by NewLister
}

// NewLister returns a Lister of c's cache of gvr. It returns an error if c
// doesn't watch gvr (reading never starts an informer: a Controller watches
// what its Resource or Kind, Owns and Watches name, and nothing else), or
// if T isn't what the cache holds (see Lister). It may be called before
// Serve, such as in the App's Init; the Lister reads once Serve has synced
// the caches.
func NewLister[T any](c *Controller, gvr schema.GroupVersionResource) (Lister[T], error) {
	if c == nil {
		return Lister[T]{}, errors.New("kube: NewLister: the Controller is nil")
	}
	ch, ok := c.listerCaches[gvr]
	if !ok {
		watched := make([]string, 0, len(c.listerCaches))
		for g := range c.listerCaches {
			watched = append(watched, g.String())
		}
		return Lister[T]{}, fmt.Errorf("kube: controller %s doesn't watch %s, so it has no cache of it: it watches %s; add an Owns or a Watches of it",
			c.settings.Name, gvr, strings.Join(watched, " and "))
	}
	if err := ch.form.check(reflect.TypeFor[T](), gvr); err != nil {
		return Lister[T]{}, fmt.Errorf("kube: controller %s: %w", c.settings.Name, err)
	}
	return Lister[T]{c: ch, gvr: gvr, scope: c.settings.Name, fast: objcache.FastDecodable(reflect.TypeFor[T]())}, nil
}

// ListerFrom returns a Lister of gvr from the cache of the Controller
// whose reconcile ctx is, or whose Finalize f it is: a Reconciler's way to
// read what its Controller watches without holding the Controller. It
// returns NewLister's errors, and an error if ctx is no reconcile's.
func ListerFrom[T any](ctx context.Context, gvr schema.GroupVersionResource) (Lister[T], error) {
	var c *Controller
	if s := scopeOf(ctx); s != nil {
		c = s.c
	}
	if c == nil {
		return Lister[T]{}, fmt.Errorf("kube: ListerFrom %s: the context is no reconcile's, so it names no Controller: use NewLister", gvr)
	}
	return NewLister[T](c, gvr)
}

// Get returns a copy of the object named name in namespace ("" for a
// cluster-scoped object). An object the cache doesn't hold is an error
// for which apierrors.IsNotFound reports true, as a GET's is. It also
// returns an error before Serve has synced the cache, and for an object
// that doesn't decode into T.
func (l Lister[T]) Get(namespace, name string) (T, error) {
	var zero T
	idx, err := l.indexer()
	if err != nil {
		return zero, err
	}
	item, exists, err := idx.GetByKey(objectKey(namespace, name))
	if err != nil {
		return zero, fmt.Errorf("kube: reading %s %s from the cache: %w", l.gvr, objectKey(namespace, name), err)
	}
	if !exists {
		return zero, apierrors.NewNotFound(l.gvr.GroupResource(), name)
	}
	return l.decode(item)
}

// List returns a copy of each object in namespace ("" for every namespace,
// and for a cluster-scoped resource) whose labels selector selects (nil for
// every object), in no particular order. It returns an error before Serve
// has synced the cache, and one naming each object that doesn't decode
// into T, with the objects that do.
func (l Lister[T]) List(namespace string, selector labels.Selector) ([]T, error) {
	idx, err := l.indexer()
	if err != nil {
		return nil, err
	}
	if l.c.form == cacheOwned && selector != nil && !selector.Empty() {
		return nil, fmt.Errorf("kube: the cache of %s, an owned resource, keeps no labels, so a List of it takes no selector", l.gvr)
	}
	var out []T
	var errs []error
	for _, key := range idx.ListKeys() {
		if namespace != "" && !strings.HasPrefix(key, namespace+"/") {
			continue
		}
		item, exists, err := idx.GetByKey(key)
		if err != nil || !exists {
			continue
		}
		t, err := l.decode(item)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if selector != nil && !selector.Empty() {
			if m, ok := any(&t).(metav1.Object); ok && !selector.Matches(labels.Set(m.GetLabels())) {
				continue
			}
		}
		out = append(out, t)
	}
	return out, errors.Join(errs...)
}

// indexer returns the cache, once synced.
func (l Lister[T]) indexer() (cache.Indexer, error) {
	if l.c == nil {
		return nil, errors.New("kube: the zero Lister reads nothing: use NewLister or ListerFrom")
	}
	inf := l.c.informer.Load()
	if inf == nil || !(*inf).HasSynced() {
		return nil, fmt.Errorf("kube: controller %s's cache of %s hasn't synced: Serve starts and syncs it", l.scope, l.gvr)
	}
	return (*inf).GetIndexer(), nil
}

// decode returns a copy of the cached item as a T.
func (l Lister[T]) decode(item any) (T, error) {
	var t T
	var err error
	switch o := item.(type) {
	case *metav1.PartialObjectMetadata: // a Watches without CacheObjects
		*any(&t).(*metav1.PartialObjectMetadata) = *o.DeepCopy()
		return t, nil
	case *cachedObject:
		if l.c.form == cacheOwned {
			*any(&t).(*metav1.PartialObjectMetadata) = ownedMetadata(o)
			return t, nil
		}
		err = o.DecodeAs(&t, l.fast)
	default:
		err = fmt.Errorf("the cache holds a %T", item)
	}
	if err != nil {
		return t, fmt.Errorf("kube: decoding %s from the cache of %s: %w", describeCached(item), l.gvr, err)
	}
	return t, nil
}

// ownedMetadata is a copy of what an Owns' cache keeps of o, deep: an
// owner reference's Controller and BlockOwnerDeletion are pointers, which
// a shallow copy would share with the cache and every other reader.
func ownedMetadata(o *cachedObject) metav1.PartialObjectMetadata {
	var refs []metav1.OwnerReference
	if cached := o.GetOwnerReferences(); cached != nil {
		refs = make([]metav1.OwnerReference, len(cached))
		for i := range cached {
			cached[i].DeepCopyInto(&refs[i])
		}
	}
	return metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name:            o.GetName(),
		Namespace:       o.GetNamespace(),
		UID:             o.GetUID(),
		ResourceVersion: o.GetResourceVersion(),
		OwnerReferences: refs,
	}}
}

// describeCached names a cached object in errors, by its cache key.
func describeCached(item any) string {
	if key, err := cache.MetaNamespaceKeyFunc(item); err == nil {
		return key
	}
	return fmt.Sprintf("a %T", item)
}

// cacheForm is what one of a Controller's caches holds.
type cacheForm int

const (
	cacheObjects  cacheForm = iota // the Controller's own objects, and a Watches' or an Owns' with CacheObjects, as their JSON
	cacheMetadata                  // a Watches' metadata
	cacheOwned                     // what Owns reads of an owned resource's metadata
)

var partialObjectMetadata = reflect.TypeFor[metav1.PartialObjectMetadata]()

// check returns an error unless a Lister of typ reads a cache of form.
func (f cacheForm) check(typ reflect.Type, gvr schema.GroupVersionResource) error {
	if f != cacheObjects {
		if typ != partialObjectMetadata {
			return fmt.Errorf("its cache of %s holds metadata only, which a Lister reads as metav1.PartialObjectMetadata, not %v; a Watches given CacheObjects caches whole objects", gvr, typ)
		}
		return nil
	}
	if !reflect.PointerTo(typ).Implements(reflect.TypeFor[metav1.Object]()) {
		return fmt.Errorf("a Lister of %s decodes into a type whose pointer is a metav1.Object, and *%v isn't", gvr, typ)
	}
	return nil
}

// listerCache is one of a Controller's caches: what it holds, and its informer
// once Serve has built it.
type listerCache struct {
	form     cacheForm
	informer atomic.Pointer[cache.SharedIndexInformer]
}

// newListerCaches returns the caches of a Controller of gvr, with owns and
// watches, or an error naming each resource that two of them name: a
// Controller has one informer of each resource, which its Lister reads.
func newListerCaches(gvr schema.GroupVersionResource, owns []informerSpec, watches []mappedResource) (map[schema.GroupVersionResource]*listerCache, error) {
	caches := map[schema.GroupVersionResource]*listerCache{gvr: {form: cacheObjects}}
	names := map[schema.GroupVersionResource]string{gvr: "the controller's own resource"}
	var errs []error
	add := func(name string, s informerSpec, form cacheForm) {
		if first, ok := names[s.gvr]; ok {
			errs = append(errs, fmt.Errorf("kube: %s names %s, as %s does: a controller has one informer of each resource", name, s.gvr, first))
			return
		}
		names[s.gvr] = name
		caches[s.gvr] = &listerCache{form: form}
	}
	for _, o := range owns {
		form := cacheOwned
		if o.objects {
			form = cacheObjects
		}
		add("Owns("+o.gvr.String()+")", o, form)
	}
	for _, w := range watches {
		form := cacheMetadata
		if w.objects {
			form = cacheObjects
		}
		add("Watches("+w.gvr.String()+")", w.informerSpec, form)
	}
	return caches, errors.Join(errs...)
}

// publishInformer records inf as the Controller's informer of gvr, for
// its Listers.
func (c *Controller) publishInformer(gvr schema.GroupVersionResource, inf cache.SharedIndexInformer) {
	if ch, ok := c.listerCaches[gvr]; ok {
		ch.informer.Store(&inf)
	}
}
