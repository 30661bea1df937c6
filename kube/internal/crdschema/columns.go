package crdschema

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"unsafe"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// ColumnRule is what a kube.ColumnOf holds: a printer column's name, the
// field it shows, named by a pointer, and its options.
type ColumnRule struct {
	Name        string
	Ptr         unsafe.Pointer
	Type        reflect.Type
	Condition   *string
	Priority    int32
	Format      string
	Description string

	// ColumnType is a type given explicitly, in place of the field's.
	ColumnType string

	// List, of type ListType, is the list field whose items' field Ptr
	// names, as a field of Item, a value of the list's item type; nil for
	// a column of a field of the object.
	List     unsafe.Pointer
	ListType reflect.Type
	Item     unsafe.Pointer
}

// Column is one of kube.Columns' columns: the type of the object its
// field was found in, and its definition, or the error that replaces it.
type Column struct {
	Obj reflect.Type
	Def apiextensionsv1.CustomResourceColumnDefinition
	Err error
}

// ResolveColumns are the columns of cols, fields of *v, a value of type t:
// v is reflect.ValueOf of the pointer given to kube.Columns, nil or not,
// and a nil item of cols is a nil kube.ColumnRule.
func ResolveColumns(t reflect.Type, v reflect.Value, cols []*ColumnRule) []Column {
	out := make([]Column, 0, len(cols))
	for i, cr := range cols {
		col := Column{Obj: t}
		if cr == nil {
			col.Err = fmt.Errorf("kube: Columns[%d] is nil", i)
			out = append(out, col)
			continue
		}
		col.Def = apiextensionsv1.CustomResourceColumnDefinition{
			Name: cr.Name, Priority: cr.Priority, Format: cr.Format, Description: cr.Description,
		}
		col.Err = cr.resolve(t, v, &col.Def)
		if col.Err != nil {
			col.Err = fmt.Errorf("kube: Columns[%d] %q: %w", i, cr.Name, col.Err)
		}
		out = append(out, col)
	}
	return out
}

// resolve sets col's JSONPath and Type from the field c names in *v, of
// type t.
func (c ColumnRule) resolve(t reflect.Type, v reflect.Value, col *apiextensionsv1.CustomResourceColumnDefinition) error {
	if c.Name == "" {
		return fmt.Errorf("has no name")
	}
	if c.Priority < 0 {
		return fmt.Errorf("has priority %d: it must be 0 or more", c.Priority)
	}
	rv := v
	if rv.IsNil() {
		return fmt.Errorf("v is nil, so it names no fields")
	}
	if c.Ptr == nil {
		return fmt.Errorf("is a column of a nil pointer, which names no field")
	}
	path, err := c.path(t, rv.Pointer())
	if err != nil {
		return err
	}
	col.JSONPath = path
	ft := c.Type
	if c.Condition == nil {
		// A pointer's column is its element's: a *metav1.Time is a date.
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
	}
	switch {
	case c.Condition != nil:
		if (ft.Kind() != reflect.Slice && ft.Kind() != reflect.Array) || !conditionShaped(ft.Elem()) {
			return fmt.Errorf("Condition fits a list of conditions, such as []metav1.Condition, not a %s", ft)
		}
		col.JSONPath = fmt.Sprintf("%s[?(@.type==%q)].status", path, *c.Condition)
		col.Type = "string"
	case ft == timeType || ft == microTimeType:
		col.Type = "date"
	default:
		switch ft.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			col.Type = "integer"
		case reflect.Float32, reflect.Float64:
			col.Type = "number"
		case reflect.Bool:
			col.Type = "boolean"
		default:
			col.Type = "string"
		}
		if encodesItself(ft) && ft != timeType && ft != microTimeType {
			col.Type = "string"
		}
	}
	if c.ColumnType != "" {
		if !slices.Contains(columnTypes, c.ColumnType) {
			return fmt.Errorf("has Type %q: use one of %s, the types the API server takes", c.ColumnType, strings.Join(columnTypes, ", "))
		}
		col.Type = c.ColumnType
	}
	return nil
}

// columnTypes are the types of a printer column the API server takes
// (apiextensions' validation, printerColumnDatatypes).
var columnTypes = []string{"integer", "number", "string", "boolean", "date"}

// path is the JSONPath of the column's field in the object of type t at
// address base: the field's, or for a column of a list's items, the
// list's, then [*], then the field's in an item.
func (c ColumnRule) path(t reflect.Type, base uintptr) (string, error) {
	at := func(what string, t reflect.Type, base, p uintptr, ft reflect.Type) (string, error) {
		if p < base || p-base >= t.Size() {
			return "", fmt.Errorf("its %s (a %s) isn't in the value given to Columns: name a field of it, not one reached through a pointer, a list or a map", what, ft)
		}
		path, ok := jsonPathAt(t, p-base, ft)
		if !ok {
			return "", fmt.Errorf("its %s (a %s) isn't one encoding/json encodes in %s", what, ft, t)
		}
		return path, nil
	}
	if c.List == nil {
		return at("field", t, base, uintptr(c.Ptr), c.Type)
	}
	list, err := at("list", t, base, uintptr(c.List), c.ListType)
	if err != nil {
		return "", err
	}
	item := c.ListType.Elem()
	if c.Item == nil {
		return "", fmt.Errorf("its item is a nil pointer, which names no field")
	}
	p, ib := uintptr(c.Ptr), uintptr(c.Item)
	if p < ib || p-ib >= item.Size() {
		return "", fmt.Errorf("its field (a %s) isn't in the item given to ItemsColumn: name a field of it, not one reached through a pointer, a list or a map", c.Type)
	}
	sub, ok := jsonPathAt(item, p-ib, c.Type)
	if !ok {
		return "", fmt.Errorf("its field (a %s) isn't one encoding/json encodes in %s", c.Type, item)
	}
	return list + "[*]" + sub, nil
}

// jsonPathAt is the JSONPath, such as .spec.size, of the field of type ft
// at offset off in struct type t, found among the fields encoding/json
// encodes and the structs they hold by value.
func jsonPathAt(t reflect.Type, off uintptr, ft reflect.Type) (string, bool) {
	if t.Kind() != reflect.Struct {
		return "", false
	}
	fields, _ := jsonFields(t)
	for _, f := range fields {
		foff, ok := offsetOf(t, f.index)
		if !ok || off < foff || off >= foff+max(f.typ.Size(), 1) {
			continue
		}
		if foff == off && f.typ == ft {
			return "." + f.name, true
		}
		if sub, ok := jsonPathAt(f.typ, off-foff, ft); ok {
			return "." + f.name + sub, true
		}
	}
	return "", false
}

// offsetOf is the offset in t of the field at index, unless it is reached
// through an embedded pointer.
func offsetOf(t reflect.Type, index []int) (uintptr, bool) {
	var off uintptr
	for _, x := range index {
		if t.Kind() != reflect.Struct {
			return 0, false
		}
		f := t.Field(x)
		off += f.Offset
		t = f.Type
	}
	return off, true
}
