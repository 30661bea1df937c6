//go:build controlplane

package kube_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus/controlplane"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/kube"
)

// TestCRDsAgainstTheAPIServer applies reflected CRDs to a real API server,
// which must accept them with fieldValidation=Strict and enforce their
// rules.
func TestCRDsAgainstTheAPIServer(t *testing.T) {
	c := controlplanetest.Start(t)
	cfg := c.RESTConfig()
	cfg.QPS, cfg.Burst = 1000, 1000 // many small requests, not client-go's 5 a second
	ext, err := apiextensionsclient.NewForConfig(cfg)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	a := apiServer{ext: ext, dyn: dyn}

	t.Run("Memcached", func(t *testing.T) { testMemcachedOnServer(t, a) })
	t.Run("EveryRow", func(t *testing.T) { testEveryRowOnServer(t, a) })
	t.Run("TemplateMetadata", func(t *testing.T) { testTemplateMetadataOnServer(t, a) })
	t.Run("Nils", func(t *testing.T) { testNilsOnServer(t, a) })
	t.Run("Quoted", func(t *testing.T) { testQuotedOnServer(t, a) })
	t.Run("Nulls", func(t *testing.T) { testNullsOnServer(t, a) })
	t.Run("Constraints", func(t *testing.T) { testConstraintsOnServer(t, a) })
	t.Run("EmbeddedKubernetesTypes", func(t *testing.T) { testEmbeddedKubernetesTypesOnServer(t, a, cfg) })
	t.Run("Columns", func(t *testing.T) { testColumnsOnServer(t, a) })
	t.Run("RootRules", func(t *testing.T) { testRootRulesOnServer(t, a) })
	t.Run("Conditions", func(t *testing.T) { testConditionsOnServer(t, a) })
	t.Run("ItemsColumn", func(t *testing.T) { testItemsColumnOnServer(t, a) })
	t.Run("SelectableFields", func(t *testing.T) { testSelectableFieldsOnServer(t, a) })
	t.Run("EmbeddedObjectMeta", func(t *testing.T) { testEmbeddedObjectMetaOnServer(t, a) })
	t.Run("NamedListType", func(t *testing.T) { testNamedListTypeOnServer(t, a) })
	t.Run("AdmissionPolicy", func(t *testing.T) { testAdmissionPolicyOnServer(t, a) })
}

type apiServer struct {
	ext apiextensionsclient.Interface
	dyn dynamic.Interface
}

// startWithCRD starts a local control plane (controlplanetest.Start) with
// r's CRD installed on it (install), and returns it with a dynamic and a
// typed client of it.
func startWithCRD(t *testing.T, r interface {
	CRD() (*apiextensionsv1.CustomResourceDefinition, error)
}) (*controlplane.Cluster, dynamic.Interface, kubernetes.Interface) {
	t.Helper()
	cluster := controlplanetest.Start(t)
	cfg := cluster.RESTConfig()
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	kc, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ext, err := apiextensionsclient.NewForConfig(cfg)
	require.NoError(t, err)
	crd, err := r.CRD()
	require.NoError(t, err)
	apiServer{ext: ext, dyn: dyn}.install(t, crd)
	return cluster, dyn, kc
}

// install creates crd with fieldValidation=Strict, waits until it is
// established, and deletes it when the test ends.
func (a apiServer) install(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	crds := a.ext.ApiextensionsV1().CustomResourceDefinitions()
	_, err := crds.Create(ctx, crd, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
	require.NoError(t, err, "the API server refused the CRD")
	t.Cleanup(func() {
		_ = crds.Delete(context.Background(), crd.Name, metav1.DeleteOptions{})
	})

	w, err := crds.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + crd.Name})
	require.NoError(t, err)
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			t.Fatalf("CRD %s wasn't established: %v", crd.Name, ctx.Err())
		case ev, ok := <-w.ResultChan():
			require.True(t, ok, "the watch of CRD %s ended", crd.Name)
			got, ok := ev.Object.(*apiextensionsv1.CustomResourceDefinition)
			if !ok {
				continue
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return
				}
			}
		}
	}
}

// create creates obj, as a map, strictly, in the default namespace.
func (a apiServer) create(t *testing.T, gvr schema.GroupVersionResource, obj map[string]any) (*unstructured.Unstructured, error) {
	t.Helper()
	return a.dyn.Resource(gvr).Namespace("default").Create(t.Context(), &unstructured.Unstructured{Object: obj},
		metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
}

// toMap is v encoded by encoding/json, as a map.
func toMap(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

func object(kind, apiVersion, name string, spec map[string]any) map[string]any {
	return map[string]any{
		"apiVersion": apiVersion,
		"kind":       kind,
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}
}

func testMemcachedOnServer(t *testing.T, a apiServer) {
	crd, err := Memcached.CRD()
	require.NoError(t, err)
	a.install(t, crd)
	gvr := Memcached.GVR()
	apiVersion := Memcached.Group + "/" + Memcached.Version

	for _, tc := range []struct {
		name string
		spec map[string]any
		want string
	}{
		{"size 0", map[string]any{"size": 0, "image": "memcached:1.6"}, "spec.size in body should be greater than or equal to 1"},
		{"size 4", map[string]any{"size": 4, "image": "memcached:1.6"}, "spec.size in body should be less than or equal to 3"},
		{"an image without memcached:", map[string]any{"size": 1, "image": "nginx:1"}, "spec.image in body should match '^memcached:'"},
		{"no size", map[string]any{"image": "memcached:1.6"}, "spec.size: Required value"},
		{"an unknown field", map[string]any{"size": 1, "replicas": 2}, `unknown field "spec.replicas"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := a.create(t, gvr, object("Memcached", apiVersion, "bad", tc.spec))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			t.Log(err)
		})
	}

	t.Run("image is defaulted", func(t *testing.T) {
		got, err := a.create(t, gvr, object("Memcached", apiVersion, "defaulted", map[string]any{"size": 2}))
		require.NoError(t, err)
		image, _, _ := unstructured.NestedString(got.Object, "spec", "image")
		require.Equal(t, "memcached:1.6.26-alpine3.19", image)
	})

	t.Run("a status whose conditions repeat a type is rejected", func(t *testing.T) {
		got, err := a.create(t, gvr, object("Memcached", apiVersion, "status", map[string]any{"size": 1}))
		require.NoError(t, err)
		now := metav1.Unix(1700000000, 0)
		cond := metav1.Condition{Type: "Available", Status: metav1.ConditionTrue, Reason: "Ready", Message: "ok", LastTransitionTime: now}
		got.Object["status"] = toMap(t, MemcachedStatus{ReadyReplicas: 1, Conditions: []metav1.Condition{cond}})
		got, err = a.dyn.Resource(gvr).Namespace("default").UpdateStatus(t.Context(), got, metav1.UpdateOptions{FieldValidation: metav1.FieldValidationStrict})
		require.NoError(t, err, "a status of metav1.Conditions is accepted")

		got.Object["status"] = toMap(t, MemcachedStatus{ReadyReplicas: 1, Conditions: []metav1.Condition{cond, cond}})
		_, err = a.dyn.Resource(gvr).Namespace("default").UpdateStatus(t.Context(), got, metav1.UpdateOptions{FieldValidation: metav1.FieldValidationStrict})
		require.Error(t, err)
		require.Contains(t, err.Error(), `status.conditions[1]: Duplicate value: {"type":"Available"}`)
		t.Log(err)

		// A condition's lastTransitionTime, unlike another zero
		// metav1.Time, is not nullable: the API server refuses its null.
		cond.LastTransitionTime = metav1.Time{}
		got.Object["status"] = toMap(t, MemcachedStatus{ReadyReplicas: 1, Conditions: []metav1.Condition{cond}})
		_, err = a.dyn.Resource(gvr).Namespace("default").UpdateStatus(t.Context(), got, metav1.UpdateOptions{FieldValidation: metav1.FieldValidationStrict})
		require.ErrorContains(t, err, "status.conditions[0].lastTransitionTime: Required value")
	})
}

// validEveryRow is an EveryRowSpec that every rule accepts, with every
// field set.
func validEveryRow() EveryRowSpec {
	s := "pointed"
	return EveryRowSpec{
		Base:        Base{Owner: "me", Labels: map[string]string{"team": "a"}},
		Bool:        true,
		Int8:        -8,
		Int16:       -16,
		Int32:       3,
		Uint8:       8,
		Uint16:      16,
		Int:         -1 << 40,
		Int64:       1 << 50,
		Uint:        1 << 40,
		Uint32:      1 << 31,
		Uint64:      1 << 52,
		Float32:     1.5,
		Float64:     2.25,
		String:      "lower",
		Bytes:       []byte("bytes"),
		Slice:       []string{"a", "b"},
		Array:       [2]int32{1, 2},
		Map:         map[string]int64{"a": 1},
		Window:      Window{Min: 1, Max: 2},
		Pointer:     &s,
		OmitPointer: &Window{Min: 3, Max: 3},
		Time:        metav1.Unix(1700000000, 0),
		MicroTime:   metav1.NewMicroTime(time.Unix(1700000000, 123456000)),
		Duration:    metav1.Duration{Duration: 90 * time.Second},
		Quantity:    resource.MustParse("1Gi"),
		IntOrString: intstr.FromString("50%"),
		Raw:         runtime.RawExtension{Raw: []byte(`{"any":["thing",1]}`)},
		Template: Template{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}, Annotations: map[string]string{"a": "b"}},
			Image:      "img",
		},
		Color:     Green,
		Endpoints: []Endpoint{{Name: "http", Protocol: "TCP", Port: 80}, {Name: "http", Protocol: "UDP", Port: 80}},
		Tags:      []string{"x", "y"},
		Mode:      "slow",
		Note:      "short",
	}
}

func testEveryRowOnServer(t *testing.T, a apiServer) {
	crd, err := EveryRow.CRD()
	require.NoError(t, err)
	a.install(t, crd)
	gvr := EveryRow.GVR()
	apiVersion := EveryRow.Group + "/" + EveryRow.Version

	t.Run("every field round-trips", func(t *testing.T) {
		sent := validEveryRow()
		got, err := a.create(t, gvr, object("EveryRow", apiVersion, "valid", toMap(t, sent)))
		require.NoError(t, err)
		want, err := json.Marshal(sent)
		require.NoError(t, err)
		back, err := json.Marshal(got.Object["spec"])
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(back), "the API server pruned or changed what encoding/json wrote")

		var decoded EveryRowSpec
		require.NoError(t, json.Unmarshal(back, &decoded))
		require.Equal(t, sent.Template.Labels, decoded.Template.Labels)
	})

	t.Run("defaults", func(t *testing.T) {
		spec := toMap(t, validEveryRow())
		delete(spec, "string")
		delete(spec, "mode")
		spec["endpoints"] = []any{map[string]any{"name": "http", "port": 80}}
		got, err := a.create(t, gvr, object("EveryRow", apiVersion, "defaulted", spec))
		require.NoError(t, err)
		var decoded EveryRowSpec
		b, err := json.Marshal(got.Object["spec"])
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &decoded))
		require.Equal(t, "abc", decoded.String)
		require.Equal(t, "fast", decoded.Mode)
		require.Equal(t, "TCP", decoded.Endpoints[0].Protocol, "a ListMap key of an item is defaulted")
	})

	for _, tc := range []struct {
		name   string
		mutate func(spec map[string]any)
		want   string
	}{
		{"Minimum", func(s map[string]any) { s["int32"] = -6 }, "spec.int32 in body should be greater than or equal to -5"},
		{"Maximum", func(s map[string]any) { s["int32"] = 6 }, "spec.int32 in body should be less than or equal to 5"},
		{"Minimum of a float", func(s map[string]any) { s["float64"] = 0.25 }, "spec.float64 in body should be greater than or equal to 0.5"},
		{"Minimum of an item's field", func(s map[string]any) {
			s["endpoints"] = []any{map[string]any{"name": "a", "port": 0}}
		}, "spec.endpoints[0].port in body should be greater than or equal to 1"},
		{"MinLength of a promoted field", func(s map[string]any) { s["owner"] = "" }, "spec.owner in body should be at least 1 chars long"},
		{"MaxLength", func(s map[string]any) { s["note"] = "a note far longer than twenty" }, "spec.note: Too long: may not be more than 20 bytes"},
		{"Pattern", func(s map[string]any) { s["string"] = "UPPER" }, "spec.string in body should match '^[a-z]+$'"},
		{"Enum", func(s map[string]any) { s["mode"] = "medium" }, `spec.mode: Unsupported value: "medium": supported values: "fast", "slow"`},
		{"Enum of an item's field", func(s map[string]any) {
			s["endpoints"] = []any{map[string]any{"name": "a", "port": 1, "protocol": "SCTP"}}
		}, `spec.endpoints[0].protocol: Unsupported value: "SCTP"`},
		{"Schema's enum", func(s map[string]any) { s["color"] = "blue" }, `spec.color: Unsupported value: "blue": supported values: "red", "green"`},
		{"MinItems", func(s map[string]any) { s["slice"] = []any{} }, "spec.slice in body should have at least 1 items"},
		{"MaxItems", func(s map[string]any) {
			s["endpoints"] = []any{
				map[string]any{"name": "a", "port": 1}, map[string]any{"name": "b", "port": 1},
				map[string]any{"name": "c", "port": 1}, map[string]any{"name": "d", "port": 1},
			}
		}, "spec.endpoints: Too many: 4: must have at most 3 items"},
		{"ListSet duplicates", func(s map[string]any) { s["tags"] = []any{"x", "x"} }, `spec.tags[1]: Duplicate value: "x"`},
		{"ListMap duplicate keys", func(s map[string]any) {
			s["endpoints"] = []any{map[string]any{"name": "a", "port": 1}, map[string]any{"name": "a", "port": 2, "protocol": "TCP"}}
		}, `spec.endpoints[1]: Duplicate value: {"name":"a","protocol":"TCP"}`},
		{"a field's CEL rule", func(s map[string]any) { s["note"] = "secret" }, `spec.note: Invalid value: "secret": note must not mention secrets`},
		{"a type's CEL rule", func(s map[string]any) { s["window"] = map[string]any{"min": 5, "max": 1} }, "spec.window: Invalid value: min must not exceed max"},
		{"a type's CEL rule through a pointer", func(s map[string]any) { s["omitPointer"] = map[string]any{"min": 5, "max": 1} }, "spec.omitPointer: Invalid value: min must not exceed max"},
		{"the spec type's CEL rule", func(s map[string]any) { s["int32"] = 3; s["bool"] = false }, "spec: Invalid value: int32 3 needs bool"},
		{"required", func(s map[string]any) { delete(s, "owner") }, "spec.owner: Required value"},
		{"integer", func(s map[string]any) { s["int8"] = "eight" }, `spec.int8: Invalid value: "string": spec.int8 in body must be of type integer: "string"`},
		{"date-time", func(s map[string]any) { s["time"] = "yesterday" }, `spec.time in body must be of type date-time: "yesterday"`},
		{"byte", func(s map[string]any) { s["bytes"] = "not base64!" }, `spec.bytes in body must be of type byte: "not base64!"`},
		{"int-or-string", func(s map[string]any) { s["quantity"] = true }, `spec.quantity: Invalid value: "boolean": spec.quantity in body must be of type integer,string: "boolean"`},
		{"not nullable", func(s map[string]any) { s["window"] = nil }, "spec.window: Required value"},
		{"an unknown field", func(s map[string]any) { s["extra"] = 1 }, `unknown field "spec.extra"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := toMap(t, validEveryRow())
			tc.mutate(spec)
			_, err := a.create(t, gvr, object("EveryRow", apiVersion, "invalid", spec))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			t.Log(err)
		})
	}

	t.Run("a nullable pointer", func(t *testing.T) {
		spec := toMap(t, validEveryRow())
		spec["pointer"] = nil
		got, err := a.create(t, gvr, object("EveryRow", apiVersion, "nullable", spec))
		require.NoError(t, err)
		v, found, _ := unstructured.NestedFieldNoCopy(got.Object, "spec", "pointer")
		require.True(t, found)
		require.Nil(t, v)
	})
}

// testTemplateMetadataOnServer shows a metav1.ObjectMeta in a template
// keeps its labels, which the spec's bare type: object would lose.
func testTemplateMetadataOnServer(t *testing.T, a apiServer) {
	type spec struct {
		Template Template `json:"template"`
	}
	sent := spec{Template: Template{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"app": "x"}, Annotations: map[string]string{"a": "b"}},
		Image:      "img",
	}}
	want, err := json.Marshal(sent)
	require.NoError(t, err)

	r := kube.Resource[spec, struct{}]{Group: "test.humus.z5labs.dev", Version: "v1", Kind: "Templated", Plural: "templateds", Scope: kube.Namespaced}
	crd, err := r.CRD()
	require.NoError(t, err)
	a.install(t, crd)
	got, err := a.create(t, r.GVR(), object("Templated", r.Group+"/"+r.Version, "templated", toMap(t, sent)))
	require.NoError(t, err)
	b, err := json.Marshal(got.Object["spec"])
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(b), "the template's metadata is kept whole")

	// The spec's bare type: object: the API server refuses the labels
	// under Strict, and prunes them otherwise.
	bare := kube.Resource[spec, struct{}]{Group: "test.humus.z5labs.dev", Version: "v1", Kind: "Bare", Plural: "bares", Scope: kube.Namespaced}
	crd, err = bare.CRD()
	require.NoError(t, err)
	props := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties
	template := props["spec"].Properties["template"]
	template.Properties["metadata"] = apiextensionsv1.JSONSchemaProps{Type: "object"}
	props["spec"].Properties["template"] = template
	a.install(t, crd)
	_, err = a.create(t, bare.GVR(), object("Bare", bare.Group+"/"+bare.Version, "strict", toMap(t, sent)))
	require.Error(t, err)
	require.Contains(t, err.Error(), `unknown field "spec.template.metadata.labels"`)
	t.Log(err)
	got, err = a.dyn.Resource(bare.GVR()).Namespace("default").Create(t.Context(),
		&unstructured.Unstructured{Object: object("Bare", bare.Group+"/"+bare.Version, "pruned", toMap(t, sent))}, metav1.CreateOptions{})
	require.NoError(t, err)
	metadata, _, _ := unstructured.NestedMap(got.Object, "spec", "template", "metadata")
	require.Empty(t, metadata, "the API server pruned the template's metadata")
}

// testNilsOnServer shows that what encoding/json writes for a nil pointer,
// slice or map, and for a zero metav1.Time, MicroTime or RawExtension, is
// accepted and kept, and that a defaulted one is defaulted.
func testNilsOnServer(t *testing.T, a apiServer) {
	type spec struct {
		Args       []string          `json:"args"`
		Env        map[string]string `json:"env"`
		Data       []byte            `json:"data"`
		Ptr        *int32            `json:"ptr"`
		Defaulted  []string          `json:"defaulted"`
		DefaultPtr *int32            `json:"defaultPtr"`
		// Their MarshalJSON writes null for a zero value.
		Time      metav1.Time          `json:"time"`
		MicroTime metav1.MicroTime     `json:"microTime"`
		Raw       runtime.RawExtension `json:"raw"`
		Times     []metav1.Time        `json:"times"`
		// omitempty never leaves out a struct: null too.
		OmitTime metav1.Time `json:"omitTime,omitempty"`
	}
	var v spec
	r := kube.Resource[spec, struct{}]{
		Group: "test.humus.z5labs.dev", Version: "v1", Kind: "Nil", Plural: "nils", Scope: kube.Namespaced,
		Rules: []kube.TypeRules{kube.Rules(&v,
			kube.Field(&v.Defaulted).Default([]string{"d"}),
			kube.Field(&v.DefaultPtr).Default(ptr[int32](7)),
		)},
	}
	crd, err := r.CRD()
	require.NoError(t, err)
	a.install(t, crd)
	sent := toMap(t, spec{Times: []metav1.Time{{}}})
	require.Equal(t, map[string]any{
		"args": nil, "env": nil, "data": nil, "ptr": nil, "defaulted": nil, "defaultPtr": nil,
		"time": nil, "microTime": nil, "raw": nil, "times": []any{nil}, "omitTime": nil,
	}, sent)
	got, err := a.create(t, r.GVR(), object("Nil", r.Group+"/"+r.Version, "nils", sent))
	require.NoError(t, err, "a zero spec, as encoding/json writes it")
	require.Equal(t, map[string]any{
		"args": nil, "env": nil, "data": nil, "ptr": nil,
		"defaulted": []any{"d"}, "defaultPtr": int64(7),
		"time": nil, "microTime": nil, "raw": nil, "times": []any{nil}, "omitTime": nil,
	}, got.Object["spec"])
	var back spec
	b, err := json.Marshal(got.Object["spec"])
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &back), "encoding/json reads the nulls back")
	require.True(t, back.Time.IsZero())
	require.Nil(t, back.Raw.Raw)

	// Server-side apply, as the controller applies a status, takes the
	// same nulls.
	applied := &unstructured.Unstructured{Object: object("Nil", r.Group+"/"+r.Version, "nils-applied", sent)}
	_, err = a.dyn.Resource(r.GVR()).Namespace("default").Apply(t.Context(), "nils-applied", applied,
		metav1.ApplyOptions{FieldManager: "test", Force: true})
	require.NoError(t, err, "an apply of a zero spec")
}

// testQuotedOnServer: fields tagged ",string" keep their Defaults, and a
// nil pointer among them, written as null, is kept.
func testQuotedOnServer(t *testing.T, a apiServer) {
	var v quotedSpec
	r := kube.Resource[quotedSpec, struct{}]{
		Group: "test.humus.z5labs.dev", Version: "v1", Kind: "Quoted", Plural: "quoteds", Scope: kube.Namespaced,
		Rules: []kube.TypeRules{kube.Rules(&v,
			kube.Field(&v.Replicas).Default(3).Enum(1, 3),
			kube.Field(&v.Name).Default("a"),
		)},
	}
	crd, err := r.CRD()
	require.NoError(t, err)
	a.install(t, crd)
	sent := toMap(t, quotedSpec{Replicas: 1})
	delete(sent, "replicas")
	got, err := a.create(t, r.GVR(), object("Quoted", r.Group+"/"+r.Version, "quoted", sent))
	require.NoError(t, err, "a spec as encoding/json writes it, with a nil pointer")
	require.Equal(t, map[string]any{"replicas": "3", "name": `"a"`, "max": nil}, got.Object["spec"])
	var back quotedSpec
	b, err := json.Marshal(got.Object["spec"])
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &back), "encoding/json reads the defaults back")
	require.Equal(t, quotedSpec{Replicas: 3, Name: "a"}, back)
}
