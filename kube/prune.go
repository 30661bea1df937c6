package kube

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/z5labs/humus/kube/internal/objcache"
)

// Pruning: a reconcile's children of a resource an Owns names with Prune
// are its whole set of them. After a reconcile that succeeds, each child
// of that resource the reconciled object controls that the reconcile
// didn't write is deleted, as kubectl's ApplySet pruning (KEP-3659)
// deletes the members of a set that an apply no longer names. The set is
// an ApplySet as kubectl defines it (k8s.io/kubectl/pkg/cmd/apply,
// applyset.go), so that kubectl sees it: each child carries the label
// ApplySetPartOfLabel, whose value is the parent's ApplySetID, and the
// parent, the reconciled object, carries that id as its ApplySetIDLabel and
// the tooling and contains-group-kinds annotations.
//
// A child is deleted only when all of these hold, so that another owner's
// child, and an object the controller didn't make, are never touched: the
// Owns' cache's index by controller owner names it under the reconciled
// object's uid; the reconcile didn't write it (a PATCH, PUT or POST through
// a client built on Client.Config, with the reconcile's context); a fresh
// GET finds it still controlled by that uid and labelled part of the
// object's ApplySet; and the DELETE carries a precondition on its uid and
// the resourceVersion that GET read. A
// reconcile that returns an error, panics or is cancelled prunes nothing,
// nor does the reconcile of an object being deleted (the garbage collector
// deletes its children). Every deletion is preceded by one INFO record,
// "prune preview", naming what is about to go; PruneDryRun logs it and
// deletes nothing.

// The ApplySet labels and annotations, as kubectl names them
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

	applySetToolingAnnotation = "applyset.kubernetes.io/tooling"
	applySetGKsAnnotation     = "applyset.kubernetes.io/contains-group-kinds"
	// applySetTooling is the tooling annotation's value, <toolname>/<semver>:
	// kubectl refuses to change an ApplySet of another tool's.
	applySetTooling = "humus-kube/v1"
)

// Prune makes an Owns prune its resource: after a reconcile that succeeds,
// each object of the resource that the reconciled object controls, that
// is labelled part of its ApplySet (ApplySetLabels), and that the
// reconcile didn't write, is deleted, in the background, with a
// precondition on its uid and resourceVersion. So a Reconciler of a pruned
// resource writes every child it keeps on every reconcile, as a
// server-side apply does at no cost when nothing changed, through a
// client built on Client.Config, with the reconcile's context: a child it
// stops writing is deleted. The controller also applies the ApplySet's
// label and annotations to the reconciled object, once, under the field manager Settings.Name +
// "-applyset". The RBAC it needs beyond Owns' is get and delete on the
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
	sum := sha256.Sum256([]byte(strings.Join([]string{name, namespace, kind, group}, ".")))
	return "applyset-" + base64.RawURLEncoding.EncodeToString(sum[:]) + "-v1"
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

// appliedWrites are the children a reconcile wrote, by resource, as
// namespace/name keys: what Prune keeps.
type appliedWrites struct {
	mu   sync.Mutex
	keys map[schema.GroupResource]map[string]bool
}

func (a *appliedWrites) add(gr schema.GroupResource, key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.keys == nil {
		a.keys = map[schema.GroupResource]map[string]bool{}
	}
	if a.keys[gr] == nil {
		a.keys[gr] = map[string]bool{}
	}
	a.keys[gr][key] = true
}

func (a *appliedWrites) has(gr schema.GroupResource, key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.keys[gr][key]
}

// noteApplied records req, a PATCH, PUT or POST of the reconcile of
// s.key, and its answer resp, as a write of a child, if it writes an
// object of a pruned resource: by the name its path names, whatever the
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
	s.applied.add(w.GVR.GroupResource(), objectKey(w.Namespace, name))
}

// prunes reports whether an Owns of c prunes.
func (c *Controller) prunes() bool {
	return slices.ContainsFunc(c.owns, func(o informerSpec) bool { return o.prune != pruneOff })
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
	id := c.applySetIDOf(u.Key())
	if err := c.applyApplySetParent(ctx, u, id); err != nil {
		return err
	}
	var errs []error
	for _, o := range c.owns {
		if o.prune != pruneOff {
			errs = append(errs, c.pruneResource(ctx, s, u, o, id))
		}
	}
	return errors.Join(errs...)
}

// prunedChild is a child pruning may delete: its namespace, name and uid,
// and the resourceVersion at which a fresh GET found it prunable.
type prunedChild struct {
	namespace, name string
	uid             types.UID
	resourceVersion string
}

func (ch prunedChild) key() string { return objectKey(ch.namespace, ch.name) }

// pruneResource deletes the children of u of o's resource that ApplySet
// id holds and the reconcile didn't write: see Prune.
func (c *Controller) pruneResource(ctx context.Context, s *scope, u *cachedObject, o informerSpec, id string) error {
	stale, err := c.unwrittenChildren(s, u, o)
	if err != nil || len(stale) == 0 {
		return err
	}
	// What the API server holds now, not the cache: a child the cache
	// shows that was given to another owner, or never labelled part of
	// the set, is left alone.
	ri := c.clients.dynamic.Resource(o.gvr)
	var doomed []prunedChild
	var unlabelled, names []string
	for _, ch := range stale {
		got, err := ri.Namespace(ch.namespace).Get(ctx, ch.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("kube: reading %s %s, a child of %s to prune: %w", o.gvr.Resource, ch.key(), c.describe(u), err)
		case got.GetUID() != ch.uid || !controlledBy(got, u.GetUID()):
		case got.GetLabels()[ApplySetPartOfLabel] != id:
			unlabelled = append(unlabelled, ch.key())
		default:
			ch.resourceVersion = got.GetResourceVersion()
			doomed = append(doomed, ch)
			names = append(names, ch.key())
		}
	}
	log := LoggerFrom(ctx)
	if len(unlabelled) > 0 {
		log.InfoContext(ctx, "not pruned: not labelled part of the ApplySet",
			slog.String("resource", o.gvr.String()), slog.Any("children", unlabelled),
			slog.String("label", ApplySetPartOfLabel+"="+id))
	}
	if len(doomed) == 0 {
		return nil
	}
	dry := o.prune == pruneDryRun
	log.InfoContext(ctx, "prune preview", slog.String("resource", o.gvr.String()), slog.Any("children", names),
		slog.String("applyset", id), slog.Bool("dryRun", dry))
	if dry {
		return nil
	}
	return c.deleteChildren(ctx, u, o, doomed)
}

// unwrittenChildren returns the children of u that the cache of o's
// resource indexes under u's uid and that s's reconcile didn't write.
func (c *Controller) unwrittenChildren(s *scope, u *cachedObject, o informerSpec) ([]prunedChild, error) {
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
	var stale []prunedChild
	for _, item := range items {
		m, ok := item.(metav1.Object)
		if !ok || s.applied.has(gr, objectKey(m.GetNamespace(), m.GetName())) {
			continue
		}
		stale = append(stale, prunedChild{namespace: m.GetNamespace(), name: m.GetName(), uid: m.GetUID()})
	}
	return stale, nil
}

// deleteChildren deletes doomed, children of u of o's resource, in the
// background, each with a precondition on its uid and the resourceVersion
// its check read, unless the reconcile is cancelled first. A child gone
// already, or changed since that check, is no error.
func (c *Controller) deleteChildren(ctx context.Context, u *cachedObject, o informerSpec, doomed []prunedChild) error {
	ri := c.clients.dynamic.Resource(o.gvr)
	background := metav1.DeletePropagationBackground
	for _, ch := range doomed {
		if err := errors.Join(ctx.Err(), mayWork(ctx)); err != nil {
			return fmt.Errorf("kube: not pruning %s %s: the reconcile was cancelled: %w", o.gvr.Resource, ch.key(), err)
		}
		// The resourceVersion too: a child given to another owner, or
		// unlabelled, since the GET that found it prunable is left alone.
		uid, rv := ch.uid, ch.resourceVersion
		err := ri.Namespace(ch.namespace).Delete(ctx, ch.name, metav1.DeleteOptions{
			Preconditions:     &metav1.Preconditions{UID: &uid, ResourceVersion: &rv},
			PropagationPolicy: &background,
		})
		switch {
		case err == nil:
			LoggerFrom(ctx).InfoContext(ctx, "pruned", slog.String("resource", o.gvr.String()), slog.String("child", ch.key()))
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Gone already, or changed since the GET (another object of
			// its name, another owner's, or updated: a change to a child
			// queues its owner again, which prunes it then if it still
			// may).
		default:
			return fmt.Errorf("kube: pruning %s %s, a child of %s: %w", o.gvr.Resource, ch.key(), c.describe(u), err)
		}
	}
	return nil
}

// controlledBy reports whether u's controller owner reference names uid.
func controlledBy(u *unstructured.Unstructured, uid types.UID) bool {
	ref := metav1.GetControllerOfNoCopy(u)
	return ref != nil && ref.UID == uid
}

// applyApplySetParent applies the ApplySet's label and annotations to u,
// the set's parent, unless it carries them already: kubectl's id label,
// its tooling, and the group-kinds of the pruned Owns. It applies under
// the field manager Settings.Name + "-applyset", so that the finalizer's
// applies, under Settings.Name, leave them be.
func (c *Controller) applyApplySetParent(ctx context.Context, u *cachedObject, id string) error {
	gks, err := c.prunedGroupKinds(ctx)
	if err != nil {
		return err
	}
	var md metav1.PartialObjectMetadata
	if err := u.Decode(&md); err != nil {
		return fmt.Errorf("kube: reading the metadata of %s: %w", c.describe(u), err)
	}
	if md.Labels[ApplySetIDLabel] == id && md.Annotations[applySetToolingAnnotation] == applySetTooling &&
		md.Annotations[applySetGKsAnnotation] == gks {
		return nil
	}
	b, err := c.applyBody(u, map[string]any{
		"labels":      map[string]any{ApplySetIDLabel: id},
		"annotations": map[string]any{applySetToolingAnnotation: applySetTooling, applySetGKsAnnotation: gks},
	}, "", nil)
	if err != nil {
		return fmt.Errorf("kube: encoding the ApplySet of %s: %w", c.describe(u), err)
	}
	apply := &unstructured.Unstructured{}
	if err := apply.UnmarshalJSON(b); err != nil {
		return err
	}
	_, err = c.clients.dynamic.Resource(c.gvr).Namespace(u.GetNamespace()).Apply(ctx, u.GetName(), apply,
		metav1.ApplyOptions{FieldManager: c.settings.Name + "-applyset", Force: true})
	if err != nil {
		return fmt.Errorf("kube: applying the ApplySet's label and annotations to %s: %w", c.describe(u), err)
	}
	return nil
}

// prunedGroupKinds returns the contains-group-kinds annotation of c's
// ApplySets: the Kind.group of each pruned Owns' resource, sorted and
// joined by commas as kubectl writes them, found once by discovery.
func (c *Controller) prunedGroupKinds(ctx context.Context) (string, error) {
	c.applySet.mu.Lock()
	defer c.applySet.mu.Unlock()
	if c.applySet.groupKinds != "" {
		return c.applySet.groupKinds, nil
	}
	var gks []string
	for _, o := range c.owns {
		if o.prune == pruneOff {
			continue
		}
		if err := ctx.Err(); err != nil {
			return "", err
		}
		list, err := c.clients.kube.Discovery().ServerResourcesForGroupVersion(o.gvr.GroupVersion().String())
		if err != nil {
			return "", fmt.Errorf("kube: finding the kind of %s by discovery, for the ApplySet's group-kinds: %w", o.gvr, err)
		}
		kind := ""
		for _, r := range list.APIResources {
			if r.Name == o.gvr.Resource {
				kind = r.Kind
			}
		}
		if kind == "" {
			return "", fmt.Errorf("kube: the API server doesn't serve %s, whose kind the ApplySet's group-kinds name", o.gvr)
		}
		gks = append(gks, schema.GroupKind{Group: o.gvr.Group, Kind: kind}.String())
	}
	slices.Sort(gks)
	c.applySet.groupKinds = strings.Join(slices.Compact(gks), ",")
	return c.applySet.groupKinds, nil
}

// applySetState is what a Controller keeps of its ApplySets: the
// group-kinds its pruned Owns name, once found.
type applySetState struct {
	mu         sync.Mutex
	groupKinds string
}
