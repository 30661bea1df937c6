package kube

import (
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

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
// its status. When the API server answers 201 Created, with JSON or
// protobuf, the object's uid and resourceVersion are the reconcile's own
// write, kept under the key of the owner being reconciled. Owns' event of
// that exact version, for that owner, isn't queued; any other is, a change
// that lands between the write and its event included, since it has a
// resourceVersion of its own. The Reconciler's write made that version,
// and the Reconciler saw what it returned, so it is no news to it.
// echoFilter holds an owned object's events while a write to it is in
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
// A write made through a client that isn't built on Client.Config, or with
// a context that isn't the reconcile's, isn't seen, and its event queues
// its owner as before. A creation whose labels an Owns' LabelSelector
// doesn't select isn't kept: that Owns hears nothing of the object, so no
// event would ever come to match it.

// noteOwnedWrite sends req, a write of the reconcile of key, through
// next, noting it first if it writes a resource c Owns: the body of a
// reconcile's writeHook (scope.go, transport.go).
func (c *Controller) noteOwnedWrite(key string, req *http.Request, next http.RoundTripper) (*http.Response, error) {
	w, ok := c.ownedWrite(key, req)
	if !ok {
		return next.RoundTrip(req)
	}
	// A POST names its object in its body, not its path: its key is known
	// only from the answer, so its events aren't held meanwhile.
	if w.name != "" {
		c.ownedCreations.writing(w.key(w.name))
		// A panic below, which the reconcile recovers, still ends the
		// write: left in flight, the object's events would be held for
		// good.
		defer func() {
			if p := recover(); p != nil {
				c.ownedCreations.wrote(w.key(w.name), nil)
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
	if got != nil && !w.selects(got.Labels) {
		// A label-selected Owns that doesn't see the object: no event
		// would come to match a write kept for it.
		got = nil
	}
	switch {
	case w.name != "":
		c.ownedCreations.wrote(w.key(w.name), writtenVersion(got, w.namespace, w.name))
	case got != nil && got.Name != "" && got.Namespace == w.namespace:
		// A POST's events weren't held: the creation's event may have
		// come already, and then nothing is left to match it.
		key := w.key(got.Name)
		v := writtenVersion(got, w.namespace, got.Name)
		c.ownedCreations.writing(key)
		c.ownedCreations.wroteCached(key, v, c.ownedCached(w, got.Name, v))
	}
	return resp, err
}

// ownedWriteTarget is a write to an owned resource, as its request's path
// names it, by the reconcile of owner.
type ownedWriteTarget struct {
	owner     string
	gvr       schema.GroupVersionResource // the Owns' resource, whose cache holds the object
	selectors []string                    // the label selectors of the Owns of its group and resource, "" for every object
	namespace string
	name      string // "" for a POST
}

// selects reports whether an Owns of w's group and resource, at any of
// its versions, watches an object with labels: one without a label
// selector watches every one. A selector that doesn't parse, which
// NewController refuses, selects none.
func (w ownedWriteTarget) selects(objLabels map[string]string) bool {
	for _, s := range w.selectors {
		if s == "" {
			return true
		}
		if sel, err := labels.Parse(s); err == nil && sel.Matches(labels.Set(objLabels)) {
			return true
		}
	}
	return false
}

// key is the echoFilter key of the object name of w's resource and
// namespace, written by w's owner's reconcile: Owns' handler builds the
// same from an event's object and its controller owner reference.
func (w ownedWriteTarget) key(name string) string {
	return ownedWriteKey(w.owner, w.gvr.GroupResource(), w.namespace, name)
}

// ownedWriteKey is the echoFilter key of an owned object: its owner's key,
// its resource, and its namespace and name. Versions of one resource name
// one object, so the version is left out.
func ownedWriteKey(owner string, gr schema.GroupResource, namespace, name string) string {
	return owner + "\x00" + gr.String() + "\x00" + namespace + "/" + name
}

// ownedWrite reports whether req, made by the reconcile of owner, writes
// an object of a resource the controller Owns, or its status, and which.
// It reads the path as the API server's request info does:
// /api/v1/[namespaces/NS/]RESOURCE[/NAME[/status]] for the core group,
// /apis/GROUP/VERSION/... for the others, after any prefix of Host's.
func (c *Controller) ownedWrite(owner string, req *http.Request) (ownedWriteTarget, bool) {
	if req.URL == nil || len(c.owns) == 0 {
		return ownedWriteTarget{}, false
	}
	p := req.URL.Path
	var gv []string
	var rest string
	if i := strings.Index(p, "/api/"); i >= 0 && (strings.Index(p, "/apis/") < 0 || i < strings.Index(p, "/apis/")) {
		parts := strings.SplitN(p[i+len("/api/"):], "/", 2)
		if len(parts) < 2 {
			return ownedWriteTarget{}, false
		}
		gv, rest = []string{"", parts[0]}, parts[1]
	} else if i := strings.Index(p, "/apis/"); i >= 0 {
		parts := strings.SplitN(p[i+len("/apis/"):], "/", 3)
		if len(parts) < 3 {
			return ownedWriteTarget{}, false
		}
		gv, rest = parts[:2], parts[2]
	} else {
		return ownedWriteTarget{}, false
	}
	segs := strings.Split(rest, "/")
	w := ownedWriteTarget{owner: owner}
	if len(segs) >= 3 && segs[0] == "namespaces" {
		w.namespace, segs = segs[1], segs[2:]
	}
	switch {
	case len(segs) == 1 && req.Method == http.MethodPost:
	case len(segs) == 2 && req.Method != http.MethodPost, len(segs) == 3 && segs[2] == "status" && req.Method != http.MethodPost:
		w.name = segs[1]
	default:
		return ownedWriteTarget{}, false
	}
	for _, o := range c.owns {
		if o.gvr.Group == gv[0] && o.gvr.Resource == segs[0] {
			if w.selectors == nil {
				w.gvr = o.gvr
			}
			w.selectors = append(w.selectors, o.selector)
		}
	}
	if w.selectors == nil {
		return ownedWriteTarget{}, false
	}
	return w, w.name != "" || req.Method == http.MethodPost
}

// ownedCached reports whether the Owns cache of w's resource holds the
// object name in w's namespace at version v or a newer one already: v's
// event has come, at least as far as the cache, and if another writer
// changed the object before the answer came (the Deployment controller
// writes a new Deployment's status at once), so has that change's. It
// reports false for a nil v, for another object of the same name, or
// before the cache is started.
func (c *Controller) ownedCached(w ownedWriteTarget, name string, v *objectVersion) bool {
	ch := c.listerCaches[w.gvr]
	if v == nil || ch == nil {
		return false
	}
	inf := ch.informer.Load()
	if inf == nil {
		return false
	}
	cached := cachedVersion((*inf).GetIndexer(), objectKey(w.namespace, name))
	return cached.uid == v.uid && newerOrSame(cached.resourceVersion, v.resourceVersion)
}

// writtenVersion is the object version m, a write's answer's metadata,
// names, or nil if m is nil or names another object than namespace/name.
func writtenVersion(m *metav1.ObjectMeta, namespace, name string) *objectVersion {
	if m == nil || m.Name != name || m.Namespace != namespace || m.ResourceVersion == "" {
		return nil
	}
	return &objectVersion{uid: m.UID, resourceVersion: m.ResourceVersion}
}
