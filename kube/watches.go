package kube

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/z5labs/humus/kube/internal/objcache"
)

// Watches reconciles the controller's objects that m maps a changed object
// of gvr to: one added, updated or deleted. It is for a resource the
// controller doesn't own, such as the Secret an object's spec names; an
// owned resource is Owns'.
//
// The controller watches gvr with an informer of its own, started and
// stopped with the controller's, limited to Settings.Namespace and to the
// objects a LabelSelector option selects (every object without one): never
// a cluster-wide informer started lazily by a read. The informer caches the
// objects' metadata, through the metadata client, unless CacheObjects asks
// for the whole objects, which a Reconciler then reads through a Lister of
// their Go type, such as corev1.Secret for a Secret's data. Either way m is
// handed the changed object's metadata.
//
// gvr needs a Version and a Resource (Group is "" for the core group), and
// may be neither the controller's own resource nor one that another Owns or
// Watches names: a controller has one informer of each resource. m is a
// MapFunc or References; References' T is the controller's object type.
// The RBAC the informer needs is list and watch on gvr (Controller.RBAC
// holds them): it reads no object by name. NewController
// and NewKindController return one error naming each mistake.
func Watches(gvr schema.GroupVersionResource, m Map, opts ...WatchOption) Part {
	return watchesPart{informerSpec: newInformerSpec(gvr, opts), m: m}
}

// Map is how a Watches finds the keys of the controller's objects that a
// changed object concerns: a MapFunc, or References.
type Map interface{ isMap() }

// MapFunc returns the controller's objects to reconcile when obj, an object
// of a watched resource, is added, updated or deleted (a deleted object as
// the cache last saw it). An update is mapped twice, its old object and its
// new one, and the keys of both are queued, as controller-runtime's
// EnqueueRequestsFromMapFunc does: a label moved from one object to another
// reconciles both. obj is a copy of the object's metadata, its own
// to keep. A key's Namespace is "" for a cluster-scoped object; keys
// already waiting in the work queue are waiting once. A panic is recovered
// and recorded as a reconcile's is (a span and an ERROR record, map
// panicked), and maps to no key. f runs on the informer's goroutine, once
// for each event (twice for an update), so it should be quick: it must
// not block on I/O.
type MapFunc func(obj *metav1.PartialObjectMetadata) []types.NamespacedName

func (MapFunc) isMap() {}

// References maps a changed object to the controller's objects that refer
// to it by name: those in its namespace (or, for a cluster-scoped object,
// those cluster-scoped) for which refs returns its name, such as
//
//	kube.References(func(w Website) []string { return []string{w.Spec.SecretName} })
//
// refs is called with each of the controller's objects, decoded into T, as
// the controller's cache sees it added or changed, and the names it
// returns are kept in an index of that cache, so a change of a watched
// object finds its objects in one lookup, however many objects the
// controller has. An empty name refers to nothing. A panic in refs, or an
// object that doesn't decode into T, refers to nothing and is recorded.
// T is the controller's object type: Object[Spec, Status] for a Resource,
// and T for a Kind[T].
func References[T any](refs func(obj T) []string) Map {
	return referencesMap{refs: refs, typ: reflect.TypeFor[T]()}
}

type referencesMap struct {
	refs any // func(T) []string
	typ  reflect.Type
}

func (referencesMap) isMap() {}

// WatchOption changes the informer of an Owns or a Watches: LabelSelector,
// or CacheObjects; and an Owns alone: Prune, PruneDryRun or
// ReconcileOwnCreations.
type WatchOption func(*informerSpec)

// LabelSelector limits an Owns or a Watches informer to the objects whose
// labels selector selects, in kubectl's syntax, such as
// "app.kubernetes.io/managed-by=website": no other object is cached, and no
// change to one reaches the controller. NewController returns an error
// naming a selector that doesn't parse (CheckLabelSelector). The
// controller's own resource takes Settings.LabelSelector.
func LabelSelector(selector string) WatchOption {
	return func(s *informerSpec) { s.selector = selector }
}

// CacheObjects makes a Watches or an Owns cache the watched objects whole,
// through the dynamic client, so that a Reconciler reads them, such as a
// Secret's data or a Job's status, from the cache with a Lister of their
// Go type, and never from the API server. The cache then weighs what the
// objects weigh (less their managed fields), where the default, metadata
// only, weighs about 1 KB an object.
func CacheObjects() WatchOption {
	return func(s *informerSpec) { s.objects = true }
}

// informerSpec is the informer an Owns or a Watches asks for.
type informerSpec struct {
	gvr          schema.GroupVersionResource
	selector     string    // "" selects every object
	objects      bool      // whole objects, through the dynamic client; else metadata
	prune        pruneMode // an Owns' pruning (prune.go)
	ownCreations bool      // an Owns' ReconcileOwnCreations (ownedcreations.go)
}

func newInformerSpec(gvr schema.GroupVersionResource, opts []WatchOption) informerSpec {
	s := informerSpec{gvr: gvr}
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}
	return s
}

// check returns one error naming each mistake in s, of the part name.
func (s informerSpec) check(name string) error {
	var errs []error
	if s.gvr.Version == "" {
		errs = append(errs, errors.New(name+" has no Version"))
	}
	if s.gvr.Resource == "" {
		errs = append(errs, errors.New(name+" has no Resource"))
	}
	if _, err := labels.Parse(s.selector); err != nil {
		errs = append(errs, fmt.Errorf("%s's label selector %q doesn't parse: %w", name, s.selector, err))
	}
	return errors.Join(errs...)
}

type watchesPart struct {
	informerSpec
	m Map
}

func (watchesPart) part() {}

// mappedResource is a checked Watches, a resource mapped to the
// controller's keys: its informer, and how a change maps to keys.
type mappedResource struct {
	informerSpec
	mapFunc MapFunc // nil for References
	index   string  // References' index of the resource's cache

	// indexFunc is References' index function, recording with the
	// controller's telemetry; nil for a MapFunc.
	indexFunc func(*telemetry) cache.IndexFunc
}

// mappedResourceOf returns p checked for a controller of T; References' index of
// the resource's cache is named index.
func mappedResourceOf[T any](p watchesPart, index string) (mappedResource, error) {
	name := "Watches(" + p.gvr.String() + ")"
	errs := []error{p.check(name)}
	w := mappedResource{informerSpec: p.informerSpec}
	if p.prune != pruneOff {
		errs = append(errs, errors.New(name+" is given Prune: only an Owns prunes the children it controls"))
	}
	if p.ownCreations {
		errs = append(errs, errors.New(name+" is given ReconcileOwnCreations: only an Owns drops the events of its owner's own creations; a Watches queues every event"))
	}
	switch m := p.m.(type) {
	case MapFunc:
		if m == nil {
			errs = append(errs, errors.New(name+"'s MapFunc is nil"))
		}
		w.mapFunc = m
	case referencesMap:
		refs, ok := m.refs.(func(T) []string)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%s: References takes a %v, not the controller's %v", name, m.typ, reflect.TypeFor[T]()))
		case refs == nil:
			errs = append(errs, errors.New(name+"'s References function is nil"))
		default:
			w.index = index
			w.indexFunc = func(tel *telemetry) cache.IndexFunc { return referenceIndex(refs, tel) }
		}
	case nil:
		errs = append(errs, errors.New(name+" has no Map: give it a MapFunc or References"))
	default:
		errs = append(errs, fmt.Errorf("%s: its Map is %T, not a MapFunc or References", name, m))
	}
	return w, errors.Join(errs...)
}

// referenceIndex is References' index function of the resource's cache: the
// namespace/name keys, in the object's namespace, of what refs returns for
// it. It never returns an error: client-go's store panics on one
// (thread_safe_store.go, updateIndices), so an object that doesn't decode,
// or a refs that panics, is recorded and indexed under no key.
func referenceIndex[T any](refs func(T) []string, tel *telemetry) cache.IndexFunc {
	fast := objcache.FastDecodable(reflect.TypeFor[T]())
	return func(obj any) (keys []string, _ error) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, nil
		}
		defer func() {
			if v := recover(); v != nil {
				keys = nil
				tel.Panicked(context.Background(), "references panicked", m.GetNamespace(), m.GetName(), v, debug.Stack())
			}
		}()
		var t T
		if o, ok := obj.(*cachedObject); !ok || o.DecodeAs(&t, fast) != nil {
			// The reconcile of the object reports it.
			return nil, nil
		}
		for _, name := range refs(t) {
			if name != "" {
				keys = append(keys, objectKey(m.GetNamespace(), name))
			}
		}
		return keys, nil
	}
}

// objectKey is the key of the object name in namespace ("" for a
// cluster-scoped object) in the work queue and the caches, as
// cache.MetaNamespaceKeyFunc makes it.
func objectKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// mappedHandler queues the keys of the controller's objects that w maps a
// watched object to, for every object added, updated or deleted. resource
// is the resource's cache, which References look their index up in. The
// initial list's adds and the resyncs are queued at low priority.
func (c *Controller) mappedHandler(w mappedResource, resource cache.Indexer, queue workqueue.TypedInterface[string]) cache.ResourceEventHandler {
	low := lowPriority(queue)
	enqueue := func(obj any, add func(string)) {
		for _, key := range c.mapKeys(w, resource, obj) {
			add(key)
		}
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		// The initial list's adds and the resyncs queue at low priority.
		AddFunc: func(obj any, initial bool) {
			if initial {
				enqueue(obj, low)
				return
			}
			enqueue(obj, queue.Add)
		},
		UpdateFunc: func(old, obj any) {
			// A MapFunc maps the old object too, as controller-runtime's
			// EnqueueRequestsFromMapFunc does: one that maps by a label,
			// an annotation or an owner reference would miss the objects
			// only the old version maps to. References' index is by the
			// watched object's name, which an update never changes, and a
			// resync's old object is its new one.
			if sameVersion(old, obj) {
				enqueue(obj, low)
				return
			}
			// The keys of both are queued once each, and only once both
			// are known: a key added for old and again for obj could be
			// taken by a worker between the two adds, and reconciled
			// twice for one change.
			keys := c.mapKeys(w, resource, obj)
			if w.mapFunc != nil {
				for _, key := range c.mapKeys(w, resource, old) {
					if !slices.Contains(keys, key) {
						keys = append(keys, key)
					}
				}
			}
			for _, key := range keys {
				queue.Add(key)
			}
		},
		DeleteFunc: func(obj any) { enqueue(obj, queue.Add) },
	}
}

// sameVersion reports whether old and obj are one version of one object,
// as a resync hands them to an update: the same uid and resourceVersion.
// Objects without a resourceVersion are never the same.
func sameVersion(old, obj any) bool {
	o, errO := meta.Accessor(old)
	n, errN := meta.Accessor(obj)
	return errO == nil && errN == nil && o.GetResourceVersion() != "" &&
		o.GetUID() == n.GetUID() && o.GetResourceVersion() == n.GetResourceVersion()
}

// mapKeys returns the keys w maps obj to, a watched object or the
// tombstone of a deleted one.
func (c *Controller) mapKeys(w mappedResource, resource cache.Indexer, obj any) (keys []string) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	if w.mapFunc == nil {
		// References: the index's keys are the resource cache's keys.
		keys, _ = resource.IndexKeys(w.index, objectKey(m.GetNamespace(), m.GetName()))
		return keys
	}
	defer func() {
		if v := recover(); v != nil {
			keys = nil
			c.tel.Panicked(context.Background(), "map panicked", m.GetNamespace(), m.GetName(), v, debug.Stack())
		}
	}()
	for _, n := range w.mapFunc(metadataOf(obj, m)) {
		if n.Name != "" {
			keys = append(keys, objectKey(n.Namespace, n.Name))
		}
	}
	return keys
}

// metadataOf returns a copy of obj's metadata, m, for a MapFunc to keep.
func metadataOf(obj any, m metav1.Object) *metav1.PartialObjectMetadata {
	switch o := obj.(type) {
	case *metav1.PartialObjectMetadata:
		return o.DeepCopy()
	case *cachedObject:
		// A Watches given CacheObjects: its metadata, from its JSON.
		var out metav1.PartialObjectMetadata
		if o.Decode(&out) == nil {
			return &out
		}
	}
	// Anything else: the fields a MapFunc reads most.
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name:        m.GetName(),
		Namespace:   m.GetNamespace(),
		UID:         m.GetUID(),
		Labels:      copyMap(m.GetLabels()),
		Annotations: copyMap(m.GetAnnotations()),
	}}
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// mappedInformers returns the informer of each Watches, limited to
// Settings.Namespace, with its handler, and adds References' indexes to
// resource, the resource's informer, which mustn't have started.
func (c *Controller) mappedInformers(resource cache.SharedIndexInformer, queue workqueue.TypedInterface[string]) ([]cache.SharedIndexInformer, []cache.ResourceEventHandler, error) {
	indexers := cache.Indexers{}
	for _, w := range c.watches {
		if w.indexFunc != nil {
			indexers[w.index] = w.indexFunc(c.tel)
		}
	}
	if len(indexers) > 0 {
		if err := resource.AddIndexers(indexers); err != nil {
			return nil, nil, fmt.Errorf("kube: adding the References' indexes to the cache of %s: %w", c.gvr, err)
		}
	}
	ns := c.settings.Namespace
	var infs []cache.SharedIndexInformer
	var handlers []cache.ResourceEventHandler
	for _, w := range c.watches {
		var inf cache.SharedIndexInformer
		var err error
		if w.objects {
			inf, err = newResourceInformer(c.clients, nil, w.gvr, ns, selectors{label: w.selector}, 0)
		} else {
			inf, err = newMetadataInformer(c.clients.metadata, nil, w.gvr, ns, w.selector, dropManagedFields)
		}
		if err != nil {
			return nil, nil, err
		}
		c.publishInformer(w.gvr, inf)
		infs = append(infs, inf)
		handlers = append(handlers, c.mappedHandler(w, resource.GetIndexer(), queue))
	}
	return infs, handlers, nil
}

// dropManagedFields is the transform of a Watches' metadata informer: it
// keeps the metadata whole, which a MapFunc and a Lister read, but for its
// managed fields, which the controller never reads and which are often the
// larger part of it.
func dropManagedFields(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		m.ManagedFields = nil
	}
	return obj, nil
}
