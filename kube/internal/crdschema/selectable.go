package crdschema

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// maxSelectableFields is the most selectable fields a CRD's version may
// have (apiextensions' validation, MaxSelectableFields).
const maxSelectableFields = 8

// Selectable is one of kube.SelectableFields' fields: the type of the
// object it was found in, and its JSONPath, or the error that replaces it.
type Selectable struct {
	Obj  reflect.Type
	Path string
	Err  error
}

// ResolveSelectable are the JSONPaths of fields, fields of *v, a value of
// type t: v is reflect.ValueOf of the pointer given to
// kube.SelectableFields, nil or not, and a nil item of fields is a nil
// kube.FieldRule. A field with constraints is an error: they belong in
// Rules.
func ResolveSelectable(t reflect.Type, v reflect.Value, fields []*Field) []Selectable {
	out := make([]Selectable, 0, len(fields))
	for i, f := range fields {
		s := Selectable{Obj: t}
		switch {
		case f == nil:
			s.Err = fmt.Errorf("kube: SelectableFields[%d] is nil", i)
		case v.IsNil():
			s.Err = fmt.Errorf("kube: SelectableFields[%d]: v is nil, so it names no fields", i)
		case f.Ptr == nil:
			s.Err = fmt.Errorf("kube: SelectableFields[%d] is a Field of a nil pointer, which names no field", i)
		case len(f.Constraints) > 0 || f.Required != nil || f.Nullable || f.Defaulted || f.Preserve:
			s.Err = fmt.Errorf("kube: SelectableFields[%d] (a %s) has constraints, which belong in the Rules of its type: give SelectableFields a bare kube.Field", i, f.Type)
		default:
			base, p := v.Pointer(), uintptr(f.Ptr)
			path, ok := "", false
			if p >= base && p-base < t.Size() {
				path, ok = jsonPathAt(t, p-base, f.Type)
			}
			if !ok {
				s.Err = fmt.Errorf("kube: SelectableFields[%d] (a %s) isn't a field encoding/json encodes in the value given to SelectableFields, reached without a pointer, a list or a map", i, f.Type)
				break
			}
			s.Path = path
		}
		out = append(out, s)
	}
	return out
}

// selectable are the Resource's selectable fields, checked as the API
// server checks them against root, the schema's root, with their errors
// added to b's.
func (r Resource) selectable(b *reflector, root apiextensionsv1.JSONSchemaProps) []apiextensionsv1.SelectableField {
	var out []apiextensionsv1.SelectableField
	for i, s := range r.SelectableFields {
		switch {
		case s.Obj == nil:
			b.errs = append(b.errs, fmt.Errorf("kube: Resource.SelectableFields[%d] is a zero SelectableField: make them with kube.SelectableFields", i))
			continue
		case s.Err != nil:
			b.errs = append(b.errs, s.Err)
			continue
		case s.Obj != r.Object:
			b.errs = append(b.errs, fmt.Errorf("kube: Resource.SelectableFields[%d] %s names a field of a %s, not of the resource's %s: give SelectableFields a *%s", i, s.Path, s.Obj, r.Object, r.Object))
			continue
		case strings.HasPrefix(s.Path, ".metadata."):
			b.errs = append(b.errs, fmt.Errorf("kube: Resource.SelectableFields[%d] %s: the API server selects by metadata.name and metadata.namespace itself, and takes no other field of metadata", i, s.Path))
			continue
		case slices.ContainsFunc(out, func(o apiextensionsv1.SelectableField) bool { return o.JSONPath == s.Path }):
			b.errs = append(b.errs, fmt.Errorf("kube: Resource.SelectableFields[%d] %s is given twice", i, s.Path))
			continue
		}
		p := root
		for name := range strings.SplitSeq(strings.TrimPrefix(s.Path, "."), ".") {
			p = p.Properties[name]
		}
		if (p.Type != "string" && p.Type != "integer" && p.Type != "boolean") || p.XIntOrString {
			b.errs = append(b.errs, fmt.Errorf("kube: Resource.SelectableFields[%d] %s is %s: the API server selects by a string, an integer or a boolean only", i, s.Path, describeType(&p)))
			continue
		}
		out = append(out, apiextensionsv1.SelectableField{JSONPath: s.Path})
	}
	if len(out) > maxSelectableFields {
		b.errs = append(b.errs, fmt.Errorf("kube: Resource.SelectableFields has %d fields: the API server takes at most %d", len(out), maxSelectableFields))
	}
	return out
}
