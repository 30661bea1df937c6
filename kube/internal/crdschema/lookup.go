package crdschema

import "reflect"

// JSONField finds the field of struct type t that encoding/json encodes
// under name, by the rules CRD reflects t's schema with (the shallowest
// field of a name wins; an embedded struct's fields are inlined). It
// returns the field's index, for reflect.Value.FieldByIndex, and its type;
// viaPointer reports a field promoted through an embedded pointer, which
// FieldByIndex can't reach while the pointer is nil. ok is false when t
// isn't a struct or encodes no field of that name.
func JSONField(t reflect.Type, name string) (index []int, typ reflect.Type, viaPointer, ok bool) {
	if t == nil || t.Kind() != reflect.Struct {
		return nil, nil, false, false
	}
	fields, _ := jsonFields(t)
	for _, f := range fields {
		if f.name == name {
			return f.index, f.typ, f.viaPointer, true
		}
	}
	return nil, nil, false, false
}
