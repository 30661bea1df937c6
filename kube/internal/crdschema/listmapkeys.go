package crdschema

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// ListMapKeys returns the lists of s, a version's openAPIV3Schema, that are
// maps by keys (x-kubernetes-list-type: map, with
// x-kubernetes-list-map-keys): each list's path, its property names from
// the root joined by dots with [] for an element of an enclosing list
// (spec.members, spec.groups[].members), to its keys. A list under a map's
// values (additionalProperties) is left out: its path has the map's keys
// in it. Nil when there is none.
func ListMapKeys(s *apiextensionsv1.JSONSchemaProps) map[string][]string {
	var out map[string][]string
	var walk func(path string, s *apiextensionsv1.JSONSchemaProps)
	walk = func(path string, s *apiextensionsv1.JSONSchemaProps) {
		if s == nil {
			return
		}
		if s.XListType != nil && *s.XListType == "map" && len(s.XListMapKeys) > 0 {
			if out == nil {
				out = map[string][]string{}
			}
			out[path] = append([]string(nil), s.XListMapKeys...)
		}
		for name, p := range s.Properties {
			next := name
			if path != "" {
				next = path + "." + name
			}
			walk(next, &p)
		}
		if s.Items != nil {
			walk(path+"[]", s.Items.Schema)
		}
	}
	walk("", s)
	return out
}
