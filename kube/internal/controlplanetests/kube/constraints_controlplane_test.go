//go:build controlplane

package kube_test

import (
	"maps"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/z5labs/humus/kube"
)

// testNullsOnServer shows both sides of nullable on the API server: a null
// is refused where the field's value is constrained or Required, and kept
// where it isn't, as a Go client's nil slice, map or pointer is written.
func testNullsOnServer(t *testing.T, a apiServer) {
	r := kube.Resource[nulls, struct{}]{
		Group: "test.humus.z5labs.dev", Version: "v1", Kind: "Null", Plural: "nulls", Scope: kube.Namespaced,
		Rules: nullRules(),
	}
	crd, err := r.CRD()
	require.NoError(t, err)
	a.install(t, crd)
	apiVersion := r.Group + "/" + r.Version

	_, err = a.create(t, r.GVR(), object("Null", apiVersion, "constrained", map[string]any{
		"pair": nil, "free": nil, "mode": nil, "labels": nil, "must": nil, "nullable": nil, "phases": nil,
	}))
	require.Error(t, err)
	for _, want := range []string{"spec.pair: Required value", "spec.mode: Required value", "spec.must: Required value"} {
		require.ErrorContains(t, err, want)
	}
	require.NotContains(t, err.Error(), "spec.free")
	t.Log(err)

	got, err := a.create(t, r.GVR(), object("Null", apiVersion, "unconstrained", map[string]any{
		"pair": []any{"a", "b"}, "free": nil, "mode": "slow", "labels": nil, "must": []any{}, "nullable": nil, "phases": nil,
	}))
	require.NoError(t, err, "nulls where nothing constrains the value")
	require.Equal(t, map[string]any{
		"pair": []any{"a", "b"}, "free": nil, "mode": "slow", "labels": nil, "must": []any{}, "nullable": nil, "phases": nil,
	}, got.Object["spec"])
}

// testConstraintsOnServer installs one CRD with every kind of constraint,
// and shows each rejecting a bad object with the API server's message.
func testConstraintsOnServer(t *testing.T, a apiServer) {
	crd, err := Constraints.CRD()
	require.NoError(t, err)
	a.install(t, crd)
	gvr := Constraints.GVR()
	apiVersion := Constraints.Group + "/" + Constraints.Version
	with := func(kv ...any) map[string]any {
		m := validConstraints()
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(m, kv[i].(string))
				continue
			}
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}

	got, err := a.create(t, gvr, object("Constrained", apiVersion, "valid", with(
		"extra", map[string]any{"any": map[string]any{"deep": []any{1, "x"}}},
		"blob", []any{1, 2},
		"any", "anything",
		"embedded", map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c"}},
		"byCode", map[string]any{"404": "not found"},
		"memory", "1Gi",
		"percent", "50%",
		"immutable", "a",
	)))
	require.NoError(t, err, "a valid object")
	spec := got.Object["spec"].(map[string]any)
	require.Equal(t, map[string]any{"any": map[string]any{"deep": []any{int64(1), "x"}}}, spec["extra"], "unknown fields are kept")
	require.NotContains(t, spec, "opt", "an Optional field without omitempty may be left out")

	for _, tc := range []struct {
		name string
		spec map[string]any
		want string
	}{
		{"ExclusiveMinimum", with("ratio", 0), "spec.ratio in body should be greater than 0"},
		{"ExclusiveMaximum", with("ratio", 1), "spec.ratio in body should be less than 1"},
		{"MultipleOf", with("step", 7), "spec.step in body should be a multiple of 5"},
		{"Format", with("id", "not-a-uuid"), "spec.id in body must be of type uuid"},
		{"MinProperties", with("labels", map[string]any{}), "spec.labels in body should have at least 1 properties"},
		{"MaxProperties", with("labels", map[string]any{"a": "1", "b": "2", "c": "3"}), "spec.labels: Too many: 3: must have at most 2 items"},
		{"EmbeddedResource", with("embedded", map[string]any{"metadata": map[string]any{"name": "c"}}), "spec.embedded.kind: Required value"},
		{"Required", with("req", nil), "spec.req: Required value"},
		{"a required field's null", with("req", nil, "labels", nil), "spec.labels: Required value"},
		{"item Format", with("hosts", []any{"-bad-"}), "spec.hosts[0] in body must be of type hostname"},
		{"item MaxLength", with("hosts", []any{"a-very-long-host-name-indeed"}), "spec.hosts[0]: Too long: may not be more than 20 bytes"},
		{"item Enum", with("tags", []any{"c"}), `spec.tags[0]: Unsupported value: "c": supported values: "a", "b"`},
		{"map value Maximum", with("ports", map[string]any{"http": 70000}), "spec.ports.http in body should be less than or equal to 65535"},
		{"a named type's Enum", with("phase", "Done"), `spec.phase: Unsupported value: "Done": supported values: "Pending", "Running"`},
		{"a named type's Enum in a list", with("phases", []any{"Done"}), `spec.phases[0]: Unsupported value: "Done"`},
		{"a named type's Minimum", with("port", 0), "spec.port in body should be greater than or equal to 1"},
		{"int-or-string Pattern", with("percent", "50"), "spec.percent in body should match '^[0-9]+%$'"},
		{"int-or-string MaxLength", with("percent", "1000%"), "spec.percent: Too long: may not be more than 4 bytes"},
		{"Quantity", with("memory", "lots"), "spec.memory in body should match '^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$'"},
		{"CEL messageExpression and reason", with("version", "1.0"), "spec.version: Forbidden: version 1.0 must start with v"},
		{"CEL fieldPath", with("window", map[string]any{"min": 3, "max": 2}), "spec.window.min: Invalid value: min exceeds max"},
		{"a condition's lastTransitionTime", with("conds", []any{map[string]any{"type": "Ready", "status": "True", "lastTransitionTime": nil}}), "spec.conds[0].lastTransitionTime: Required value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := a.create(t, gvr, object("Constrained", apiVersion, "bad", tc.spec))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			t.Log(err)
		})
	}

	t.Run("transition rule with optionalOldSelf", func(t *testing.T) {
		obj := &unstructured.Unstructured{Object: object("Constrained", apiVersion, "immutable", with("immutable", "a"))}
		_, err := a.create(t, gvr, maps.Clone(obj.Object))
		require.NoError(t, err, "a create runs the rule with no oldSelf")
		got, err := a.dyn.Resource(gvr).Namespace("default").Get(t.Context(), "immutable", metav1.GetOptions{})
		require.NoError(t, err)
		require.NoError(t, unstructured.SetNestedField(got.Object, "b", "spec", "immutable"))
		_, err = a.dyn.Resource(gvr).Namespace("default").Update(t.Context(), got, metav1.UpdateOptions{FieldValidation: metav1.FieldValidationStrict})
		require.ErrorContains(t, err, `spec.immutable: Invalid value: "b": immutable is immutable`)
		t.Log(err)
	})
}

// testColumnsOnServer shows what kubectl get shows of an object: its
// printer columns, as the API server makes a table of them, and that the
// short name and the category find the resource.
func testColumnsOnServer(t *testing.T, a apiServer) {
	r := memcachedWithColumns()
	r.Group = "columns.example.com"
	crd, err := r.CRD()
	require.NoError(t, err)
	a.install(t, crd)
	apiVersion := r.Group + "/" + r.Version
	_, err = a.create(t, r.GVR(), object("Memcached", apiVersion, "cols", map[string]any{"size": 2}))
	require.NoError(t, err)
	status := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion, "kind": "Memcached", "metadata": map[string]any{"name": "cols"},
		"status": map[string]any{"conditions": []any{map[string]any{
			"type": "Available", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z",
		}}},
	}}
	_, err = a.dyn.Resource(r.GVR()).Namespace("default").ApplyStatus(t.Context(), "cols", status, metav1.ApplyOptions{FieldManager: "test"})
	require.NoError(t, err)

	var table metav1.Table
	err = a.ext.ApiextensionsV1().RESTClient().Get().
		AbsPath("/apis", r.Group, r.Version, "namespaces", "default", r.Plural).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").
		Do(t.Context()).Into(&table)
	require.NoError(t, err)
	var names []string
	for _, c := range table.ColumnDefinitions {
		names = append(names, c.Name)
	}
	require.Equal(t, []string{"Name", "Ready", "Size", "Image", "Age"}, names)
	require.Len(t, table.Rows, 1)
	require.Equal(t, []any{"cols", "True", int64(2), "memcached:1.6.26-alpine3.19"}, table.Rows[0].Cells[:4])

	got, err := a.ext.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), crd.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"mc"}, got.Status.AcceptedNames.ShortNames)
	require.Equal(t, []string{"all", "caches"}, got.Status.AcceptedNames.Categories)
	require.Equal(t, "memcache", got.Status.AcceptedNames.Singular)
}
