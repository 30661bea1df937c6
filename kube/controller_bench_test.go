package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/z5labs/humus/kube/internal/objcache"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"
)

// A typical custom resource: a spec of a few dozen fields and a status with
// conditions, about 4 KiB as JSON without its managed fields.
type benchSpec struct {
	Image     string            `json:"image"`
	Replicas  int32             `json:"replicas"`
	Args      []string          `json:"args,omitempty"`
	Env       []benchEnv        `json:"env,omitempty"`
	Resources map[string]string `json:"resources,omitempty"`
}

type benchEnv struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type benchStatus struct {
	ReadyReplicas int32              `json:"readyReplicas,omitempty"`
	Conditions    []metav1.Condition `json:"conditions,omitempty"`
}

type benchObject = Object[benchSpec, benchStatus]

// The converge benchmark's Memcached (bench/internal/memcached), converged:
// a size and an image, and one condition, Available.
type benchMemcachedSpec struct {
	Size  int32  `json:"size"`
	Image string `json:"image"`
}

type benchMemcachedStatus struct {
	ReadyReplicas int32              `json:"readyReplicas,omitempty"`
	Conditions    []metav1.Condition `json:"conditions,omitempty"`
}

// newBenchMemcached returns Memcached i as the API server serves it once
// converged: created by the benchmark, its status applied by the
// controller.
func newBenchMemcached(b testing.TB, i int) *unstructured.Unstructured {
	b.Helper()
	t := metav1.Unix(1_800_000_000, 0)
	obj := Object[benchMemcachedSpec, benchMemcachedStatus]{
		TypeMeta: metav1.TypeMeta{APIVersion: "cache.example.com/v1alpha1", Kind: "Memcached"},
		ObjectMeta: metav1.ObjectMeta{
			Name:              fmt.Sprintf("mc-%05d", i),
			Namespace:         "bench",
			UID:               types.UID(fmt.Sprintf("0b6e3f39-6c3a-4a5e-9a0e-6f1f3d3%05d", i)),
			ResourceVersion:   fmt.Sprint(100_000 + 2*i),
			Generation:        1,
			CreationTimestamp: t,
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "converge", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "cache.example.com/v1alpha1", Time: &t, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{".":{},"f:image":{},"f:size":{}}}`)}},
				{Manager: controllerName, Operation: metav1.ManagedFieldsOperationApply, APIVersion: "cache.example.com/v1alpha1", Time: &t, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{"k:{\"type\":\"Available\"}":{".":{},"f:lastTransitionTime":{},"f:message":{},"f:observedGeneration":{},"f:reason":{},"f:status":{},"f:type":{}}}}}`)}, Subresource: "status"},
			},
		},
		Spec: benchMemcachedSpec{Size: 3, Image: "memcached:1.6.26-alpine3.19"},
		Status: benchMemcachedStatus{Conditions: []metav1.Condition{{
			Type: "Available", Status: metav1.ConditionTrue, ObservedGeneration: 1,
			LastTransitionTime: t, Reason: "DeploymentApplied",
		}}},
	}
	raw, err := json.Marshal(obj)
	require.NoError(b, err)
	u := &unstructured.Unstructured{}
	require.NoError(b, u.UnmarshalJSON(raw))
	return u
}

// newBenchObject returns object i as the API server serves it: with the
// managed fields of three managers, kubectl, the controller and its status.
func newBenchObject(b testing.TB, i int) *unstructured.Unstructured {
	b.Helper()
	obj := benchObject{
		TypeMeta: metav1.TypeMeta{APIVersion: "test.example.com/v1", Kind: "Bench"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            fmt.Sprintf("bench-%04d", i),
			Namespace:       testNamespace,
			UID:             types.UID(fmt.Sprintf("0b6e3f39-6c3a-4a5e-9a0e-6f1f3d3c%04d", i)),
			ResourceVersion: "123456",
			Generation:      7,
			Labels:          map[string]string{"app.kubernetes.io/name": "bench", "app.kubernetes.io/instance": fmt.Sprintf("bench-%04d", i), "team": "platform"},
			Annotations:     map[string]string{"example.com/owner": "platform-team@example.com", "example.com/description": strings.Repeat("a typical annotation ", 8)},
			Finalizers:      []string{"test.example.com/cleanup"},
		},
		Spec: benchSpec{
			Image:     "registry.example.com/platform/bench:v1.2.3",
			Replicas:  3,
			Args:      []string{"--port=8080", "--log-level=info", "--metrics-addr=:9090"},
			Resources: map[string]string{"cpu": "500m", "memory": "256Mi"},
		},
	}
	for j := range 36 {
		obj.Spec.Env = append(obj.Spec.Env, benchEnv{Name: fmt.Sprintf("SETTING_%02d", j), Value: fmt.Sprintf("value-of-setting-number-%02d-for-bench", j)})
	}
	for _, typ := range []string{"Available", "Progressing", "Degraded", "Reconciled"} {
		obj.Status.Conditions = append(obj.Status.Conditions, metav1.Condition{
			Type: typ, Status: metav1.ConditionTrue, ObservedGeneration: 7,
			LastTransitionTime: metav1.Unix(1_800_000_000, 0),
			Reason:             "AsExpected", Message: "The deployment has the replicas its spec asks for, all of them ready.",
		})
	}
	obj.Status.ReadyReplicas = 3
	fields := func(n int) *metav1.FieldsV1 {
		var sb strings.Builder
		sb.WriteString(`{"f:spec":{`)
		for j := range n {
			if j > 0 {
				sb.WriteString(",")
			}
			fmt.Fprintf(&sb, `"f:field%02d":{}`, j)
		}
		sb.WriteString(`}}`)
		return &metav1.FieldsV1{Raw: []byte(sb.String())}
	}
	t := metav1.Unix(1_800_000_000, 0)
	obj.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "test.example.com/v1", Time: &t, FieldsType: "FieldsV1", FieldsV1: fields(40)},
		{Manager: controllerName, Operation: metav1.ManagedFieldsOperationApply, APIVersion: "test.example.com/v1", Time: &t, FieldsType: "FieldsV1", FieldsV1: fields(4)},
		{Manager: controllerName, Operation: metav1.ManagedFieldsOperationApply, APIVersion: "test.example.com/v1", Time: &t, FieldsType: "FieldsV1", FieldsV1: fields(30), Subresource: "status"},
	}
	raw, err := json.Marshal(obj)
	require.NoError(b, err)
	u := &unstructured.Unstructured{}
	require.NoError(b, u.UnmarshalJSON(raw))
	return u
}

// cachedJSON is u's JSON as the cache keeps it, without managed fields.
func cachedJSON(b testing.TB, u *unstructured.Unstructured) []byte {
	b.Helper()
	o, err := newCachedObject(u.DeepCopy())
	require.NoError(b, err)
	return []byte(o.Raw())
}

// BenchmarkReconcileOverhead measures what the controller adds to each
// reconcile, on an object in the cache as the informer's transform leaves
// it: the cache lookup, the decode into a new Object, the status encoding
// before Reconcile, and the comparison with the Result's status, which is
// equal, so nothing is applied.
func BenchmarkReconcileOverhead(b *testing.B) {
	u := newBenchObject(b, 0)
	served := len(must(u.MarshalJSON()))
	o, err := newCachedObject(u)
	require.NoError(b, err)

	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	require.NoError(b, indexer.Add(o))
	c, err := newController(&humus.Setup{}, newFakeCluster(b).clients(), nil, testSettings(),
		Resource[benchSpec, benchStatus]{Group: "test.example.com", Version: "v1", Kind: "Bench", Plural: "benches", Scope: Namespaced},
		ReconcilerFunc[benchSpec, benchStatus](func(ctx context.Context, obj benchObject) (Result[benchStatus], error) {
			st := obj.Status
			return Result[benchStatus]{Status: &st}, nil
		}))
	require.NoError(b, err)
	key := testNamespace + "/" + u.GetName()
	ctx := context.Background()

	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		if _, err := c.reconcileKey(ctx, indexer, key); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "CPU-ns/op")
	b.ReportMetric(float64(served), "JSON-B-served")
	b.ReportMetric(float64(len(o.Raw())), "JSON-B-cached")
}

// processCPU is the CPU time the process has used, user and system, in
// nanoseconds. On a shared machine it is a steadier figure than ns/op,
// which counts the time other processes held the cores too; it counts the
// garbage collector's work on other threads.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// BenchmarkDecode compares the controller's decode (decodeJSON), from the cached JSON,
// with apimachinery's DefaultUnstructuredConverter on a deep copy of an
// unstructured object, as the cache held it before, which converts a
// number to a narrower field silently, so the controller doesn't use it.
func BenchmarkDecode(b *testing.B) {
	u := newBenchObject(b, 0)
	o, err := newCachedObject(u.DeepCopy())
	require.NoError(b, err)
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var obj benchObject
			if err := o.Decode(&obj); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unstructured converter", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var obj benchObject
			if err := kruntime.DefaultUnstructuredConverter.FromUnstructured(kruntime.DeepCopyJSON(u.Object), &obj); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCachedObjectBytes measures the heap each cached object holds in
// an informer's indexer, with its key, for the Memcached and the 4 KiB
// object at N=1,000 and N=10,000: as an unstructured object, decoded from
// the API server's JSON (what the cache held before), with its managed
// fields and without, and as the *cachedObject the resource's informer
// now holds. B/object is the heap held per object; JSON-B/object the size
// of the object's JSON without managed fields, and x-JSON their ratio.
func BenchmarkCachedObjectBytes(b *testing.B) {
	for _, obj := range []struct {
		name string
		new  func(testing.TB, int) *unstructured.Unstructured
	}{
		{"Memcached", newBenchMemcached},
		{"4KiB", newBenchObject},
	} {
		for _, n := range []int{1_000, 10_000} {
			raws := make([][]byte, n)
			jsonBytes := 0
			for i := range raws {
				u := obj.new(b, i)
				raws[i] = must(u.MarshalJSON())
				jsonBytes += len(cachedJSON(b, u))
			}
			for _, form := range []struct {
				name      string
				transform cache.TransformFunc
				// read, when set, reads the JSON in place of the
				// unstructured decode and transform.
				read func([]byte) (any, error)
			}{
				{"unstructured", nil, nil},
				{"unstructured without managedFields", func(obj any) (any, error) {
					obj.(*unstructured.Unstructured).SetManagedFields(nil)
					return obj, nil
				}, nil},
				{"cachedObject", objcache.CompactObject, nil},
				// What the controller's cache holds: read straight
				// from the API server's JSON (package objcache).
				{"cachedObject from JSON", nil, func(raw []byte) (any, error) {
					return objcache.ObjectFromJSON(raw)
				}},
			} {
				b.Run(fmt.Sprintf("%s/N=%d/%s", obj.name, n, form.name), func(b *testing.B) {
					var perObject float64
					for b.Loop() {
						var before, after runtime.MemStats
						runtime.GC()
						runtime.ReadMemStats(&before)
						store := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, cache.Indexers{})
						for _, raw := range raws {
							if form.read != nil {
								item, err := form.read(raw)
								if err != nil {
									b.Fatal(err)
								}
								if err := store.Add(item); err != nil {
									b.Fatal(err)
								}
								continue
							}
							u := &unstructured.Unstructured{}
							if err := u.UnmarshalJSON(raw); err != nil {
								b.Fatal(err)
							}
							var item any = u
							if form.transform != nil {
								var err error
								if item, err = form.transform(u); err != nil {
									b.Fatal(err)
								}
							}
							if err := store.Add(item); err != nil {
								b.Fatal(err)
							}
						}
						runtime.GC()
						runtime.ReadMemStats(&after)
						perObject = float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
						runtime.KeepAlive(store)
					}
					b.ReportMetric(perObject, "B/object")
					b.ReportMetric(float64(jsonBytes)/float64(n), "JSON-B/object")
					b.ReportMetric(perObject*float64(n)/float64(jsonBytes), "x-JSON")
				})
			}
		}
	}
}

// BenchmarkCacheWithALabelSelector measures the heap the resource's cache
// holds for N=10,000 Memcacheds in the cluster, of which a quarter carry
// the label shard=a: with no selector the informer caches all of them;
// with Settings.LabelSelector "shard=a" (as one shard of a controller
// sharded by hand, or a controller that cares about labelled objects only)
// it caches the quarter, and the heap held shrinks with it. B/object is
// the heap held per object in the cluster; cached the objects the cache
// holds.
func BenchmarkCacheWithALabelSelector(b *testing.B) {
	const n = 10_000
	gvr := schema.GroupVersionResource{Group: "cache.example.com", Version: "v1alpha1", Resource: "memcacheds"}
	objs := make([]kruntime.Object, n)
	for i := range objs {
		u := newBenchMemcached(b, i)
		if i%4 == 0 {
			u.SetLabels(map[string]string{"shard": "a"})
		}
		objs[i] = u
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(kruntime.NewScheme(), map[schema.GroupVersionResource]string{gvr: "MemcachedList"}, objs...)
	for _, selector := range []string{"", "shard=a"} {
		name := "no selector"
		if selector != "" {
			name = "selector " + selector
		}
		b.Run(name, func(b *testing.B) {
			var perObject float64
			var cached int
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				inf, err := newResourceInformer(clients{dynamic: client}, newWatchHealth(gvr.String(), time.Minute, nil), gvr, "bench", selectors{label: selector}, 0)
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { defer close(done); inf.RunWithContext(ctx) }()
				if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
					b.Fatal("the informer didn't sync")
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perObject = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / n
				cached = len(inf.GetStore().ListKeys())
				cancel()
				<-done
			}
			b.ReportMetric(perObject, "B/object")
			b.ReportMetric(float64(cached), "cached")
		})
	}
}

// BenchmarkOwnWriteCheck measures what the resource's informer does on the
// event of the controller's own status apply, for the Memcached and the
// 4 KiB object: objcache.ChangedOnly, which tells it apart from
// another writer's change landing in a no-op apply, on the cached object
// before the apply and the one after it (a new resourceVersion and status).
// The converge benchmark meets it once an object.
func BenchmarkOwnWriteCheck(b *testing.B) {
	for _, obj := range []struct {
		name string
		new  func(testing.TB, int) *unstructured.Unstructured
	}{
		{"Memcached", newBenchMemcached},
		{"4KiB", newBenchObject},
	} {
		b.Run(obj.name, func(b *testing.B) {
			u := obj.new(b, 0)
			old, err := newCachedObject(u.DeepCopy())
			require.NoError(b, err)
			u.SetResourceVersion("999999")
			require.NoError(b, unstructured.SetNestedField(u.Object, int64(2), "status", "readyReplicas"))
			applied, err := newCachedObject(u)
			require.NoError(b, err)
			status := []string{"readyReplicas"}
			require.True(b, objcache.ChangedOnly(old, applied, "", status))

			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				if !objcache.ChangedOnly(old, applied, "", status) {
					b.Fatal("the status apply counts as another writer's change")
				}
			}
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "CPU-ns/op")
		})
	}
}
