package objcache

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// fieldPath returns the path, such as spec.resources.limits.memory or
// spec.items[2].size, of the deepest value of raw that doesn't decode into
// its field of t, or "" if raw fails as a whole or decodes. encoding/json
// names the field of a mismatched type (UnmarshalTypeError.Field), but not
// that of an error a json.Unmarshaler returns, as resource.Quantity's does
// for "1Gx": fieldPath decodes raw again field by field to find it. It is
// only called once a decode has failed.
func fieldPath(raw []byte, t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return "" // the value itself, decoded by its own UnmarshalJSON
	}
	fails := func(raw []byte, t reflect.Type) bool {
		return json.Unmarshal(raw, reflect.New(t).Interface()) != nil
	}
	switch t.Kind() {
	case reflect.Struct:
		var fields map[string]json.RawMessage
		if json.Unmarshal(raw, &fields) != nil {
			return ""
		}
		byName := decodeFields(t)
		for _, name := range sortedKeys(fields) {
			ft, ok := byName[strings.ToLower(name)]
			if !ok || !fails(fields[name], ft) {
				continue
			}
			if sub := fieldPath(fields[name], ft); sub != "" {
				if strings.HasPrefix(sub, "[") {
					return name + sub
				}
				return name + "." + sub
			}
			return name
		}
	case reflect.Map:
		var entries map[string]json.RawMessage
		if json.Unmarshal(raw, &entries) != nil {
			return ""
		}
		for _, key := range sortedKeys(entries) {
			if !fails(entries[key], t.Elem()) {
				continue
			}
			if sub := fieldPath(entries[key], t.Elem()); sub != "" {
				return key + "." + sub
			}
			return key
		}
	case reflect.Slice, reflect.Array:
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return ""
		}
		for i, item := range items {
			if !fails(item, t.Elem()) {
				continue
			}
			p := "[" + strconv.Itoa(i) + "]"
			if sub := fieldPath(item, t.Elem()); sub != "" {
				if strings.HasPrefix(sub, "[") {
					return p + sub
				}
				return p + "." + sub
			}
			return p
		}
	}
	return ""
}

// decodeFields returns the type of each field encoding/json decodes into a
// struct of type t, by its JSON name in lower case (encoding/json matches
// names without regard to case), with embedded structs' fields promoted.
func decodeFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			et := ft
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				for n, t := range decodeFields(et) {
					if _, ok := out[n]; !ok {
						out[n] = t
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[strings.ToLower(name)] = ft
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
