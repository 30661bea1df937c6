package crdschema

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"unsafe"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Rules are the rules of one Go type: kube.TypeRules holds one. Type is
// the type, nil in a zero TypeRules; Errs are the mistakes found while
// making it, which CRD reports.
type Rules struct {
	Type   reflect.Type
	Fields []Field
	Errs   []error

	Description *string
	Validations []apiextensionsv1.ValidationRule

	// Values, from kube.ValueRules, constrain every value of the type.
	Values []Constraint

	// Schema, from kube.Schema, is the type's whole schema, which is not
	// reflected.
	Schema *apiextensionsv1.JSONSchemaProps
}

// Field is one field's rule, as kube.FieldOf holds it without its type
// parameter: the field, named by a pointer until ResolveFields finds its
// index, and its constraints.
type Field struct {
	Ptr   unsafe.Pointer // from kube.Field, until ResolveFields resolves it
	Type  reflect.Type   // the field's type
	Index []int          // the field's index sequence, from ResolveFields

	Defaulted   bool
	Required    *bool // from Required or Optional
	Nullable    bool  // from Nullable
	Preserve    bool  // from PreserveUnknownFields
	Constraints []Constraint
}

// Constraint is one constraint of a field or of values, applied to a
// schema. Name is the kube method that made it, which errors name.
type Constraint struct {
	Name  string
	Apply func(s *apiextensionsv1.JSONSchemaProps) error
	// Value is whether it constrains the value, which null would bypass.
	Value bool
}

// ConstrainsValue reports whether one of cs constrains the value.
func ConstrainsValue(cs []Constraint) bool {
	return slices.ContainsFunc(cs, func(c Constraint) bool { return c.Value })
}

// ResolveFields finds each of fields in *v, a value of struct type t, by
// its pointer's offset in *v and its type, and returns the Rules of t,
// with an error for each field that names none. v is reflect.ValueOf of
// the pointer given to kube.Rules, nil or not; a nil item of fields is a
// nil kube.FieldRule.
func ResolveFields(t reflect.Type, v reflect.Value, fields []*Field) Rules {
	r := Rules{Type: t}
	if v.IsNil() {
		r.Errs = append(r.Errs, fmt.Errorf("kube: Rules for %s: v is nil, so it names no fields", t))
		return r
	}
	base := v.Pointer()
	for i, f := range fields {
		if f == nil {
			r.Errs = append(r.Errs, fmt.Errorf("kube: Rules for %s: field rule %d is nil", t, i+1))
			continue
		}
		fr := *f
		if fr.Ptr == nil {
			r.Errs = append(r.Errs, fmt.Errorf("kube: Rules for %s: field rule %d is a Field of a nil pointer, which names no field", t, i+1))
			continue
		}
		p := uintptr(fr.Ptr)
		if p < base || p-base >= t.Size() && !(t.Size() == 0 && p == base) {
			if owner, path := behindEmbeddedPointer(v.Elem(), p, fr.Type, 0); owner != nil {
				r.Errs = append(r.Errs, fmt.Errorf("kube: Rules for %s: field rule %d (a %s) points outside the value given to Rules: it names %s, promoted through the embedded pointer *%s: constrain it in Rules for %s", t, i+1, fr.Type, path, owner, owner))
				continue
			}
			r.Errs = append(r.Errs, fmt.Errorf("kube: Rules for %s: field rule %d (a %s) points outside the value given to Rules, so it names no field of %s", t, i+1, fr.Type, t))
			continue
		}
		index, err := fieldAt(t, p-base, fr.Type)
		if err != nil {
			r.Errs = append(r.Errs, fmt.Errorf("kube: Rules for %s: field rule %d (a %s): %w", t, i+1, fr.Type, err))
			continue
		}
		fr.Index = index
		fr.Ptr = nil // Rules keeps no pointer into v.
		r.Fields = append(r.Fields, fr)
	}
	return r
}

// items is the schema of an array's items, or nil.
func items(p *apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps {
	if p.Items == nil {
		return nil
	}
	return p.Items.Schema
}

// fits reports whether the schema p is of type want, and n isn't negative.
// An int-or-string fits a string's constraints, as the API server allows.
func fits(p *apiextensionsv1.JSONSchemaProps, want string, n int) error {
	if p.Type != want && !(want == "string" && p.XIntOrString) {
		return fmt.Errorf("fits a field of type %s, not %s", want, describeType(p))
	}
	if n < 0 {
		return fmt.Errorf("is %d, which is negative", n)
	}
	return nil
}

// number is v as a float64, for a field whose schema is a number.
func number(p *apiextensionsv1.JSONSchemaProps, v any) (float64, error) {
	if p.Type != "integer" && p.Type != "number" {
		return 0, fmt.Errorf("fits a number, not %s", describeType(p))
	}
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return 0, fmt.Errorf("is a nil pointer")
		}
		rv = rv.Elem()
	}
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(rv.Int()), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return float64(rv.Uint()), nil
	case reflect.Float32, reflect.Float64:
		// JSON has no NaN or infinity, so no CRD could be encoded.
		switch f := rv.Float(); {
		case math.IsNaN(f):
			return 0, fmt.Errorf("is NaN, which JSON can't encode")
		case math.IsInf(f, 0):
			return 0, fmt.Errorf("is %v, which JSON can't encode", f)
		default:
			return f, nil
		}
	}
	return 0, fmt.Errorf("fits a number, not a %s", rv.Type())
}

func describeType(p *apiextensionsv1.JSONSchemaProps) string {
	switch {
	case p.XIntOrString:
		return "int-or-string"
	case p.Type == "":
		return "a schema of no type"
	}
	return p.Type
}

// fieldAt is the index sequence of the field of struct type t at offset
// off whose type is ft: a field of t, or one promoted from a struct
// embedded in t by value.
func fieldAt(t reflect.Type, off uintptr, ft reflect.Type) ([]int, error) {
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%s is a %s, not a struct, so it has no fields: constrain its values with kube.ValueRules(kube.Values[%s]()...), or give its whole schema with kube.Schema[%s]", t, t.Kind(), t, t)
	}
	if index := promotedAt(t, off, ft); index != nil {
		return index, nil
	}
	// Not a field of t: say where it points instead.
	if owner, path := nestedAt(t, off, ft); owner != nil {
		return nil, fmt.Errorf("it names %s, a field of the nested struct %s: constrain it in Rules for %s", path, owner, owner)
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Type.Kind() == reflect.Array && off >= f.Offset && off < f.Offset+f.Type.Size() {
			return nil, fmt.Errorf("it points into the array %s.%s, not at a field", t, f.Name)
		}
	}
	return nil, fmt.Errorf("it names no field of %s", t)
}

// nestedAt finds the field of type ft at offset off in a struct nested in
// struct type t, by value: the struct type whose field it is, and its
// selector from t, such as outer.Inner.Deep.Min.
func nestedAt(t reflect.Type, off uintptr, ft reflect.Type) (reflect.Type, string) {
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Type.Kind() != reflect.Struct || off < f.Offset || off >= f.Offset+f.Type.Size() {
			continue
		}
		if index := promotedAt(f.Type, off-f.Offset, ft); index != nil {
			return f.Type, t.Name() + "." + f.Name + strings.TrimPrefix(goFieldName(f.Type, index), f.Type.Name())
		}
		if owner, path := nestedAt(f.Type, off-f.Offset, ft); owner != nil {
			return owner, t.Name() + "." + f.Name + strings.TrimPrefix(path, f.Type.Name())
		}
	}
	return nil, ""
}

// promotedAt is fieldAt for a field of t or one promoted from an embedded
// struct, or nil.
func promotedAt(t reflect.Type, off uintptr, ft reflect.Type) []int {
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Offset == off && f.Type == ft {
			return []int{i}
		}
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.Anonymous || f.Type.Kind() != reflect.Struct || off < f.Offset || off >= f.Offset+f.Type.Size() {
			continue
		}
		if index := promotedAt(f.Type, off-f.Offset, ft); index != nil {
			return append([]int{i}, index...)
		}
	}
	return nil
}

// behindEmbeddedPointer finds the field of type ft at address p in a struct
// that struct value v embeds by a non-nil pointer, or one that struct
// embeds, and so on: the embedded struct's type, whose field it is, and its
// selector, such as Outer.Inner.A. depth bounds a chain of pointers that
// loops.
func behindEmbeddedPointer(v reflect.Value, p uintptr, ft reflect.Type, depth int) (reflect.Type, string) {
	if v.Kind() != reflect.Struct || depth > 32 {
		return nil, ""
	}
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.Anonymous || f.Type.Kind() != reflect.Pointer || f.Type.Elem().Kind() != reflect.Struct {
			continue
		}
		fv := v.Field(i)
		if fv.IsNil() {
			continue
		}
		et := f.Type.Elem()
		if addr := fv.Pointer(); p >= addr && p-addr < et.Size() {
			if index := promotedAt(et, p-addr, ft); index != nil {
				return et, t.Name() + "." + f.Name + strings.TrimPrefix(goFieldName(et, index), et.Name())
			}
		}
		if owner, path := behindEmbeddedPointer(fv.Elem(), p, ft, depth+1); owner != nil {
			return owner, t.Name() + "." + f.Name + strings.TrimPrefix(path, et.Name())
		}
	}
	return nil, ""
}
