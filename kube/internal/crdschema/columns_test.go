package crdschema

import (
	"reflect"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type columnsObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Status struct {
		Finished *metav1.Time      `json:"finished,omitempty"`
		Started  metav1.Time       `json:"started"`
		Micro    *metav1.MicroTime `json:"micro,omitempty"`
		Count    *int32            `json:"count,omitempty"`
	} `json:"status"`
}

func columnOf[T any](name string, p *T) *ColumnRule {
	return &ColumnRule{Name: name, Ptr: unsafe.Pointer(p), Type: reflect.TypeFor[T]()}
}

// TestAPrinterColumnOfATimeOrAPointerToOneIsADate: kubectl get shows a
// date column as an age, so a *metav1.Time, such as the object's own
// DeletionTimestamp, is a date as a metav1.Time is, not a string.
func TestAPrinterColumnOfATimeOrAPointerToOneIsADate(t *testing.T) {
	var obj columnsObject
	cols := ResolveColumns(reflect.TypeFor[columnsObject](), reflect.ValueOf(&obj), []*ColumnRule{
		columnOf("Deleted", &obj.DeletionTimestamp),
		columnOf("Finished", &obj.Status.Finished),
		columnOf("Started", &obj.Status.Started),
		columnOf("Micro", &obj.Status.Micro),
		columnOf("Count", &obj.Status.Count),
	})
	got := map[string][2]string{}
	for _, c := range cols {
		require.NoError(t, c.Err)
		got[c.Def.Name] = [2]string{c.Def.JSONPath, c.Def.Type}
	}
	require.Equal(t, map[string][2]string{
		"Deleted":  {".metadata.deletionTimestamp", "date"},
		"Finished": {".status.finished", "date"},
		"Started":  {".status.started", "date"},
		"Micro":    {".status.micro", "date"},
		"Count":    {".status.count", "integer"},
	}, got)
}
