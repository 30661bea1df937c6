package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/z5labs/humus/kube/internal/sharding"
	ktel "github.com/z5labs/humus/kube/internal/telemetry"
)

// A member's cache share (Sharding.CacheShare): each object of the
// resource, and each child of one (an object of an Owns resource whose
// controller owner reference names an object of the resource), carries
// the label ShardLabel(Settings.Name) set to the identity of the member
// that owns its key (a child follows its owner's key). A member's
// resource and Owns informers select its own identity (shareSelectors),
// so the API server sends each member only its share.
//
// The label is written by the members, one merge patch of that one label
// (field manager Settings.Name + "-shard"), only under a view every live
// member has acknowledged (sharding.Member.Agreed), and only by a member
// with a valid tenure:
//
//   - A stray, an object whose label names no member of the agreed view
//     (unlabelled, labelled by a member gone, or by hand), is labelled by
//     the member that owns its key. Each member watches the strays of each
//     kind through a metadata informer selecting "label notin (members)",
//     restarted at each agreed view; at steady state it holds nothing.
//   - An object in a member's own cache whose key another member owns in
//     the agreed view (the key moved, or the label was set by hand) is
//     relabelled by that member to the owner: at each agreed view it walks
//     its caches, the resource's objects first, and it checks each object its caches add
//     or update.
//
// So an object whose key doesn't move is never written, and a key's
// object reaches its new owner's cache before that member reconciles it:
// until then, the key reconciles as gone, which does nothing. A relabel's
// check of the agreed view and its write are not one step, and a member
// acknowledges the next view without waiting for its relabels in flight:
// a write decided under one view may land once the next is agreed (a
// member stalled past its deadline sends none: write's lease check). The
// object then names a member of the new view, whose checkOwn or walk
// relabels it to its key's owner, or none, and is a stray of the new
// view's strays' informers: one write more, and no key reconciled twice,
// since reconciles are taken by the member (Take), not by the label.

// shareSelectors turns c's resource and Owns selectors into a member's
// share of them: each also selects ShardLabel(Settings.Name) = the
// member's identity. The selectors as the user gave them are kept for
// the strays (shardCache). Without Sharding.CacheShare it does nothing.
func (c *Controller) shareSelectors() {
	if !c.settings.Sharding.CacheShare {
		return
	}
	own := ShardLabel(c.settings.Name) + "=" + c.settings.LeaderElection.Identity
	c.userSelectors = map[string]string{c.gvr.String(): c.settings.LabelSelector}
	c.settings.LabelSelector = andSelector(c.settings.LabelSelector, own)
	for i := range c.owns {
		c.userSelectors[c.owns[i].gvr.String()] = c.owns[i].selector
		c.owns[i].selector = andSelector(c.owns[i].selector, own)
	}
}

// checkOwnsSelectShare returns an error naming each Owns whose
// LabelSelector selects on ShardLabel(Settings.Name) with
// Sharding.CacheShare on, which the members select on themselves; nil
// without CacheShare.
func checkOwnsSelectShare(s Settings, owns []informerSpec) error {
	if !s.Sharding.CacheShare {
		return nil
	}
	var errs []error
	for _, o := range owns {
		if selectsOn(o.selector, ShardLabel(s.Name)) {
			errs = append(errs, fmt.Errorf("kube: with Settings.Sharding.CacheShare on, the members select on the label %s themselves, and the Owns of %s selects on it too (%q); take it out of its LabelSelector", ShardLabel(s.Name), o.gvr, o.selector))
		}
	}
	return errors.Join(errs...)
}

// selectsOn reports whether selector parses and has a requirement on
// the label key.
func selectsOn(selector, key string) bool {
	sel, err := labels.Parse(selector)
	if err != nil {
		return false
	}
	reqs, _ := sel.Requirements()
	return slices.ContainsFunc(reqs, func(r labels.Requirement) bool { return r.Key() == key })
}

// andSelector is the label selector that selects what both a and b do.
// A blank a selects everything, as "" does (labels.Parse), and a comma
// after it would make no selector.
func andSelector(a, b string) string {
	if strings.TrimSpace(a) == "" {
		return b
	}
	return a + "," + b
}

// shardCache is the member's half of Sharding.CacheShare that writes the
// label: its strays' informers and the relabels it queues. Its run ends
// with the member's background work.
type shardCache struct {
	c     *Controller
	label string // ShardLabel(Settings.Name)
	id    string // this member's identity
	// agreed is the member's sharding.Member.Agreed, set by watchOwn.
	agreed func() (sharding.Agreement, bool)
	// lease is the member's, whose validity each write checks again as
	// it enters the transport; nil in tests that give none.
	lease interface{ Valid() error }
	kinds []*shareKind // each Owns, then the resource
	wake  chan struct{}
	queue workqueue.TypedRateLimitingInterface[relabel]
}

// shareKind is one resource whose objects carry the label: the
// resource's own or an Owns'.
type shareKind struct {
	gvr      schema.GroupVersionResource
	selector string                    // the user's, without the share's label
	field    string                    // Settings.FieldSelector for the resource; "" for an Owns
	inf      cache.SharedIndexInformer // this member's share of it
	own      cache.Indexer             // inf's
	// key is the key an object's label follows: its own for the
	// resource, its controller owner's for an Owns; false for an object
	// that follows none (not a child of the resource's).
	key func(obj any) (string, bool)

	mu     sync.Mutex
	strays cache.SharedIndexInformer // nil until the first agreed view
	stop   context.CancelFunc
	done   chan struct{}
}

// relabel is a queued check of one object: kinds[kind]'s key.
type relabel struct {
	kind int
	key  string
}

// newShardCache returns cs's shard cache, or nil without
// Sharding.CacheShare; watchOwn starts it watching the member's own
// informers.
func (c *Controller) newShardCache(cs *informerSet) (*shardCache, error) {
	if !c.settings.Sharding.CacheShare {
		return nil, nil
	}
	sc := &shardCache{
		c:     c,
		label: ShardLabel(c.settings.Name),
		id:    c.settings.LeaderElection.Identity,
		wake:  make(chan struct{}, 1),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[relabel](c.settings.RetryBaseDelay, c.settings.RetryMaxDelay),
			workqueue.TypedRateLimitingQueueConfig[relabel]{Name: c.settings.Name + "-shard"}),
	}
	ownInformers := map[string]cache.SharedIndexInformer{}
	for i, name := range cs.names {
		ownInformers[name] = cs.all[i]
	}
	for _, o := range c.owns {
		sc.kinds = append(sc.kinds, &shareKind{gvr: o.gvr, selector: c.userSelectors[o.gvr.String()], key: c.ownerKey})
	}
	sc.kinds = append(sc.kinds, &shareKind{gvr: c.gvr, selector: c.userSelectors[c.gvr.String()], field: c.settings.FieldSelector, key: func(obj any) (string, bool) {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		return key, err == nil
	}})
	for _, k := range sc.kinds {
		if k.inf = ownInformers[k.gvr.String()]; k.inf == nil {
			return nil, fmt.Errorf("kube: no informer of %s for the cache share", k.gvr)
		}
		k.own = k.inf.GetIndexer()
	}
	return sc, nil
}

// watchOwn sets agreed, the member's sharding.Member.Agreed, and adds the
// handlers that check each object the member's own caches add or update
// (checkOwn); before it, sc reads no view.
func (sc *shardCache) watchOwn(agreed func() (sharding.Agreement, bool)) error {
	sc.agreed = agreed
	for i, k := range sc.kinds {
		check := func(obj any) { sc.checkOwn(i, obj) }
		if _, err := sc.c.addHandler(k.inf, addedOrUpdated(check)); err != nil {
			return err
		}
	}
	return nil
}

// addedOrUpdated is a handler calling check with each object an
// informer adds or updates; deletes need nothing.
func addedOrUpdated(check func(obj any)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{AddFunc: check, UpdateFunc: func(_, obj any) { check(obj) }}
}

// poke wakes run: the member has taken up an agreed view.
func (sc *shardCache) poke() {
	select {
	case sc.wake <- struct{}{}:
	default:
	}
}

// run restarts the strays' informers and walks the member's caches at
// each agreed view, and relabels with relabellers(Settings.Workers)
// goroutines, until
// ctx ends; then it stops them all and returns.
func (sc *shardCache) run(ctx context.Context) {
	names := make([]string, len(sc.kinds))
	strays := make([]ktel.Cache, len(sc.kinds))
	for i, k := range sc.kinds {
		names[i], strays[i] = k.gvr.String()+" strays", k
	}
	// humus.kube.controller.cache.objects counts the strays' caches too,
	// under "<GVR> strays"; an error is the meter's, and the gauge is
	// not worth stopping the member for.
	if reg, err := sc.c.tel.ObserveCaches(names, strays); err == nil {
		defer func() { _ = reg.Unregister() }()
	}
	var wg sync.WaitGroup
	defer func() {
		sc.queue.ShutDown()
		for _, k := range sc.kinds {
			k.stopStrays()
		}
		wg.Wait()
	}()
	for range relabellers(sc.c.settings.Workers) {
		wg.Go(func() {
			for sc.relabelNext(ctx) {
			}
		})
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-sc.wake:
		}
		// Each poke is the member taking up an agreed view after a time
		// without one, in which checkOwn, checkStray and relabelNext
		// dropped what they saw: walk and restart the strays even when the
		// view is the one agreed before (a joiner that never acknowledged,
		// a member that paused and came back), or those objects wait for
		// an unrelated update or the next view change.
		a, ok := sc.agreed()
		if !ok {
			continue
		}
		for i, k := range sc.kinds {
			sc.startStrays(ctx, i, k, a.Members())
		}
		// The resource's objects first: a moved key is reconciled once its
		// object reaches its new owner, whose apply of a child with
		// ShardLabels moves the child in the same write; a child it
		// doesn't apply follows in the walk, and its arrival reconciles
		// its owner again. Until then the new owner's cache lacks it, so
		// a prune doesn't see it, and never deletes it.
		for i := len(sc.kinds) - 1; i >= 0; i-- {
			for _, obj := range sc.kinds[i].own.List() {
				sc.checkOwn(i, obj)
			}
		}
	}
}

// relabellers is how many relabels a member sends at once: as many as
// its workers, and at least 8, since a view change after a member's
// crash relabels its whole share at once and its keys wait for it; each
// is one small patch, which the API server's priority and fairness
// limits as it does the workers' writes.
func relabellers(workers int) int { return max(workers, 8) }

// checkOwn queues obj, in the member's own cache of kinds[i], if the
// agreed view gives its key to another member.
func (sc *shardCache) checkOwn(i int, obj any) {
	a, ok := sc.agreed()
	if !ok {
		return // the walk at the next agreed view checks it
	}
	key, ok := sc.kinds[i].key(obj)
	if !ok {
		return
	}
	if a.Owner(key) == sc.id {
		if i == len(sc.kinds)-1 {
			sc.strayChildren(key)
		}
		return
	}
	if objKey, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		sc.queue.Add(relabel{i, objKey})
	}
}

// checkStray queues obj, a stray of kinds[i], if the agreed view gives
// its key to this member.
func (sc *shardCache) checkStray(i int, obj any) {
	a, ok := sc.agreed()
	if !ok {
		return
	}
	key, ok := sc.kinds[i].key(obj)
	if !ok || a.Owner(key) != sc.id || !sc.ownerCached(i, key) {
		return
	}
	if objKey, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		sc.queue.Add(relabel{i, objKey})
	}
}

// ownerCached reports whether key, the key a stray of kinds[i] follows,
// names an object in this member's own cache of the resource: always for
// the resource's own strays, whose informer takes the controller's
// selectors; for a child, only if its owner is one the controller
// selects and this member holds. A stray child whose owner isn't cached
// yet is queued once its owner arrives (checkOwn); one whose owner the
// controller doesn't select is never labelled.
func (sc *shardCache) ownerCached(i int, key string) bool {
	res := len(sc.kinds) - 1
	if i == res {
		return true
	}
	_, ok, err := sc.kinds[res].own.GetByKey(key)
	return ok && err == nil
}

// strayChildren queues the stray children of key, an object of the
// resource this member's cache now holds as its own.
func (sc *shardCache) strayChildren(key string) {
	for i, k := range sc.kinds[:len(sc.kinds)-1] {
		strays := k.straysCache()
		if strays == nil {
			continue
		}
		children, err := strays.ByIndex(strayOwnerIndex, key)
		if err != nil {
			continue
		}
		for _, child := range children {
			if childKey, err := cache.MetaNamespaceKeyFunc(child); err == nil {
				sc.queue.Add(relabel{i, childKey})
			}
		}
	}
}

// strayOwnerIndex indexes a child kind's strays by the key of their
// controller owner of the resource.
const strayOwnerIndex = "humus.kube/stray-owner"

// startStrays replaces k's strays' informer with one selecting the
// objects whose label names none of members, and starts it.
func (sc *shardCache) startStrays(ctx context.Context, i int, k *shareKind, members []string) {
	k.stopStrays()
	sel := selectors{label: andSelector(k.selector, sc.label+" notin ("+strings.Join(members, ",")+")"), field: k.field}
	ri := sc.c.clients.metadata.Resource(k.gvr).Namespace(sc.c.settings.Namespace)
	inf, err := newInformer(sc.c.clients.metadata, nil, ri.List, ri.Watch, sel, &metav1.PartialObjectMetadata{}, strayMetadata(sc.label),
		cache.SharedIndexInformerOptions{ObjectDescription: k.gvr.String() + " strays", Indexers: cache.Indexers{strayOwnerIndex: func(obj any) ([]string, error) {
			if key, ok := k.key(obj); ok {
				return []string{key}, nil
			}
			return nil, nil
		}}})
	if err == nil {
		check := func(obj any) { sc.checkStray(i, obj) }
		_, err = sc.c.addHandler(inf, addedOrUpdated(check))
	}
	if err != nil {
		// Neither can fail on an informer not started.
		sc.c.tel.Log().ErrorContext(ctx, "starting the strays' informer", "controller", sc.c.settings.Name, "resource", k.gvr.String(), "error", err.Error())
		return
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	k.mu.Lock()
	k.strays, k.stop, k.done = inf, stop, done
	k.mu.Unlock()
	go func() {
		defer close(done)
		inf.RunWithContext(sctx)
	}()
}

// stopStrays stops k's strays' informer, if it runs, and waits for it.
func (k *shareKind) stopStrays() {
	k.mu.Lock()
	stop, done := k.stop, k.done
	k.strays, k.stop, k.done = nil, nil, nil
	k.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// ListKeys returns the keys of the strays k's informer holds: none
// before the first agreed view.
func (k *shareKind) ListKeys() []string {
	if strays := k.straysCache(); strays != nil {
		return strays.ListKeys()
	}
	return nil
}

// straysCache returns the cache of k's strays' informer, or nil before
// the first agreed view.
func (k *shareKind) straysCache() cache.Indexer {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.strays == nil {
		return nil
	}
	return k.strays.GetIndexer()
}

// stray returns k's stray of key, if its informer holds one.
func (k *shareKind) stray(key string) (any, bool) {
	strays := k.straysCache()
	if strays == nil {
		return nil, false
	}
	obj, ok, err := strays.GetByKey(key)
	return obj, ok && err == nil
}

// strayMetadata keeps of a stray what its relabel reads: its name,
// namespace, resourceVersion, the share's label and its controller owner
// reference.
func strayMetadata(label string) cache.TransformFunc {
	return func(obj any) (any, error) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return obj, nil // a tombstone
		}
		out := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
			Name: m.GetName(), Namespace: m.GetNamespace(), ResourceVersion: m.GetResourceVersion(),
		}}
		if v, ok := m.GetLabels()[label]; ok {
			out.Labels = map[string]string{label: v}
		}
		if ref := metav1.GetControllerOfNoCopy(m); ref != nil {
			out.OwnerReferences = []metav1.OwnerReference{*ref}
		}
		return out, nil
	}
}

// relabelNext relabels the next queued object, if it still needs it
// under the agreed view, and reports whether the queue is still open. An
// object this member's cache holds moves to its key's owner; a stray
// whose key is this member's comes to it. A failed write is retried with
// the queue's backoff; one refused because the object is gone is not.
func (sc *shardCache) relabelNext(ctx context.Context) bool {
	r, shutdown := sc.queue.Get()
	if shutdown {
		return false
	}
	defer sc.queue.Done(r)
	a, ok := sc.agreed()
	if !ok {
		// The next agreed view's walk and strays queue it again.
		sc.queue.Forget(r)
		return true
	}
	k := sc.kinds[r.kind]
	var to string
	if obj, ok, _ := k.own.GetByKey(r.key); ok {
		if key, ok := k.key(obj); ok && a.Owner(key) != sc.id {
			to = a.Owner(key)
		}
	} else if obj, ok := k.stray(r.key); ok {
		if key, ok := k.key(obj); ok && a.Owner(key) == sc.id && sc.ownerCached(r.kind, key) {
			to = sc.id
		}
	}
	if to == "" {
		sc.queue.Forget(r)
		return true
	}
	if err := sc.write(ctx, k.gvr, r.key, to); err != nil {
		if apierrors.IsNotFound(err) || ctx.Err() != nil {
			sc.queue.Forget(r)
			return true
		}
		sc.c.tel.Log().WarnContext(ctx, "labelling an object with its member failed", "controller", sc.c.settings.Name,
			"resource", k.gvr.String(), "key", r.key, "member", to, "error", err.Error())
		sc.queue.AddRateLimited(r)
		return true
	}
	sc.queue.Forget(r)
	return true
}

// write sets key's label to member with a merge patch of that label alone.
func (sc *shardCache) write(ctx context.Context, gvr schema.GroupVersionResource, key, member string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{sc.label: member}}})
	if err != nil {
		return err
	}
	if sc.lease != nil {
		// As a reconcile's writes are: a member that passed relabelNext's
		// check and then stalled past its deadline (a GC pause, a SIGSTOP)
		// sends nothing on waking (scope.NoteWrite).
		ctx = withScope(ctx, &scope{lease: sc.lease})
	}
	_, err = sc.c.clients.metadata.Resource(gvr).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: sc.c.settings.Name + "-shard"})
	return err
}
