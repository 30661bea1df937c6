package kube

import (
	"reflect"
	"regexp"
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/z5labs/humus/kube/internal/crdschema"
)

// Format is a string format the API server checks, as a schema's format
// names it. The constants are the formats the API server knows
// (k8s.io/apiextensions-apiserver's pkg/apiserver/validation, formats.go);
// any other is an error from CRD, as the API server would ignore it.
type Format string

// The formats the API server checks (k8s.io/kube-openapi's strfmt
// registry, as apiextensions-apiserver uses it).
const (
	FormatBSONObjectID Format = "bsonobjectid"
	FormatURI          Format = "uri"
	FormatEmail        Format = "email"
	FormatHostname     Format = "hostname"
	FormatIPv4         Format = "ipv4"
	FormatIPv6         Format = "ipv6"
	FormatCIDR         Format = "cidr"
	FormatMAC          Format = "mac"
	FormatUUID         Format = "uuid"
	FormatUUID3        Format = "uuid3"
	FormatUUID4        Format = "uuid4"
	FormatUUID5        Format = "uuid5"
	FormatISBN         Format = "isbn"
	FormatISBN10       Format = "isbn10"
	FormatISBN13       Format = "isbn13"
	FormatCreditCard   Format = "creditcard"
	FormatSSN          Format = "ssn"
	FormatHexColor     Format = "hexcolor"
	FormatRGBColor     Format = "rgbcolor"
	FormatByte         Format = "byte"
	FormatPassword     Format = "password"
	FormatDate         Format = "date"
	FormatDuration     Format = "duration"
	FormatDateTime     Format = "date-time"
	// The API server checks these since Kubernetes 1.34, and ignores them
	// before: a Kubernetes name of up to 63 lower-case alphanumerics and
	// dashes, and a dot-separated one of up to 253.
	FormatK8sShortName Format = "k8s-short-name"
	FormatK8sLongName  Format = "k8s-long-name"
)

// CEL is a CEL rule the API server checks, and its options, as an
// x-kubernetes-validations entry holds them (controller-gen's
// +kubebuilder:validation:XValidation). Rule is the expression, in which
// self is the value and, in a transition rule, oldSelf its value before an
// update. Message is reported when it is false, or MessageExpression, a CEL
// expression that gives the message. Reason is the reason reported, one of
// apiextensionsv1's FieldValueInvalid (the API server's default),
// FieldValueForbidden, FieldValueRequired and FieldValueDuplicate.
// FieldPath is a path below self, such as .spec.replicas, that the error
// names: each step ".name" or "['name']" a field of self's schema, or a
// map's key, never a list's item, as the API server requires. Without one
// the error names self's path, and a rule on the whole object has none
// ("<nil>: Invalid value"). A rule on the object (kube.Rules of a
// *kube.Object) can name .spec, .status and their fields, .apiVersion,
// .kind and .metadata, but nothing below .metadata, such as
// .metadata.name: the CRD's schema of metadata is a bare object. Below an
// embedded resource (Field(...).EmbeddedResource()) only the fields its
// schema declares can be named, not its apiVersion, kind or metadata; and
// a quoted name can't end in a backslash (the server's scanner reads \'
// as an escaped quote).
// OptionalOldSelf runs a transition rule on a create too, with oldSelf an
// optional that has no value. CRD checks Rule is given, Reason is known
// and FieldPath names a field of the rule's schema, as the API server
// does; the API server compiles the expressions when the CRD is applied.
type CEL struct {
	Rule              string
	Message           string
	MessageExpression string
	Reason            apiextensionsv1.FieldValueErrorReason
	FieldPath         string
	OptionalOldSelf   bool
}

// ValuesOf are constraints on values of type T: a list's items or a map's
// values (Items and MapValues), or every value of a named type
// (ValueRules). Values makes one. Each method returns a copy with one more
// constraint, and fits the types that FieldOf's method of its name fits.
type ValuesOf[T any] struct {
	cs []crdschema.Constraint
}

// Values starts the constraints on values of type T.
func Values[T any]() ValuesOf[T] { return ValuesOf[T]{} }

func (v ValuesOf[T]) add(c crdschema.Constraint) ValuesOf[T] {
	v.cs = append(slices.Clip(v.cs), c)
	return v
}

// Enum limits the values to values, each encoded as encoding/json encodes it.
func (v ValuesOf[T]) Enum(values ...T) ValuesOf[T] { return v.add(crdschema.Enum(values)) }

// Minimum is the least value, inclusive. It fits a number.
func (v ValuesOf[T]) Minimum(n T) ValuesOf[T] { return v.add(crdschema.Minimum(n, false)) }

// Maximum is the greatest value, inclusive. It fits a number.
func (v ValuesOf[T]) Maximum(n T) ValuesOf[T] { return v.add(crdschema.Maximum(n, false)) }

// ExclusiveMinimum is a value each value must be greater than. It fits a
// number.
func (v ValuesOf[T]) ExclusiveMinimum(n T) ValuesOf[T] { return v.add(crdschema.Minimum(n, true)) }

// ExclusiveMaximum is a value each value must be less than. It fits a
// number.
func (v ValuesOf[T]) ExclusiveMaximum(n T) ValuesOf[T] { return v.add(crdschema.Maximum(n, true)) }

// MultipleOf is a number each value is a multiple of, greater than 0. It
// fits a number.
func (v ValuesOf[T]) MultipleOf(n T) ValuesOf[T] { return v.add(crdschema.MultipleOf(n)) }

// MinLength is the least length, in characters. It fits a string or an
// int-or-string.
func (v ValuesOf[T]) MinLength(n int) ValuesOf[T] { return v.add(crdschema.MinLength(n)) }

// MaxLength is the greatest length, in characters. It fits a string or an
// int-or-string.
func (v ValuesOf[T]) MaxLength(n int) ValuesOf[T] { return v.add(crdschema.MaxLength(n)) }

// Pattern is a regular expression each value matches. It fits a string or
// an int-or-string.
func (v ValuesOf[T]) Pattern(re *regexp.Regexp) ValuesOf[T] { return v.add(crdschema.Pattern(re)) }

// Format is the values' format. It fits a string or an int-or-string.
func (v ValuesOf[T]) Format(f Format) ValuesOf[T] { return v.add(crdschema.Format(string(f))) }

// MinItems is the least number of items. It fits a slice or an array.
func (v ValuesOf[T]) MinItems(n int) ValuesOf[T] { return v.add(crdschema.MinItems(n)) }

// MaxItems is the greatest number of items. It fits a slice or an array.
func (v ValuesOf[T]) MaxItems(n int) ValuesOf[T] { return v.add(crdschema.MaxItems(n)) }

// MinProperties is the least number of properties. It fits a map or a
// struct.
func (v ValuesOf[T]) MinProperties(n int) ValuesOf[T] { return v.add(crdschema.MinProperties(n)) }

// MaxProperties is the greatest number of properties. It fits a map or a
// struct.
func (v ValuesOf[T]) MaxProperties(n int) ValuesOf[T] { return v.add(crdschema.MaxProperties(n)) }

// Validation is a CEL rule each value satisfies, in which self is the
// value, and the message the API server reports when it is false.
func (v ValuesOf[T]) Validation(rule, message string) ValuesOf[T] {
	return v.add(crdschema.Validation(crdschema.CEL{Rule: rule, Message: message}))
}

// XValidation is a CEL rule, with its options, each value satisfies.
func (v ValuesOf[T]) XValidation(rule CEL) ValuesOf[T] {
	return v.add(crdschema.Validation(crdschema.CEL(rule)))
}

// ListSet makes a list a set (x-kubernetes-list-type: set), as FieldOf's
// ListSet does, wherever a named slice type given to ValueRules appears.
func (v ValuesOf[T]) ListSet() ValuesOf[T] { return v.add(crdschema.ListSet()) }

// ListMap makes a list of structs a map keyed by keys, as FieldOf's
// ListMap does, wherever a named slice type given to ValueRules appears.
func (v ValuesOf[T]) ListMap(keys ...string) ValuesOf[T] { return v.add(crdschema.ListMap(keys)) }

// Atomic makes a list, a map or a struct atomic, as FieldOf's Atomic does,
// wherever a named type given to ValueRules appears.
func (v ValuesOf[T]) Atomic() ValuesOf[T] { return v.add(crdschema.Atomic()) }

// ItemsOf constrains each item of the lists of type L, as Items does a
// field's, such as every value of a named slice type given to ValueRules:
// kube.ValueRules(kube.ItemsOf(kube.Values[Hosts]().ListSet(), kube.Values[string]().Format(kube.FormatHostname))).
func ItemsOf[E any, L ~[]E](v ValuesOf[L], each ValuesOf[E]) ValuesOf[L] {
	return v.add(crdschema.Items(each.cs))
}

// Items constrains each item of the list field f, such as
// kube.Items(kube.Field(&spec.Hosts), kube.Values[string]().Format(kube.FormatHostname))
// (controller-gen's +kubebuilder:validation:items:...). An item with a
// constraint on its value isn't nullable, even if it is a pointer.
func Items[E any, L ~[]E](f FieldOf[L], each ValuesOf[E]) FieldOf[L] {
	return f.add(crdschema.Items(each.cs))
}

// MapValues constrains each value of the map field f, as Items does a
// list's items.
func MapValues[K comparable, V any, M ~map[K]V](f FieldOf[M], each ValuesOf[V]) FieldOf[M] {
	return f.add(crdschema.MapValues(each.cs))
}

// ValueRules constrains every value of type T, wherever T appears: a named
// type that isn't a struct, such as a type Phase string with an Enum, a
// type Port int32 with a Minimum and a Maximum, or a type Hosts []string
// that is a set (ListSet) whose items are hostnames (ItemsOf). A field of type T with
// constraints of its own has both, its own last. A constraint that doesn't
// fit T is an error from CRD, as is a second TypeRules for T.
//
// T must be a named type declared in a package, not a predeclared one such
// as string or int32: those appear in every field of their type, the
// Kubernetes types a spec embeds included, so constraining them is an error
// from CRD; constrain the field with Field instead, or declare a type.
func ValueRules[T any](v ValuesOf[T]) TypeRules {
	return TypeRules{crdschema.ValueRules(reflect.TypeFor[T](), v.cs)}
}
