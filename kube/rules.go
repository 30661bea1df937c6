package kube

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"unsafe"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// TypeRules constrain the fields of one Go type, wherever the type appears
// in a schema. Rules and Schema make one; its zero value constrains
// nothing and names no type, which CRD reports as an error.
//
// A TypeRules is a value: each method returns a copy with one more
// constraint, and the original is unchanged.
type TypeRules struct {
	typ    reflect.Type
	fields []fieldRule
	errs   []error

	description *string
	validations []apiextensionsv1.ValidationRule

	// values, from ValueRules, constrain every value of the type.
	values []constraint

	// schema, from Schema, is the type's whole schema, which is not
	// reflected.
	schema *apiextensionsv1.JSONSchemaProps
}

// Rules constrains the fields of T. v only names them: each of fields is a
// Field of a field of *v, such as kube.Field(&spec.Size), or of a field
// promoted to *v from a struct embedded in it. v is usually a package-level
// variable that is never written.
//
// A field is found by its offset in *v and its type, so a pointer that
// isn't to a field of *v, or points into a field of a nested struct, such as
// &spec.Template.Port, or to a field promoted through an embedded pointer,
// is an error that CRD returns: a nested or pointer-embedded struct is
// constrained by its own Rules. Rules never fails itself.
func Rules[T any](v *T, fields ...FieldRule) TypeRules {
	t := reflect.TypeFor[T]()
	r := TypeRules{typ: t}
	if v == nil {
		r.errs = append(r.errs, fmt.Errorf("kube: Rules for %s: v is nil, so it names no fields", t))
		return r
	}
	base := uintptr(unsafe.Pointer(v))
	for i, f := range fields {
		if f == nil {
			r.errs = append(r.errs, fmt.Errorf("kube: Rules for %s: field rule %d is nil", t, i+1))
			continue
		}
		fr := f.fieldRule()
		if fr.ptr == nil {
			r.errs = append(r.errs, fmt.Errorf("kube: Rules for %s: field rule %d is a Field of a nil pointer, which names no field", t, i+1))
			continue
		}
		p := uintptr(fr.ptr)
		if p < base || p-base >= t.Size() && !(t.Size() == 0 && p == base) {
			if owner, path := behindEmbeddedPointer(reflect.ValueOf(v).Elem(), p, fr.typ, 0); owner != nil {
				r.errs = append(r.errs, fmt.Errorf("kube: Rules for %s: field rule %d (a %s) points outside the value given to Rules: it names %s, promoted through the embedded pointer *%s: constrain it in Rules for %s", t, i+1, fr.typ, path, owner, owner))
				continue
			}
			r.errs = append(r.errs, fmt.Errorf("kube: Rules for %s: field rule %d (a %s) points outside the value given to Rules, so it names no field of %s", t, i+1, fr.typ, t))
			continue
		}
		index, err := fieldAt(t, p-base, fr.typ)
		if err != nil {
			r.errs = append(r.errs, fmt.Errorf("kube: Rules for %s: field rule %d (a %s): %w", t, i+1, fr.typ, err))
			continue
		}
		fr.index = index
		fr.ptr = nil // Rules keeps no pointer into v.
		r.fields = append(r.fields, fr)
	}
	return r
}

// Schema gives T's schema whole, for a type that encodes itself, whose
// schema can't be reflected: a type that implements json.Marshaler, such as
// one that encodes as a string. s is used as it is wherever T appears,
// except that a field of type *T is nullable as any pointer field is, and a
// field's own constraints are added to it. It must be a structural schema,
// which the API server checks when the CRD is applied.
func Schema[T any](s apiextensionsv1.JSONSchemaProps) TypeRules {
	return TypeRules{typ: reflect.TypeFor[T](), schema: s.DeepCopy()}
}

// Description describes the type itself: it is the description of every
// property of the type, unless the field has its own Description.
func (r TypeRules) Description(s string) TypeRules {
	r.description = &s
	return r
}

// Validation constrains the type itself with a CEL rule that the API server
// checks, such as "self.minReplicas <= self.maxReplicas", and the message it
// reports when the rule is false. The rule is added as an
// x-kubernetes-validations entry wherever the type appears, including where
// a struct of the type is embedded in another. CRD doesn't compile the
// rule: the API server compiles it when the CRD is applied.
func (r TypeRules) Validation(rule, message string) TypeRules {
	r.validations = append(slices.Clip(r.validations), apiextensionsv1.ValidationRule{Rule: rule, Message: message})
	return r
}

// XValidation constrains the type itself with a CEL rule and its options
// (controller-gen's +kubebuilder:validation:XValidation on a type), as
// Validation does. A CEL without a Rule, or with an unknown Reason, is an
// error that CRD returns.
func (r TypeRules) XValidation(rule CEL) TypeRules {
	v, err := rule.validationRule()
	if err != nil {
		r.errs = append(slices.Clip(r.errs), fmt.Errorf("kube: TypeRules for %s: XValidation %w", r.typ, err))
		return r
	}
	r.validations = append(slices.Clip(r.validations), v)
	return r
}

// FieldRule is a FieldOf of any type: one field and its constraints.
type FieldRule interface {
	fieldRule() fieldRule
}

// fieldRule is a FieldOf without its type parameter.
type fieldRule struct {
	ptr   unsafe.Pointer // from Field, until Rules resolves it
	typ   reflect.Type   // the field's type
	index []int          // the field's index sequence, from Rules

	defaulted   bool
	required    *bool // from Required or Optional
	nullable    bool  // from Nullable
	preserve    bool  // from PreserveUnknownFields
	constraints []constraint
}

// constraint is one method of FieldOf, applied to the field's schema.
type constraint struct {
	name  string
	apply func(s *apiextensionsv1.JSONSchemaProps) error
	// value is whether it constrains the value, which null would bypass.
	value bool
}

// FieldOf is a field of type T, and its constraints. Each method returns a
// copy with one more constraint. A constraint that doesn't fit the field's
// type, such as Pattern on a number, is an error from CRD. A constraint set
// twice in one FieldOf takes its last value; two FieldOfs for one field in
// one Rules that set one keyword to different values, or make it Required
// and Optional, are an error from CRD.
type FieldOf[T any] struct {
	r fieldRule
}

// Field names the field p points to. p must point to a field of the value
// given to Rules.
func Field[T any](p *T) FieldOf[T] {
	return FieldOf[T]{r: fieldRule{ptr: unsafe.Pointer(p), typ: reflect.TypeFor[T]()}}
}

func (f FieldOf[T]) fieldRule() fieldRule { return f.r }

func (f FieldOf[T]) with(name string, apply func(s *apiextensionsv1.JSONSchemaProps) error) FieldOf[T] {
	return f.add(constraint{name: name, apply: apply})
}

func (f FieldOf[T]) add(c constraint) FieldOf[T] {
	f.r.constraints = append(slices.Clip(f.r.constraints), c)
	return f
}

// Description describes the field, as kubectl explain shows it.
func (f FieldOf[T]) Description(s string) FieldOf[T] {
	return f.with("Description", func(p *apiextensionsv1.JSONSchemaProps) error {
		p.Description = s
		return nil
	})
}

// Title is the field's title, a short name for it that OpenAPI documents
// show (controller-gen's +kubebuilder:title). The API server keeps it and
// checks nothing with it.
func (f FieldOf[T]) Title(s string) FieldOf[T] {
	return f.with("Title", func(p *apiextensionsv1.JSONSchemaProps) error {
		p.Title = s
		return nil
	})
}

// Example is an example of the field's value, encoded as encoding/json
// encodes v (controller-gen's +kubebuilder:example), which OpenAPI
// documents show. The API server keeps it and checks nothing with it.
func (f FieldOf[T]) Example(v T) FieldOf[T] {
	return f.with("Example", func(p *apiextensionsv1.JSONSchemaProps) error {
		raw, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encoding its value: %w", err)
		}
		p.Example = &apiextensionsv1.JSON{Raw: raw}
		return nil
	})
}

// Default is the value the API server gives the field when an object leaves
// it out, encoded as encoding/json encodes v. A field with a Default is
// optional, and not nullable even if it is a pointer, a slice or a map: the
// API server drops a null it may not keep, and then defaults the field. The
// API server checks the default against the field's schema when the CRD is
// applied.
func (f FieldOf[T]) Default(v T) FieldOf[T] {
	f = f.with("Default", func(p *apiextensionsv1.JSONSchemaProps) error {
		raw, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encoding its value: %w", err)
		}
		p.Default = &apiextensionsv1.JSON{Raw: raw}
		return nil
	})
	f.r.defaulted = true
	return f
}

// Enum limits the field to values, each encoded as encoding/json encodes
// it (controller-gen's +kubebuilder:validation:Enum). Like every
// constraint on a field's value, it makes the field not nullable (see CRD).
// A value the field's other constraints refuse (Enum(5).Maximum(3)) is an
// error from CRD, as no object could hold it.
func (f FieldOf[T]) Enum(values ...T) FieldOf[T] { return f.add(enumOf(values)) }

// Minimum is the field's least value, inclusive. It fits a number.
func (f FieldOf[T]) Minimum(v T) FieldOf[T] { return f.add(minimumOf(v, false)) }

// Maximum is the field's greatest value, inclusive. It fits a number.
func (f FieldOf[T]) Maximum(v T) FieldOf[T] { return f.add(maximumOf(v, false)) }

// ExclusiveMinimum is a value the field must be greater than
// (controller-gen's Minimum with ExclusiveMinimum=true). It fits a number,
// and replaces a Minimum.
func (f FieldOf[T]) ExclusiveMinimum(v T) FieldOf[T] { return f.add(minimumOf(v, true)) }

// ExclusiveMaximum is a value the field must be less than (controller-gen's
// Maximum with ExclusiveMaximum=true). It fits a number, and replaces a
// Maximum.
func (f FieldOf[T]) ExclusiveMaximum(v T) FieldOf[T] { return f.add(maximumOf(v, true)) }

// MultipleOf is a number the field's value is a multiple of. It fits a
// number, and must be greater than 0.
func (f FieldOf[T]) MultipleOf(v T) FieldOf[T] { return f.add(multipleOf(v)) }

// MinLength is the field's least length, in characters. It fits a string
// or an int-or-string.
func (f FieldOf[T]) MinLength(n int) FieldOf[T] { return f.add(minLengthOf(n)) }

// MaxLength is the field's greatest length, in characters. It fits a
// string or an int-or-string. The API server's cost limits on CEL rules
// often need one.
func (f FieldOf[T]) MaxLength(n int) FieldOf[T] { return f.add(maxLengthOf(n)) }

// Pattern is a regular expression the field matches. It fits a string or
// an int-or-string. The API server matches it with Go's regexp package, as
// re was compiled.
func (f FieldOf[T]) Pattern(re *regexp.Regexp) FieldOf[T] { return f.add(patternOf(re)) }

// Format is the field's format, such as kube.FormatUUID, which the API
// server checks. It fits a string or an int-or-string.
func (f FieldOf[T]) Format(format Format) FieldOf[T] { return f.add(formatOf(format)) }

// MinItems is the field's least number of items. It fits a slice or an
// array.
func (f FieldOf[T]) MinItems(n int) FieldOf[T] { return f.add(minItemsOf(n)) }

// MaxItems is the field's greatest number of items. It fits a slice or an
// array. The API server's cost limits on CEL rules often need one.
func (f FieldOf[T]) MaxItems(n int) FieldOf[T] { return f.add(maxItemsOf(n)) }

// MinProperties is the field's least number of properties. It fits a map
// or a struct.
func (f FieldOf[T]) MinProperties(n int) FieldOf[T] { return f.add(minPropertiesOf(n)) }

// MaxProperties is the field's greatest number of properties. It fits a
// map or a struct.
func (f FieldOf[T]) MaxProperties(n int) FieldOf[T] { return f.add(maxPropertiesOf(n)) }

// Validation constrains the field with a CEL rule that the API server
// checks, in which self is the field's value, such as "self.size() <= 10",
// and the message it reports when the rule is false. CRD doesn't compile
// the rule: the API server compiles it when the CRD is applied.
func (f FieldOf[T]) Validation(rule, message string) FieldOf[T] {
	return f.add(celOf(CEL{Rule: rule, Message: message}))
}

// XValidation constrains the field with a CEL rule and its options
// (controller-gen's +kubebuilder:validation:XValidation): a message, or a
// messageExpression, a reason, a fieldPath, and optionalOldSelf for a
// transition rule.
func (f FieldOf[T]) XValidation(rule CEL) FieldOf[T] { return f.add(celOf(rule)) }

// ListSet makes the field a set: its items are unique, and server-side
// apply merges them one by one (x-kubernetes-list-type: set). It fits a
// slice or an array whose items are scalars, and not pointers, which the
// API server requires.
func (f FieldOf[T]) ListSet() FieldOf[T] {
	return f.with("ListSet", func(p *apiextensionsv1.JSONSchemaProps) error {
		set := "set"
		p.XListType = &set
		p.XListMapKeys = nil
		if err := fits(p, "array", 0); err != nil {
			return err
		}
		it := items(p)
		switch {
		case it != nil && it.Type == "object":
			return fmt.Errorf("fits a list of scalars, not of objects: use ListMap")
		case it != nil && it.Nullable:
			return fmt.Errorf("fits a list whose items can't be null, not of pointers, slices, maps, metav1.Times or RawExtensions")
		}
		return nil
	})
}

// ListMap makes the field a map keyed by keys, the JSON names of fields of
// its items: no two items have the same keys, and server-side apply merges
// them by their keys (x-kubernetes-list-type: map). It fits a slice or an
// array of structs. As the API server requires, each key is a scalar field
// of the item that is required or has a Default, and not nullable, and the
// items themselves aren't nullable.
func (f FieldOf[T]) ListMap(keys ...string) FieldOf[T] {
	keys = slices.Clone(keys)
	return f.with("ListMap", func(p *apiextensionsv1.JSONSchemaProps) error {
		m := "map"
		p.XListType = &m
		p.XListMapKeys = keys
		if err := fits(p, "array", 0); err != nil {
			return err
		}
		if len(keys) == 0 {
			return fmt.Errorf("has no keys")
		}
		it := items(p)
		if it == nil || it.Type != "object" || len(it.Properties) == 0 {
			return fmt.Errorf("fits a list of structs")
		}
		if it.Nullable {
			return fmt.Errorf("fits a list of structs, not of pointers to them, whose items can be null")
		}
		var errs []error
		for i, k := range keys {
			prop, ok := it.Properties[k]
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("key %q is not a field of the items", k))
				continue
			case slices.Contains(keys[:i], k):
				errs = append(errs, fmt.Errorf("key %q is given twice", k))
			case prop.Type == "object" || prop.Type == "array":
				errs = append(errs, fmt.Errorf("key %q is a %s, not a scalar", k, prop.Type))
			case prop.Nullable:
				errs = append(errs, fmt.Errorf("key %q is nullable, and a key can't be", k))
			case prop.Default == nil && !slices.Contains(it.Required, k):
				errs = append(errs, fmt.Errorf("key %q is optional: a key must be required (no omitempty or omitzero) or have a Default", k))
			}
		}
		return joinErrs(errs)
	})
}

// Atomic makes server-side apply replace the field whole, rather than
// merge it: a list's x-kubernetes-list-type: atomic (controller-gen's
// +listType=atomic), a map's or a struct's x-kubernetes-map-type: atomic
// (+mapType=atomic, +structType=atomic). It fits a slice, an array, a map
// or a struct, and replaces a ListSet or ListMap.
func (f FieldOf[T]) Atomic() FieldOf[T] {
	return f.with("Atomic", func(p *apiextensionsv1.JSONSchemaProps) error {
		atomic := "atomic"
		switch p.Type {
		case "array":
			p.XListType = &atomic
			p.XListMapKeys = nil
		case "object":
			p.XMapType = &atomic
		default:
			return fmt.Errorf("fits a list, a map or a struct, not %s", describeType(p))
		}
		return nil
	})
}

// PreserveUnknownFields makes the API server keep every field of the
// field's value, rather than prune those its schema doesn't name
// (x-kubernetes-preserve-unknown-fields, controller-gen's
// +kubebuilder:pruning:PreserveUnknownFields). It fits a map or a struct,
// and a field whose type has no schema of its own: an interface, such as
// any or map[string]any, or a type that implements json.Marshaler, such
// as json.RawMessage, whose schema is then any JSON value (any object,
// for a map).
func (f FieldOf[T]) PreserveUnknownFields() FieldOf[T] {
	f = f.with("PreserveUnknownFields", func(p *apiextensionsv1.JSONSchemaProps) error {
		p.XPreserveUnknownFields = ptrTo(true)
		if p.Type != "object" && p.Type != "" {
			return fmt.Errorf("fits a map, a struct or an interface, not %s", describeType(p))
		}
		return nil
	})
	f.r.preserve = true
	return f
}

// EmbeddedResource makes the field a Kubernetes object, with apiVersion,
// kind and metadata, which the API server checks as it checks an object's
// (x-kubernetes-embedded-resource, controller-gen's
// +kubebuilder:validation:EmbeddedResource). It fits a struct or a map,
// usually a runtime.RawExtension.
func (f FieldOf[T]) EmbeddedResource() FieldOf[T] {
	return f.with("EmbeddedResource", func(p *apiextensionsv1.JSONSchemaProps) error {
		p.XEmbeddedResource = true
		return fits(p, "object", 0)
	})
}

// Optional makes the field optional whatever its json tag says
// (controller-gen's +optional). It replaces a Required.
func (f FieldOf[T]) Optional() FieldOf[T] {
	f.r.required = ptrTo(false)
	return f
}

// Required makes the field required whatever its json tag says
// (controller-gen's +required), and not nullable (see CRD): an object
// without it, or with it null, is refused. It replaces an Optional.
func (f FieldOf[T]) Required() FieldOf[T] {
	f.r.required = ptrTo(true)
	return f
}

// Nullable lets the field be null (controller-gen's +nullable), whatever
// CRD decides from its type and constraints. With Required on the same
// field it is an error from CRD, as Required refuses a null; a field
// required only by its json tag may be Nullable (present, maybe null).
func (f FieldOf[T]) Nullable() FieldOf[T] {
	f.r.nullable = true
	return f
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
