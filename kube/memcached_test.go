package kube_test

import (
	"flag"
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus/kube"
)

// The Memcached types of the spec's "In use", as an end user writes them.

type MemcachedSpec struct {
	Size          int32  `json:"size"`
	Image         string `json:"image"`
	ConfigMapName string `json:"configMapName,omitempty"`
}

type MemcachedStatus struct {
	ReadyReplicas int32              `json:"readyReplicas,omitempty"`
	Conditions    []metav1.Condition `json:"conditions,omitempty"`
}

var (
	spec   MemcachedSpec
	status MemcachedStatus
	mcObj  kube.Object[MemcachedSpec, MemcachedStatus]

	Memcached = kube.Resource[MemcachedSpec, MemcachedStatus]{
		Group:      "cache.example.com",
		Version:    "v1alpha1",
		Kind:       "Memcached",
		Plural:     "memcacheds",
		Scope:      kube.Namespaced,
		ShortNames: []string{"mc"},
		Columns: kube.Columns(&mcObj,
			kube.PrinterColumn("Ready", &mcObj.Status.Conditions).Condition("Available"),
			kube.PrinterColumn("Size", &mcObj.Spec.Size),
			kube.PrinterColumn("Age", &mcObj.CreationTimestamp),
		),
		Rules: []kube.TypeRules{
			kube.Rules(&spec,
				kube.Field(&spec.Size).Minimum(1).Maximum(3).Description("How many memcached pods run."),
				kube.Field(&spec.Image).Pattern(regexp.MustCompile(`^memcached:`)).Default("memcached:1.6.26-alpine3.19"),
				kube.Field(&spec.ConfigMapName).Description("The ConfigMap, in the Memcached's namespace, whose data are memcached's options: each key a long option, such as memory-limit, and its value the option's, such as \"64\" for --memory-limit=64. A change to it rolls the pods."),
			),
			kube.Rules(&status,
				kube.Field(&status.Conditions).ListMap("type"),
			),
		},
	}
)

var update = flag.Bool("update", false, "rewrite the golden CRD")

// TestMemcachedCRD is the spec's golden test: a change to the types that
// isn't in the YAML fails go test. The types are the Memcached example's
// first version, v1alpha1, alone, so the golden CRD is the one it deployed
// before it had v1beta1 too (the example's own golden test checks both).
func TestMemcachedCRD(t *testing.T) {
	got, err := Memcached.CRDYAML()
	require.NoError(t, err)
	const golden = "testdata/memcacheds.v1alpha1.crd.yaml"
	if *update {
		require.NoError(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
}
