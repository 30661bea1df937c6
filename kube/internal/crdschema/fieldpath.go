package crdschema

import (
	"fmt"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// checkFieldPaths returns an error for each CEL rule of root, the whole
// object's schema, and of the schemas below it, whose fieldPath the API
// server refuses when the CRD is applied: the apiextensions validation of
// x-kubernetes-validations (k8s.io/apiextensions-apiserver's
// ValidateCustomResourceDefinition, by cel.ValidFieldPath) requires a
// fieldPath, when given, to be non-blank, on one line, and to name a field
// of the schema the rule is on, step by step: ".name" or "['name']" of an
// object's properties, or a key of a map's additionalProperties; no list
// index. So a rule on the object can name .spec, .status and the fields
// the CRD's schema has below them, .apiVersion, .kind and .metadata, but
// not .metadata.name: the CRD's schema of metadata is a bare object, the
// API server's own.
func checkFieldPaths(root *apiextensionsv1.JSONSchemaProps) []error {
	var errs []error
	var walk func(s *apiextensionsv1.JSONSchemaProps, at string)
	walk = func(s *apiextensionsv1.JSONSchemaProps, at string) {
		for _, v := range s.XValidations {
			if v.FieldPath == "" {
				continue
			}
			if problem := fieldPathProblem(s, v.FieldPath); problem != "" {
				errs = append(errs, fmt.Errorf("kube: the CEL rule %q on %s has FieldPath %q, which the API server refuses: %s", v.Rule, at, v.FieldPath, problem))
			}
		}
		for _, name := range sortedKeys(s.Properties) {
			p := s.Properties[name]
			walk(&p, childPath(at, name))
		}
		if s.Items != nil && s.Items.Schema != nil {
			walk(s.Items.Schema, at+"'s items")
		}
		if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
			walk(s.AdditionalProperties.Schema, at+"'s values")
		}
	}
	walk(root, "the object")
	return errs
}

// childPath is the name of the property name of the schema at at.
func childPath(at, name string) string {
	if at == "the object" {
		return "." + name
	}
	return at + "." + name
}

func sortedKeys(m map[string]apiextensionsv1.JSONSchemaProps) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// fieldPathProblem returns why the API server refuses path as the
// fieldPath of a rule on s, or "" if it accepts it, as cel.ValidFieldPath
// reads it: a sequence of ".name" and "['name']" steps (a quoted name may
// hold dots and brackets, and \' and \\ escapes), each of s's properties,
// or a key of its additionalProperties. An embedded resource, whose
// apiVersion, kind and metadata the API server knows, isn't checked
// below them.
func fieldPathProblem(s *apiextensionsv1.JSONSchemaProps, path string) string {
	if strings.TrimSpace(path) == "" {
		return "it must be non-empty if given"
	}
	if strings.ContainsAny(path, "\n\r") {
		return "it must not contain line breaks"
	}
	const hint = "give a path below the value the rule is on (self), such as .spec.replicas for a rule on the object; a field its schema names, or a map's key: not a list's item, and not below .metadata, whose schema the API server keeps"
	rest := path
	walked := ""
	for rest != "" {
		var name string
		switch {
		case rest[0] == '.':
			end := strings.IndexAny(rest[1:], ".[]")
			if end < 0 {
				end = len(rest) - 1
			}
			name, rest = rest[1:1+end], rest[1+end:]
			if name == "" {
				return fmt.Sprintf("an empty field name after %q; %s", walked, hint)
			}
		case strings.HasPrefix(rest, "['"):
			n, after, ok := quotedName(rest[2:])
			if !ok {
				return fmt.Sprintf("%q after %q isn't a single-quoted name in brackets; %s", rest, walked, hint)
			}
			name, rest = n, after
		case rest[0] == '[':
			return fmt.Sprintf("%q after %q is a list index or an unquoted name: only ['name'] is allowed; %s", rest, walked, hint)
		default:
			return fmt.Sprintf("%q after %q doesn't start with . or ['; %s", rest, walked, hint)
		}
		switch {
		case s.Properties != nil:
			p, ok := s.Properties[name]
			if !ok {
				if s.XEmbeddedResource && (name == "apiVersion" || name == "kind" || name == "metadata") {
					return ""
				}
				return fmt.Sprintf("%s has no field %q; %s", describeWalked(walked), name, hint)
			}
			s = &p
		case s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil:
			s = s.AdditionalProperties.Schema
		default:
			if s.XEmbeddedResource && (name == "apiVersion" || name == "kind" || name == "metadata") {
				return ""
			}
			return fmt.Sprintf("%s has no fields in its schema, so %q names nothing; %s", describeWalked(walked), name, hint)
		}
		walked = path[:len(path)-len(rest)]
	}
	return ""
}

// describeWalked names the value at the part of a fieldPath walked.
func describeWalked(walked string) string {
	if walked == "" {
		return "self"
	}
	return walked
}

// quotedName reads a name quoted with ' up to its closing "']", with \'
// and \\ unescaped, and returns it and what follows the bracket.
func quotedName(s string) (name, rest string, ok bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if i+1 >= len(s) {
				return "", "", false
			}
			i++
			b.WriteByte(s[i])
		case '\'':
			if !strings.HasPrefix(s[i:], "']") {
				return "", "", false
			}
			return b.String(), s[i+2:], true
		default:
			b.WriteByte(s[i])
		}
	}
	return "", "", false
}
