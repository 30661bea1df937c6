package kube_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus/kube"
)

type columnsSpec struct {
	Size     int32              `json:"size"`
	Ratio    *float64           `json:"ratio,omitempty"`
	On       bool               `json:"on"`
	Window   Window             `json:"window"`
	Memory   resource.Quantity  `json:"memory"`
	Hidden   string             `json:"-"`
	Children []Window           `json:"children"`
	Conds    []MyCondition      `json:"conds"`
	Std      []metav1.Condition `json:"std"`
}

type columnsObject = kube.Object[columnsSpec, MemcachedStatus]

var colObj columnsObject

// MemcachedWithColumns is Memcached with a short name, a category, a
// singular name and printer columns.
func memcachedWithColumns() kube.Resource[MemcachedSpec, MemcachedStatus] {
	var obj kube.Object[MemcachedSpec, MemcachedStatus]
	r := Memcached
	r.Singular = "memcache"
	r.ShortNames = []string{"mc"}
	r.Categories = []string{"all", "caches"}
	r.Columns = kube.Columns(&obj,
		kube.PrinterColumn("Ready", &obj.Status.Conditions).Condition("Available"),
		kube.PrinterColumn("Size", &obj.Spec.Size).Description("how many pods"),
		kube.PrinterColumn("Image", &obj.Spec.Image).Priority(1),
		kube.PrinterColumn("Age", &obj.CreationTimestamp),
	)
	return r
}

func TestPrinterColumnsNamesAndCategories(t *testing.T) {
	crd, err := memcachedWithColumns().CRD()
	require.NoError(t, err)
	requireServerValid(t, crd)
	require.Equal(t, apiextensionsv1.CustomResourceDefinitionNames{
		Plural: "memcacheds", Singular: "memcache", ShortNames: []string{"mc"}, Kind: "Memcached",
		ListKind: "MemcachedList", Categories: []string{"all", "caches"},
	}, crd.Spec.Names)
	require.Equal(t, []apiextensionsv1.CustomResourceColumnDefinition{
		{Name: "Ready", Type: "string", JSONPath: `.status.conditions[?(@.type=="Available")].status`},
		{Name: "Size", Type: "integer", JSONPath: ".spec.size", Description: "how many pods"},
		{Name: "Image", Type: "string", JSONPath: ".spec.image", Priority: 1},
		{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
	}, crd.Spec.Versions[0].AdditionalPrinterColumns)
}

func TestPrinterColumnTypesFollowTheField(t *testing.T) {
	r := kube.Resource[columnsSpec, MemcachedStatus]{
		Group: "test.humus.z5labs.dev", Version: "v1", Kind: "Col", Plural: "cols", Scope: kube.Namespaced,
		Columns: kube.Columns(&colObj,
			kube.PrinterColumn("Ratio", &colObj.Spec.Ratio).Format(kube.Format("double")),
			kube.PrinterColumn("On", &colObj.Spec.On),
			kube.PrinterColumn("Max", &colObj.Spec.Window.Max),
			kube.PrinterColumn("Memory", &colObj.Spec.Memory),
			kube.PrinterColumn("Mine", &colObj.Spec.Conds).Condition("Ready"),
			kube.PrinterColumn("Ready", &colObj.Status.ReadyReplicas),
			kube.PrinterColumn("Name", &colObj.Name),
		),
	}
	crd, err := r.CRD()
	require.NoError(t, err)
	requireServerValid(t, crd)
	require.Equal(t, []apiextensionsv1.CustomResourceColumnDefinition{
		{Name: "Ratio", Type: "number", Format: "double", JSONPath: ".spec.ratio"},
		{Name: "On", Type: "boolean", JSONPath: ".spec.on"},
		{Name: "Max", Type: "integer", JSONPath: ".spec.window.max"},
		{Name: "Memory", Type: "string", JSONPath: ".spec.memory"},
		{Name: "Mine", Type: "string", JSONPath: `.spec.conds[?(@.type=="Ready")].status`},
		{Name: "Ready", Type: "integer", JSONPath: ".status.readyReplicas"},
		{Name: "Name", Type: "string", JSONPath: ".metadata.name"},
	}, crd.Spec.Versions[0].AdditionalPrinterColumns)
}

func TestPrinterColumnErrors(t *testing.T) {
	var other kube.Object[MemcachedSpec, MemcachedStatus]
	var loose columnsSpec
	items := []Window{{}} // as a list's items are, outside the object
	r := kube.Resource[columnsSpec, MemcachedStatus]{
		Group: "test.humus.z5labs.dev", Version: "v1", Kind: "Col", Plural: "cols", Scope: kube.Namespaced,
		Singular: "Col", ShortNames: []string{"c_1"}, Categories: []string{"All"},
		Columns: append(kube.Columns(&colObj,
			kube.PrinterColumn("", &colObj.Spec.Size),
			kube.PrinterColumn("Neg", &colObj.Spec.Size).Priority(-1),
			kube.PrinterColumn("Hidden", &colObj.Spec.Hidden),
			kube.PrinterColumn("Elsewhere", &loose.Size),
			kube.PrinterColumn("Item", &items[0].Min),
			kube.PrinterColumn("NotConds", &colObj.Spec.Children).Condition("Ready"),
			kube.PrinterColumn[int32]("Nil", nil),
			nil,
			kube.PrinterColumn("Size", &colObj.Spec.Size),
			kube.PrinterColumn("Size", &colObj.Spec.On),
		), append(kube.Columns(&other, kube.PrinterColumn("Other", &other.Spec.Size)), kube.Column{})...),
	}
	_, err := r.CRD()
	requireErrorsContain(t, err,
		`kube: Resource.Singular "Col"`,
		`kube: Resource.ShortNames[0] "c_1"`,
		`kube: Resource.Categories[0] "All"`,
		`kube: Columns[0] "": has no name`,
		`kube: Columns[1] "Neg": has priority -1: it must be 0 or more`,
		`kube: Columns[2] "Hidden": its field (a string) isn't one encoding/json encodes`,
		`kube: Columns[3] "Elsewhere": its field (a int32) isn't in the value given to Columns`,
		`kube: Columns[4] "Item": its field (a int32) isn't in the value given to Columns`,
		`kube: Columns[5] "NotConds": Condition fits a list of conditions, such as []metav1.Condition, not a []kube_test.Window`,
		`kube: Columns[6] "Nil": is a column of a nil pointer`,
		`kube: Columns[7] is nil`,
		`two columns are named "Size"`,
		`kube: Resource.Columns[10] "Other" names a field of a kube.Object[github.com/z5labs/humus/kube/internal/controlplanetests/kube_test.MemcachedSpec,github.com/z5labs/humus/kube/internal/controlplanetests/kube_test.MemcachedStatus]`,
		`kube: Resource.Columns[11] is a zero Column: make the columns with kube.Columns`,
	)
}
