package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/z5labs/humus/kube/internal/objcache"
	metadatafake "k8s.io/client-go/metadata/fake"
)

// benchServed returns obj, a typed object, as the API server serves it: as
// unstructured JSON with its apiVersion and kind, and managed fields of
// manager for its top-level fields but metadata.
func benchServed(b testing.TB, obj kruntime.Object, meta *metav1.ObjectMeta, i int, fields string) *unstructured.Unstructured {
	b.Helper()
	t := metav1.Unix(1_800_000_000, 0)
	meta.Name = fmt.Sprintf("obj-%05d", i)
	meta.Namespace = "bench"
	meta.UID = types.UID(fmt.Sprintf("0b6e3f39-6c3a-4a5e-9a0e-6f1f3d3%05d", i))
	meta.ResourceVersion = fmt.Sprint(100_000 + i)
	meta.CreationTimestamp = t
	meta.Labels = map[string]string{"app.kubernetes.io/name": "website", "app.kubernetes.io/instance": fmt.Sprintf("site-%05d", i)}
	meta.ManagedFields = []metav1.ManagedFieldsEntry{{
		Manager: "kubectl-client-side-apply", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &t,
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:app.kubernetes.io/instance":{},"f:app.kubernetes.io/name":{}}},` + fields + `}`)},
	}}
	raw, err := json.Marshal(obj)
	require.NoError(b, err)
	u := &unstructured.Unstructured{}
	require.NoError(b, u.UnmarshalJSON(raw))
	return u
}

// benchSecret is Secret i: an Opaque Secret of a username and a password,
// as a Website's spec names.
func benchSecret(b testing.TB, i int) *unstructured.Unstructured {
	s := &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		Type:     corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			"username": []byte(fmt.Sprintf("site-%05d", i)),
			"password": []byte(fmt.Sprintf("s3cr3t-%05d-0123456789abcdef0123456789", i)),
		},
	}
	return benchServed(b, s, &s.ObjectMeta, i, `"f:data":{".":{},"f:password":{},"f:username":{}},"f:type":{}`)
}

// benchConfigMap is ConfigMap i: a few settings and a small config file.
func benchConfigMap(b testing.TB, i int) *unstructured.Unstructured {
	cm := &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		Data: map[string]string{
			"LOG_LEVEL":   "info",
			"SITE_NAME":   fmt.Sprintf("site-%05d", i),
			"nginx.conf":  "server {\n  listen 8080;\n  root /usr/share/nginx/html;\n  location / { try_files $uri $uri/ =404; }\n}\n",
			"CACHE_BYTES": "67108864",
		},
	}
	return benchServed(b, cm, &cm.ObjectMeta, i, `"f:data":{".":{},"f:CACHE_BYTES":{},"f:LOG_LEVEL":{},"f:SITE_NAME":{},"f:nginx.conf":{}}`)
}

// benchJob is Job i, completed: one container, and its status.
func benchJob(b testing.TB, i int) *unstructured.Unstructured {
	t := metav1.Unix(1_800_000_000, 0)
	one := int32(1)
	j := &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		Spec: batchv1.JobSpec{
			Completions: &one, Parallelism: &one, BackoffLimit: &one,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"batch.kubernetes.io/job-name": fmt.Sprintf("obj-%05d", i)}},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{
						Name: "backup", Image: "registry.example.com/platform/backup:v1.2.3",
						Args:                     []string{"--site", fmt.Sprintf("site-%05d", i), "--to", "s3://backups/sites"},
						TerminationMessagePath:   "/dev/termination-log",
						TerminationMessagePolicy: corev1.TerminationMessageReadFile,
						ImagePullPolicy:          corev1.PullIfNotPresent,
					}},
					DNSPolicy:     corev1.DNSClusterFirst,
					SchedulerName: "default-scheduler",
				},
			},
		},
		Status: batchv1.JobStatus{
			StartTime: &t, CompletionTime: &t, Succeeded: 1,
			Conditions: []batchv1.JobCondition{
				{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastProbeTime: t, LastTransitionTime: t, Reason: "CompletionsReached", Message: "Reached expected number of succeeded pods"},
				{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastProbeTime: t, LastTransitionTime: t, Reason: "CompletionsReached", Message: "Reached expected number of succeeded pods"},
			},
		},
	}
	return benchServed(b, j, &j.ObjectMeta, i, `"f:spec":{"f:backoffLimit":{},"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"backup\"}":{".":{},"f:args":{},"f:image":{},"f:name":{}}},"f:restartPolicy":{}}}}`)
}

// BenchmarkWatchesCachedObjectBytes measures the heap a Watches given
// CacheObjects holds per cached object, for a Secret, a ConfigMap and a
// Job, at N=1,000 and N=10,000 in the controller's namespace: a Widget
// controller on client-go's fakes, with a Watches of the resource given
// CacheObjects and References, served until its first reconcile (after
// every cache has synced), less the same controller's heap with no watched
// object. B/object is the heap held per cached object; JSON-B/object the
// object's JSON without managed fields, as BenchmarkCachedObjectBytes
// measures the resource's own cache, and x-JSON their ratio;
// served-B/object is the JSON as served, with its managed fields; and
// store-B/object what an indexer alone holds of the same objects, as the
// informer's transform leaves them (storeHeap).
func BenchmarkWatchesCachedObjectBytes(b *testing.B) {
	for _, kind := range []struct {
		name string
		gvr  schema.GroupVersionResource
		list string
		new  func(testing.TB, int) *unstructured.Unstructured
	}{
		{"Secret", schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, "SecretList", benchSecret},
		{"ConfigMap", configMapGVR, "ConfigMapList", benchConfigMap},
		{"Job", schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}, "JobList", benchJob},
	} {
		for _, n := range []int{1_000, 10_000} {
			b.Run(fmt.Sprintf("%s/N=%d", kind.name, n), func(b *testing.B) {
				objs := make([]*unstructured.Unstructured, n)
				jsonBytes, servedBytes := 0, 0
				for i := range objs {
					objs[i] = kind.new(b, i)
					servedBytes += len(must(objs[i].MarshalJSON()))
					jsonBytes += len(cachedJSON(b, objs[i]))
				}
				// A first run of the controller makes what it makes once
				// (schemes, instruments), which no other run counts, and
				// frees what the last sub-benchmark's goroutines, ending
				// after its Shutdown, still held.
				watchesHeap(b, kind.gvr, kind.list, nil)
				store := storeHeap(b, objs)
				var perObject float64
				for b.Loop() {
					base := watchesHeap(b, kind.gvr, kind.list, nil)
					held := watchesHeap(b, kind.gvr, kind.list, objs)
					perObject = (held - base) / float64(n)
				}
				b.ReportMetric(perObject, "B/object")
				b.ReportMetric(store/float64(n), "store-B/object")
				b.ReportMetric(float64(jsonBytes)/float64(n), "JSON-B/object")
				b.ReportMetric(float64(servedBytes)/float64(n), "served-B/object")
				b.ReportMetric(perObject*float64(n)/float64(jsonBytes), "x-JSON")
			})
		}
	}
}

// storeHeap returns the heap an indexer holds of objs as the Watches'
// informer's transform leaves them, with their keys: what
// BenchmarkCachedObjectBytes measures of the resource's cache, without the
// informer's own (its queue's and its handler's buffers).
func storeHeap(b *testing.B, objs []*unstructured.Unstructured) float64 {
	b.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	store := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, cache.Indexers{})
	for _, o := range objs {
		item, err := objcache.CompactObject(o.DeepCopy())
		require.NoError(b, err)
		require.NoError(b, store.Add(item))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(store)
	return float64(after.HeapAlloc) - float64(before.HeapAlloc)
}

// watchesHeap returns the heap a Widget controller with a Watches of gvr
// given CacheObjects holds once served until its first reconcile, with
// objs in the cluster's namespace bench.
func watchesHeap(b *testing.B, gvr schema.GroupVersionResource, list string, objs []*unstructured.Unstructured) float64 {
	b.Helper()
	w := widgetReferring("w", "obj-00000")
	w.SetNamespace("bench")
	cluster := []kruntime.Object{w}
	for _, o := range objs {
		cluster = append(cluster, o.DeepCopy())
	}
	f := &fakeCluster{
		dynamic: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(kruntime.NewScheme(), map[schema.GroupVersionResource]string{
			widgetGVR: "WidgetList", gvr: list,
		}, cluster...),
		metadata: metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme()),
		kube:     kubefake.NewClientset(),
	}
	f.dynamic.PrependReactor("patch", "*", f.apply)
	settings := testSettings()
	settings.Namespace = "bench"
	var once sync.Once
	reconciled := make(chan struct{})
	c, err := newController(&humus.Setup{}, f.clients(), nil, settings, widgets(),
		ReconcilerFunc[widgetSpec, widgetStatus](func(context.Context, widget) (Result[widgetStatus], error) {
			once.Do(func() { close(reconciled) })
			return Result[widgetStatus]{}, nil
		}),
		Watches(gvr, References(func(w widget) []string { return []string{w.Labels["config"]} }), CacheObjects()))
	require.NoError(b, err)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Serve(ctx) }()
	<-reconciled
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	inf := c.listerCaches[gvr].informer.Load()
	require.NotNil(b, inf)
	require.Len(b, (*inf).GetStore().ListKeys(), len(objs), "the Watches' cache holds every object")
	cancel()
	require.NoError(b, c.Shutdown(context.Background()))
	<-done
	runtime.KeepAlive(f)
	return float64(after.HeapAlloc) - float64(before.HeapAlloc)
}
