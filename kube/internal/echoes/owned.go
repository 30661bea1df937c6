package echoes

import (
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Owned is a resource the controller Owns, as a write's path names it: its
// resource, and its label selector, "" for every object.
type Owned struct {
	GVR      schema.GroupVersionResource
	Selector string
}

// OwnedWrite is a write to an owned resource, as its request's path
// names it, by the reconcile of owner.
type OwnedWrite struct {
	owner     string
	GVR       schema.GroupVersionResource // the Owns' resource, whose cache holds the object
	selectors []string                    // the label selectors of the Owns of its group and resource, "" for every object
	Namespace string
	Name      string // "" for a POST
}

// Selects reports whether an Owns of w's group and resource, at any of
// its versions, watches an object with labels: one without a label
// selector watches every one. A selector that doesn't parse, which
// NewController refuses, selects none.
func (w OwnedWrite) Selects(objLabels map[string]string) bool {
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

// Key is the Filter key of the object name of w's resource and
// namespace, written by w's owner's reconcile: Owns' handler builds the
// same from an event's object and its controller owner reference.
func (w OwnedWrite) Key(name string) string {
	return OwnedKey(w.owner, w.GVR.GroupResource(), w.Namespace, name)
}

// OwnedKey is the Filter key of an owned object: its owner's key,
// its resource, and its namespace and name. Versions of one resource name
// one object, so the version is left out.
func OwnedKey(owner string, gr schema.GroupResource, namespace, name string) string {
	return owner + "\x00" + gr.String() + "\x00" + namespace + "/" + name
}

// OwnedWriteOf reports whether req, made by the reconcile of owner, writes
// an object of a resource of owns, or any subresource of it (its status,
// a Deployment's scale), and which: a write to a subresource is a write
// of its object, named by the path. It reads the path as the API server's
// request info does:
// /api/v1/[namespaces/NS/]RESOURCE[/NAME[/SUBRESOURCE]] for the core
// group, /apis/GROUP/VERSION/... for the others, after any prefix of
// Host's. A POST names its object in its path only to a subresource.
func OwnedWriteOf(owner string, req *http.Request, owns []Owned) (OwnedWrite, bool) {
	if req.URL == nil || len(owns) == 0 {
		return OwnedWrite{}, false
	}
	p := req.URL.Path
	var gv []string
	var rest string
	if i := strings.Index(p, "/api/"); i >= 0 && (strings.Index(p, "/apis/") < 0 || i < strings.Index(p, "/apis/")) {
		parts := strings.SplitN(p[i+len("/api/"):], "/", 2)
		if len(parts) < 2 {
			return OwnedWrite{}, false
		}
		gv, rest = []string{"", parts[0]}, parts[1]
	} else if i := strings.Index(p, "/apis/"); i >= 0 {
		parts := strings.SplitN(p[i+len("/apis/"):], "/", 3)
		if len(parts) < 3 {
			return OwnedWrite{}, false
		}
		gv, rest = parts[:2], parts[2]
	} else {
		return OwnedWrite{}, false
	}
	segs := strings.Split(rest, "/")
	w := OwnedWrite{owner: owner}
	if len(segs) >= 3 && segs[0] == "namespaces" {
		w.Namespace, segs = segs[1], segs[2:]
	}
	switch {
	case len(segs) == 1 && req.Method == http.MethodPost:
	case len(segs) == 2 && req.Method != http.MethodPost, len(segs) == 3 && segs[2] != "":
		w.Name = segs[1]
	default:
		return OwnedWrite{}, false
	}
	for _, o := range owns {
		if o.GVR.Group == gv[0] && o.GVR.Resource == segs[0] {
			if w.selectors == nil {
				w.GVR = o.GVR
			}
			w.selectors = append(w.selectors, o.Selector)
		}
	}
	if w.selectors == nil {
		return OwnedWrite{}, false
	}
	return w, w.Name != "" || req.Method == http.MethodPost
}

// Written is the object version m, a write's answer's metadata,
// names, or nil if m is nil or names another object than namespace/name.
func Written(m *metav1.ObjectMeta, namespace, name string) *Version {
	if m == nil || m.Name != name || m.Namespace != namespace || m.ResourceVersion == "" {
		return nil
	}
	return &Version{UID: m.UID, ResourceVersion: m.ResourceVersion}
}
