package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/z5labs/humus/kube/internal/applyset"
	"github.com/z5labs/humus/kube/internal/echoes"
	"github.com/z5labs/humus/kube/internal/objcache"
)

// Pruning (Prune): after a reconcile that succeeds, each child of a pruned
// Owns' resource that the Owns' cache indexes under the reconciled
// object's uid, and that the reconcile didn't write (a PATCH, PUT or POST
// of the object or any of its subresources, its status or its scale,
// through a client built on Client.Config, with the reconcile's context:
// noteApplied), is handed to internal/applyset, which deletes those a
// fresh GET finds still the object's and labelled part of its ApplySet,
// with preconditions on their uid and resourceVersion, after the "prune
// preview" record. A reconcile that returns an error, panics or is
// cancelled prunes nothing, nor does the reconcile of an object being
// deleted (the garbage collector deletes its children).

// The ApplySet labels, as kubectl names them
// (k8s.io/kubectl/pkg/cmd/apply, applyset.go).
const (
	// ApplySetPartOfLabel is the label on each child of an ApplySet: its
	// value is the parent's ApplySetID. A Reconciler of a pruned resource
	// puts it on every child it writes (ApplySetLabels).
	ApplySetPartOfLabel = "applyset.kubernetes.io/part-of"
	// ApplySetIDLabel is the label on an ApplySet's parent, whose value is
	// its ApplySetID. The controller applies it.
	ApplySetIDLabel = "applyset.kubernetes.io/id"
	// ApplySetParentTypeLabel is the label on a CRD, "true", that lets
	// kubectl take its custom resources as ApplySet parents: a Resource
	// whose Owns prune needs it in Resource.Labels.
	ApplySetParentTypeLabel = "applyset.kubernetes.io/is-parent-type"
)

// Prune makes an Owns prune its resource: after a reconcile that succeeds,
// each object of the resource that the reconciled object controls, that
// is labelled part of its ApplySet (ApplySetLabels), and that the
// reconcile didn't write (a write of any of its subresources, such as a
// Deployment's scale, counts as one of the object), is deleted, in the background, with a
// precondition on its uid and resourceVersion. So a Reconciler of a pruned
// resource writes every child it keeps on every reconcile, as a
// server-side apply does at no cost when nothing changed, through a
// client built on Client.Config, with the reconcile's context: a child it
// stops writing is deleted. The controller also applies the ApplySet's
// label and annotations to the reconciled object, once, under the field manager Settings.Name +
// "-applyset", as its own write: its event doesn't reconcile the object
// again. The RBAC it needs beyond Owns' is get and delete on the
// resource, and patch on the controller's own (which Finalize needs too).
// A reconcile whose prune fails (a GET, the parent's apply or a DELETE)
// returns that error, and is retried as any failed reconcile. A Watches
// can't take it; a Resource whose Owns prunes needs ApplySetParentTypeLabel
// "true" in Resource.Labels, and NewController says so.
func Prune() WatchOption {
	return func(s *informerSpec) { s.prune = pruneDelete }
}

// PruneDryRun is Prune that deletes nothing: each reconcile that succeeds
// logs the "prune preview" record of what Prune would delete, and the
// ApplySet's label and annotations are applied, as Prune does.
func PruneDryRun() WatchOption {
	return func(s *informerSpec) { s.prune = pruneDryRun }
}

// pruneMode is an Owns' pruning: none, Prune's or PruneDryRun's.
type pruneMode int

const (
	pruneOff pruneMode = iota
	pruneDelete
	pruneDryRun
)

// ApplySetID returns kubectl's id of the ApplySet whose parent is the
// object name in namespace ("" for a cluster-scoped one), of kind in group
// ("" for the core group): "applyset-" + the unpadded URL-safe base64 of
// the SHA-256 of name.namespace.kind.group + "-v1", as kubectl's
// ApplySet.ID computes it, so that
//
//	kubectl get <resource> -l applyset.kubernetes.io/part-of=<id>
//
// lists the set.
func ApplySetID(name, namespace, kind, group string) string {
	return applyset.ID(name, namespace, kind, group)
}

// ApplySetLabels returns the label that makes a child part of the
// ApplySet of the object ctx's reconcile reconciles, ApplySetPartOfLabel,
// as a new map, for a child's labels, such as
// appsv1ac.Deployment(name, ns).WithLabels(kube.ApplySetLabels(ctx)). It
// returns nil if ctx is no reconcile's.
func ApplySetLabels(ctx context.Context) map[string]string {
	s := scopeOf(ctx)
	if s == nil || s.c == nil || s.key == "" {
		return nil
	}
	return map[string]string{ApplySetPartOfLabel: s.c.applySetIDOf(s.key)}
}

// applySetIDOf is the ApplySet id of the controller's object under key.
func (c *Controller) applySetIDOf(key string) string {
	ns, name, ok := strings.Cut(key, "/")
	if !ok {
		ns, name = "", key
	}
	return ApplySetID(name, ns, c.kind, c.group)
}

// checkApplySetParent returns an error if an Owns of owns prunes and
// resourceLabels, those of a Resource's CRD, don't make its kind an
// ApplySet parent kubectl takes.
func checkApplySetParent(kind string, resourceLabels map[string]string, owns []informerSpec) error {
	for _, o := range owns {
		if o.prune != pruneOff && resourceLabels[ApplySetParentTypeLabel] != "true" {
			return fmt.Errorf("kube: Owns(%s) prunes, so %s is an ApplySet parent, which kubectl takes only from a CRD labelled %s: \"true\": add it to Resource.Labels", o.gvr, kind, ApplySetParentTypeLabel)
		}
	}
	return nil
}

// noteApplied records req, a PATCH, PUT or POST of the reconcile of
// s.key, and its answer resp, as a write of a child, if it writes an
// object of a pruned resource or a subresource of one (a Deployment's
// scale: the write names its object): by the name its path names, whatever the
// answer (a write that failed was still meant), or for a POST by the name
// the API server's answer of the created object names.
func (s *scope) noteApplied(req *http.Request, resp *http.Response, err error) {
	c := s.c
	if !c.prunes() {
		return
	}
	w, ok := c.ownedWrite(s.key, req)
	if !ok || !c.prunesResource(w.GVR.GroupResource()) {
		return
	}
	name := w.Name
	if name == "" {
		got := objcache.CreatedMetadata(resp, err)
		if got == nil || got.Namespace != w.Namespace {
			return
		}
		name = got.Name
	}
	s.applied.Add(w.GVR.GroupResource(), objectKey(w.Namespace, name))
}

// prunes reports whether an Owns of c prunes.
func (c *Controller) prunes() bool {
	return slices.ContainsFunc(c.owns, func(o informerSpec) bool { return o.prune != pruneOff })
}

// prunedResources returns the resources of c's Owns that prune, found
// once, as ownedResources is: every reconcile that prunes asks, though
// the ApplySet's group-kinds are found from them only once.
func (c *Controller) prunedResources() []schema.GroupVersionResource {
	c.ownedResources()
	return c.pruned
}

// prunesResource reports whether an Owns of gr prunes.
func (c *Controller) prunesResource(gr schema.GroupResource) bool {
	return slices.ContainsFunc(c.owns, func(o informerSpec) bool { return o.prune != pruneOff && o.gvr.GroupResource() == gr })
}

// pruneAfter prunes the children of u, whose reconcile succeeded with ctx,
// of each pruned Owns: see Prune. An object being deleted, or a reconcile
// whose context is done or whose Lease has lapsed, prunes nothing, the
// last with an error.
func (c *Controller) pruneAfter(ctx context.Context, u *cachedObject) error {
	s := scopeOf(ctx)
	if !c.prunes() || s == nil || u.GetDeletionTimestamp() != nil {
		return nil
	}
	if err := errors.Join(ctx.Err(), mayWork(ctx)); err != nil {
		return fmt.Errorf("kube: not pruning the children of %s: the reconcile was cancelled: %w", c.describe(u), err)
	}
	parent := applyset.Parent{ID: c.applySetIDOf(u.Key()), UID: u.GetUID(), Name: c.describe(u)}
	if err := c.applyApplySetParent(ctx, u, parent.ID); err != nil {
		return err
	}
	pruner := applyset.Pruner{Client: c.clients.dynamic, Log: LoggerFrom, MayWork: mayWork}
	var errs []error
	for _, o := range c.owns {
		if o.prune == pruneOff {
			continue
		}
		stale, err := c.unwrittenChildren(s, u, o)
		if err == nil {
			err = pruner.Prune(ctx, o.gvr, parent, stale, o.prune == pruneDryRun)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// unwrittenChildren returns the children of u that the cache of o's
// resource indexes under u's uid and that s's reconcile didn't write.
func (c *Controller) unwrittenChildren(s *scope, u *cachedObject, o informerSpec) ([]applyset.Child, error) {
	ch := c.listerCaches[o.gvr]
	if ch == nil {
		return nil, nil
	}
	inf := ch.informer.Load()
	if inf == nil {
		return nil, nil
	}
	items, err := (*inf).GetIndexer().ByIndex(controllerUIDIndex, string(u.GetUID()))
	if err != nil {
		return nil, fmt.Errorf("kube: reading the children of %s from the cache of %s: %w", c.describe(u), o.gvr, err)
	}
	gr := o.gvr.GroupResource()
	var stale []applyset.Child
	for _, item := range items {
		m, ok := item.(metav1.Object)
		if !ok || s.applied.Has(gr, objectKey(m.GetNamespace(), m.GetName())) {
			continue
		}
		stale = append(stale, applyset.Child{Namespace: m.GetNamespace(), Name: m.GetName(), UID: m.GetUID()})
	}
	return stale, nil
}

// applyApplySetParent applies the ApplySet's label and annotations to u,
// the set's parent, unless it carries them already: kubectl's id label,
// its tooling, and the group-kinds of the pruned Owns. It applies under
// the field manager Settings.Name + "-applyset", so that the finalizer's
// applies, under Settings.Name, leave them be, as the controller's own
// write, whose event doesn't queue u again (echoes.Filter).
func (c *Controller) applyApplySetParent(ctx context.Context, u *cachedObject, id string) error {
	gks, err := c.applySet.Get(ctx, c.clients.kube.Discovery(), c.prunedResources())
	if err != nil {
		return err
	}
	var md metav1.PartialObjectMetadata
	if err := u.Decode(&md); err != nil {
		return fmt.Errorf("kube: reading the metadata of %s: %w", c.describe(u), err)
	}
	meta := applyset.ParentMetadata(md.Labels, md.Annotations, id, gks)
	if meta == nil {
		return nil
	}
	b, err := c.applyBody(u, meta, "", nil)
	if err != nil {
		return fmt.Errorf("kube: encoding the ApplySet of %s: %w", c.describe(u), err)
	}
	apply := &unstructured.Unstructured{}
	if err := apply.UnmarshalJSON(b); err != nil {
		return err
	}
	// Its event is the controller's own write, as a status apply's is
	// (internal/echoes): it changes nothing the Reconciler reads, so it
	// doesn't queue the object for a second reconcile.
	scope := echoes.Scope{Labels: []string{applyset.IDLabel}, Annotations: []string{applyset.ToolingAnnotation, applyset.GroupKindsAnnotation}}
	held := func(v echoes.Version) bool { return c.holds(u.Key(), v.UID) }
	err = c.echoes.WriteScoped(u.Key(), scope, held, func() (*echoes.Version, error) {
		res, err := c.clients.dynamic.Resource(c.gvr).Namespace(u.GetNamespace()).Apply(ctx, u.GetName(), apply,
			metav1.ApplyOptions{FieldManager: c.settings.Name + "-applyset", Force: true})
		if err != nil || res == nil {
			return nil, err
		}
		return &echoes.Version{UID: res.GetUID(), ResourceVersion: res.GetResourceVersion()}, nil
	})
	if err != nil {
		return fmt.Errorf("kube: applying the ApplySet's label and annotations to %s: %w", c.describe(u), err)
	}
	return nil
}
