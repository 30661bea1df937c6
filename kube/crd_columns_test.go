package kube_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/z5labs/humus/kube"
)

type cronStatus struct {
	Active []corev1.ObjectReference `json:"active,omitempty"`
	Count  intstr.IntOrString       `json:"count,omitzero"`
}

var (
	cronObject kube.Object[rootSpec, cronStatus]
	activeRef  corev1.ObjectReference
)

func cronResource(cols ...kube.ColumnRule) kube.Resource[rootSpec, cronStatus] {
	return kube.Resource[rootSpec, cronStatus]{
		Group: "batch.example.com", Version: "v1", Kind: "CronJob", Plural: "cronjobs", Scope: kube.Namespaced,
		Columns: kube.Columns(&cronObject, cols...),
	}
}

// TestAColumnOfAListsItemsAndAnExplicitType: ItemsColumn reaches into a
// list (.status.active[*].name), and Type sets a column's type where its
// field's Go type doesn't say; Priority and Format are kept.
func TestAColumnOfAListsItemsAndAnExplicitType(t *testing.T) {
	crd, err := cronResource(
		kube.ItemsColumn("Active", &cronObject.Status.Active, &activeRef, &activeRef.Name).Priority(1),
		kube.PrinterColumn("Count", &cronObject.Status.Count).Type("integer"),
		kube.PrinterColumn("Schedule", &cronObject.Spec.Schedule).Format(kube.FormatPassword),
	).CRD()
	require.NoError(t, err)
	cols := crd.Spec.Versions[0].AdditionalPrinterColumns
	require.Len(t, cols, 3)
	require.Equal(t, ".status.active[*].name", cols[0].JSONPath)
	require.Equal(t, "string", cols[0].Type)
	require.Equal(t, int32(1), cols[0].Priority)
	require.Equal(t, ".status.count", cols[1].JSONPath)
	require.Equal(t, "integer", cols[1].Type)
	require.Equal(t, "password", cols[2].Format)
}

// TestColumnErrorsOfItemsAndTypes: a Type the API server doesn't take, and
// an item field that isn't in the item given, are errors from CRD.
func TestColumnErrorsOfItemsAndTypes(t *testing.T) {
	var other corev1.ObjectReference
	_, err := cronResource(
		kube.PrinterColumn("Count", &cronObject.Status.Count).Type("int"),
		kube.ItemsColumn("Active", &cronObject.Status.Active, &activeRef, &other.Name),
		kube.ItemsColumn("Nil", &cronObject.Status.Active, nil, &activeRef.Name),
	).CRD()
	require.ErrorContains(t, err, `Columns[0] "Count": has Type "int": use one of integer, number, string, boolean, date`)
	require.ErrorContains(t, err, `Columns[1] "Active": its field (a string) isn't in the item given to ItemsColumn`)
	require.ErrorContains(t, err, `Columns[2] "Nil": its item is a nil pointer`)
}
