package kube

import (
	"reflect"
	"unsafe"

	"github.com/z5labs/humus/kube/internal/crdschema"
)

// Column is a column that kubectl get shows for each object, as a CRD's
// additionalPrinterColumns holds it. Columns makes them.
type Column struct {
	c crdschema.Column
}

// ColumnOf is one printer column of a field of type T: its name, the field,
// and its options. PrinterColumn makes one, and each method returns a copy
// with one more option.
type ColumnOf[T any] struct {
	r crdschema.ColumnRule
}

// ColumnRule is a ColumnOf of any type.
type ColumnRule interface {
	column() crdschema.ColumnRule
}

// PrinterColumn is a column named name (controller-gen's
// +kubebuilder:printcolumn), such as "Size", that shows the field p points
// to, a field of the object given to Columns, such as &obj.Spec.Size or
// &obj.CreationTimestamp. Its JSONPath is the field's path in the object's
// JSON, such as .spec.size, and its type follows the field's Go type:
// integer, number, boolean, date for a metav1.Time or MicroTime or a
// pointer to one, and string for anything else.
func PrinterColumn[T any](name string, p *T) ColumnOf[T] {
	return ColumnOf[T]{crdschema.ColumnRule{Name: name, Ptr: unsafe.Pointer(p), Type: reflect.TypeFor[T]()}}
}

// ItemsColumn is a column named name that shows, for the list field list
// points to, a field of the object given to Columns, the field p points
// to in each item (a JSONPath into a list, such as
// .status.active[*].name, which controller-gen's printcolumn takes). The
// API server's table, which kubectl get shows, takes the first of a
// JSONPath's results: the first item's value. item is a value
// of the list's item type that only names its fields, usually a
// package-level variable that is never written, and p points to a field
// of it: kube.ItemsColumn("Active", &obj.Status.Active, &ref, &ref.Name).
// Its type follows the field's Go type, as PrinterColumn's does.
func ItemsColumn[E, T any](name string, list *[]E, item *E, p *T) ColumnOf[T] {
	return ColumnOf[T]{crdschema.ColumnRule{
		Name: name, Ptr: unsafe.Pointer(p), Type: reflect.TypeFor[T](),
		List: unsafe.Pointer(list), ListType: reflect.TypeFor[[]E](), Item: unsafe.Pointer(item),
	}}
}

func (c ColumnOf[T]) column() crdschema.ColumnRule {
	return c.r
}

// Condition shows, for a field that is a list of conditions (such as
// []metav1.Condition), the status of the condition of type conditionType,
// such as True for .status.conditions[?(@.type=="Available")].status.
func (c ColumnOf[T]) Condition(conditionType string) ColumnOf[T] {
	c.r.Condition = &conditionType
	return c
}

// Priority is 0, the default, for a column kubectl get always shows, and
// more for one it shows only with -o wide.
func (c ColumnOf[T]) Priority(p int32) ColumnOf[T] {
	c.r.Priority = p
	return c
}

// Format is the column's format, such as kube.FormatDateTime, which kubectl
// may use to print it.
func (c ColumnOf[T]) Format(f Format) ColumnOf[T] {
	c.r.Format = string(f)
	return c
}

// Type is the column's type, in place of the one its field's Go type
// gives, for a field whose Go type doesn't say, such as an
// intstr.IntOrString that holds a count: one of integer, number, string,
// boolean and date, the API server's; any other is an error from CRD. The
// API server shows a value that isn't of the type as <none>.
func (c ColumnOf[T]) Type(t string) ColumnOf[T] {
	c.r.ColumnType = t
	return c
}

// Description describes the column.
func (c ColumnOf[T]) Description(s string) ColumnOf[T] {
	c.r.Description = s
	return c
}

// Columns are the printer columns of v's fields, for Resource.Columns. v is
// usually a package-level kube.Object[Spec, Status] that is never written,
// which only names the fields. A column of a field that isn't in v, or that
// is reached through a pointer, a list or a map (ItemsColumn reaches into a
// list), is an error that CRD returns, as is a v of any type but the
// Resource's Object. Columns never fails itself.
func Columns[T any](v *T, cols ...ColumnRule) []Column {
	crs := make([]*crdschema.ColumnRule, len(cols))
	for i, c := range cols {
		if c != nil {
			cr := c.column()
			crs[i] = &cr
		}
	}
	resolved := crdschema.ResolveColumns(reflect.TypeFor[T](), reflect.ValueOf(v), crs)
	out := make([]Column, len(resolved))
	for i, c := range resolved {
		out[i] = Column{c}
	}
	return out
}

// SelectableField is a field of a resource's objects that a field selector
// may name, as a CRD's selectableFields holds it. SelectableFields makes
// them.
type SelectableField struct {
	s crdschema.Selectable
}

// SelectableFields are the selectable fields of v's fields, for
// Resource.SelectableFields: each of fields is a bare kube.Field of a field
// of *v, such as kube.Field(&obj.Spec.Color), with no constraints, which
// belong in Rules. v is usually a package-level kube.Object[Spec, Status]
// that is never written, which only names the fields. A field that isn't
// in v, is reached through a pointer, a list or a map, is in metadata, is
// given twice, or isn't a string, an integer or a boolean, more than 8 of
// them, and a v of any type but the Resource's Object are errors that CRD
// returns. SelectableFields never fails itself.
func SelectableFields[T any](v *T, fields ...FieldRule) []SelectableField {
	frs := make([]*crdschema.Field, len(fields))
	for i, f := range fields {
		if f != nil {
			fr := f.fieldRule()
			frs[i] = &fr
		}
	}
	resolved := crdschema.ResolveSelectable(reflect.TypeFor[T](), reflect.ValueOf(v), frs)
	out := make([]SelectableField, len(resolved))
	for i, s := range resolved {
		out[i] = SelectableField{s}
	}
	return out
}
