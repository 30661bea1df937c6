package applyset

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// The ApplySet labels and annotations, as kubectl names them
// (k8s.io/kubectl/pkg/cmd/apply, applyset.go). kube's ApplySetPartOfLabel,
// ApplySetIDLabel and ApplySetParentTypeLabel are the first three.
const (
	// PartOfLabel is the label on each child of an ApplySet: its value is
	// the parent's ID.
	PartOfLabel = "applyset.kubernetes.io/part-of"
	// IDLabel is the label on an ApplySet's parent, whose value is its ID.
	IDLabel = "applyset.kubernetes.io/id"
	// ParentTypeLabel is the label on a CRD, "true", that lets kubectl
	// take its custom resources as ApplySet parents.
	ParentTypeLabel = "applyset.kubernetes.io/is-parent-type"

	// ToolingAnnotation and GroupKindsAnnotation are the parent's
	// annotations: the tool that manages the set, and the group-kinds of
	// its children.
	ToolingAnnotation    = "applyset.kubernetes.io/tooling"
	GroupKindsAnnotation = "applyset.kubernetes.io/contains-group-kinds"
	// Tooling is the tooling annotation's value, <toolname>/<semver>:
	// kubectl refuses to change an ApplySet of another tool's.
	Tooling = "humus-kube/v1"
)

// ID returns kubectl's id of the ApplySet whose parent is the object name
// in namespace ("" for a cluster-scoped one), of kind in group ("" for the
// core group): "applyset-" + the unpadded URL-safe base64 of the SHA-256
// of name.namespace.kind.group + "-v1", as kubectl's ApplySet.ID computes
// it.
func ID(name, namespace, kind, group string) string {
	sum := sha256.Sum256([]byte(strings.Join([]string{name, namespace, kind, group}, ".")))
	return "applyset-" + base64.RawURLEncoding.EncodeToString(sum[:]) + "-v1"
}

// ParentMetadata returns the metadata an apply to a parent whose labels
// and annotations are these sets, for the ApplySet id whose children's
// group-kinds are gks: kubectl's id label, its tooling, and the
// group-kinds; or nil if the parent carries them already.
func ParentMetadata(labels, annotations map[string]string, id, gks string) map[string]any {
	if labels[IDLabel] == id && annotations[ToolingAnnotation] == Tooling &&
		annotations[GroupKindsAnnotation] == gks {
		return nil
	}
	return map[string]any{
		"labels":      map[string]any{IDLabel: id},
		"annotations": map[string]any{ToolingAnnotation: Tooling, GroupKindsAnnotation: gks},
	}
}

// GroupKinds is the contains-group-kinds annotation of a controller's
// ApplySets, found once.
type GroupKinds struct {
	mu    sync.Mutex
	value string
}

// Get returns the contains-group-kinds annotation of the ApplySets whose
// children are of the resources pruned: the Kind.group of each, sorted and
// joined by commas as kubectl writes them, found once by discovery.
func (g *GroupKinds) Get(ctx context.Context, d discovery.DiscoveryInterface, pruned []schema.GroupVersionResource) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.value != "" {
		return g.value, nil
	}
	var gks []string
	for _, gvr := range pruned {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		list, err := d.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
		if err != nil {
			return "", fmt.Errorf("kube: finding the kind of %s by discovery, for the ApplySet's group-kinds: %w", gvr, err)
		}
		kind := ""
		for _, r := range list.APIResources {
			if r.Name == gvr.Resource {
				kind = r.Kind
			}
		}
		if kind == "" {
			return "", fmt.Errorf("kube: the API server doesn't serve %s, whose kind the ApplySet's group-kinds name", gvr)
		}
		gks = append(gks, schema.GroupKind{Group: gvr.Group, Kind: kind}.String())
	}
	slices.Sort(gks)
	g.value = strings.Join(slices.Compact(gks), ",")
	return g.value, nil
}

// Written are the children a reconcile wrote, by resource, as
// namespace/name keys: what Prune keeps. Its methods are safe for
// concurrent use.
type Written struct {
	mu   sync.Mutex
	keys map[schema.GroupResource]map[string]bool
}

// Add records a write of the child key of gr.
func (a *Written) Add(gr schema.GroupResource, key string) {
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

// Has reports whether the child key of gr was written.
func (a *Written) Has(gr schema.GroupResource, key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.keys[gr][key]
}
