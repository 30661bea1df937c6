//go:build controlplane

package kube_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// testRootRulesOnServer: a CEL rule on the whole object reads its name,
// and the API server refuses an object whose name breaks it.
func testRootRulesOnServer(t *testing.T, a apiServer) {
	crd, err := nameLimited.CRD()
	require.NoError(t, err)
	a.install(t, crd)
	apiVersion := nameLimited.Group + "/" + nameLimited.Version

	_, err = a.create(t, nameLimited.GVR(), object("NameLimited", apiVersion, strings.Repeat("a", 53), map[string]any{"schedule": "@daily"}))
	require.ErrorContains(t, err, "the name must be no more than 52 characters")
	t.Log(err)
	_, err = a.create(t, nameLimited.GVR(), object("NameLimited", apiVersion, strings.Repeat("a", 52), map[string]any{"schedule": "@daily"}))
	require.NoError(t, err)

	got, err := a.ext.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), crd.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "default/webhook-cert", got.Annotations["cert-manager.io/inject-ca-from"])
	require.Equal(t, "examples", got.Labels["app.kubernetes.io/part-of"])
}

// testConditionsOnServer: a metav1.Condition in a status has the
// validations its Go source gives it, as controller-gen's CRD has, so the
// API server refuses a status of Maybe, an empty reason and a type that
// isn't a qualified name, and takes a good condition.
func testConditionsOnServer(t *testing.T, a apiServer) {
	crd, err := conditioned.CRD()
	require.NoError(t, err)
	a.install(t, crd)
	apiVersion := conditioned.Group + "/" + conditioned.Version
	res := a.dyn.Resource(conditioned.GVR()).Namespace("default")
	_, err = a.create(t, conditioned.GVR(), object("Conditioned", apiVersion, "c", map[string]any{}))
	require.NoError(t, err)

	status := func(cond map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": apiVersion, "kind": "Conditioned", "metadata": map[string]any{"name": "c"},
			"status": map[string]any{"conditions": []any{cond}},
		}}
	}
	_, err = res.ApplyStatus(t.Context(), "c", status(map[string]any{
		"type": "bad type!", "status": "Maybe", "reason": "", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": -1,
	}), metav1.ApplyOptions{FieldManager: "test"})
	require.Error(t, err)
	for _, want := range []string{
		`status.conditions[0].status: Unsupported value: "Maybe": supported values: "True", "False", "Unknown"`,
		`status.conditions[0].reason: Invalid value: "": conditions[0].reason in body should be at least 1 chars long`,
		`status.conditions[0].type: Invalid value: "bad type!": conditions[0].type in body should match`,
		`status.conditions[0].observedGeneration: Invalid value: -1: conditions[0].observedGeneration in body should be greater than or equal to 0`,
	} {
		require.ErrorContains(t, err, want)
	}
	t.Log(err)

	_, err = res.ApplyStatus(t.Context(), "c", status(map[string]any{
		"type": "example.com/Ready", "status": "True", "reason": "AllGood", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1,
	}), metav1.ApplyOptions{FieldManager: "test"})
	require.NoError(t, err)
}

// testItemsColumnOnServer: the API server's table of a resource, which
// kubectl get shows, has a column of a list's items (the first item's
// value: the API server takes a JSONPath's first result), an int-or-string
// count typed integer, and a column of priority 1, which kubectl shows
// only with -o wide.
func testItemsColumnOnServer(t *testing.T, a apiServer) {
	crd, err := withActive.CRD()
	require.NoError(t, err)
	a.install(t, crd)
	apiVersion := withActive.Group + "/" + withActive.Version
	_, err = a.create(t, withActive.GVR(), object("WithActive", apiVersion, "w", map[string]any{}))
	require.NoError(t, err)
	status := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion, "kind": "WithActive", "metadata": map[string]any{"name": "w"},
		"status": map[string]any{"count": 3, "active": []any{map[string]any{"name": "a"}, map[string]any{"name": "b"}}},
	}}
	_, err = a.dyn.Resource(withActive.GVR()).Namespace("default").ApplyStatus(t.Context(), "w", status, metav1.ApplyOptions{FieldManager: "test"})
	require.NoError(t, err)

	var table metav1.Table
	err = a.ext.ApiextensionsV1().RESTClient().Get().
		AbsPath("/apis", withActive.Group, withActive.Version, "namespaces", "default", withActive.Plural).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").
		Do(t.Context()).Into(&table)
	require.NoError(t, err)
	var names []string
	var priorities []int32
	for _, c := range table.ColumnDefinitions {
		names = append(names, c.Name)
		priorities = append(priorities, c.Priority)
	}
	require.Equal(t, []string{"Name", "Active", "Count", "Kinds"}, names)
	require.Equal(t, []int32{0, 0, 0, 1}, priorities)
	require.Equal(t, "integer", table.ColumnDefinitions[2].Type)
	require.Len(t, table.Rows, 1)
	require.Equal(t, []any{"w", "a", int64(3)}, table.Rows[0].Cells[:3])
}

// testSelectableFieldsOnServer: a field selector names a selectable field,
// and the API server refuses one that names another.
func testSelectableFieldsOnServer(t *testing.T, a apiServer) {
	crd, err := colored.CRD()
	require.NoError(t, err)
	a.install(t, crd)
	apiVersion := colored.Group + "/" + colored.Version
	for name, color := range map[string]string{"a": "blue", "b": "red", "c": "blue"} {
		_, err := a.create(t, colored.GVR(), object("Colored", apiVersion, name, map[string]any{"color": color, "size": len(name)}))
		require.NoError(t, err)
	}
	res := a.dyn.Resource(colored.GVR()).Namespace("default")
	list, err := res.List(t.Context(), metav1.ListOptions{FieldSelector: "spec.color=blue"})
	require.NoError(t, err)
	var names []string
	for _, o := range list.Items {
		names = append(names, o.GetName())
	}
	require.ElementsMatch(t, []string{"a", "c"}, names)
	_, err = res.List(t.Context(), metav1.ListOptions{FieldSelector: "spec.other=blue"})
	require.Error(t, err, "a field that isn't selectable")
	t.Log(err)
}

// testEmbeddedObjectMetaOnServer: with EmbeddedObjectMeta, a CEL rule on a
// template's metadata compiles, and the API server refuses a template for
// another namespace.
func testEmbeddedObjectMetaOnServer(t *testing.T, a apiServer) {
	r := namespacedTemplates(true)
	crd, err := r.CRD()
	require.NoError(t, err)
	a.install(t, crd)
	apiVersion := r.Group + "/" + r.Version
	template := func(ns string) map[string]any {
		return map[string]any{"template": map[string]any{
			"metadata": map[string]any{"namespace": ns, "labels": map[string]any{"app": "web"}},
			"spec":     map[string]any{"containers": []any{map[string]any{"name": "web", "image": "web:1"}}},
		}}
	}
	_, err = a.create(t, r.GVR(), object("Namespaced", apiVersion, "other", template("other")))
	require.ErrorContains(t, err, "the template's namespace must be jobs")
	t.Log(err)
	got, err := a.create(t, r.GVR(), object("Namespaced", apiVersion, "jobs", template("jobs")))
	require.NoError(t, err)
	labels, _, _ := unstructured.NestedStringMap(got.Object, "spec", "template", "metadata", "labels")
	require.Equal(t, map[string]string{"app": "web"}, labels)
}

// testNamedListTypeOnServer: a named slice type's ValueRules make every
// field of it a set of hostnames, and the API server refuses a duplicate
// and a bad hostname in each.
func testNamedListTypeOnServer(t *testing.T, a apiServer) {
	crd, err := hosted.CRD()
	require.NoError(t, err)
	a.install(t, crd)
	apiVersion := hosted.Group + "/" + hosted.Version
	_, err = a.create(t, hosted.GVR(), object("Hosted", apiVersion, "bad", map[string]any{
		"primary": []any{"a.example.com", "a.example.com"},
		"backup":  []any{"not a host!"},
	}))
	require.ErrorContains(t, err, `spec.primary[1]: Duplicate value: "a.example.com"`)
	require.ErrorContains(t, err, `spec.backup[0]: Invalid value: "not a host!": spec.backup[0] in body must be of type hostname`)
	t.Log(err)
	_, err = a.create(t, hosted.GVR(), object("Hosted", apiVersion, "good", map[string]any{
		"primary": []any{"a.example.com", "b.example.com"},
	}))
	require.NoError(t, err)
}
