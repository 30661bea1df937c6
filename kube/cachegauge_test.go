package kube

import (
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus/humustest"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	ktel "github.com/z5labs/humus/kube/internal/telemetry"
)

// cacheGauge returns humus.kube.controller.cache.objects as collected
// now, by informer, and fails the test if a data point's attributes are
// other than the controller's name and the informer's. ok is false when
// the gauge has no data point.
func cacheGauge(t *testing.T, tel *humustest.Telemetry) (byInformer map[string]int64, ok bool) {
	t.Helper()
	m, found := tel.Metric(instrumentationScope, ktel.CacheObjectsName)
	if !found {
		return nil, false
	}
	require.Equal(t, "{object}", m.Unit)
	require.Equal(t, "Objects in each of the controller's informers' caches, by informer.", m.Description)
	g, isGauge := m.Data.(metricdata.Gauge[int64])
	require.True(t, isGauge, "an Int64ObservableGauge")
	if len(g.DataPoints) == 0 {
		return nil, false
	}
	byInformer = map[string]int64{}
	for _, dp := range g.DataPoints {
		require.Equal(t, 2, dp.Attributes.Len(), "the controller's name and the informer's, nothing else")
		name, _ := dp.Attributes.Value(attrController)
		require.Equal(t, controllerName, name.AsString())
		inf, has := dp.Attributes.Value(ktel.AttrInformer)
		require.True(t, has)
		byInformer[inf.AsString()] = dp.Value
	}
	return byInformer, true
}

// TestTheCacheGaugeCountsEachInformersObjects: while the informers run,
// humus.kube.controller.cache.objects reads, at each collection, how many
// objects each informer's cache holds, by informer (its GVR string); once
// Serve has returned, its callback is unregistered and the gauge reports
// nothing. With and without Sharding, as every replica's informers run
// alike.
func TestTheCacheGaugeCountsEachInformersObjects(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		t.Run(fmt.Sprintf("Sharding.Enabled=%v", sharded), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeCluster(t, newWidget("w1", 1), newWidget("w2", 2))
				md := f.metadata.Tracker()
				controlledBy := func(owner string) metav1.OwnerReference {
					return metav1.OwnerReference{APIVersion: "test.example.com/v1", Kind: "Widget", Name: owner, UID: types.UID("uid-" + owner), Controller: ptr.To(true)}
				}
				require.NoError(t, md.Create(configMapGVR, ownedConfigMap(testNamespace, "c1", controlledBy("w1")), testNamespace))
				require.NoError(t, md.Create(configMapGVR, ownedConfigMap(testNamespace, "c2", controlledBy("w2")), testNamespace))
				tel := humustest.NewTelemetry(t)
				s := testSettings()
				s.Sharding.Enabled = sharded
				var n counter
				c := newWidgetController(t, f, tel.Telemetry, s, noStatus(&n), Owns(configMapGVR))

				_, ok := cacheGauge(t, tel)
				require.False(t, ok, "nothing observed before the informers start")

				srv := serve(t, c)
				synctest.Wait()
				got, ok := cacheGauge(t, tel)
				require.True(t, ok)
				require.Equal(t, map[string]int64{widgetGVR.String(): 2, configMapGVR.String(): 2}, got)

				f.create(t, widgetGVR, newWidget("w3", 3))
				require.NoError(t, md.Delete(configMapGVR, testNamespace, "c1"))
				synctest.Wait()
				got, _ = cacheGauge(t, tel)
				require.Equal(t, map[string]int64{widgetGVR.String(): 3, configMapGVR.String(): 1}, got, "read from the caches at each collection")

				require.NoError(t, srv.stop(t))
				_, ok = cacheGauge(t, tel)
				require.False(t, ok, "the informers stopped, their callback is unregistered")
			})
		})
	}
}

// TestTheCacheGaugeIsObservedAgainOnEachStart: a Controller served, stopped
// and served again registers the gauge's callback once per run, so the
// second run observes one data point per informer, not two.
func TestTheCacheGaugeIsObservedAgainOnEachStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		tel := humustest.NewTelemetry(t)
		for run := range 2 {
			var n counter
			c := newWidgetController(t, f, tel.Telemetry, testSettings(), noStatus(&n))
			srv := serve(t, c)
			synctest.Wait()
			m, ok := tel.Metric(instrumentationScope, ktel.CacheObjectsName)
			require.True(t, ok, "run %d", run)
			require.Len(t, m.Data.(metricdata.Gauge[int64]).DataPoints, 1, "run %d: one informer, one data point", run)
			require.NoError(t, srv.stop(t))
			_, ok = cacheGauge(t, tel)
			require.False(t, ok, "run %d stopped", run)
		}
	})
}

// BenchmarkCacheGaugeCollect measures one collection of
// humus.kube.controller.cache.objects over an informer's cache of 10,000
// objects: "ListKeys" alone, what the callback reads per cache, and
// "Collect", the in-memory SDK's whole collection with the callback.
func BenchmarkCacheGaugeCollect(b *testing.B) {
	const n = 10000
	store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for i := range n {
		u := &unstructured.Unstructured{}
		u.SetNamespace(testNamespace)
		u.SetName(fmt.Sprintf("w%d", i))
		require.NoError(b, store.Add(u))
	}
	b.Run("ListKeys", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if len(store.ListKeys()) != n {
				b.Fatal("short")
			}
		}
	})
	b.Run("Collect", func(b *testing.B) {
		tel := humustest.NewTelemetry(b)
		kt, err := ktel.New(tel.Telemetry, controllerName, 0)
		require.NoError(b, err)
		reg, err := kt.ObserveCaches([]string{widgetGVR.String()}, []ktel.Cache{store})
		require.NoError(b, err)
		defer func() { require.NoError(b, reg.Unregister()) }()
		b.ReportAllocs()
		for b.Loop() {
			tel.Metrics()
		}
	})
}
