package crdschema

import (
	"cmp"
	"reflect"
	"slices"
	"strings"
	"unicode"
)

// jsonField is a field as encoding/json encodes it.
type jsonField struct {
	name       string
	tagged     bool
	index      []int
	typ        reflect.Type
	omit       bool // omitempty or omitzero
	omitzero   bool // omitzero, which leaves out a zero struct too, where omitempty doesn't
	quoted     bool // the ",string" option, on a scalar
	viaPointer bool // promoted through an embedded pointer, so absent when it is nil
}

// jsonFields are the fields encoding/json encodes of struct type t, in
// their index order, and the struct types it inlines, by the rules of
// encoding/json's typeFields: the shallowest field of a name wins, then the
// one tagged with the name, and a tie hides them all.
func jsonFields(t reflect.Type) ([]jsonField, []reflect.Type) {
	fields, inlined := allFields(t)
	return dominantFields(fields), inlined
}

// fieldWalk is a struct type whose fields allFields reads: t, or one
// inlined in it at index, through an embedded pointer (viaPointer) or not.
type fieldWalk struct {
	typ        reflect.Type
	index      []int
	viaPointer bool
}

// allFields are every field of struct type t and of the structs it
// inlines, a level of embedding at a time, shallowest first, each struct
// once; a field of a struct embedded twice at one level comes twice, so
// that dominantFields' tie hides it. inlined are the structs inlined.
func allFields(t reflect.Type) (fields []jsonField, inlined []reflect.Type) {
	var current []fieldWalk
	next := []fieldWalk{{typ: t}}
	count, nextCount := map[reflect.Type]int{}, map[reflect.Type]int{}
	visited := map[reflect.Type]bool{}
	for len(next) > 0 {
		current, next = next, current[:0]
		count, nextCount = nextCount, map[reflect.Type]int{}
		for _, w := range current {
			if visited[w.typ] {
				continue
			}
			visited[w.typ] = true
			if w.typ != t {
				inlined = append(inlined, w.typ)
			}
			for i := range w.typ.NumField() {
				f, embedded, ok := fieldOf(w, i)
				switch {
				case !ok:
				case embedded != nil:
					nextCount[embedded.typ]++
					if nextCount[embedded.typ] == 1 {
						next = append(next, *embedded)
					}
				default:
					fields = append(fields, f)
					if count[w.typ] > 1 {
						// A second copy, so the tie hides it.
						fields = append(fields, f)
					}
				}
			}
		}
	}
	return fields, inlined
}

// fieldOf is the i-th field of w's struct as encoding/json reads it: a
// field it encodes, or an embedded struct whose fields it inlines
// (embedded), or neither, ok false, for a field it skips.
func fieldOf(w fieldWalk, i int) (f jsonField, embedded *fieldWalk, ok bool) {
	sf := w.typ.Field(i)
	if sf.Anonymous {
		et := sf.Type
		if et.Kind() == reflect.Pointer {
			et = et.Elem()
		}
		if !sf.IsExported() && et.Kind() != reflect.Struct {
			return f, nil, false
		}
	} else if !sf.IsExported() {
		return f, nil, false
	}
	tag := sf.Tag.Get("json")
	if tag == "-" {
		return f, nil, false
	}
	name, opts, _ := strings.Cut(tag, ",")
	if !validTagName(name) {
		name = ""
	}
	index := append(slices.Clip(w.index), i)
	ft := sf.Type
	isPtr := false
	if ft.Name() == "" && ft.Kind() == reflect.Pointer {
		ft = ft.Elem()
		isPtr = true
	}
	if name == "" && sf.Anonymous && ft.Kind() == reflect.Struct {
		return f, &fieldWalk{typ: ft, index: index, viaPointer: w.viaPointer || isPtr}, true
	}
	f = jsonField{
		name:       name,
		tagged:     name != "",
		index:      index,
		typ:        sf.Type,
		viaPointer: w.viaPointer,
	}
	if f.name == "" {
		f.name = sf.Name
	}
	f.setOptions(opts, ft)
	return f, nil, true
}

// setOptions sets f's options from opts, its json tag's after the name:
// omitempty, omitzero, and string, which quotes a scalar; ft is f's type,
// less a pointer.
func (f *jsonField) setOptions(opts string, ft reflect.Type) {
	for opt := range strings.SplitSeq(opts, ",") {
		switch opt {
		case "omitempty":
			f.omit = true
		case "omitzero":
			f.omit, f.omitzero = true, true
		case "string":
			// A type that encodes itself ignores ",string".
			if encodesItself(ft) {
				break
			}
			switch ft.Kind() {
			case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
				reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
				reflect.Float32, reflect.Float64, reflect.String:
				f.quoted = true
			}
		}
	}
}

// dominantFields are the fields of fields that encoding/json encodes, in
// index order: of each name, the dominant one (dominantField), if any.
func dominantFields(fields []jsonField) []jsonField {
	slices.SortFunc(fields, func(a, b jsonField) int {
		return cmp.Or(
			strings.Compare(a.name, b.name),
			cmp.Compare(len(a.index), len(b.index)),
			boolCompare(b.tagged, a.tagged),
			slices.Compare(a.index, b.index),
		)
	})
	out := fields[:0]
	for advance, i := 0, 0; i < len(fields); i += advance {
		fi := fields[i]
		for advance = 1; i+advance < len(fields); advance++ {
			if fields[i+advance].name != fi.name {
				break
			}
		}
		if advance == 1 {
			out = append(out, fi)
			continue
		}
		if dominant, ok := dominantField(fields[i : i+advance]); ok {
			out = append(out, dominant)
		}
	}
	slices.SortFunc(out, func(a, b jsonField) int { return slices.Compare(a.index, b.index) })
	return out
}

// encodesItself reports whether t, or *t, implements json.Marshaler or
// encoding.TextMarshaler, whose encoding encoding/json uses as it is.
func encodesItself(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t.Implements(marshalerType) || p.Implements(marshalerType) ||
		t.Implements(textMarshalerType) || p.Implements(textMarshalerType)
}

// dominantField is encoding/json's: the shallowest field of a name, unless
// two are as shallow, which hides them all.
func dominantField(fields []jsonField) (jsonField, bool) {
	if len(fields) > 1 && len(fields[0].index) == len(fields[1].index) && fields[0].tagged == fields[1].tagged {
		return jsonField{}, false
	}
	return fields[0], true
}

func boolCompare(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// validTagName is encoding/json's isValidTag.
func validTagName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}

// goFieldName is the Go selector of the field at index in t, such as
// MemcachedSpec.Image.
func goFieldName(t reflect.Type, index []int) string {
	var sb strings.Builder
	sb.WriteString(t.Name())
	for _, x := range index {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || x >= t.NumField() {
			break
		}
		f := t.Field(x)
		sb.WriteString(".")
		sb.WriteString(f.Name)
		t = f.Type
	}
	return sb.String()
}
