package kube

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"unsafe"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/z5labs/humus/kube/internal/crdschema"
)

// TypeRules constrain the fields of one Go type, wherever the type appears
// in a schema. Rules and Schema make one; its zero value constrains
// nothing and names no type, which CRD reports as an error.
//
// A TypeRules is a value: each method returns a copy with one more
// constraint, and the original is unchanged.
type TypeRules struct {
	r crdschema.Rules
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
	frs := make([]*crdschema.Field, len(fields))
	for i, f := range fields {
		if f != nil {
			fr := f.fieldRule()
			frs[i] = &fr
		}
	}
	return TypeRules{crdschema.ResolveFields(reflect.TypeFor[T](), reflect.ValueOf(v), frs)}
}

// Schema gives T's schema whole, for a type that encodes itself, whose
// schema can't be reflected: a type that implements json.Marshaler, such as
// one that encodes as a string. s is used as it is wherever T appears,
// except that a field of type *T is nullable as any pointer field is, and a
// field's own constraints are added to it. It must be a structural schema,
// which the API server checks when the CRD is applied.
func Schema[T any](s apiextensionsv1.JSONSchemaProps) TypeRules {
	return TypeRules{crdschema.Rules{Type: reflect.TypeFor[T](), Schema: s.DeepCopy()}}
}

// Description describes the type itself: it is the description of every
// property of the type, unless the field has its own Description.
func (r TypeRules) Description(s string) TypeRules {
	r.r.Description = &s
	return r
}

// Validation constrains the type itself with a CEL rule that the API server
// checks, such as "self.minReplicas <= self.maxReplicas", and the message it
// reports when the rule is false. The rule is added as an
// x-kubernetes-validations entry wherever the type appears, including where
// a struct of the type is embedded in another. CRD doesn't compile the
// rule: the API server compiles it when the CRD is applied.
func (r TypeRules) Validation(rule, message string) TypeRules {
	r.r.Validations = append(slices.Clip(r.r.Validations), apiextensionsv1.ValidationRule{Rule: rule, Message: message})
	return r
}

// XValidation constrains the type itself with a CEL rule and its options
// (controller-gen's +kubebuilder:validation:XValidation on a type), as
// Validation does. A CEL without a Rule, or with an unknown Reason, is an
// error that CRD returns.
func (r TypeRules) XValidation(rule CEL) TypeRules {
	v, err := crdschema.CEL(rule).ValidationRule()
	if err != nil {
		r.r.Errs = append(slices.Clip(r.r.Errs), fmt.Errorf("kube: TypeRules for %s: XValidation %w", r.r.Type, err))
		return r
	}
	r.r.Validations = append(slices.Clip(r.r.Validations), v)
	return r
}

// FieldRule is a FieldOf of any type: one field and its constraints.
type FieldRule interface {
	fieldRule() crdschema.Field
}

// FieldOf is a field of type T, and its constraints. Each method returns a
// copy with one more constraint. A constraint that doesn't fit the field's
// type, such as Pattern on a number, is an error from CRD. A constraint set
// twice in one FieldOf takes its last value; two FieldOfs for one field in
// one Rules that set one keyword to different values, or make it Required
// and Optional, are an error from CRD.
type FieldOf[T any] struct {
	r crdschema.Field
}

// Field names the field p points to. p must point to a field of the value
// given to Rules.
func Field[T any](p *T) FieldOf[T] {
	return FieldOf[T]{r: crdschema.Field{Ptr: unsafe.Pointer(p), Type: reflect.TypeFor[T]()}}
}

func (f FieldOf[T]) fieldRule() crdschema.Field { return f.r }

func (f FieldOf[T]) add(c crdschema.Constraint) FieldOf[T] {
	f.r.Constraints = append(slices.Clip(f.r.Constraints), c)
	return f
}

// Description describes the field, as kubectl explain shows it.
func (f FieldOf[T]) Description(s string) FieldOf[T] {
	return f.add(crdschema.Description(s))
}

// Title is the field's title, a short name for it that OpenAPI documents
// show (controller-gen's +kubebuilder:title). The API server keeps it and
// checks nothing with it.
func (f FieldOf[T]) Title(s string) FieldOf[T] {
	return f.add(crdschema.Title(s))
}

// Example is an example of the field's value, encoded as encoding/json
// encodes v (controller-gen's +kubebuilder:example), which OpenAPI
// documents show. The API server keeps it and checks nothing with it.
func (f FieldOf[T]) Example(v T) FieldOf[T] {
	return f.add(crdschema.Example(v))
}

// Default is the value the API server gives the field when an object leaves
// it out, encoded as encoding/json encodes v. A field with a Default is
// optional, and not nullable even if it is a pointer, a slice or a map: the
// API server drops a null it may not keep, and then defaults the field. The
// API server checks the default against the field's schema when the CRD is
// applied.
func (f FieldOf[T]) Default(v T) FieldOf[T] {
	f = f.add(crdschema.Default(v))
	f.r.Defaulted = true
	return f
}

// Enum limits the field to values, each encoded as encoding/json encodes
// it (controller-gen's +kubebuilder:validation:Enum). Like every
// constraint on a field's value, it makes the field not nullable (see CRD).
// A value the field's other constraints refuse (Enum(5).Maximum(3)) is an
// error from CRD, as no object could hold it.
func (f FieldOf[T]) Enum(values ...T) FieldOf[T] { return f.add(crdschema.Enum(values)) }

// Minimum is the field's least value, inclusive. It fits a number.
func (f FieldOf[T]) Minimum(v T) FieldOf[T] { return f.add(crdschema.Minimum(v, false)) }

// Maximum is the field's greatest value, inclusive. It fits a number.
func (f FieldOf[T]) Maximum(v T) FieldOf[T] { return f.add(crdschema.Maximum(v, false)) }

// ExclusiveMinimum is a value the field must be greater than
// (controller-gen's Minimum with ExclusiveMinimum=true). It fits a number,
// and replaces a Minimum.
func (f FieldOf[T]) ExclusiveMinimum(v T) FieldOf[T] { return f.add(crdschema.Minimum(v, true)) }

// ExclusiveMaximum is a value the field must be less than (controller-gen's
// Maximum with ExclusiveMaximum=true). It fits a number, and replaces a
// Maximum.
func (f FieldOf[T]) ExclusiveMaximum(v T) FieldOf[T] { return f.add(crdschema.Maximum(v, true)) }

// MultipleOf is a number the field's value is a multiple of. It fits a
// number, and must be greater than 0.
func (f FieldOf[T]) MultipleOf(v T) FieldOf[T] { return f.add(crdschema.MultipleOf(v)) }

// MinLength is the field's least length, in characters. It fits a string
// or an int-or-string.
func (f FieldOf[T]) MinLength(n int) FieldOf[T] { return f.add(crdschema.MinLength(n)) }

// MaxLength is the field's greatest length, in characters. It fits a
// string or an int-or-string. The API server's cost limits on CEL rules
// often need one.
func (f FieldOf[T]) MaxLength(n int) FieldOf[T] { return f.add(crdschema.MaxLength(n)) }

// Pattern is a regular expression the field matches. It fits a string or
// an int-or-string. The API server matches it with Go's regexp package, as
// re was compiled.
func (f FieldOf[T]) Pattern(re *regexp.Regexp) FieldOf[T] { return f.add(crdschema.Pattern(re)) }

// Format is the field's format, such as kube.FormatUUID, which the API
// server checks. It fits a string or an int-or-string.
func (f FieldOf[T]) Format(format Format) FieldOf[T] { return f.add(crdschema.Format(string(format))) }

// MinItems is the field's least number of items. It fits a slice or an
// array.
func (f FieldOf[T]) MinItems(n int) FieldOf[T] { return f.add(crdschema.MinItems(n)) }

// MaxItems is the field's greatest number of items. It fits a slice or an
// array. The API server's cost limits on CEL rules often need one.
func (f FieldOf[T]) MaxItems(n int) FieldOf[T] { return f.add(crdschema.MaxItems(n)) }

// MinProperties is the field's least number of properties. It fits a map
// or a struct.
func (f FieldOf[T]) MinProperties(n int) FieldOf[T] { return f.add(crdschema.MinProperties(n)) }

// MaxProperties is the field's greatest number of properties. It fits a
// map or a struct.
func (f FieldOf[T]) MaxProperties(n int) FieldOf[T] { return f.add(crdschema.MaxProperties(n)) }

// Validation constrains the field with a CEL rule that the API server
// checks, in which self is the field's value, such as "self.size() <= 10",
// and the message it reports when the rule is false. CRD doesn't compile
// the rule: the API server compiles it when the CRD is applied.
func (f FieldOf[T]) Validation(rule, message string) FieldOf[T] {
	return f.add(crdschema.Validation(crdschema.CEL{Rule: rule, Message: message}))
}

// XValidation constrains the field with a CEL rule and its options
// (controller-gen's +kubebuilder:validation:XValidation): a message, or a
// messageExpression, a reason, a fieldPath, and optionalOldSelf for a
// transition rule.
func (f FieldOf[T]) XValidation(rule CEL) FieldOf[T] {
	return f.add(crdschema.Validation(crdschema.CEL(rule)))
}

// ListSet makes the field a set: its items are unique, and server-side
// apply merges them one by one (x-kubernetes-list-type: set). It fits a
// slice or an array whose items are scalars, and not pointers, which the
// API server requires.
func (f FieldOf[T]) ListSet() FieldOf[T] {
	return f.add(crdschema.ListSet())
}

// ListMap makes the field a map keyed by keys, the JSON names of fields of
// its items: no two items have the same keys, and server-side apply merges
// them by their keys (x-kubernetes-list-type: map). It fits a slice or an
// array of structs. As the API server requires, each key is a scalar field
// of the item that is required or has a Default, and not nullable, and the
// items themselves aren't nullable.
func (f FieldOf[T]) ListMap(keys ...string) FieldOf[T] {
	return f.add(crdschema.ListMap(keys))
}

// Atomic makes server-side apply replace the field whole, rather than
// merge it: a list's x-kubernetes-list-type: atomic (controller-gen's
// +listType=atomic), a map's or a struct's x-kubernetes-map-type: atomic
// (+mapType=atomic, +structType=atomic). It fits a slice, an array, a map
// or a struct, and replaces a ListSet or ListMap.
func (f FieldOf[T]) Atomic() FieldOf[T] {
	return f.add(crdschema.Atomic())
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
	f = f.add(crdschema.PreserveUnknownFields())
	f.r.Preserve = true
	return f
}

// EmbeddedResource makes the field a Kubernetes object, with apiVersion,
// kind and metadata, which the API server checks as it checks an object's
// (x-kubernetes-embedded-resource, controller-gen's
// +kubebuilder:validation:EmbeddedResource). It fits a struct or a map,
// usually a runtime.RawExtension.
func (f FieldOf[T]) EmbeddedResource() FieldOf[T] {
	return f.add(crdschema.EmbeddedResource())
}

// Optional makes the field optional whatever its json tag says
// (controller-gen's +optional). It replaces a Required.
func (f FieldOf[T]) Optional() FieldOf[T] {
	f.r.Required = ptrTo(false)
	return f
}

// Required makes the field required whatever its json tag says
// (controller-gen's +required), and not nullable (see CRD): an object
// without it, or with it null, is refused. It replaces an Optional.
func (f FieldOf[T]) Required() FieldOf[T] {
	f.r.Required = ptrTo(true)
	return f
}

// Nullable lets the field be null (controller-gen's +nullable), whatever
// CRD decides from its type and constraints. With Required on the same
// field it is an error from CRD, as Required refuses a null; a field
// required only by its json tag may be Nullable (present, maybe null).
func (f FieldOf[T]) Nullable() FieldOf[T] {
	f.r.Nullable = true
	return f
}

func ptrTo[T any](v T) *T { return &v }
