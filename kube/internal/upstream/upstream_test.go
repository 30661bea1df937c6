package upstream_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/z5labs/humus/kube/internal/upstream"
)

func TestName(t *testing.T) {
	require.Equal(t, "io.k8s.api.core.v1.Container", upstream.Name("k8s.io/api/core/v1", "Container"))
	require.Equal(t, "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector", upstream.Name("k8s.io/apimachinery/pkg/apis/meta/v1", "LabelSelector"))
	require.Empty(t, upstream.Name("example.com/api/v1", "Container"))
	require.Empty(t, upstream.Name("k8s.io/api/core/v1", ""))
}

func TestGenerateTrimsTheDocuments(t *testing.T) {
	doc := []byte(`{"components":{"schemas":{
		"io.k8s.api.x.v1.Thing":{"type":"object","description":"A thing.","required":["name","port"],"x-kubernetes-map-type":"atomic",
			"properties":{
				"name":{"type":"string","default":"","description":"Its name."},
				"port":{"type":"integer","format":"int32","default":0},
				"protocol":{"type":"string","default":"TCP"},
				"key":{"type":"string","default":""},
				"inner":{"allOf":[{"$ref":"#/components/schemas/io.k8s.api.x.v1.Inner"}],"default":{}},
				"items":{"type":"array","items":{"$ref":"#/components/schemas/io.k8s.api.x.v1.Inner"},"x-kubernetes-list-type":"map","x-kubernetes-list-map-keys":["name"],"x-kubernetes-patch-strategy":"merge"}}},
		"io.k8s.apimachinery.pkg.api.resource.Quantity":{"type":"string","description":"Not an object."}}}}`)
	b, err := upstream.Generate(map[string][]byte{"apis/x/v1": doc})
	require.NoError(t, err)
	types, err := upstream.Decode(b)
	require.NoError(t, err)
	require.Len(t, types, 1, "only object types with properties")
	thing := types["io.k8s.api.x.v1.Thing"]
	require.Equal(t, "A thing.", thing.Description)
	require.Equal(t, []string{"name", "port"}, thing.Required)
	require.Equal(t, "atomic", thing.MapType)
	require.Equal(t, "Its name.", thing.Properties["name"].Description)
	require.Nil(t, thing.Properties["name"].Default, "a zero default of a required field is left out")
	require.Nil(t, thing.Properties["port"].Default)
	require.Equal(t, "int32", thing.Properties["port"].Format)
	require.JSONEq(t, `"TCP"`, string(thing.Properties["protocol"].Default))
	require.JSONEq(t, `""`, string(thing.Properties["key"].Default), "a zero scalar default of a field that isn't required is kept")
	require.Nil(t, thing.Properties["inner"].Default, "a {} default is left out")
	require.Equal(t, "map", thing.Properties["items"].ListType)
	require.Equal(t, []string{"name"}, thing.Properties["items"].ListMapKeys)

	again, err := upstream.Generate(map[string][]byte{"apis/x/v1": doc})
	require.NoError(t, err)
	require.Equal(t, b, again, "the same documents make the same bytes")

	_, err = upstream.Generate(map[string][]byte{"apis/x/v1": doc, "apis/y/v1": []byte(`{"components":{"schemas":{"io.k8s.api.x.v1.Thing":{"type":"object","properties":{"other":{}}}}}}`)})
	require.ErrorContains(t, err, "io.k8s.api.x.v1.Thing differs from its schema in another document")
	_, err = upstream.Generate(map[string][]byte{"apis/x/v1": []byte(`{`)})
	require.ErrorContains(t, err, "upstream: apis/x/v1:")
}

func TestTheEmbeddedTableHasTheTypesOperatorsEmbed(t *testing.T) {
	types, err := upstream.Table()
	require.NoError(t, err)
	for _, name := range []string{
		"io.k8s.api.core.v1.PodTemplateSpec", "io.k8s.api.core.v1.Container", "io.k8s.api.core.v1.EnvVar",
		"io.k8s.api.core.v1.ResourceRequirements", "io.k8s.api.core.v1.Affinity", "io.k8s.api.core.v1.Toleration",
		"io.k8s.api.core.v1.LocalObjectReference", "io.k8s.api.core.v1.SecretKeySelector",
		"io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector", "io.k8s.apimachinery.pkg.apis.meta.v1.Condition",
		"io.k8s.api.apps.v1.DeploymentStrategy", "io.k8s.api.batch.v1.JobTemplateSpec",
		"io.k8s.api.networking.v1.IngressRule", "io.k8s.api.policy.v1.PodDisruptionBudgetSpec",
		"io.k8s.api.rbac.v1.PolicyRule", "io.k8s.api.autoscaling.v2.MetricSpec",
	} {
		require.Contains(t, types, name)
	}
}
