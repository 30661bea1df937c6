package kube_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/z5labs/humus/kube"
)

// workloadSpec embeds what real operators' specs embed of Kubernetes' own
// types, with no rules.
type workloadSpec struct {
	Template         corev1.PodTemplateSpec            `json:"template"`
	Selector         *metav1.LabelSelector             `json:"selector,omitempty"`
	Env              []corev1.EnvVar                   `json:"env,omitempty"`
	Resources        corev1.ResourceRequirements       `json:"resources,omitzero"`
	Affinity         *corev1.Affinity                  `json:"affinity,omitempty"`
	Tolerations      []corev1.Toleration               `json:"tolerations,omitempty"`
	ImagePullSecrets []corev1.LocalObjectReference     `json:"imagePullSecrets,omitempty"`
	Password         *corev1.SecretKeySelector         `json:"password,omitempty"`
	Ports            []corev1.ServicePort              `json:"ports,omitempty"`
	Strategy         *appsv1.DeploymentStrategy        `json:"strategy,omitempty"`
	Backup           *batchv1.JobTemplateSpec          `json:"backup,omitempty"`
	Ingress          []networkingv1.IngressRule        `json:"ingress,omitempty"`
	Budget           *policyv1.PodDisruptionBudgetSpec `json:"budget,omitempty"`
	Permissions      []rbacv1.PolicyRule               `json:"permissions,omitempty"`
	Metrics          []autoscalingv2.MetricSpec        `json:"metrics,omitempty"`
	MaxUnavailable   *intstr.IntOrString               `json:"maxUnavailable,omitempty"`
}

type workloadStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

var workloads = kube.Resource[workloadSpec, workloadStatus]{
	Group: "apps.example.com", Version: "v1", Kind: "Workload", Plural: "workloads", Scope: kube.Namespaced,
}

func workloadSchema(t *testing.T, rules ...kube.TypeRules) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	r := workloads
	r.Rules = rules
	crd, err := r.CRD()
	require.NoError(t, err)
	requireServerValid(t, crd)
	return *crd.Spec.Versions[0].Schema.OpenAPIV3Schema
}

// at is the schema at path in s: a property's name, or "[]" for an
// array's items or a map's values.
func at(t *testing.T, s apiextensionsv1.JSONSchemaProps, path ...string) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	for i, p := range path {
		switch {
		case p == "[]" && s.Items != nil && s.Items.Schema != nil:
			s = *s.Items.Schema
		case p == "[]" && s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil:
			s = *s.AdditionalProperties.Schema
		default:
			next, ok := s.Properties[p]
			require.True(t, ok, "no property %s at %v", p, path[:i])
			s = next
		}
	}
	return s
}

func TestEmbeddedKubernetesTypesHaveTheAPIServersSchema(t *testing.T) {
	root := workloadSchema(t)
	spec := at(t, root, "spec")
	podSpec := at(t, spec, "template", "spec")

	containers := at(t, podSpec, "containers")
	require.Equal(t, ptr("map"), containers.XListType, "server-side apply merges containers by name")
	require.Equal(t, []string{"name"}, containers.XListMapKeys)
	require.False(t, containers.Nullable, "the API server requires containers, so null doesn't pass as present")
	require.Contains(t, podSpec.Required, "containers")
	require.Contains(t, containers.Description, "List of containers belonging to the pod.")

	container := at(t, containers, "[]")
	require.Equal(t, []string{"name"}, container.Required, "only name is required, whatever the json tags say")
	require.Contains(t, container.Description, "A single application container")
	ports := at(t, container, "ports")
	require.Equal(t, ptr("map"), ports.XListType)
	require.Equal(t, []string{"containerPort", "protocol"}, ports.XListMapKeys)
	require.JSONEq(t, `"TCP"`, string(at(t, ports, "[]", "protocol").Default.Raw), "ContainerPort's +default=\"TCP\"")
	require.Nil(t, at(t, ports, "[]", "containerPort").Default, "openapi-gen's zero defaults are left out, so required holds")
	require.Equal(t, ptr("map"), at(t, container, "env").XListType)
	require.Equal(t, []string{"name"}, at(t, container, "env").XListMapKeys)
	require.Equal(t, ptr("atomic"), at(t, container, "command").XListType)

	memory := at(t, container, "resources", "limits", "[]")
	require.True(t, memory.XIntOrString)
	require.NotEmpty(t, memory.Pattern, "a Quantity's pattern")

	require.Equal(t, ptr("map"), at(t, podSpec, "volumes").XListType)
	require.Equal(t, ptr("atomic"), at(t, podSpec, "nodeSelector").XMapType)
	require.Equal(t, ptr("atomic"), at(t, podSpec, "tolerations").XListType)
	require.Equal(t, ptr("map"), at(t, podSpec, "topologySpreadConstraints").XListType)
	require.Equal(t, []string{"topologyKey", "whenUnsatisfiable"}, at(t, podSpec, "topologySpreadConstraints").XListMapKeys)

	require.Equal(t, ptr("atomic"), at(t, spec, "selector").XMapType, "LabelSelector is struct-type atomic")
	require.Equal(t, ptr("atomic"), at(t, spec, "password").XMapType, "so is SecretKeySelector")
	require.Equal(t, []string{"key"}, at(t, spec, "password").Required)
	require.Equal(t, ptr("atomic"), at(t, spec, "imagePullSecrets", "[]").XMapType)
}

func TestRulesApplyOnTopOfKubernetesTypes(t *testing.T) {
	var spec workloadSpec
	var c corev1.Container
	root := workloadSchema(t,
		kube.Rules(&spec,
			kube.Field(&spec.Env).ListMap("name").MaxItems(10).Description("The environment of every container."),
		),
		kube.Rules(&c,
			kube.Field(&c.Image).MinLength(1),
		),
	)
	env := at(t, root, "spec", "env")
	require.Equal(t, "The environment of every container.", env.Description)
	require.Equal(t, ptr(int64(10)), env.MaxItems)
	require.Equal(t, ptr("map"), env.XListType)
	require.Equal(t, []string{"name"}, env.Items.Schema.Required, "EnvVar's own schema, from upstream")
	require.Contains(t, env.Items.Schema.Description, "EnvVar represents an environment variable")

	image := at(t, root, "spec", "template", "spec", "containers", "[]", "image")
	require.Equal(t, ptr(int64(1)), image.MinLength)
	require.Contains(t, image.Description, "Container image name.")

	// A field of the user's own type is the user's: upstream's list type
	// is on PodSpec's containers, not on every []Container.
	require.Nil(t, at(t, workloadSchema(t), "spec", "env").XListType)
}

// TestSizeOfACRDEmbeddingAPodTemplate logs the size of the CRD that embeds
// a pod template and more, with Kubernetes' descriptions and without.
func TestSizeOfACRDEmbeddingAPodTemplate(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml func() ([]byte, error)
	}{
		{"workloads (above)", workloads.CRDYAML},
		{"a PodTemplateSpec alone", kube.Resource[one[corev1.PodTemplateSpec], struct{}]{
			Group: "apps.example.com", Version: "v1", Kind: "Template", Plural: "templates", Scope: kube.Namespaced,
		}.CRDYAML},
	} {
		b, err := tc.yaml()
		require.NoError(t, err)
		var crd apiextensionsv1.CustomResourceDefinition
		require.NoError(t, yaml.Unmarshal(b, &crd))
		stripDescriptions(crd.Spec.Versions[0].Schema.OpenAPIV3Schema)
		bare, err := yaml.Marshal(&crd)
		require.NoError(t, err)
		t.Logf("%s: %d bytes of YAML with descriptions, %d without", tc.name, len(b), len(bare))
	}
}

func stripDescriptions(s *apiextensionsv1.JSONSchemaProps) {
	s.Description = ""
	for k, p := range s.Properties {
		stripDescriptions(&p)
		s.Properties[k] = p
	}
	if s.Items != nil && s.Items.Schema != nil {
		stripDescriptions(s.Items.Schema)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		stripDescriptions(s.AdditionalProperties.Schema)
	}
}

func TestAResourceDescribesItselfItsSpecAndItsStatus(t *testing.T) {
	var spec workloadSpec
	var status workloadStatus
	r := workloads
	r.Description = "A workload."
	r.Rules = []kube.TypeRules{kube.Rules(&spec).Description("What runs."), kube.Rules(&status).Description("What ran.")}
	crd, err := r.CRD()
	require.NoError(t, err)
	requireServerValid(t, crd)
	root := *crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	require.Equal(t, "A workload.", root.Description)
	require.Equal(t, "What runs.", at(t, root, "spec").Description)
	require.Equal(t, "What ran.", at(t, root, "status").Description)
	require.Contains(t, at(t, root, "apiVersion").Description, "APIVersion defines the versioned schema", "the API server's own description")
	require.Contains(t, at(t, root, "kind").Description, "Kind is a string value representing the REST resource")

	b, err := r.CRDYAML()
	require.NoError(t, err)
	require.NotContains(t, string(b), "\nstatus:", "CRDYAML leaves out the CRD's status")
}

func TestOmitUpstreamDescriptionsKeepsYoursOnly(t *testing.T) {
	var s one[corev1.PodTemplateSpec]
	r := kube.Resource[one[corev1.PodTemplateSpec], struct{}]{
		Group: "apps.example.com", Version: "v1", Kind: "Template", Plural: "templates", Scope: kube.Namespaced,
		Description: "a template",
		Rules:       []kube.TypeRules{kube.Rules(&s, kube.Field(&s.F).Description("the pods"))},
	}
	with, err := r.CRDYAML()
	require.NoError(t, err)
	r.OmitUpstreamDescriptions = true
	without, err := r.CRDYAML()
	require.NoError(t, err)
	t.Logf("a PodTemplateSpec: %d bytes of YAML with upstream descriptions, %d without", len(with), len(without))
	require.Less(t, len(without), len(with)/2)

	crd, err := r.CRD()
	require.NoError(t, err)
	requireServerValid(t, crd)
	root := *crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	require.Equal(t, "a template", root.Description)
	require.NotEmpty(t, root.Properties["apiVersion"].Description)
	v := at(t, root, "spec", "f")
	require.Equal(t, "the pods", v.Description)
	v.Description = ""
	var described []string
	var walk func(path string, p apiextensionsv1.JSONSchemaProps)
	walk = func(path string, p apiextensionsv1.JSONSchemaProps) {
		if p.Description != "" {
			described = append(described, path)
		}
		for name, c := range p.Properties {
			walk(path+"."+name, c)
		}
		if p.Items != nil && p.Items.Schema != nil {
			walk(path+"[*]", *p.Items.Schema)
		}
		if p.AdditionalProperties != nil && p.AdditionalProperties.Schema != nil {
			walk(path+"{*}", *p.AdditionalProperties.Schema)
		}
	}
	walk("spec.f", v)
	require.Empty(t, described, "no upstream description is left")
}
