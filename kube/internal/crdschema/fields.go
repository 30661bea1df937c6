package crdschema

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// A struct's schema: its fields as encoding/json encodes them, each
// field's rules, and whether it may be null.

// object is the schema of struct type t: a property for each field that
// encoding/json encodes, constrained by the Rules of t and of the structs
// embedded in it.
func (b *reflector) object(t reflect.Type, path string) apiextensionsv1.JSONSchemaProps {
	fields, inlined := jsonFields(t)
	s := apiextensionsv1.JSONSchemaProps{Type: "object"}
	b.upstreamObject(t, &s)
	if len(fields) > 0 {
		s.Properties = make(map[string]apiextensionsv1.JSONSchemaProps, len(fields))
	}
	for _, f := range fields {
		p, required := b.field(t, f, path+"."+f.name)
		s.Properties[f.name] = p
		if required {
			s.Required = append(s.Required, f.name)
		}
	}
	// An embedded struct's own validations hold of the struct it is
	// inlined in, since its fields are there.
	for _, e := range inlined {
		if r := b.rules[e]; r != nil {
			b.used[e] = true
			s.XValidations = append(s.XValidations, r.Validations...)
		}
	}
	return s
}

// ruleAt is a field's rule: the k-th field rule of the Rules of owner.
type ruleAt struct {
	owner reflect.Type
	k     int
	fr    Field
}

// fieldRules returns the rules of field f of struct t: those of each struct
// along f's index sequence, the innermost first, so the outer type's rules
// win; the innermost struct, the one that declares f; and whether a rule
// preserves f's unknown fields.
func (b *reflector) fieldRules(t reflect.Type, f jsonField) (frs []ruleAt, declaring reflect.Type, preserve bool) {
	owner := make([]reflect.Type, len(f.index))
	ot := t
	for i, x := range f.index {
		owner[i] = ot
		ot = ot.Field(x).Type
		for ot.Kind() == reflect.Pointer {
			ot = ot.Elem()
		}
	}
	for i := len(f.index) - 1; i >= 0; i-- {
		if r := b.rules[owner[i]]; r != nil {
			for k, fr := range r.Fields {
				if slices.Equal(fr.Index, f.index[i:]) {
					frs = append(frs, ruleAt{owner[i], k, fr})
					preserve = preserve || fr.Preserve
				}
			}
		}
	}
	return frs, owner[len(owner)-1], preserve
}

// field is the schema of field f of struct t, at fpath, and whether it is
// required.
func (b *reflector) field(t reflect.Type, f jsonField, fpath string) (apiextensionsv1.JSONSchemaProps, bool) {
	ft := f.typ
	ptr := ft.Kind() == reflect.Pointer
	for ft.Kind() == reflect.Pointer {
		ft = ft.Elem()
	}
	frs, declaring, preserve := b.fieldRules(t, f)
	p := b.fieldValue(f, ft, fpath, preserve)
	st := fieldState{required: !f.omit && !f.viaPointer}
	// A field of Kubernetes' own types has what the API server's schema
	// says of it, and is required as it says, and then isn't nullable,
	// so that a null doesn't pass for a field the API server requires.
	upRequired, upDefaulted, up := b.upstreamField(t, declaring, f.name, &p)
	if up {
		st.required = upRequired
	}
	// The validation markers of Kubernetes' own Go source, such as
	// metav1.Condition's, constrain the value, as controller-gen's do.
	marked := false
	if mark := sourceMarkers(declaring, f.name); mark != nil {
		mark(&p)
		marked = true
	}
	if len(frs) > 1 {
		b.conflicts(fpath, p, frs)
	}
	// An upstream +default, as a user's Default, makes the field not
	// nullable: the API server defaults a missing field, not a null.
	st.defaulted = upDefaulted
	st.constrained = b.constrained(ft) || upRequired || marked
	b.applyFieldRules(fpath, frs, &p, &st)
	if f.quoted {
		quoteValues(&p)
	}
	if len(frs) > 0 {
		for _, err := range consistent(&p) {
			b.report("consistent "+fpath+err.Error(), fmt.Errorf("kube: %s: %w", fpath, err))
		}
	}
	b.checkRequiredNullable(fpath, st)
	conditionTime := f.name == "lastTransitionTime" && st.required && conditionShaped(declaring)
	if st.nullable || b.keepsNull(f, ft, ptr, st.defaulted, st.constrained, conditionTime) {
		p.Nullable = true
	}
	return p, st.required
}

// fieldValue is the schema of the value of field f, of type ft once its
// pointers are removed, at fpath, before any rule: a string for a quoted
// field, any JSON value for one a rule preserves, else ft's schema.
func (b *reflector) fieldValue(f jsonField, ft reflect.Type, fpath string, preserve bool) apiextensionsv1.JSONSchemaProps {
	if f.quoted {
		return apiextensionsv1.JSONSchemaProps{Type: "string"}
	}
	if preserve {
		if p, opaque := b.opaque(ft); opaque {
			return p
		}
	}
	return b.schema(ft, fpath)
}

// fieldState is what a field's rules, its tag and the API server's own
// schema say of it beside its schema: whether it is required, defaulted,
// nullable by a rule, or constrained; and the rules that say Required and
// Nullable, as "Rules for T: T.F", for the error when they contradict.
type fieldState struct {
	required, defaulted, nullable, constrained bool
	requiredBy, nullableBy                     string
}

// applyFieldRules applies frs, the rules of the field at fpath, to its
// schema p and its state st.
func (b *reflector) applyFieldRules(fpath string, frs []ruleAt, p *apiextensionsv1.JSONSchemaProps, st *fieldState) {
	for _, ra := range frs {
		fr := ra.fr
		if fr.Defaulted {
			st.required = false
			st.defaulted = true
		}
		if fr.Required != nil {
			st.required = *fr.Required
			st.constrained = st.constrained || st.required
			if st.required {
				st.requiredBy = fmt.Sprintf("Rules for %s: %s", ra.owner, goFieldName(ra.owner, fr.Index))
			}
		}
		st.nullable = st.nullable || fr.Nullable
		if fr.Nullable {
			st.nullableBy = fmt.Sprintf("Rules for %s: %s", ra.owner, goFieldName(ra.owner, fr.Index))
		}
		st.constrained = st.constrained || ConstrainsValue(fr.Constraints)
		for n, c := range fr.Constraints {
			if err := applyConstraint(c, p); err != nil {
				b.report(fmt.Sprintf("rule %s %d %d", ra.owner, ra.k, n), fmt.Errorf("kube: %s: Rules for %s: %s: %s %w", fpath, ra.owner, goFieldName(ra.owner, fr.Index), c.Name, err))
			}
		}
	}
}

// checkRequiredNullable reports the field at fpath that a rule makes
// Required and a rule Nullable: Required promises that a null is refused,
// and Nullable lets one in.
func (b *reflector) checkRequiredNullable(fpath string, st fieldState) {
	if st.requiredBy == "" || st.nullableBy == "" || !st.required {
		return
	}
	where := st.requiredBy
	if st.nullableBy != st.requiredBy {
		where += " and " + st.nullableBy
	}
	b.report("nullable required "+fpath, fmt.Errorf("kube: %s: %s: Required and Nullable contradict: a Required field refuses a null, which Nullable lets in; drop one of them (a field required by its json tag alone may be Nullable: present, and maybe null)", fpath, where))
}

// keepsNull reports whether the schema of field f, of type ft once its
// pointers are removed (ptr if there were any), is nullable without a
// rule saying so: whether encoding/json may write null for it, and the
// API server should keep that null. The API server drops a null it may
// not keep, and then finds a required field missing; and it defaults only
// a field that is missing. Each case below is one reason it isn't.
func (b *reflector) keepsNull(f jsonField, ft reflect.Type, ptr, defaulted, constrained, conditionTime bool) bool {
	switch {
	case !ptr && (f.quoted || !b.mayBeNil(ft)):
		// encoding/json writes null only for a nil pointer (",string" or
		// not), and for a nil slice or map or a zero metav1.Time,
		// MicroTime or RawExtension (mayBeNil) not tagged ",string".
		return false
	case f.omitzero:
		// omitzero leaves out both a nil and a zero value (it asks
		// metav1.Time's IsZero).
		return false
	case f.omit && !zeroIsNull(ft) && (ptr || ft.Kind() == reflect.Slice || ft.Kind() == reflect.Map):
		// omitempty leaves out a nil pointer, slice or map, but never a
		// struct: a zero metav1.Time tagged omitempty is still written,
		// as null, and so is a pointer to one.
		return false
	case defaulted:
		// The API server defaults only a field that is missing.
		return false
	case constrained:
		// A field whose value is constrained, by a rule of its own or of
		// its type, or that Required makes required, isn't nullable, so a
		// null can't pass its constraints: the API server drops the null,
		// and a required field is then missing.
		return false
	case conditionTime:
		// A condition's lastTransitionTime (metav1.Condition's, embedded
		// or not, or a user's own condition type's) stays required and not
		// nullable, as Kubernetes' own ValidateConditions requires it set
		// (apimachinery's meta/v1/validation), so a condition without one
		// is refused rather than stored as null.
		return false
	}
	return true
}

// quoteValues encodes p's Default and Enum values, which were encoded as
// the field's Go type, as a field tagged ",string" is: the JSON of the
// value, in a JSON string. A null, from a nil pointer, stays null.
func quoteValues(p *apiextensionsv1.JSONSchemaProps) {
	quote := func(v *apiextensionsv1.JSON) {
		if v == nil || string(v.Raw) == "null" {
			return
		}
		v.Raw, _ = json.Marshal(string(v.Raw)) // a string always encodes
	}
	quote(p.Default)
	for i := range p.Enum {
		quote(&p.Enum[i])
	}
}
