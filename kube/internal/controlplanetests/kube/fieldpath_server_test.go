package kube_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/z5labs/humus/kube"
)

type pathSpec struct {
	Schedule string            `json:"schedule"`
	Labels   map[string]string `json:"labels,omitempty"`
	Hosts    []string          `json:"hosts,omitempty"`
	Nested   struct {
		Size int32 `json:"size"`
	} `json:"nested"`
	// Template is an embedded resource (x-kubernetes-embedded-resource):
	// its schema holds only the fields the CRD declares, none here.
	Template runtime.RawExtension `json:"template"`
}

var (
	pathObject kube.Object[pathSpec, struct{}]
	pathSpecV  pathSpec
)

// pathResource is a Resource whose root rule has fieldPath path.
func pathResource(path string) kube.Resource[pathSpec, struct{}] {
	return kube.Resource[pathSpec, struct{}]{
		Group: "paths.example.com", Version: "v1", Kind: "Path", Plural: "paths", Scope: kube.Namespaced,
		Rules: []kube.TypeRules{
			kube.Rules(&pathObject).XValidation(kube.CEL{Rule: "self.spec.schedule != ''", FieldPath: path}),
			kube.Rules(&pathSpecV, kube.Field(&pathSpecV.Template).EmbeddedResource()),
		},
	}
}

// rootFieldPaths are fieldPaths of a rule on the whole object, some the
// API server accepts and some it refuses.
var rootFieldPaths = []string{
	".spec", ".spec.schedule", "['spec'].schedule", ".spec['schedule']", ".spec.labels.app", ".spec.labels['a.b/c']",
	".spec.nested.size", ".metadata", ".apiVersion", ".kind", ".status",
	".metadata.name", ".metadata.generateName", ".spec.when", ".spec.hosts[0]", ".spec.hosts.x", ".spec.schedule.x",
	"spec", ".spec.", "..spec", ".spec]", "['spec", "[spec]", " ", ".spec\n.schedule",
	// Below an embedded resource, only what its schema declares.
	".spec.template", ".spec.template.apiVersion", ".spec.template.kind", ".spec.template.metadata", ".spec.template.metadata.name", ".spec.template.spec",
	// Quoted names and the scanner's tokens.
	`.spec.labels['a\\']`, `.spec.labels['a\\\\']`, `.spec.labels['a\'b']`, `.spec.labels['a\\b']`, `.spec.labels['a\tb']`, `.spec.labels['a\qb']`,
	`.spec.labels['a']x`, `.spec.labels['']`, `.spec.labels[]`, `.spec.labels['a'`, `.spec.labels['a`, `.spec.labels.`, `.spec.labels..`, `.spec.labels.'a'`,
	`.spec.labels.]`, `.spec.labels.[`, `.spec['labels'].app`, `['spec']['labels']['a.b']`, `.spec.'labels'`,
}

// serverAcceptsFieldPath reports whether the API server's own check of a
// rule's fieldPath (apiextensions validation's pathValid:
// cel.ValidFieldPath on the structural schema the rule is on, after the
// blank and line-break checks) accepts path on the root of crd.
func serverAcceptsFieldPath(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition, path string) bool {
	t.Helper()
	v1 := crd.DeepCopy()
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(v1)
	var internal apiextensions.CustomResourceDefinition
	require.NoError(t, apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(v1, &internal, nil))
	ss, err := structuralschema.NewStructural(internal.Spec.Validation.OpenAPIV3Schema)
	require.NoError(t, err)
	if len(path) > 0 && len(trimSpace(path)) == 0 {
		return false
	}
	for _, r := range path {
		if r == '\n' || r == '\r' {
			return false
		}
	}
	_, _, err = cel.ValidFieldPath(path, ss)
	return err == nil
}

func trimSpace(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// TestCRDRefusesTheFieldPathsTheAPIServerRefuses holds CRD's check of a
// root rule's FieldPath to the API server's own code, path by path: CRD
// returns an error exactly for the paths the server refuses, such as
// .metadata.name (issue 37).
func TestCRDRefusesTheFieldPathsTheAPIServerRefuses(t *testing.T) {
	valid, err := pathResource(".spec").CRD()
	require.NoError(t, err)
	for _, path := range rootFieldPaths {
		crd := valid.DeepCopy()
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema.XValidations[0].FieldPath = path
		server := serverAcceptsFieldPath(t, crd, path)
		_, err := pathResource(path).CRD()
		if server {
			assert.NoError(t, err, "the API server accepts %q", path)
		} else {
			assert.ErrorContains(t, err, "which the API server refuses", "the API server refuses %q", path)
		}
	}
}
