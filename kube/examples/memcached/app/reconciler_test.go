package app_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/examples/memcached/app"
)

// memcached is a Memcached as the controller hands it to the Reconciler,
// but for its apiVersion and kind, which the owner reference doesn't need.
func memcached() app.Object {
	var m app.Object
	m.Name = "cache"
	m.Namespace = "default"
	m.UID = "8e0b4d7c-0000-4000-8000-000000000001"
	m.Generation = 3
	m.Spec = app.MemcachedSpec{Size: 2, Image: "memcached:1.6.26-alpine3.19"}
	return m
}

func TestReconcileAppliesAnOwnedDeploymentAndReportsAvailable(t *testing.T) {
	kc := kubefake.NewClientset()
	res, err := app.Reconciler{Kube: kc}.Reconcile(t.Context(), memcached())
	require.NoError(t, err)

	d, err := kc.AppsV1().Deployments("default").Get(t.Context(), "cache", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, int32(2), *d.Spec.Replicas)
	require.Equal(t, "memcached:1.6.26-alpine3.19", d.Spec.Template.Spec.Containers[0].Image)
	require.Equal(t, map[string]string{"app": "memcached", "memcached": "cache"}, d.Spec.Selector.MatchLabels)
	require.Len(t, d.OwnerReferences, 1)
	ref := d.OwnerReferences[0]
	require.Equal(t, "cache.example.com/v1beta1", ref.APIVersion)
	require.Equal(t, "Memcached", ref.Kind)
	require.Equal(t, memcached().UID, ref.UID)
	require.True(t, *ref.Controller)
	require.Equal(t, app.FieldManager, d.ManagedFields[0].Manager)
	// Sharding.CacheShare is off (this context is no member's reconcile):
	// kube.ShardLabels is nil, and the Deployment has no labels.
	require.Empty(t, d.Labels)

	// No replica is available yet: the Deployment's controller hasn't
	// written its status.
	require.NotNil(t, res.Status)
	c := meta.FindStatusCondition(res.Status.Conditions, "Available")
	require.NotNil(t, c)
	require.Equal(t, metav1.ConditionFalse, c.Status)
	require.Equal(t, "ReplicasUnavailable", c.Reason)
	require.Equal(t, "0/2 replicas available", c.Message)
	require.Equal(t, int64(3), c.ObservedGeneration)
	require.Zero(t, res.After)
}

func TestReconcileReportsAvailableOnceTheReplicasAre(t *testing.T) {
	for _, tc := range []struct {
		name            string
		updated, avail  int32
		want            metav1.ConditionStatus
		reason, message string
	}{
		{"NoneAvailable", 2, 0, metav1.ConditionFalse, "ReplicasUnavailable", "0/2 replicas available"},
		{"OneAvailable", 2, 1, metav1.ConditionFalse, "ReplicasUnavailable", "1/2 replicas available"},
		{"TwoAvailableOfTheOldSpec", 0, 2, metav1.ConditionFalse, "ReplicasUnavailable", "2/2 replicas available"},
		{"AllAvailable", 2, 2, metav1.ConditionTrue, "ReplicasAvailable", "2/2 replicas available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The Deployment's status, as its controller wrote it.
			kc := kubefake.NewClientset(&appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: "default"},
				Status: appsv1.DeploymentStatus{
					Replicas: 2, UpdatedReplicas: tc.updated, ReadyReplicas: tc.avail, AvailableReplicas: tc.avail,
				},
			})
			res, err := app.Reconciler{Kube: kc}.Reconcile(t.Context(), memcached())
			require.NoError(t, err)
			c := meta.FindStatusCondition(res.Status.Conditions, "Available")
			require.NotNil(t, c)
			require.Equal(t, tc.want, c.Status)
			require.Equal(t, tc.reason, c.Reason)
			require.Equal(t, tc.message, c.Message)
			require.Equal(t, tc.avail, res.Status.ReadyReplicas)
			if tc.want == metav1.ConditionTrue {
				require.Empty(t, res.Waiting, "ready")
			} else {
				require.Equal(t, tc.message, res.Waiting, "kube reports Ready False and Reconciling True")
			}
		})
	}
}

func TestReconcileReportsAFailedApplyAsAConditionAndAnError(t *testing.T) {
	kc := kubefake.NewClientset()
	kc.PrependReactor("patch", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("the API server is on fire")
	})
	res, err := app.Reconciler{Kube: kc}.Reconcile(t.Context(), memcached())
	require.ErrorContains(t, err, "the API server is on fire")
	require.NotNil(t, res.Status, "a failure is a condition too")
	c := meta.FindStatusCondition(res.Status.Conditions, "Available")
	require.NotNil(t, c)
	require.Equal(t, metav1.ConditionUnknown, c.Status)
	require.Equal(t, "ApplyFailed", c.Reason)
	require.Contains(t, c.Message, "the API server is on fire")
	require.False(t, kube.IsTerminal(err), "retried")
}

// An apply the API server refuses as invalid fails the same way on every
// retry: it is Terminal, which kube reports as Stalled and doesn't retry.
func TestReconcileDeclaresAnInvalidDeploymentTerminal(t *testing.T) {
	kc := kubefake.NewClientset()
	kc.PrependReactor("patch", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "cache", field.ErrorList{
			field.Invalid(field.NewPath("spec", "template", "metadata", "labels"), "x", "must be no more than 63 characters"),
		})
	})
	res, err := app.Reconciler{Kube: kc}.Reconcile(t.Context(), memcached())
	require.True(t, kube.IsTerminal(err), "%v", err)
	require.True(t, apierrors.IsInvalid(err), "the API server's error, unwrapped")
	c := meta.FindStatusCondition(res.Status.Conditions, "Available")
	require.NotNil(t, c)
	require.Equal(t, "ApplyFailed", c.Reason)
}

func TestFinalizeRecordsThatItRan(t *testing.T) {
	tel := humustest.NewTelemetry(t)
	fin, err := app.NewFinalizer(tel.LoggerProvider, tel.MeterProvider)
	require.NoError(t, err)
	require.NoError(t, fin.Finalize(t.Context(), memcached()))

	records := tel.Records()
	require.Len(t, records, 1)
	require.Equal(t, "memcached finalized", records[0].Body().AsString())

	m, ok := tel.Metric("github.com/z5labs/humus/kube/examples/memcached/app", "memcached.finalizations")
	require.True(t, ok)
	var count int64
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		count += dp.Value
	}
	require.Equal(t, int64(1), count)
}

// reconcileTest is what the Memcached controller's reconcile context
// carries, as a unit test fills it: its cache of ConfigMaps holding cms.
func reconcileTest(t *testing.T, cms ...any) *kube.ReconcileTest {
	t.Helper()
	rt, err := kube.NewReconcileTest(app.FieldManager, kube.TestObjects(app.ConfigMaps(), cms...))
	require.NoError(t, err)
	return rt
}

func TestReconcileRunsMemcachedWithTheOptionsOfItsConfigMap(t *testing.T) {
	rt := reconcileTest(t, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cache-options", Namespace: "default"},
		Data:       map[string]string{"threads": "4", "memory-limit": "64"},
	})
	m := memcached()
	m.Spec.ConfigMapName = "cache-options"
	kc := kubefake.NewClientset()
	_, err := app.Reconciler{Kube: kc}.Reconcile(rt.Context(t.Context()), m)
	require.NoError(t, err)

	d, err := kc.AppsV1().Deployments("default").Get(t.Context(), "cache", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"--memory-limit=64", "--threads=4"}, d.Spec.Template.Spec.Containers[0].Args)

	// The first apply of a generation is a Normal Event on the Memcached.
	evs, err := rt.Events()
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, corev1.EventTypeNormal, evs[0].Type)
	require.Equal(t, "DeploymentApplied", evs[0].Reason)
	require.Equal(t, "cache", evs[0].Regarding.Name)
	require.Equal(t, "applied Deployment cache: 2 replicas of memcached:1.6.26-alpine3.19", evs[0].Note)
}

func TestReconcileWaitsForAMissingConfigMapWithoutApplying(t *testing.T) {
	rt := reconcileTest(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cache-options", Namespace: "elsewhere"}})
	m := memcached()
	m.Spec.ConfigMapName = "cache-options"
	kc := kubefake.NewClientset()
	res, err := app.Reconciler{Kube: kc}.Reconcile(rt.Context(t.Context()), m)
	require.NoError(t, err, "a missing ConfigMap is no error: its creation reconciles the Memcached")
	c := meta.FindStatusCondition(res.Status.Conditions, "Available")
	require.NotNil(t, c)
	require.Equal(t, metav1.ConditionFalse, c.Status)
	require.Equal(t, "ConfigMapNotFound", c.Reason)
	require.Zero(t, res.After)
	require.Equal(t, c.Message, res.Waiting, "kube reports Ready False and Reconciling True")
	require.Empty(t, kc.Actions(), "nothing is applied")
	evs, err := rt.Events()
	require.NoError(t, err)
	require.Empty(t, evs)
}
