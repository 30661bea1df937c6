package kube

import (
	"fmt"
	"reflect"
	"unsafe"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Column is a column that kubectl get shows for each object, as a CRD's
// additionalPrinterColumns holds it. Columns makes them.
type Column struct {
	obj reflect.Type // the type given to Columns
	col apiextensionsv1.CustomResourceColumnDefinition
	err error
}

// ColumnOf is one printer column of a field of type T: its name, the field,
// and its options. PrinterColumn makes one, and each method returns a copy
// with one more option.
type ColumnOf[T any] struct {
	columnRule
}

// ColumnRule is a ColumnOf of any type.
type ColumnRule interface {
	column() columnRule
}

// columnRule is what a ColumnOf of any type holds.
type columnRule struct {
	name        string
	ptr         unsafe.Pointer
	typ         reflect.Type
	condition   *string
	priority    int32
	format      Format
	description string
}

// PrinterColumn is a column named name (controller-gen's
// +kubebuilder:printcolumn), such as "Size", that shows the field p points
// to, a field of the object given to Columns, such as &obj.Spec.Size or
// &obj.CreationTimestamp. Its JSONPath is the field's path in the object's
// JSON, such as .spec.size, and its type follows the field's Go type:
// integer, number, boolean, date for a metav1.Time or MicroTime, and string
// for anything else.
func PrinterColumn[T any](name string, p *T) ColumnOf[T] {
	return ColumnOf[T]{columnRule{name: name, ptr: unsafe.Pointer(p), typ: reflect.TypeFor[T]()}}
}

func (c ColumnOf[T]) column() columnRule {
	return c.columnRule
}

// Condition shows, for a field that is a list of conditions (such as
// []metav1.Condition), the status of the condition of type conditionType,
// such as True for .status.conditions[?(@.type=="Available")].status.
func (c ColumnOf[T]) Condition(conditionType string) ColumnOf[T] {
	c.condition = &conditionType
	return c
}

// Priority is 0, the default, for a column kubectl get always shows, and
// more for one it shows only with -o wide.
func (c ColumnOf[T]) Priority(p int32) ColumnOf[T] {
	c.priority = p
	return c
}

// Format is the column's format, such as kube.FormatDateTime, which kubectl
// may use to print it.
func (c ColumnOf[T]) Format(f Format) ColumnOf[T] {
	c.format = f
	return c
}

// Description describes the column.
func (c ColumnOf[T]) Description(s string) ColumnOf[T] {
	c.description = s
	return c
}

// Columns are the printer columns of v's fields, for Resource.Columns. v is
// usually a package-level kube.Object[Spec, Status] that is never written,
// which only names the fields. A column of a field that isn't in v, or that
// is reached through a pointer, a list or a map, is an error that CRD
// returns, as is a v of any type but the Resource's Object. Columns never
// fails itself.
func Columns[T any](v *T, cols ...ColumnRule) []Column {
	t := reflect.TypeFor[T]()
	out := make([]Column, 0, len(cols))
	for i, c := range cols {
		col := Column{obj: t}
		if c == nil {
			col.err = fmt.Errorf("kube: Columns[%d] is nil", i)
			out = append(out, col)
			continue
		}
		cr := c.column()
		col.col = apiextensionsv1.CustomResourceColumnDefinition{
			Name: cr.name, Priority: cr.priority, Format: string(cr.format), Description: cr.description,
		}
		col.err = cr.resolve(t, v, &col.col)
		if col.err != nil {
			col.err = fmt.Errorf("kube: Columns[%d] %q: %w", i, cr.name, col.err)
		}
		out = append(out, col)
	}
	return out
}

// resolve sets col's JSONPath and Type from the field c names in *v, of
// type t.
func (c columnRule) resolve(t reflect.Type, v any, col *apiextensionsv1.CustomResourceColumnDefinition) error {
	if c.name == "" {
		return fmt.Errorf("has no name")
	}
	if c.priority < 0 {
		return fmt.Errorf("has priority %d: it must be 0 or more", c.priority)
	}
	rv := reflect.ValueOf(v)
	if rv.IsNil() {
		return fmt.Errorf("v is nil, so it names no fields")
	}
	if c.ptr == nil {
		return fmt.Errorf("is a column of a nil pointer, which names no field")
	}
	base, p := rv.Pointer(), uintptr(c.ptr)
	if p < base || p-base >= t.Size() {
		return fmt.Errorf("its field (a %s) isn't in the value given to Columns: name a field of it, not one reached through a pointer, a list or a map", c.typ)
	}
	path, ok := jsonPathAt(t, p-base, c.typ)
	if !ok {
		return fmt.Errorf("its field (a %s) isn't one encoding/json encodes in %s", c.typ, t)
	}
	col.JSONPath = path
	switch ft := c.typ; {
	case c.condition != nil:
		if (ft.Kind() != reflect.Slice && ft.Kind() != reflect.Array) || !conditionShaped(ft.Elem()) {
			return fmt.Errorf("Condition fits a list of conditions, such as []metav1.Condition, not a %s", ft)
		}
		col.JSONPath = fmt.Sprintf("%s[?(@.type==%q)].status", path, *c.condition)
		col.Type = "string"
	case ft == timeType || ft == microTimeType:
		col.Type = "date"
	default:
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
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
	return nil
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
