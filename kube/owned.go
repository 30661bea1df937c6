package kube

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/z5labs/humus/kube/internal/echoes"
)

// Owns reconciles an object again when a resource of gvr that it controls
// changes: one whose controller owner reference names the object's group
// and kind. The controller watches gvr through a metadata informer, since
// only the owner references are read, limited to Settings.Namespace and to
// the objects a LabelSelector option selects (every object without one). A
// namespaced resource can name a cluster-scoped owner, such as its
// Namespace. gvr needs a Version and a Resource; its Group is "" for the
// core group. A Lister of metav1.PartialObjectMetadata reads the cached
// metadata.
//
// Given CacheObjects, the informer caches the whole objects instead, in
// the compact cache a Watches given CacheObjects uses, with their owner
// references: a Reconciler reads its children's status, such as a Job's
// conditions, through a Lister of their Go type, such as batchv1.Job.
// Either way the cache is indexed by controller owner, and
// Lister.ControlledBy returns an owner's children in one lookup; and
// either way a reconcile's own creation of a child doesn't come back as
// work (ownedcreations.go), unless the Owns is given
// ReconcileOwnCreations, as controller-runtime's Owns queues it. NewController and NewKindController return an
// error naming an Owns without a Version or a Resource, or with a
// selector that doesn't parse.
func Owns(gvr schema.GroupVersionResource, opts ...WatchOption) Part {
	return ownsPart{informerSpec: newInformerSpec(gvr, opts)}
}

type ownsPart struct{ informerSpec }

func (ownsPart) part() {}

func (p ownsPart) check() error {
	name := "Owns(" + p.gvr.String() + ")"
	return p.informerSpec.check(name)
}

// ownerHandler queues the owner of every object of the owned resource gr
// that changes, added, updated or deleted, when its controller owner
// reference names the controller's group and kind. An update queues the
// owner of the old object too when it isn't the new one's: the controller
// owner reference was moved to another owner, or removed. An add or update
// whose object is what a write of the owner's own reconcile returned isn't
// queued (ownedcreations.go), nor an update to the version the object
// had (a relist's). The initial list's adds are queued at low priority: a
// change goes ahead of them.
func (c *Controller) ownerHandler(queue workqueue.TypedInterface[string], gr schema.GroupResource) cache.ResourceEventHandler {
	low := lowPriority(queue)
	changed := func(obj any, add func(string)) {
		owner, ok := c.ownerKey(obj)
		if !ok {
			return
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			add(owner)
			return
		}
		c.ownedCreations.Changed(echoes.OwnedKey(owner, gr, m.GetNamespace(), m.GetName()),
			echoes.Version{UID: m.GetUID(), ResourceVersion: m.GetResourceVersion()},
			func(string) { add(owner) })
	}
	// lost is the old owner's loss of obj: another writer moved or
	// removed its controller owner reference. It is news to that owner,
	// and whatever was kept for it is forgotten: the child's events no
	// longer come to it.
	lost := func(obj any) {
		owner, ok := c.ownerKey(obj)
		if !ok {
			return
		}
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if m, err := meta.Accessor(obj); err == nil {
			c.ownedCreations.Deleted(echoes.OwnedKey(owner, gr, m.GetNamespace(), m.GetName()))
		}
		queue.Add(owner)
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		// The initial list's adds and the resyncs queue at low priority.
		AddFunc: func(obj any, initial bool) {
			if initial {
				changed(obj, low)
				return
			}
			changed(obj, queue.Add)
		},
		UpdateFunc: func(old, obj any) {
			// The same version again is no change: a relist hands every
			// object it finds unchanged to an update, as a resync would
			// (Owns' informers have none). Its owner has had that version
			// already, as its add or as its own write. sample-controller
			// skips it so.
			if sameVersion(old, obj) {
				return
			}
			// Both owners, as controller-runtime's EnqueueRequestForOwner
			// queues them: the one that lost the child too.
			if was, ok := c.ownerKey(old); ok {
				if is, ok := c.ownerKey(obj); !ok || is != was {
					lost(old)
				}
			}
			changed(obj, queue.Add)
		},
		DeleteFunc: lost,
	}
}

// ownerKey returns the work queue key of obj's controller, if the
// controller reconciles it: namespace/name with the owned resource's
// namespace, or name alone for a cluster-scoped owner.
func (c *Controller) ownerKey(obj any) (string, bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", false
	}
	ref := metav1.GetControllerOfNoCopy(m)
	if ref == nil || ref.Kind != c.kind {
		return "", false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || gv.Group != c.group {
		return "", false
	}
	if c.scope == Cluster {
		return ref.Name, true
	}
	// A namespaced owner is in its dependent's namespace; a cluster-scoped
	// dependent can't have one, and the garbage collector ignores it.
	if m.GetNamespace() == "" {
		return "", false
	}
	return m.GetNamespace() + "/" + ref.Name, true
}
