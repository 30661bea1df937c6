package kube_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/z5labs/humus/kube"
)

var (
	testConfigMaps  = corev1.SchemeGroupVersion.WithResource("configmaps")
	testDeployments = appsv1.SchemeGroupVersion.WithResource("deployments")
	testSecrets     = corev1.SchemeGroupVersion.WithResource("secrets")
)

func TestReconcileTestListerReadsItsObjectsAsCopies(t *testing.T) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "opts", Namespace: "ns", Labels: map[string]string{"tier": "cache"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Data: map[string]string{"threads": "4"},
	}
	other := corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "elsewhere"}}
	rt, err := kube.NewReconcileTest("test-controller", kube.TestObjects(testConfigMaps, cm, other))
	require.NoError(t, err)
	// What the test changes after handing an object over isn't seen: the
	// cache holds its encoding, as an informer's does.
	cm.Data["threads"] = "8"

	l, err := kube.ListerFrom[corev1.ConfigMap](rt.Context(t.Context()), testConfigMaps)
	require.NoError(t, err)
	got, err := l.Get("ns", "opts")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"threads": "4"}, got.Data)
	require.Empty(t, got.ManagedFields, "the cache keeps no managed fields")

	// Each read is a new copy: a change to one doesn't reach the cache.
	got.Data["threads"] = "16"
	again, err := l.Get("ns", "opts")
	require.NoError(t, err)
	require.Equal(t, "4", again.Data["threads"])

	_, err = l.Get("ns", "missing")
	require.True(t, apierrors.IsNotFound(err), "%v", err)

	all, err := l.List("", nil)
	require.NoError(t, err)
	require.Len(t, all, 2)
	inNS, err := l.List("ns", nil)
	require.NoError(t, err)
	require.Len(t, inNS, 1)
	sel, err := l.List("", labels.SelectorFromSet(labels.Set{"tier": "cache"}))
	require.NoError(t, err)
	require.Len(t, sel, 1)
	require.Equal(t, "opts", sel[0].Name)
}

func TestReconcileTestCachesHaveTheirControllersForms(t *testing.T) {
	yes := true
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{
		Name: "web", Namespace: "ns", UID: "u1", ResourceVersion: "7", Labels: map[string]string{"app": "web"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "cache.example.com/v1alpha1", Kind: "Memcached", Name: "web", UID: "u0", Controller: &yes}},
	}}
	s := corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tls", Namespace: "ns", Labels: map[string]string{"a": "b"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}, Data: map[string][]byte{"k": []byte("v")}}
	rt, err := kube.NewReconcileTest("test-controller", kube.TestOwned(testDeployments, d), kube.TestMetadata(testSecrets, s))
	require.NoError(t, err)
	ctx := rt.Context(t.Context())

	// An Owns' cache keeps what Owns reads, read as metadata only.
	owned, err := kube.ListerFrom[metav1.PartialObjectMetadata](ctx, testDeployments)
	require.NoError(t, err)
	got, err := owned.Get("ns", "web")
	require.NoError(t, err)
	require.Equal(t, metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "u1", ResourceVersion: "7", OwnerReferences: d.OwnerReferences}, got.ObjectMeta)
	_, err = owned.List("", labels.SelectorFromSet(labels.Set{"app": "web"}))
	require.ErrorContains(t, err, "keeps no labels")
	_, err = kube.ListerFrom[appsv1.Deployment](ctx, testDeployments)
	require.ErrorContains(t, err, "holds metadata only")

	// A Watches' metadata cache keeps the metadata whole but its managed
	// fields.
	meta, err := kube.ListerFrom[metav1.PartialObjectMetadata](ctx, testSecrets)
	require.NoError(t, err)
	m, err := meta.Get("ns", "tls")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"a": "b"}, m.Labels)
	require.Empty(t, m.ManagedFields)

	// A resource it has no cache of fails as NewLister does.
	_, err = kube.ListerFrom[corev1.ConfigMap](ctx, testConfigMaps)
	require.ErrorContains(t, err, "controller test-controller doesn't watch /v1, Resource=configmaps")
}

func TestReconcileTestRecordsEvents(t *testing.T) {
	rt, err := kube.NewReconcileTest("test-controller")
	require.NoError(t, err)
	ctx := rt.Context(t.Context())
	obj := corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "opts", Namespace: "ns", UID: "u1"},
	}
	kube.RecorderFrom(ctx).Normal(obj, "Applied", "Apply", "100% applied")
	kube.RecorderFrom(ctx).Warning(&obj, "Failed", "Apply", strings.Repeat("x", 2000))
	kube.RecorderFrom(ctx).Normal(42, "Applied", "Apply", "not an object")

	evs, err := rt.Events()
	require.ErrorContains(t, err, "a *int is not an object")
	require.Len(t, evs, 2)
	require.Equal(t, kube.TestEvent{
		Regarding: corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "opts", UID: "u1"},
		Type:      corev1.EventTypeNormal, Reason: "Applied", Action: "Apply", Note: "100% applied",
	}, evs[0])
	require.Equal(t, corev1.EventTypeWarning, evs[1].Type)
	require.Len(t, evs[1].Note, 1024, "cut to the API server's limit")
	require.Same(t, rt.Recorder(), kube.RecorderFrom(ctx))
}

func TestNewReconcileTestNamesEveryMistake(t *testing.T) {
	_, err := kube.NewReconcileTest("test-controller",
		kube.TestObjects(testConfigMaps, &corev1.ConfigMap{}),
		kube.TestMetadata(testConfigMaps),
		kube.TestOwned(testDeployments, "not an object"),
	)
	require.ErrorContains(t, err, "object 0 of /v1, Resource=configmaps: the *v1.ConfigMap has no name")
	require.ErrorContains(t, err, "two caches of /v1, Resource=configmaps")
	require.ErrorContains(t, err, "object 0 of apps/v1, Resource=deployments: kube: a *string is not an object")

	// Two objects of one namespace/name in a cache would replace each
	// other unseen.
	_, err = kube.NewReconcileTest("test-controller",
		kube.TestObjects(testConfigMaps,
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "opts", Namespace: "ns"}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "opts", Namespace: "other"}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "opts", Namespace: "ns"}, Data: map[string]string{"threads": "4"}}),
		kube.TestOwned(testDeployments, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d"}}, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d"}}),
	)
	require.EqualError(t, err, "kube: NewReconcileTest: object 2 of /v1, Resource=configmaps: a second object ns/opts: a cache holds one object of each namespace/name\n"+
		"kube: NewReconcileTest: object 1 of apps/v1, Resource=deployments: a second object d: a cache holds one object of each namespace/name")

	_, err = kube.NewReconcileTest("test-controller",
		kube.TestObjects(testConfigMaps, nil, (*corev1.ConfigMap)(nil)),
		kube.TestMetadata(testSecrets.GroupVersion().WithResource("")),
	)
	require.EqualError(t, err, "kube: NewReconcileTest: object 0 of /v1, Resource=configmaps: kube: the object is nil\n"+
		"kube: NewReconcileTest: object 1 of /v1, Resource=configmaps: kube: the *v1.ConfigMap is nil\n"+
		`kube: NewReconcileTest: a cache of "/v1, Resource=": name its resource's version and plural resource, such as {Version: "v1", Resource: "configmaps"}`)
}

// ExampleNewReconcileTest shows a unit test's Reconciler reading a
// ConfigMap through ListerFrom, as it does from its Controller's cache.
func ExampleNewReconcileTest() {
	options := func(ctx context.Context, namespace, name string) (string, error) {
		l, err := kube.ListerFrom[corev1.ConfigMap](ctx, testConfigMaps)
		if err != nil {
			return "", err
		}
		cm, err := l.Get(namespace, name)
		return cm.Data["threads"], err
	}
	rt, err := kube.NewReconcileTest("memcached-controller", kube.TestObjects(testConfigMaps,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "opts", Namespace: "ns"}, Data: map[string]string{"threads": "4"}}))
	if err != nil {
		panic(err)
	}
	threads, err := options(rt.Context(context.Background()), "ns", "opts")
	fmt.Println(threads, err)
	// Output: 4 <nil>
}
