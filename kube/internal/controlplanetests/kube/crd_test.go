package kube_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/z5labs/humus/kube"
)

// requireServerValid checks crd with the API server's own code, as the API
// server checks a CRD that is created: the v1 defaults, the conversion to
// the internal version, and ValidateCustomResourceDefinition, which
// includes the structural schema check, the check of defaults and list
// types, and the compilation of CEL rules.
func requireServerValid(t testing.TB, crd *apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	errs := serverErrors(t, crd)
	require.Empty(t, errs, "the API server's validation of the CRD")
}

// serverErrors are the API server's validation errors of crd.
func serverErrors(t testing.TB, crd *apiextensionsv1.CustomResourceDefinition) []string {
	t.Helper()
	v1 := crd.DeepCopy()
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(v1)
	var internal apiextensions.CustomResourceDefinition
	require.NoError(t, apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(v1, &internal, nil))
	// The API server's strategy records the storage version on create.
	for _, v := range internal.Spec.Versions {
		if v.Storage {
			internal.Status.StoredVersions = append(internal.Status.StoredVersions, v.Name)
		}
	}
	var out []string
	for _, e := range validation.ValidateCustomResourceDefinition(context.Background(), &internal) {
		out = append(out, e.Error())
	}
	return out
}

// requireErrorsContain checks err names each of want, and is one joined
// error.
func requireErrorsContain(t testing.TB, err error, want ...string) {
	t.Helper()
	require.Error(t, err)
	for _, w := range want {
		require.Contains(t, err.Error(), w)
	}
	if len(want) > 1 {
		var joined interface{ Unwrap() []error }
		require.True(t, errors.As(err, &joined), "one error joined with errors.Join")
		require.Greater(t, len(joined.Unwrap()), 1)
	}
}

func TestCRDIsNamedPluralDotGroupWithOneServedStoredVersionAndStatus(t *testing.T) {
	crd, err := Memcached.CRD()
	require.NoError(t, err)
	requireServerValid(t, crd)

	require.Equal(t, "apiextensions.k8s.io/v1", crd.APIVersion)
	require.Equal(t, "CustomResourceDefinition", crd.Kind)
	require.Equal(t, "memcacheds.cache.example.com", crd.Name)
	require.Equal(t, "cache.example.com", crd.Spec.Group)
	require.Equal(t, apiextensionsv1.CustomResourceDefinitionNames{
		Plural: "memcacheds", Singular: "memcached", ShortNames: []string{"mc"}, Kind: "Memcached", ListKind: "MemcachedList",
	}, crd.Spec.Names)
	require.Equal(t, apiextensionsv1.NamespaceScoped, crd.Spec.Scope)
	require.Len(t, crd.Spec.Versions, 1)
	v := crd.Spec.Versions[0]
	require.Equal(t, "v1alpha1", v.Name)
	require.True(t, v.Served)
	require.True(t, v.Storage)
	require.NotNil(t, v.Subresources)
	require.NotNil(t, v.Subresources.Status)
	require.Nil(t, v.Subresources.Scale)
	require.Equal(t, schema.GroupVersionResource{Group: "cache.example.com", Version: "v1alpha1", Resource: "memcacheds"}, Memcached.GVR())
}

func TestCRDRootHasTypeMetaMetadataRequiredSpecAndStatus(t *testing.T) {
	crd, err := Memcached.CRD()
	require.NoError(t, err)
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	require.Equal(t, "object", root.Type)
	require.Equal(t, []string{"spec"}, root.Required)
	require.Len(t, root.Properties, 5)
	require.Equal(t, "string", root.Properties["apiVersion"].Type)
	require.Equal(t, "string", root.Properties["kind"].Type)
	require.Equal(t, apiextensionsv1.JSONSchemaProps{Type: "object"}, root.Properties["metadata"])
	require.Equal(t, "object", root.Properties["spec"].Type)
	require.Equal(t, "object", root.Properties["status"].Type)
}

func TestCRDOfAClusterScopedResource(t *testing.T) {
	r := Memcached
	r.Scope = kube.Cluster
	crd, err := r.CRD()
	require.NoError(t, err)
	require.Equal(t, apiextensionsv1.ClusterScoped, crd.Spec.Scope)
	requireServerValid(t, crd)
}

func TestCRDNamesEveryMissingName(t *testing.T) {
	var r kube.Resource[MemcachedSpec, MemcachedStatus]
	crd, err := r.CRD()
	require.Nil(t, crd)
	requireErrorsContain(t, err,
		"Resource.Group is missing",
		"Resource.Version is missing",
		"Resource.Kind is missing",
		"Resource.Plural is missing",
		`Resource.Scope "": must be kube.Namespaced or kube.Cluster`,
	)
}

func TestCRDRejectsNamesTheAPIServerRejects(t *testing.T) {
	r := kube.Resource[MemcachedSpec, struct{}]{
		Group:   "example",
		Version: "V1",
		Kind:    "Mem cached",
		Plural:  "Memcacheds",
		Scope:   "Namespace",
	}
	_, err := r.CRD()
	requireErrorsContain(t, err,
		`Resource.Group "example": should be a domain with at least one dot`,
		`Resource.Version "V1"`,
		`Resource.Kind "Mem cached"`,
		`Resource.Plural "Memcacheds"`,
		`Resource.Scope "Namespace"`,
	)

	// Each of these is one the API server rejects too.
	for name, mutate := range map[string]func(*apiextensionsv1.CustomResourceDefinition){
		"group": func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Spec.Group = "example"
			c.Name = "memcacheds.example"
		},
		"version": func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Versions[0].Name = "V1" },
		"kind":    func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Names.Kind = "Mem cached" },
		"plural": func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Spec.Names.Plural = "Memcacheds"
			c.Name = "Memcacheds.cache.example.com"
		},
		"scope": func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Scope = "Namespace" },
	} {
		crd, err := Memcached.CRD()
		require.NoError(t, err)
		mutate(crd)
		require.NotEmpty(t, serverErrors(t, crd), name)
	}
}

func TestCRDJoinsErrorsOfNamesAndTypesAndRules(t *testing.T) {
	type bad struct {
		C chan int `json:"c"`
	}
	var b bad
	r := kube.Resource[bad, struct{}]{
		Kind:  "Bad",
		Rules: []kube.TypeRules{kube.Rules(&b, kube.Field(&b.C).MinItems(1))},
	}
	_, err := r.CRD()
	requireErrorsContain(t, err,
		"Resource.Group is missing",
		"spec.c: chan int is a channel",
		"MinItems fits a field of type array",
	)
	require.Equal(t, 1, strings.Count(err.Error(), "is a channel"))
}

func BenchmarkCRD(b *testing.B) {
	b.Run("Memcached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Memcached.CRD(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("EveryRow", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EveryRow.CRD(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestCRDRejectsNamesTheAPIServerRejectsOnceJoined(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(r *kube.Resource[MemcachedSpec, struct{}])
		want   string
	}{
		"a Kind whose list kind is too long": {
			func(r *kube.Resource[MemcachedSpec, struct{}]) { r.Kind = "M" + strings.Repeat("e", 61) },
			"its list kind M" + strings.Repeat("e", 61) + "List must be no more than 63 characters",
		},
		"a name too long": {
			func(r *kube.Resource[MemcachedSpec, struct{}]) {
				r.Group = strings.Repeat("g", 60) + "." + strings.Repeat("h", 60) + "." + strings.Repeat("i", 60) + "." + strings.Repeat("j", 60) + ".io"
				r.Plural = strings.Repeat("p", 10)
			},
			"is 257 characters: it must be no more than 253",
		},
		"a group under k8s.io": {
			func(r *kube.Resource[MemcachedSpec, struct{}]) { r.Group = "cache.k8s.io" },
			`Resource.Group "cache.k8s.io": a group under k8s.io or kubernetes.io is Kubernetes' own`,
		},
		"a group under kubernetes.io": {
			func(r *kube.Resource[MemcachedSpec, struct{}]) { r.Group = "kubernetes.io" },
			`Resource.Group "kubernetes.io": a group under k8s.io or kubernetes.io is Kubernetes' own`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := kube.Resource[MemcachedSpec, struct{}]{Group: "cache.example.com", Version: "v1", Kind: "Memcached", Plural: "memcacheds", Scope: kube.Namespaced}
			tc.mutate(&r)
			_, err := r.CRD()
			require.ErrorContains(t, err, tc.want)

			// The API server rejects it too.
			tc.mutate(&r)
			ok := kube.Resource[MemcachedSpec, struct{}]{Group: "cache.example.com", Version: "v1", Kind: "Memcached", Plural: "memcacheds", Scope: kube.Namespaced}
			crd, err := ok.CRD()
			require.NoError(t, err)
			crd.Name = r.Plural + "." + r.Group
			crd.Spec.Group = r.Group
			crd.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{Plural: r.Plural, Singular: strings.ToLower(r.Kind), Kind: r.Kind, ListKind: r.Kind + "List"}
			require.NotEmpty(t, serverErrors(t, crd))
		})
	}
	// x-k8s.io isn't under k8s.io.
	r := kube.Resource[MemcachedSpec, struct{}]{Group: "cache.x-k8s.io", Version: "v1", Kind: "M" + strings.Repeat("e", 58), Plural: "memcacheds", Scope: kube.Namespaced}
	crd, err := r.CRD()
	require.NoError(t, err)
	requireServerValid(t, crd)
}
