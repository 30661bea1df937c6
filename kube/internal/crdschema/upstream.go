package crdschema

import (
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/z5labs/humus/kube/internal/upstream"
)

var podType = reflect.TypeFor[corev1.Pod]()

// upstreamTable is the API server's own schema of Kubernetes' types
// (package upstream), which a reflector loads when it first meets a type
// from k8s.io.
type upstreamTable struct {
	loaded bool
	types  map[string]upstream.Type
}

// upstreamType is the API server's own schema of struct type t, or nil when
// t isn't one of Kubernetes' types in the table.
func (b *reflector) upstreamType(t reflect.Type) *upstream.Type {
	name := upstream.Name(t.PkgPath(), t.Name())
	if name == "" {
		return nil
	}
	if !b.upstream.loaded {
		b.upstream.loaded = true
		types, err := upstream.Table()
		if err != nil {
			b.errs = append(b.errs, err)
		}
		b.upstream.types = types
	}
	u, ok := b.upstream.types[name]
	if !ok {
		return nil
	}
	return &u
}

// upstreamObject gives s, the schema of struct type t, t's description and
// map type as the API server has them, when t is one of Kubernetes' types:
// x-kubernetes-map-type atomic on a struct such as metav1.LabelSelector
// makes server-side apply replace it whole.
func (b *reflector) upstreamObject(t reflect.Type, s *apiextensionsv1.JSONSchemaProps) {
	u := b.upstreamType(t)
	if u == nil {
		return
	}
	if !b.omitUpstreamDescriptions {
		s.Description = u.Description
	}
	if u.MapType != "" {
		s.XMapType = ptrTo(u.MapType)
	}
}

// upstreamField gives p, the schema of the field named name of struct type
// t, what the API server's own schema has for it, when t is one of
// Kubernetes' types, or else when owner, the struct embedded in t that the
// field is promoted from, is: its description, format, +default value,
// list type and list-map keys, and map type, but not its enum. t comes first, as a type that
// inlines another (EphemeralContainer inlines EphemeralContainerCommon) is
// described with the fields it inlines; owner is for a user's type that
// embeds one of Kubernetes' (a metav1.Condition). ok reports whether it
// did; required is then whether the API server requires the field,
// whatever its json tag says, and defaulted whether it has a default.
func (b *reflector) upstreamField(t, owner reflect.Type, name string, p *apiextensionsv1.JSONSchemaProps) (required, defaulted, ok bool) {
	var u *upstream.Type
	var up upstream.Property
	for _, typ := range []reflect.Type{t, owner} {
		if u = b.upstreamType(typ); u == nil {
			continue
		}
		if up, ok = u.Properties[name]; ok {
			break
		}
	}
	if !ok {
		return false, false, false
	}
	if up.Description != "" && !b.omitUpstreamDescriptions {
		p.Description = up.Description
	}
	if up.Format != "" && (p.Type == "string" || p.Type == "integer" || p.Type == "number") {
		p.Format = up.Format
	}
	// The table's enums (of +enum types, such as a Pod's restartPolicy)
	// are left out, as controller-gen leaves them out: a CRD made against
	// one release's list would refuse a value a newer cluster's Pods
	// accept, a break on upgrade, while the Pod's own validation checks
	// the value anyway when the Pod is made.
	if len(up.Default) > 0 {
		p.Default = &apiextensionsv1.JSON{Raw: append([]byte(nil), up.Default...)}
		defaulted = true
	}
	if up.ListType != "" {
		p.XListType = ptrTo(up.ListType)
	}
	if len(up.ListMapKeys) > 0 {
		p.XListMapKeys = append([]string(nil), up.ListMapKeys...)
	}
	if up.MapType != "" {
		p.XMapType = ptrTo(up.MapType)
	}
	return slices.Contains(u.Required, name), defaulted, true
}

// rootDescriptions are the descriptions of a custom resource's apiVersion
// and kind: the API server's own for every object's, as its schema has
// them on a Pod. (The root's metadata may have nothing but its type.)
func (b *reflector) rootDescriptions() map[string]string {
	u := b.upstreamType(podType)
	if u == nil {
		return nil
	}
	doc := make(map[string]string, 2)
	for _, name := range []string{"apiVersion", "kind"} {
		doc[name] = u.Properties[name].Description
	}
	return doc
}
