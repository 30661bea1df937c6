package app_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/z5labs/humus/kube/conversion"
	"github.com/z5labs/humus/kube/examples/memcached/app"
)

// TestMemcachedConversionsRoundTrip: fuzzed Memcacheds of v1alpha1 and
// v1beta1 come back equal through the other version, v1beta1's resources
// too, which v1alpha1 keeps in its annotation.
func TestMemcachedConversionsRoundTrip(t *testing.T) {
	require.NoError(t, conversion.RoundTrip(app.Memcached.Conversion(), conversion.RoundTripOptions{}))
}

// TestV1alpha1WithoutPreservingLosesTheResources shows what Preserving
// keeps: without it, RoundTrip names the path v1alpha1 drops.
func TestV1alpha1WithoutPreservingLosesTheResources(t *testing.T) {
	k := app.Memcached.Conversion()
	k.Spokes[0] = conversion.NewSpoke("v1alpha1", app.ToV1beta1, app.FromV1beta1)
	err := conversion.RoundTrip(k, conversion.RoundTripOptions{})
	require.ErrorContains(t, err, "spec.resources")
}

// TestTheStorageVersionIsTheHub: v1beta1 is the controller's version, the
// hub and the storage version, so the controller's informer and the
// garbage collector's (at the preferred version, v1beta1) read without a
// conversion.
func TestTheStorageVersionIsTheHub(t *testing.T) {
	require.Equal(t, "v1beta1", app.Memcached.StorageVersion())
	require.Equal(t, app.Memcached.Version, app.Memcached.StorageVersion())
	crd, err := app.Memcached.CRD()
	require.NoError(t, err)
	require.Equal(t, "Webhook", string(crd.Spec.Conversion.Strategy))
	for _, v := range crd.Spec.Versions {
		require.True(t, v.Served, v.Name)
	}
}

func TestReconcileSetsTheContainersResources(t *testing.T) {
	kc := kubefake.NewClientset()
	m := memcached()
	m.Spec.Resources = &corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")},
	}
	_, err := app.Reconciler{Kube: kc}.Reconcile(t.Context(), m)
	require.NoError(t, err)
	d, err := kc.AppsV1().Deployments("default").Get(t.Context(), "cache", metav1.GetOptions{})
	require.NoError(t, err)
	got := d.Spec.Template.Spec.Containers[0].Resources
	require.Equal(t, "64Mi", got.Limits.Memory().String())
	require.Equal(t, "10m", got.Requests.Cpu().String())
}
