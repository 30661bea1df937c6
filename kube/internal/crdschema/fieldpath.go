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
// API server's own; below an embedded resource, only the fields its schema
// declares.
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
// fieldPath of a rule on s, or "" if it accepts it, reading it as
// k8s.io/apiextensions-apiserver's cel.ValidFieldPath does: path is split
// into the delimiters '.', '[' and ']' and the text between them, a text
// starting with ' running to the next ' not right after a backslash (so a
// quoted name can't end in a backslash); then each step is "." and the
// next token, or "[", a single-quoted name (with \', \\, \a, \b, \f, \n,
// \r, \t and \v escapes) and "]", and names one of s's properties, or a
// key of its additionalProperties. Nothing below an embedded resource
// (x-kubernetes-embedded-resource) is exempt: the rule's schema there
// holds only what the CRD declares, and the server refuses .metadata or
// .kind below it when the CRD declares no such field.
func fieldPathProblem(s *apiextensionsv1.JSONSchemaProps, path string) string {
	if strings.TrimSpace(path) == "" {
		return "it must be non-empty if given"
	}
	if strings.ContainsAny(path, "\n\r") {
		return "it must not contain line breaks"
	}
	const hint = "give a path below the value the rule is on (self), such as .spec.replicas for a rule on the object; a field its schema names, or a map's key: not a list's item, and not below .metadata, whose schema the API server keeps"
	toks := fieldPathTokens(path)
	walked := ""
	for i := 0; i < len(toks); i++ {
		var name string
		switch toks[i] {
		case ".":
			if i+1 == len(toks) {
				return fmt.Sprintf("an empty field name after %q; %s", walked, hint)
			}
			i++
			name = toks[i]
		case "[":
			if i+1 == len(toks) {
				return fmt.Sprintf("%q after %q isn't a single-quoted name in brackets; %s", "[", walked, hint)
			}
			i++
			q := toks[i]
			if q != "" && strings.Trim(q, "0123456789") == "" {
				return fmt.Sprintf("%q after %q is a list index: a FieldPath can't name a list's item; %s", strings.Join(toks[i-1:], ""), walked, hint)
			}
			if len(q) < 2 || q[0] != '\'' || q[len(q)-1] != '\'' {
				return fmt.Sprintf("%q after %q isn't a single-quoted name in brackets (a list index and an unquoted name aren't allowed, and a quoted name can't end in a backslash); %s", strings.Join(toks[i-1:], ""), walked, hint)
			}
			n, err := unescapeSingleQuote(q[1 : len(q)-1])
			if err != nil {
				return fmt.Sprintf("the quoted name %s after %q: %v; %s", q, walked, err, hint)
			}
			if i+1 == len(toks) || toks[i+1] != "]" {
				return fmt.Sprintf("%q after %q isn't a single-quoted name in brackets; %s", strings.Join(toks[i-1:], ""), walked, hint)
			}
			i++
			name = n
		default:
			return fmt.Sprintf("%q after %q doesn't start with . or ['; %s", strings.Join(toks[i:], ""), walked, hint)
		}
		switch {
		case s.Properties != nil:
			p, ok := s.Properties[name]
			if !ok {
				return fmt.Sprintf("%s has no field %q; %s", describeWalked(walked), name, hint)
			}
			s = &p
		case s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil:
			s = s.AdditionalProperties.Schema
		default:
			return fmt.Sprintf("%s has no fields in its schema, so %q names nothing; %s", describeWalked(walked), name, hint)
		}
		walked = strings.Join(toks[:i+1], "")
	}
	return ""
}

// fieldPathTokens splits path as cel.ValidFieldPath's scanner does: each
// of '.', '[' and ']' is a token, and so is the text between them, except
// that a text starting with ' runs to the next ' that doesn't follow a
// backslash (or to the end of path), delimiters included.
func fieldPathTokens(path string) []string {
	var toks []string
	for rest := path; rest != ""; {
		n := len(rest)
		for i := 0; i < len(rest); i++ {
			if rest[0] == '\'' {
				if i > 0 && rest[i] == '\'' && rest[i-1] != '\\' {
					n = i + 1
					break
				}
				continue
			}
			if rest[i] == '.' || rest[i] == '[' || rest[i] == ']' {
				n = max(i, 1)
				break
			}
		}
		toks = append(toks, rest[:n])
		rest = rest[n:]
	}
	return toks
}

// unescapeSingleQuote unescapes a single-quoted name's text as
// cel.ValidFieldPath does: \a, \b, \f, \n, \r, \t, \v, \' and \\; any other
// character after a backslash is an error.
func unescapeSingleQuote(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 == len(s) {
			return "", fmt.Errorf("it ends in a lone backslash")
		}
		i++
		r, ok := map[byte]byte{'a': '\a', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t', 'v': '\v', '\'': '\'', '\\': '\\'}[s[i]]
		if !ok {
			return "", fmt.Errorf("\\%c is not an escape (only \\a, \\b, \\f, \\n, \\r, \\t, \\v, \\' and \\\\ are)", s[i])
		}
		b.WriteByte(r)
	}
	return b.String(), nil
}

// describeWalked names the value at the part of a fieldPath walked.
func describeWalked(walked string) string {
	if walked == "" {
		return "self"
	}
	return walked
}
