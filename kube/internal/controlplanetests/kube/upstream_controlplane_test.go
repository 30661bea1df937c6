//go:build controlplane

package kube_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/internal/upstream"
)

type podTemplateSpec struct {
	Template  corev1.PodTemplateSpec      `json:"template"`
	Selector  *metav1.LabelSelector       `json:"selector,omitempty"`
	Resources corev1.ResourceRequirements `json:"resources,omitzero"`
}

var podTemplates = kube.Resource[podTemplateSpec, struct{}]{
	Group: "apps.example.com", Version: "v1", Kind: "PodTemplated", Plural: "podtemplateds", Scope: kube.Namespaced,
}

// testEmbeddedKubernetesTypesOnServer installs a CRD that embeds a
// PodTemplateSpec, and shows the API server enforcing what Kubernetes' own
// schema says of it.
func testEmbeddedKubernetesTypesOnServer(t *testing.T, a apiServer, cfg *rest.Config) {
	crd, err := podTemplates.CRD()
	require.NoError(t, err)
	a.install(t, crd)
	gvr := podTemplates.GVR()
	apiVersion := podTemplates.Group + "/" + podTemplates.Version
	res := a.dyn.Resource(gvr).Namespace("default")

	t.Run("two managers apply their own containers", func(t *testing.T) {
		apply := func(manager, container string) error {
			obj := object("PodTemplated", apiVersion, "shared", map[string]any{
				"template": map[string]any{"spec": map[string]any{"containers": []any{
					map[string]any{"name": container, "image": container + ":1", "ports": []any{map[string]any{"containerPort": 80}}},
				}}},
			})
			_, err := res.Apply(t.Context(), "shared", &unstructured.Unstructured{Object: obj}, metav1.ApplyOptions{FieldManager: manager})
			return err
		}
		require.NoError(t, apply("first", "web"))
		require.NoError(t, apply("second", "sidecar"), "containers is a list-map keyed by name, so the managers don't conflict")
		got, err := res.Get(t.Context(), "shared", metav1.GetOptions{})
		require.NoError(t, err)
		containers, _, _ := unstructured.NestedSlice(got.Object, "spec", "template", "spec", "containers")
		var names []string
		for _, c := range containers {
			c := c.(map[string]any)
			names = append(names, c["name"].(string))
			ports := c["ports"].([]any)
			require.Equal(t, "TCP", ports[0].(map[string]any)["protocol"], "ContainerPort's protocol is defaulted, as upstream's +default says")
		}
		require.ElementsMatch(t, []string{"web", "sidecar"}, names)
	})

	for _, tc := range []struct {
		name string
		spec map[string]any
		want string
	}{
		{"a quantity that isn't one", map[string]any{
			"template":  map[string]any{},
			"resources": map[string]any{"limits": map[string]any{"memory": "lots"}},
		}, `spec.resources.limits.memory: Invalid value: "lots": spec.resources.limits.memory in body should match '^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$'`},
		{"containers: null", map[string]any{
			"template": map[string]any{"spec": map[string]any{"containers": nil}},
		}, "spec.template.spec.containers: Required value"},
		{"a container without a name", map[string]any{
			"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"image": "web:1"}}}},
		}, "spec.template.spec.containers[0].name: Required value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := a.create(t, gvr, object("PodTemplated", apiVersion, "bad", tc.spec))
			require.ErrorContains(t, err, tc.want)
			t.Log(err)
		})
	}

	t.Run("a good quantity", func(t *testing.T) {
		_, err := a.create(t, gvr, object("PodTemplated", apiVersion, "quantities", map[string]any{
			"template":  map[string]any{},
			"resources": map[string]any{"limits": map[string]any{"memory": "512Mi", "cpu": 2}, "requests": map[string]any{"cpu": "250m"}},
		}))
		require.NoError(t, err)
	})

	t.Run("a value the table's enums don't list", func(t *testing.T) {
		// As controller-gen's, the CRD leaves out the enums of Kubernetes'
		// own types, so a value a newer release adds isn't refused here:
		// the Pod's own validation checks it when the Pod is made.
		got, err := a.create(t, gvr, object("PodTemplated", apiVersion, "newer", map[string]any{
			"template": map[string]any{"spec": map[string]any{
				"restartPolicy": "OnFridays",
				"containers":    []any{map[string]any{"name": "web", "image": "web:1", "imagePullPolicy": "Sometimes"}},
			}},
		}))
		require.NoError(t, err)
		policy, _, _ := unstructured.NestedString(got.Object, "spec", "template", "spec", "restartPolicy")
		require.Equal(t, "OnFridays", policy)
	})

	t.Run("a null where upstream has a default", func(t *testing.T) {
		// GRPCAction's service has +default="": the API server drops the
		// null and defaults it, as it stores a Pod's.
		got, err := a.create(t, gvr, object("PodTemplated", apiVersion, "grpc", map[string]any{
			"template": map[string]any{"spec": map[string]any{
				"containers": []any{map[string]any{"name": "web", "image": "web:1",
					"livenessProbe": map[string]any{"grpc": map[string]any{"port": 8080, "service": nil}}}},
			}},
		}))
		require.NoError(t, err)
		containers, _, _ := unstructured.NestedSlice(got.Object, "spec", "template", "spec", "containers")
		grpc := containers[0].(map[string]any)["livenessProbe"].(map[string]any)["grpc"].(map[string]any)
		require.Contains(t, grpc, "service")
		require.Equal(t, "", grpc["service"], "service: null is defaulted to \"\", not stored as null")
	})

	t.Run("the same list and map types as the API server's", func(t *testing.T) {
		docs, err := upstream.Fetch(t.Context(), cfg)
		require.NoError(t, err)
		var doc struct {
			Components struct {
				Schemas map[string]map[string]any `json:"schemas"`
			} `json:"components"`
		}
		require.NoError(t, json.Unmarshal(docs["api/v1"], &doc))
		defs := doc.Components.Schemas
		spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		var c comparison
		c.compare("spec.template", spec.Properties["template"], map[string]any{"$ref": "#/components/schemas/io.k8s.api.core.v1.PodTemplateSpec"}, defs)
		c.compare("spec.selector", spec.Properties["selector"], map[string]any{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"}, defs)
		c.compare("spec.resources", spec.Properties["resources"], map[string]any{"$ref": "#/components/schemas/io.k8s.api.core.v1.ResourceRequirements"}, defs)
		require.Empty(t, c.diffs)
		require.Greater(t, c.lists, 30)
		t.Logf("compared %d nodes: %d list types, %d map types", c.nodes, c.lists, c.maps)
	})
}

// comparison compares kube's schema of a Kubernetes type with the API
// server's own, node by node: x-kubernetes-list-type,
// x-kubernetes-list-map-keys and x-kubernetes-map-type.
type comparison struct {
	nodes, lists, maps int
	diffs              []string
}

func (c *comparison) compare(path string, k apiextensionsv1.JSONSchemaProps, s map[string]any, defs map[string]map[string]any) {
	// A property refers to its type by $ref or by allOf: [{$ref}]; the
	// property's own extensions sit beside it.
	node := map[string]any{}
	ref, _ := s["$ref"].(string)
	if all, ok := s["allOf"].([]any); ok && len(all) == 1 {
		ref, _ = all[0].(map[string]any)["$ref"].(string)
	}
	if ref != "" {
		name := strings.TrimPrefix(ref, "#/components/schemas/")
		if name == "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" {
			return // kube's is type: object, x-kubernetes-preserve-unknown-fields
		}
		for k, v := range defs[name] {
			node[k] = v
		}
	}
	for k, v := range s {
		node[k] = v
	}
	c.nodes++
	str := func(key string) *string {
		if v, ok := node[key].(string); ok {
			return &v
		}
		return nil
	}
	var keys []string
	for _, k := range asSlice(node["x-kubernetes-list-map-keys"]) {
		keys = append(keys, k.(string))
	}
	if want, got := str("x-kubernetes-list-type"), k.XListType; !equalPtr(want, got) {
		c.diffs = append(c.diffs, fmt.Sprintf("%s: x-kubernetes-list-type %s, the API server's %s", path, show(got), show(want)))
	} else if want != nil {
		c.lists++
	}
	if !slices.Equal(keys, k.XListMapKeys) {
		c.diffs = append(c.diffs, fmt.Sprintf("%s: x-kubernetes-list-map-keys %v, the API server's %v", path, k.XListMapKeys, keys))
	}
	if want, got := str("x-kubernetes-map-type"), k.XMapType; !equalPtr(want, got) {
		c.diffs = append(c.diffs, fmt.Sprintf("%s: x-kubernetes-map-type %s, the API server's %s", path, show(got), show(want)))
	} else if want != nil {
		c.maps++
	}
	if props, ok := node["properties"].(map[string]any); ok {
		for name, p := range props {
			kp, ok := k.Properties[name]
			if !ok {
				c.diffs = append(c.diffs, fmt.Sprintf("%s.%s: missing", path, name))
				continue
			}
			c.compare(path+"."+name, kp, p.(map[string]any), defs)
		}
	}
	if items, ok := node["items"].(map[string]any); ok && k.Items != nil && k.Items.Schema != nil {
		c.compare(path+"[*]", *k.Items.Schema, items, defs)
	}
	if values, ok := node["additionalProperties"].(map[string]any); ok && k.AdditionalProperties != nil && k.AdditionalProperties.Schema != nil {
		c.compare(path+"[*]", *k.AdditionalProperties.Schema, values, defs)
	}
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func equalPtr(a, b *string) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

func show(s *string) string {
	if s == nil {
		return "none"
	}
	return *s
}
