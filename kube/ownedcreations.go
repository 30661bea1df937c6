package kube

import (
	"context"
	"log/slog"
	"net/http"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/z5labs/humus/kube/internal/echoes"
	"github.com/z5labs/humus/kube/internal/objcache"
)

// The Reconciler's creations of the resources its controller Owns don't
// come back as work either. A Reconciler applies its Deployment and reads
// the Deployment the apply returns; the informer then hands that same
// Deployment back, and Owns would queue its owner to be reconciled again,
// only to apply the same Deployment once more: a second reconcile and a
// second write an object, for nothing (issue 13 measured 998 such writes
// after 1,000 Memcacheds had converged).
//
// So the Client's transport notes each write a reconcile makes to an
// owned resource, through any client-go client built on Client.Config: a
// PATCH (a server-side apply among them), a PUT or a POST, of the object or
// any of its subresources (its status, its scale). When the API server answers 201 Created, with JSON or
// protobuf, the object's uid and resourceVersion are the reconcile's own
// write, kept under the key of the owner being reconciled. Owns' event of
// that exact version, for that owner, isn't queued; any other is, a change
// that lands between the write and its event included, since it has a
// resourceVersion of its own. The Reconciler's write made that version,
// and the Reconciler saw what it returned, so it is no news to it.
// echoes.Filter holds an owned object's events while a write to it is in
// flight, as it does the resource's, since an event can come before its
// write's response does.
//
// Only a creation counts. A write that changes an object that exists
// answers 200, and so does one that changes nothing, such as an apply of
// what is already there, which returns the object at the resourceVersion
// of whatever change came last: another writer's, say the Deployment
// controller's status update, landed after the Reconciler read the
// Deployment and before it applied. Nothing in the answer tells the two
// apart, and the Reconciler that read the Deployment before that change
// must see it. So the event of an update's version queues its owner, as
// before: a changed Deployment reconciles its Memcached once more.
//
// A creation whose object is deleted before the write's answer comes, the
// events of both having come already, keeps nothing either (ownedGone):
// kept, its version would wait for an event that won't come.
//
// A write made through a client that isn't built on Client.Config, or with
// a context that isn't the reconcile's, isn't seen, and its event queues
// its owner as before. A creation whose labels an Owns' LabelSelector
// doesn't select isn't kept: that Owns hears nothing of the object, so no
// event would ever come to match it.

// controller-runtime differs: its Owns queues the owner for every event,
// its own creations' included, and code ported from it may rely on that,
// such as the kubebuilder book's CronJob, which creates a Job and counts
// its active Jobs from the cache in the next reconcile, the one the Job's
// creation event starts. Here that reconcile doesn't come, and the status
// stays as it was until the next change or After (issue 37). Two things
// keep the difference from going unnoticed: an Owns given
// ReconcileOwnCreations keeps no creation, so its owner's own creations
// queue it as any event does; and a reconcile that succeeded, made a
// creation whose event is dropped and left its status unchanged, the sign
// of a status computed before the creation, logs a DEBUG record
// (reportUnseenCreations).

// ReconcileOwnCreations makes an Owns queue the owner for its own
// reconcile's creations of the Owns' resource too, as controller-runtime's
// Owns does: the creation's event reconciles the owner once more. Give it
// to an Owns whose Reconciler reads what it created from the cache in its
// next reconcile rather than from what the creation returned, such as
// code ported from controller-runtime that counts a CronJob's active Jobs
// with a Lister. It costs one reconcile more per creation. NewController
// and NewKindController return an error naming a Watches given it.
func ReconcileOwnCreations() WatchOption {
	return func(s *informerSpec) { s.ownCreations = true }
}

// keepsOwnCreations reports whether an Owns of gr is given
// ReconcileOwnCreations, so that no creation of gr is kept.
func (c *Controller) keepsOwnCreations(gr schema.GroupResource) bool {
	return slices.ContainsFunc(c.owns, func(o informerSpec) bool { return o.ownCreations && o.gvr.GroupResource() == gr })
}

// noteOwnedWrite sends req, a write of the reconcile whose scope is s,
// through next, noting it first if it writes a resource c Owns: the body
// of a reconcile's apitransport.WriteHook (scope.go). A creation kept, so
// that its event won't queue the owner, is added to s's created.
func (c *Controller) noteOwnedWrite(s *scope, req *http.Request, next http.RoundTripper) (*http.Response, error) {
	key := s.key
	w, ok := c.ownedWrite(key, req)
	if !ok {
		return next.RoundTrip(req)
	}
	// A POST names its object in its body, not its path: its key is known
	// only from the answer, so its events aren't held meanwhile.
	if w.Name != "" {
		c.ownedCreations.Writing(w.Key(w.Name))
		// A panic below, which the reconcile recovers, still ends the
		// write: left in flight, the object's events would be held for
		// good.
		defer func() {
			if p := recover(); p != nil {
				c.ownedCreations.Wrote(w.Key(w.Name), nil)
				panic(p)
			}
		}()
	}
	resp, err := next.RoundTrip(req)
	got := objcache.CreatedMetadata(resp, err)
	if got != nil {
		// Only an object the reconciled owner controls: Owns' events of
		// any other queue their own controller, and a write kept for them
		// would never be matched.
		if owner, ok := c.ownerKey(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
			Namespace: got.Namespace, OwnerReferences: got.OwnerReferences,
		}}); !ok || owner != key {
			got = nil
		}
	}
	if got != nil && !w.Selects(got.Labels) {
		// A label-selected Owns that doesn't see the object: no event
		// would come to match a write kept for it.
		got = nil
	}
	if got != nil && c.keepsOwnCreations(w.GVR.GroupResource()) {
		// ReconcileOwnCreations: the creation's event queues the owner.
		got = nil
	}
	if got != nil {
		s.created(w.GVR.Resource + " " + objectKey(got.Namespace, got.Name))
	}
	switch {
	case w.Name != "":
		// A creation whose object was deleted before its answer came, its
		// events with it, or passed by a relist, has no event left to match
		// it (ownedGone); its events held meanwhile are matched first.
		c.ownedCreations.WroteUnless(w.Key(w.Name), echoes.Written(got, w.Namespace, w.Name), echoes.Scope{},
			func(v echoes.Version) bool { return c.ownedGone(w, w.Name, v) })
	case got != nil && got.Name != "" && got.Namespace == w.Namespace:
		// A POST's events weren't held: the creation's event may have
		// come already, or its deletion's too, and then nothing is left
		// to match it.
		key := w.Key(got.Name)
		v := echoes.Written(got, w.Namespace, got.Name)
		c.ownedCreations.Writing(key)
		c.ownedCreations.WroteUnless(key, v, echoes.Scope{}, func(v echoes.Version) bool {
			return c.ownedCached(w, got.Name, &v) || c.ownedGone(w, got.Name, v)
		})
	}
	return resp, err
}

// ownedWrite reports whether req, made by the reconcile of owner, writes
// an object of a resource the controller Owns, or a subresource of it,
// and which (echoes.OwnedWriteOf).
func (c *Controller) ownedWrite(owner string, req *http.Request) (echoes.OwnedWrite, bool) {
	if len(c.owns) == 0 {
		return echoes.OwnedWrite{}, false
	}
	return echoes.OwnedWriteOf(owner, req, c.ownedResources())
}

// ownedResources is c's Owns as echoes.OwnedWriteOf takes them, made
// once, with c.pruned (prunedResources).
func (c *Controller) ownedResources() []echoes.Owned {
	c.ownsOnce.Do(func() {
		c.owned = make([]echoes.Owned, len(c.owns))
		for i, o := range c.owns {
			c.owned[i] = echoes.Owned{GVR: o.gvr, Selector: o.selector}
			if o.prune != pruneOff {
				c.pruned = append(c.pruned, o.gvr)
			}
		}
	})
	return c.owned
}

// ownedGone reports whether the Owns cache of w's resource holds no
// object name of v's uid in w's namespace while its informer's watch has
// come to v's resourceVersion or past it: v's object was created and
// deleted, and the events of both came (or a relist passed them) before
// the write's answer did, so no event is left to match v. It reports
// false before the cache is started, or for resourceVersions that aren't
// kube-apiserver's integers, unless they are equal. An event of v that
// is still on its way from the informer's queue to its handler then
// queues its owner, and nothing worse.
func (c *Controller) ownedGone(w echoes.OwnedWrite, name string, v echoes.Version) bool {
	ch := c.listerCaches[w.GVR]
	if ch == nil {
		return false
	}
	inf := ch.informer.Load()
	if inf == nil || cachedVersion((*inf).GetIndexer(), objectKey(w.Namespace, name)).UID == v.UID {
		return false
	}
	last := (*inf).LastSyncResourceVersion()
	return last != "" && newerOrSame(last, v.ResourceVersion)
}

// ownedCached reports whether the Owns cache of w's resource holds the
// object name in w's namespace at version v or a newer one already: v's
// event has come, at least as far as the cache, and if another writer
// changed the object before the answer came (the Deployment controller
// writes a new Deployment's status at once), so has that change's. It
// reports false for a nil v, for another object of the same name, or
// before the cache is started.
func (c *Controller) ownedCached(w echoes.OwnedWrite, name string, v *echoes.Version) bool {
	ch := c.listerCaches[w.GVR]
	if v == nil || ch == nil {
		return false
	}
	inf := ch.informer.Load()
	if inf == nil {
		return false
	}
	cached := cachedVersion((*inf).GetIndexer(), objectKey(w.Namespace, name))
	return cached.UID == v.UID && newerOrSame(cached.ResourceVersion, v.ResourceVersion)
}

// reportUnseenCreations logs, at DEBUG, the owned objects that the
// reconcile of u created and whose events won't reconcile u again, if the
// reconcile succeeded and its status didn't change: statusChanged is
// whether a status was applied. A Reconciler that counts its children in
// its status from the cache, as controller-runtime's code does, leaves
// its status as it was in the reconcile that creates one, and relies on
// the creation's event for the next reconcile, which doesn't come here.
// The record names the children and ReconcileOwnCreations.
func (c *Controller) reportUnseenCreations(ctx context.Context, u *cachedObject, statusChanged bool) {
	s := scopeOf(ctx)
	if statusChanged || s == nil {
		return
	}
	created := s.takeCreated()
	if len(created) == 0 {
		return
	}
	LoggerFrom(ctx).DebugContext(ctx, "own creations don't reconcile again",
		slog.String("controller", c.settings.Name),
		slog.Any("created", created),
		slog.String("why", "the reconcile of "+c.describe(u)+" created owned objects and left its status unchanged; their creation events don't queue it again, as they do in controller-runtime: "+
			"if its status reports them from the cache, give their Owns kube.ReconcileOwnCreations(), or report what the creation returned"))
}
