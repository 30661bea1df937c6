package kube

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/z5labs/humus/kube/internal/objcache"
	"github.com/z5labs/humus/kube/internal/watchhealth"
)

// An Owns' cache is indexed by each object's controller owner: the uid its
// controller owner reference names. A Reconciler reads its object's
// children in one lookup of that index (Lister.ControlledBy), not by a
// scan of the namespace, and pruning (prune.go) finds the children it may
// delete there. The index is client-go's, an Indexer's.

// controllerUIDIndex is the name of an Owns' cache's index by the uid of
// each object's controller owner reference.
const controllerUIDIndex = "kube.controller-uid"

// controllerUIDIndexFunc is controllerUIDIndex's index function: the uid
// an object's controller owner reference names, or no key for an object
// without one. It never returns an error, on which client-go's store
// panics.
func controllerUIDIndexFunc(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil
	}
	ref := metav1.GetControllerOfNoCopy(m)
	if ref == nil || ref.UID == "" {
		return nil, nil
	}
	return []string{string(ref.UID)}, nil
}

// ownsIndexers are the indexes of an Owns' cache.
func ownsIndexers() cache.Indexers {
	return cache.Indexers{controllerUIDIndex: controllerUIDIndexFunc}
}

// ownsInformer returns the informer of the Owns o in namespace ("" for
// all), indexed by controller owner: of the objects' metadata, as Owns
// reads it (objcache.CompactMetadata), or, given CacheObjects, of the
// whole objects with their owner references (objcache.CompactOwned). Its
// lists and watches are recorded in h.
func (c *Controller) ownsInformer(o informerSpec, namespace string, h *watchhealth.Health) (cache.SharedIndexInformer, error) {
	if !o.objects {
		inf, err := newMetadataInformer(c.clients.metadata, h, o.gvr, namespace, o.selector, objcache.CompactMetadata)
		if err != nil {
			return nil, err
		}
		if err := inf.AddIndexers(ownsIndexers()); err != nil {
			return nil, fmt.Errorf("kube: adding the index by controller owner to the cache of %s: %w", o.gvr, err)
		}
		return inf, nil
	}
	opts := cache.SharedIndexInformerOptions{ObjectDescription: o.gvr.String(), Indexers: ownsIndexers()}
	sel := selectors{label: o.selector}
	if cc := c.clients.cached; cc != nil {
		return newInformer(cc, h,
			func(ctx context.Context, lo metav1.ListOptions) (*objcache.List, error) {
				return cc.List(ctx, o.gvr, namespace, lo)
			},
			func(ctx context.Context, lo metav1.ListOptions) (watch.Interface, error) {
				return cc.Watch(ctx, o.gvr, namespace, lo)
			},
			sel, &cachedObject{}, objcache.CompactOwned, opts)
	}
	ri := c.clients.dynamic.Resource(o.gvr).Namespace(namespace)
	return newInformer(c.clients.dynamic, h, ri.List, ri.Watch, sel, &unstructured.Unstructured{}, objcache.CompactOwned, opts)
}

// ControlledBy returns a copy of each object of an Owns' cache whose
// controller owner reference names the uid owner, such as the Jobs of the
// CronJob a Reconciler is handed (its UID), in no particular order: one
// lookup of the cache's index by controller owner, however many objects
// the namespace holds. An object that merely lists owner among its other
// owner references isn't one. It reads what List reads, as the same T
// (the whole object for an Owns given CacheObjects, its
// metav1.PartialObjectMetadata otherwise), and returns List's errors, and
// an error for a cache that isn't an Owns': only an Owns' cache has the
// index.
func (l Lister[T]) ControlledBy(owner types.UID) ([]T, error) {
	idx, err := l.indexer()
	if err != nil {
		return nil, err
	}
	if _, ok := idx.GetIndexers()[controllerUIDIndex]; !ok {
		return nil, fmt.Errorf("kube: the cache of %s isn't an Owns', so it has no index by controller owner: list the children of an owned resource through its Owns", l.gvr)
	}
	items, err := idx.ByIndex(controllerUIDIndex, string(owner))
	if err != nil {
		return nil, fmt.Errorf("kube: reading the objects of %s controlled by %s from the cache: %w", l.gvr, owner, err)
	}
	out := make([]T, 0, len(items))
	var errs []error
	for _, item := range items {
		t, err := l.decode(item)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, t)
	}
	return out, errors.Join(errs...)
}
