package crdschema

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// CEL is kube.CEL, which converts to it: a CEL rule and its options.
type CEL struct {
	Rule              string
	Message           string
	MessageExpression string
	Reason            apiextensionsv1.FieldValueErrorReason
	FieldPath         string
	OptionalOldSelf   bool
}

// ValidationRule is c as the schema holds it, or an error naming what is
// wrong with it: no Rule, or an unknown Reason.
func (c CEL) ValidationRule() (apiextensionsv1.ValidationRule, error) {
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

// set is a constraint that doesn't constrain the value.
func set(name string, apply func(s *apiextensionsv1.JSONSchemaProps) error) Constraint {
	return Constraint{Name: name, Apply: apply}
}

// Description sets the schema's description.
func Description(s string) Constraint {
	return set("Description", func(p *apiextensionsv1.JSONSchemaProps) error {
		p.Description = s
		return nil
	})
}

// Title sets the schema's title.
func Title(s string) Constraint {
	return set("Title", func(p *apiextensionsv1.JSONSchemaProps) error {
		p.Title = s
		return nil
	})
}

// Example sets the schema's example, v encoded by encoding/json.
func Example(v any) Constraint {
	return set("Example", func(p *apiextensionsv1.JSONSchemaProps) error {
		raw, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encoding its value: %w", err)
		}
		p.Example = &apiextensionsv1.JSON{Raw: raw}
		return nil
	})
}

// Default sets the schema's default, v encoded by encoding/json. The
// field's rule must say Defaulted too.
func Default(v any) Constraint {
	return set("Default", func(p *apiextensionsv1.JSONSchemaProps) error {
		raw, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encoding its value: %w", err)
		}
		p.Default = &apiextensionsv1.JSON{Raw: raw}
		return nil
	})
}

// Validation adds the CEL rule c.
func Validation(c CEL) Constraint {
	return Constraint{Name: "Validation", Value: true, Apply: func(p *apiextensionsv1.JSONSchemaProps) error {
		v, err := c.ValidationRule()
		if err != nil {
			return err
		}
		p.XValidations = append(p.XValidations, v)
		return nil
	}}
}

// Enum limits the value to values, each encoded by encoding/json.
func Enum[T any](values []T) Constraint {
	values = slices.Clone(values)
	return Constraint{Name: "Enum", Value: true, Apply: func(p *apiextensionsv1.JSONSchemaProps) error {
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

// Minimum sets the least value, v a number, exclusive or not.
func Minimum(v any, exclusive bool) Constraint {
	name := "Minimum"
	if exclusive {
		name = "ExclusiveMinimum"
	}
	return Constraint{Name: name, Value: true, Apply: func(p *apiextensionsv1.JSONSchemaProps) error {
		n, err := number(p, v)
		if err != nil {
			return err
		}
		p.Minimum, p.ExclusiveMinimum = &n, exclusive
		return nil
	}}
}

// Maximum sets the greatest value, v a number, exclusive or not.
func Maximum(v any, exclusive bool) Constraint {
	name := "Maximum"
	if exclusive {
		name = "ExclusiveMaximum"
	}
	return Constraint{Name: name, Value: true, Apply: func(p *apiextensionsv1.JSONSchemaProps) error {
		n, err := number(p, v)
		if err != nil {
			return err
		}
		p.Maximum, p.ExclusiveMaximum = &n, exclusive
		return nil
	}}
}

// MultipleOf sets a number, greater than 0, the value is a multiple of.
func MultipleOf(v any) Constraint {
	return Constraint{Name: "MultipleOf", Value: true, Apply: func(p *apiextensionsv1.JSONSchemaProps) error {
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
func count(name, want string, n int, set func(p *apiextensionsv1.JSONSchemaProps, v *int64)) Constraint {
	return Constraint{Name: name, Value: true, Apply: func(p *apiextensionsv1.JSONSchemaProps) error {
		set(p, ptrTo(int64(n)))
		return fits(p, want, n)
	}}
}

// MinLength sets a string's least length.
func MinLength(n int) Constraint {
	return count("MinLength", "string", n, func(p *apiextensionsv1.JSONSchemaProps, v *int64) { p.MinLength = v })
}

// MaxLength sets a string's greatest length.
func MaxLength(n int) Constraint {
	return count("MaxLength", "string", n, func(p *apiextensionsv1.JSONSchemaProps, v *int64) { p.MaxLength = v })
}

// MinItems sets a list's least number of items.
func MinItems(n int) Constraint {
	return count("MinItems", "array", n, func(p *apiextensionsv1.JSONSchemaProps, v *int64) { p.MinItems = v })
}

// MaxItems sets a list's greatest number of items.
func MaxItems(n int) Constraint {
	return count("MaxItems", "array", n, func(p *apiextensionsv1.JSONSchemaProps, v *int64) { p.MaxItems = v })
}

// MinProperties sets an object's least number of properties.
func MinProperties(n int) Constraint {
	return count("MinProperties", "object", n, func(p *apiextensionsv1.JSONSchemaProps, v *int64) { p.MinProperties = v })
}

// MaxProperties sets an object's greatest number of properties.
func MaxProperties(n int) Constraint {
	return count("MaxProperties", "object", n, func(p *apiextensionsv1.JSONSchemaProps, v *int64) { p.MaxProperties = v })
}

// Pattern sets the regular expression a string matches.
func Pattern(re *regexp.Regexp) Constraint {
	return Constraint{Name: "Pattern", Value: true, Apply: func(p *apiextensionsv1.JSONSchemaProps) error {
		if re == nil {
			return fmt.Errorf("is nil")
		}
		p.Pattern = re.String()
		return fits(p, "string", 0)
	}}
}

// Format sets a string's format, one the API server knows.
func Format(f string) Constraint {
	return Constraint{Name: "Format", Value: true, Apply: func(p *apiextensionsv1.JSONSchemaProps) error {
		if f == "" {
			return fmt.Errorf("is empty")
		}
		if err := checkFormat(f); err != nil {
			return err
		}
		p.Format = f
		return fits(p, "string", 0)
	}}
}

// ListSet makes a list of scalars a set.
func ListSet() Constraint {
	return set("ListSet", func(p *apiextensionsv1.JSONSchemaProps) error {
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

// ListMap makes a list of structs a map keyed by keys, which the API
// server's rules for list-map keys check.
func ListMap(keys []string) Constraint {
	keys = slices.Clone(keys)
	return set("ListMap", func(p *apiextensionsv1.JSONSchemaProps) error {
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

// Atomic makes a list, a map or a struct atomic.
func Atomic() Constraint {
	return set("Atomic", func(p *apiextensionsv1.JSONSchemaProps) error {
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

// PreserveUnknownFields keeps a map's or struct's unknown fields. The
// field's rule must say Preserve too.
func PreserveUnknownFields() Constraint {
	return set("PreserveUnknownFields", func(p *apiextensionsv1.JSONSchemaProps) error {
		p.XPreserveUnknownFields = ptrTo(true)
		if p.Type != "object" && p.Type != "" {
			return fmt.Errorf("fits a map, a struct or an interface, not %s", describeType(p))
		}
		return nil
	})
}

// EmbeddedResource makes an object a Kubernetes object.
func EmbeddedResource() Constraint {
	return set("EmbeddedResource", func(p *apiextensionsv1.JSONSchemaProps) error {
		p.XEmbeddedResource = true
		return fits(p, "object", 0)
	})
}

// Items applies cs to each item of a list.
func Items(cs []Constraint) Constraint {
	cs = slices.Clone(cs)
	return set("Items", func(p *apiextensionsv1.JSONSchemaProps) error {
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

// MapValues applies cs to each value of a map.
func MapValues(cs []Constraint) Constraint {
	cs = slices.Clone(cs)
	return set("MapValues", func(p *apiextensionsv1.JSONSchemaProps) error {
		if p.Type != "object" || p.AdditionalProperties == nil || p.AdditionalProperties.Schema == nil {
			return fmt.Errorf("fits a map, not %s", describeType(p))
		}
		return applyValues(cs, p.AdditionalProperties.Schema)
	})
}

// applyValues applies cs to p, and makes p not nullable if one of them
// constrains its value.
func applyValues(cs []Constraint, p *apiextensionsv1.JSONSchemaProps) error {
	var errs []error
	for _, c := range cs {
		if err := applyConstraint(c, p); err != nil {
			errs = append(errs, fmt.Errorf("%s %w", c.Name, err))
		}
		if c.Value {
			p.Nullable = false
		}
	}
	return joinErrs(errs)
}

// ValueRules are the Rules of values of named type t, constrained by cs.
func ValueRules(t reflect.Type, cs []Constraint) Rules {
	r := Rules{Type: t, Values: slices.Clone(cs)}
	if t.PkgPath() == "" {
		r.Errs = append(r.Errs, fmt.Errorf("kube: ValueRules[%s]: %s is not a type of your own, and would constrain every %s field, Kubernetes' own included: declare one (type Phase %s) or constrain the field with kube.Field", t, t, t, t))
	}
	return r
}

// applyConstraint applies c to p, and turns a panic, such as one from a
// value's MarshalJSON, into an error.
func applyConstraint(c Constraint, p *apiextensionsv1.JSONSchemaProps) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panicked: %v", r)
		}
	}()
	return c.Apply(p)
}

func joinErrs(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

func ptrTo[T any](v T) *T { return &v }
