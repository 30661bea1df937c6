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
	type walk struct {
		typ        reflect.Type
		index      []int
		viaPointer bool
	}
	var (
		current []walk
		next    = []walk{{typ: t}}

		count, nextCount = map[reflect.Type]int{}, map[reflect.Type]int{}
		visited          = map[reflect.Type]bool{}

		fields  []jsonField
		inlined []reflect.Type
	)
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
				sf := w.typ.Field(i)
				if sf.Anonymous {
					et := sf.Type
					if et.Kind() == reflect.Pointer {
						et = et.Elem()
					}
					if !sf.IsExported() && et.Kind() != reflect.Struct {
						continue
					}
				} else if !sf.IsExported() {
					continue
				}
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
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
				if name != "" || !sf.Anonymous || ft.Kind() != reflect.Struct {
					f := jsonField{
						name:       name,
						tagged:     name != "",
						index:      index,
						typ:        sf.Type,
						viaPointer: w.viaPointer,
					}
					if f.name == "" {
						f.name = sf.Name
					}
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
					fields = append(fields, f)
					if count[w.typ] > 1 {
						// A second copy, so the tie below hides it.
						fields = append(fields, fields[len(fields)-1])
					}
					continue
				}
				nextCount[ft]++
				if nextCount[ft] == 1 {
					next = append(next, walk{typ: ft, index: index, viaPointer: w.viaPointer || isPtr})
				}
			}
		}
	}

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
	return out, inlined
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
