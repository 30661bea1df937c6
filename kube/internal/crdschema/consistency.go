package crdschema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"regexp"
	"slices"
	"unicode/utf8"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// knownFormats are the string formats the API server checks: those of
// k8s.io/apiextensions-apiserver's pkg/apiserver/validation (formats.go,
// supportedVersionedFormats, as of the release in go.mod), which it takes
// from k8s.io/kube-openapi's strfmt registry. A format the API server
// doesn't know is stripped from the schema it validates with, and checks
// nothing. The API server compares them without dashes (date-time is
// datetime). kube's Format constants are these.
var knownFormats = []string{
	"bsonobjectid", "uri", "email", "hostname", "ipv4", "ipv6", "cidr", "mac",
	"uuid", "uuid3", "uuid4", "uuid5", "isbn", "isbn10", "isbn13", "creditcard",
	"ssn", "hexcolor", "rgbcolor", "byte", "password", "date", "duration", "date-time",
	"k8s-short-name", "k8s-long-name",
}

// checkFormat is nil if the API server checks format f.
func checkFormat(f string) error {
	if slices.Contains(knownFormats, f) || f == "datetime" {
		return nil
	}
	return fmt.Errorf("is %q, which the API server doesn't know, and would ignore: use one of kube's Format constants, such as kube.FormatUUID (the formats of k8s.io/apiextensions-apiserver's pkg/apiserver/validation)", f)
}

// consistent reports the mistakes in schema p's own constraints that no
// value, or no default, could pass: a minimum above its maximum, a least
// count above its greatest, and a Default that its schema refuses. It
// looks into p's items and map values, not its properties, which are
// checked where their struct is.
func consistent(p *apiextensionsv1.JSONSchemaProps) []error {
	var errs []error
	if p.Minimum != nil && p.Maximum != nil {
		lo, hi := *p.Minimum, *p.Maximum
		if lo > hi || lo == hi && (p.ExclusiveMinimum || p.ExclusiveMaximum) {
			errs = append(errs, fmt.Errorf("%s %v and %s %v leave no value: lower the one or raise the other", minName(p), lo, maxName(p), hi))
		}
	}
	pairs := []struct {
		lo, hi *int64
		what   string
	}{
		{p.MinLength, p.MaxLength, "Length"},
		{p.MinItems, p.MaxItems, "Items"},
		{p.MinProperties, p.MaxProperties, "Properties"},
	}
	for _, c := range pairs {
		if c.lo != nil && c.hi != nil && *c.lo > *c.hi {
			errs = append(errs, fmt.Errorf("Min%s %d is greater than Max%s %d, which leaves no value: lower the one or raise the other", c.what, *c.lo, c.what, *c.hi))
		}
	}
	if p.Default != nil {
		if err := checkDefault(p); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, checkEnum(p)...)
	if it := items(p); it != nil {
		for _, err := range consistent(it) {
			errs = append(errs, fmt.Errorf("its items: %w", err))
		}
	}
	if p.AdditionalProperties != nil && p.AdditionalProperties.Schema != nil {
		for _, err := range consistent(p.AdditionalProperties.Schema) {
			errs = append(errs, fmt.Errorf("its values: %w", err))
		}
	}
	return errs
}

func minName(p *apiextensionsv1.JSONSchemaProps) string {
	if p.ExclusiveMinimum {
		return "ExclusiveMinimum"
	}
	return "Minimum"
}

func maxName(p *apiextensionsv1.JSONSchemaProps) string {
	if p.ExclusiveMaximum {
		return "ExclusiveMaximum"
	}
	return "Maximum"
}

// checkDefault is an error naming each of p's own constraints that p's
// Default breaks, which the API server would refuse the CRD for: bounds,
// MultipleOf, lengths (in characters, as the API server counts them),
// Pattern, Enum and counts of items and properties.
func checkDefault(p *apiextensionsv1.JSONSchemaProps) error {
	broken, err := breaks(p, p.Default.Raw)
	if err != nil {
		return fmt.Errorf("Default %s isn't JSON: %w", p.Default.Raw, err)
	}
	if len(p.Enum) > 0 && !slices.ContainsFunc(p.Enum, func(e apiextensionsv1.JSON) bool { return sameJSON(e.Raw, p.Default.Raw) }) {
		broken = append(broken, "Enum")
	}
	if len(broken) == 0 {
		return nil
	}
	return fmt.Errorf("Default %s breaks the field's own %s, so the API server would refuse the CRD: give a Default its constraints accept", p.Default.Raw, joinWords(broken))
}

// checkEnum is an error for each of p's Enum values that breaks one of p's
// own other constraints: the API server accepts the CRD, but refuses every
// object that holds the value, so it is an Enum value no object can have
// (Enum(5, 6).Maximum(3) leaves no value at all).
func checkEnum(p *apiextensionsv1.JSONSchemaProps) []error {
	var errs []error
	for _, e := range p.Enum {
		broken, err := breaks(p, e.Raw)
		if err != nil || len(broken) == 0 {
			continue
		}
		errs = append(errs, fmt.Errorf("Enum value %s breaks the field's own %s, so no object can hold it: drop the value, or loosen the constraint", e.Raw, joinWords(broken)))
	}
	return errs
}

// breaks returns the names of p's own constraints, but Enum, that the JSON
// value raw breaks, or an error if raw isn't JSON.
func breaks(p *apiextensionsv1.JSONSchemaProps, raw []byte) ([]string, error) {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	var broken []string
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			break
		}
		switch {
		case p.Minimum != nil && (f < *p.Minimum || p.ExclusiveMinimum && f == *p.Minimum):
			broken = append(broken, fmt.Sprintf("%s %v", minName(p), *p.Minimum))
		case p.Maximum != nil && (f > *p.Maximum || p.ExclusiveMaximum && f == *p.Maximum):
			broken = append(broken, fmt.Sprintf("%s %v", maxName(p), *p.Maximum))
		}
		if m := p.MultipleOf; m != nil && *m > 0 {
			if q := f / *m; math.Abs(q-math.Round(q)) > 1e-9 {
				broken = append(broken, fmt.Sprintf("MultipleOf %v", *m))
			}
		}
	case string:
		n := int64(utf8.RuneCountInString(x))
		if p.MinLength != nil && n < *p.MinLength {
			broken = append(broken, fmt.Sprintf("MinLength %d", *p.MinLength))
		}
		if p.MaxLength != nil && n > *p.MaxLength {
			broken = append(broken, fmt.Sprintf("MaxLength %d", *p.MaxLength))
		}
		if p.Pattern != "" {
			if re, err := regexp.Compile(p.Pattern); err == nil && !re.MatchString(x) {
				broken = append(broken, fmt.Sprintf("Pattern %s", p.Pattern))
			}
		}
	case []any:
		n := int64(len(x))
		if p.MinItems != nil && n < *p.MinItems {
			broken = append(broken, fmt.Sprintf("MinItems %d", *p.MinItems))
		}
		if p.MaxItems != nil && n > *p.MaxItems {
			broken = append(broken, fmt.Sprintf("MaxItems %d", *p.MaxItems))
		}
	case map[string]any:
		n := int64(len(x))
		if p.MinProperties != nil && n < *p.MinProperties {
			broken = append(broken, fmt.Sprintf("MinProperties %d", *p.MinProperties))
		}
		if p.MaxProperties != nil && n > *p.MaxProperties {
			broken = append(broken, fmt.Sprintf("MaxProperties %d", *p.MaxProperties))
		}
	}
	return broken, nil
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

func joinWords(ws []string) string {
	switch len(ws) {
	case 1:
		return ws[0]
	case 2:
		return ws[0] + " and " + ws[1]
	}
	out := ""
	for i, w := range ws {
		switch {
		case i == len(ws)-1:
			out += ", and " + w
		case i > 0:
			out += ", " + w
		default:
			out = w
		}
	}
	return out
}

// conflicts reports two Field rules of one type's Rules for one field
// that set one keyword to different values, or one Required and the other
// Optional: CRD would otherwise keep the last silently. base is the
// field's schema before its rules. Rules of different types (an embedding
// struct's over an embedded one's) don't conflict: the outer one wins.
func (b *reflector) conflicts(fpath string, base apiextensionsv1.JSONSchemaProps, rules []ruleAt) {
	type applied struct {
		owner reflect.Type
		fr    Field
		set   map[string]any
	}
	baseKeys := keywords(&base)
	var all []applied
	for _, ra := range rules {
		owner, fr := ra.owner, ra.fr
		p := *base.DeepCopy()
		for _, c := range fr.Constraints {
			_ = applyConstraint(c, &p) // its errors are reported where it is applied
		}
		set := map[string]any{}
		for k, v := range keywords(&p) {
			if !sameValue(baseKeys[k], v) {
				set[k] = v
			}
		}
		all = append(all, applied{owner, fr, set})
	}
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			a, c := all[i], all[j]
			if a.owner != c.owner {
				continue
			}
			var diff []string
			for _, k := range slices.Sorted(maps.Keys(a.set)) {
				if v, ok := c.set[k]; ok && !sameValue(a.set[k], v) {
					diff = append(diff, fmt.Sprintf("%s %s and %s", k, show(a.set[k]), show(v)))
				}
			}
			if a.fr.Required != nil && c.fr.Required != nil && *a.fr.Required != *c.fr.Required {
				diff = append(diff, "Required and Optional")
			}
			if len(diff) > 0 {
				b.report(fmt.Sprintf("conflict %s %d %d", fpath, i, j), fmt.Errorf("kube: %s: Rules for %s: two Field rules for %s conflict, setting %s: give the field one rule with the constraint you mean", fpath, a.owner, goFieldName(a.owner, a.fr.Index), joinWords(diff)))
			}
		}
	}
}

// keywords are schema p's keywords and their JSON values, as a CRD holds
// them.
func keywords(p *apiextensionsv1.JSONSchemaProps) map[string]any {
	raw, err := json.Marshal(p)
	if err != nil {
		return nil
	}
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return m
}

func sameValue(a, b any) bool { return reflect.DeepEqual(a, b) }

func show(v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(raw)
}
