package kube

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
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
// names. OptionalOldSelf runs a transition rule on a create too, with
// oldSelf an optional that has no value. CRD checks Rule is given and
// Reason is known; the API server compiles the expressions when the CRD is
// applied.
type CEL struct {
	Rule              string
	Message           string
	MessageExpression string
	Reason            apiextensionsv1.FieldValueErrorReason
	FieldPath         string
	OptionalOldSelf   bool
}

// validationRule is c as the schema holds it, or an error naming what is
// wrong with it.
func (c CEL) validationRule() (apiextensionsv1.ValidationRule, error) {
	v := apiextensionsv1.ValidationRule{Rule: c.Rule, Message: c.Message, MessageExpression: c.MessageExpression, FieldPath: c.FieldPath}
	var errs []error
	if c.Rule == "" {
		errs = append(errs, fmt.Errorf("has no Rule"))
	}
	if c.Reason != "" {
		switch c.Reason {
		case apiextensionsv1.FieldValueInvalid, apiextensionsv1.FieldValueForbidden, apiextensionsv1.FieldValueRequired, apiextensionsv1.FieldValueDuplicate:
			v.Reason = ptrTo(c.Reason)
		default:
			errs = append(errs, fmt.Errorf("has Reason %q: use one of apiextensionsv1.FieldValueInvalid, FieldValueForbidden, FieldValueRequired or FieldValueDuplicate", c.Reason))
		}
	}
	if c.OptionalOldSelf {
		v.OptionalOldSelf = ptrTo(true)
	}
	return v, joinErrs(errs)
}

func celOf(c CEL) constraint {
	return constraint{name: "Validation", value: true, apply: func(p *apiextensionsv1.JSONSchemaProps) error {
		v, err := c.validationRule()
		if err != nil {
			return err
		}
		p.XValidations = append(p.XValidations, v)
		return nil
	}}
}

func enumOf[T any](values []T) constraint {
	values = slices.Clone(values)
	return constraint{name: "Enum", value: true, apply: func(p *apiextensionsv1.JSONSchemaProps) error {
		if len(values) == 0 {
			return fmt.Errorf("has no values")
		}
		p.Enum = make([]apiextensionsv1.JSON, 0, len(values))
		for _, v := range values {
			raw, err := json.Marshal(v)
			if err != nil {
				return fmt.Errorf("encoding %v: %w", v, err)
			}
			p.Enum = append(p.Enum, apiextensionsv1.JSON{Raw: raw})
		}
		return nil
	}}
}

func minimumOf(v any, exclusive bool) constraint {
	name := "Minimum"
	if exclusive {
		name = "ExclusiveMinimum"
	}
	return constraint{name: name, value: true, apply: func(p *apiextensionsv1.JSONSchemaProps) error {
		n, err := number(p, v)
		if err != nil {
			return err
		}
		p.Minimum, p.ExclusiveMinimum = &n, exclusive
		return nil
	}}
}

func maximumOf(v any, exclusive bool) constraint {
	name := "Maximum"
	if exclusive {
		name = "ExclusiveMaximum"
	}
	return constraint{name: name, value: true, apply: func(p *apiextensionsv1.JSONSchemaProps) error {
		n, err := number(p, v)
		if err != nil {
			return err
		}
		p.Maximum, p.ExclusiveMaximum = &n, exclusive
		return nil
	}}
}

func multipleOf(v any) constraint {
	return constraint{name: "MultipleOf", value: true, apply: func(p *apiextensionsv1.JSONSchemaProps) error {
		n, err := number(p, v)
		if err != nil {
			return err
		}
		if n <= 0 {
			return fmt.Errorf("is %v: it must be greater than 0", n)
		}
		p.MultipleOf = &n
		return nil
	}}
}

// count is a constraint that sets a count, such as MinLength, on a schema
// of type want.
func count(name, want string, n int, set func(p *apiextensionsv1.JSONSchemaProps, v *int64)) constraint {
	return constraint{name: name, value: true, apply: func(p *apiextensionsv1.JSONSchemaProps) error {
		set(p, ptrTo(int64(n)))
		return fits(p, want, n)
	}}
}

func minLengthOf(n int) constraint {
	return count("MinLength", "string", n, func(p *apiextensionsv1.JSONSchemaProps, v *int64) { p.MinLength = v })
}

func maxLengthOf(n int) constraint {
	return count("MaxLength", "string", n, func(p *apiextensionsv1.JSONSchemaProps, v *int64) { p.MaxLength = v })
}

func minItemsOf(n int) constraint {
	return count("MinItems", "array", n, func(p *apiextensionsv1.JSONSchemaProps, v *int64) { p.MinItems = v })
}

func maxItemsOf(n int) constraint {
	return count("MaxItems", "array", n, func(p *apiextensionsv1.JSONSchemaProps, v *int64) { p.MaxItems = v })
}

func minPropertiesOf(n int) constraint {
	return count("MinProperties", "object", n, func(p *apiextensionsv1.JSONSchemaProps, v *int64) { p.MinProperties = v })
}

func maxPropertiesOf(n int) constraint {
	return count("MaxProperties", "object", n, func(p *apiextensionsv1.JSONSchemaProps, v *int64) { p.MaxProperties = v })
}

func patternOf(re *regexp.Regexp) constraint {
	return constraint{name: "Pattern", value: true, apply: func(p *apiextensionsv1.JSONSchemaProps) error {
		if re == nil {
			return fmt.Errorf("is nil")
		}
		p.Pattern = re.String()
		return fits(p, "string", 0)
	}}
}

func formatOf(f Format) constraint {
	return constraint{name: "Format", value: true, apply: func(p *apiextensionsv1.JSONSchemaProps) error {
		if f == "" {
			return fmt.Errorf("is empty")
		}
		if err := checkFormat(f); err != nil {
			return err
		}
		p.Format = string(f)
		return fits(p, "string", 0)
	}}
}

// ValuesOf are constraints on values of type T: a list's items or a map's
// values (Items and MapValues), or every value of a named type
// (ValueRules). Values makes one. Each method returns a copy with one more
// constraint, and fits the types that FieldOf's method of its name fits.
type ValuesOf[T any] struct {
	cs []constraint
}

// Values starts the constraints on values of type T.
func Values[T any]() ValuesOf[T] { return ValuesOf[T]{} }

func (v ValuesOf[T]) add(c constraint) ValuesOf[T] {
	v.cs = append(slices.Clip(v.cs), c)
	return v
}

// Enum limits the values to values, each encoded as encoding/json encodes it.
func (v ValuesOf[T]) Enum(values ...T) ValuesOf[T] { return v.add(enumOf(values)) }

// Minimum is the least value, inclusive. It fits a number.
func (v ValuesOf[T]) Minimum(n T) ValuesOf[T] { return v.add(minimumOf(n, false)) }

// Maximum is the greatest value, inclusive. It fits a number.
func (v ValuesOf[T]) Maximum(n T) ValuesOf[T] { return v.add(maximumOf(n, false)) }

// ExclusiveMinimum is a value each value must be greater than. It fits a
// number.
func (v ValuesOf[T]) ExclusiveMinimum(n T) ValuesOf[T] { return v.add(minimumOf(n, true)) }

// ExclusiveMaximum is a value each value must be less than. It fits a
// number.
func (v ValuesOf[T]) ExclusiveMaximum(n T) ValuesOf[T] { return v.add(maximumOf(n, true)) }

// MultipleOf is a number each value is a multiple of, greater than 0. It
// fits a number.
func (v ValuesOf[T]) MultipleOf(n T) ValuesOf[T] { return v.add(multipleOf(n)) }

// MinLength is the least length, in characters. It fits a string or an
// int-or-string.
func (v ValuesOf[T]) MinLength(n int) ValuesOf[T] { return v.add(minLengthOf(n)) }

// MaxLength is the greatest length, in characters. It fits a string or an
// int-or-string.
func (v ValuesOf[T]) MaxLength(n int) ValuesOf[T] { return v.add(maxLengthOf(n)) }

// Pattern is a regular expression each value matches. It fits a string or
// an int-or-string.
func (v ValuesOf[T]) Pattern(re *regexp.Regexp) ValuesOf[T] { return v.add(patternOf(re)) }

// Format is the values' format. It fits a string or an int-or-string.
func (v ValuesOf[T]) Format(f Format) ValuesOf[T] { return v.add(formatOf(f)) }

// MinItems is the least number of items. It fits a slice or an array.
func (v ValuesOf[T]) MinItems(n int) ValuesOf[T] { return v.add(minItemsOf(n)) }

// MaxItems is the greatest number of items. It fits a slice or an array.
func (v ValuesOf[T]) MaxItems(n int) ValuesOf[T] { return v.add(maxItemsOf(n)) }

// MinProperties is the least number of properties. It fits a map or a
// struct.
func (v ValuesOf[T]) MinProperties(n int) ValuesOf[T] { return v.add(minPropertiesOf(n)) }

// MaxProperties is the greatest number of properties. It fits a map or a
// struct.
func (v ValuesOf[T]) MaxProperties(n int) ValuesOf[T] { return v.add(maxPropertiesOf(n)) }

// Validation is a CEL rule each value satisfies, in which self is the
// value, and the message the API server reports when it is false.
func (v ValuesOf[T]) Validation(rule, message string) ValuesOf[T] {
	return v.add(celOf(CEL{Rule: rule, Message: message}))
}

// XValidation is a CEL rule, with its options, each value satisfies.
func (v ValuesOf[T]) XValidation(rule CEL) ValuesOf[T] { return v.add(celOf(rule)) }

// Items constrains each item of the list field f, such as
// kube.Items(kube.Field(&spec.Hosts), kube.Values[string]().Format(kube.FormatHostname))
// (controller-gen's +kubebuilder:validation:items:...). An item with a
// constraint on its value isn't nullable, even if it is a pointer.
func Items[E any, L ~[]E](f FieldOf[L], each ValuesOf[E]) FieldOf[L] {
	cs := slices.Clone(each.cs)
	return f.with("Items", func(p *apiextensionsv1.JSONSchemaProps) error {
		if err := fits(p, "array", 0); err != nil {
			return err
		}
		it := items(p)
		if it == nil {
			return fmt.Errorf("fits a list whose items have a schema")
		}
		return applyValues(cs, it)
	})
}

// MapValues constrains each value of the map field f, as Items does a
// list's items.
func MapValues[K comparable, V any, M ~map[K]V](f FieldOf[M], each ValuesOf[V]) FieldOf[M] {
	cs := slices.Clone(each.cs)
	return f.with("MapValues", func(p *apiextensionsv1.JSONSchemaProps) error {
		if p.Type != "object" || p.AdditionalProperties == nil || p.AdditionalProperties.Schema == nil {
			return fmt.Errorf("fits a map, not %s", describeType(p))
		}
		return applyValues(cs, p.AdditionalProperties.Schema)
	})
}

// applyValues applies cs to p, and makes p not nullable if one of them
// constrains its value.
func applyValues(cs []constraint, p *apiextensionsv1.JSONSchemaProps) error {
	var errs []error
	for _, c := range cs {
		if err := applyConstraint(c, p); err != nil {
			errs = append(errs, fmt.Errorf("%s %w", c.name, err))
		}
		if c.value {
			p.Nullable = false
		}
	}
	return joinErrs(errs)
}

// ValueRules constrains every value of type T, wherever T appears: a named
// type that isn't a struct, such as a type Phase string with an Enum, or a
// type Port int32 with a Minimum and a Maximum. A field of type T with
// constraints of its own has both, its own last. A constraint that doesn't
// fit T is an error from CRD, as is a second TypeRules for T.
//
// T must be a named type declared in a package, not a predeclared one such
// as string or int32: those appear in every field of their type, the
// Kubernetes types a spec embeds included, so constraining them is an error
// from CRD; constrain the field with Field instead, or declare a type.
func ValueRules[T any](v ValuesOf[T]) TypeRules {
	t := reflect.TypeFor[T]()
	r := TypeRules{typ: t, values: slices.Clone(v.cs)}
	if t.PkgPath() == "" {
		r.errs = append(r.errs, fmt.Errorf("kube: ValueRules[%s]: %s is not a type of your own, and would constrain every %s field, Kubernetes' own included: declare one (type Phase %s) or constrain the field with kube.Field", t, t, t, t))
	}
	return r
}

// constrainsValue reports whether one of cs constrains the value.
func constrainsValue(cs []constraint) bool {
	return slices.ContainsFunc(cs, func(c constraint) bool { return c.value })
}
