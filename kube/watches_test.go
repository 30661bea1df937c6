package kube

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
)

// configMap is a ConfigMap in the test namespace as the metadata client
// serves it.
func configMap(name string, labels map[string]string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace, Labels: labels},
	}
}

// fullConfigMap is a ConfigMap in the test namespace with data, as the
// dynamic client serves it.
func fullConfigMap(name, value string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata":   map[string]any{"name": name, "namespace": testNamespace},
		"data":       map[string]any{"value": value},
	}}
}

// widgetReferring is a Widget whose label config names the ConfigMap it
// refers to.
func widgetReferring(name, config string) *unstructured.Unstructured {
	u := newWidget(name, 1)
	u.SetLabels(map[string]string{"config": config})
	return u
}

// byConfigLabel is the test's References: a Widget refers to the
// ConfigMap its label config names.
var byConfigLabel = References(func(w widget) []string { return []string{w.Labels["config"]} })

func noStatus(n *counter) Reconciler[widgetSpec, widgetStatus] {
	return ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
		n.add(w.Name)
		return Result[widgetStatus]{}, nil
	})
}

func TestWatchesMapKeysDeduplicateInTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1), newWidget("w2", 1))
		var n counter
		hold := make(chan struct{})
		held := false
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				if n.add(w.Name) == 2 && w.Name == "w2" && !held {
					held = true
					<-hold
				}
				return Result[widgetStatus]{}, nil
			}),
			Watches(configMapGVR, MapFunc(func(obj *metav1.PartialObjectMetadata) []types.NamespacedName {
				// Every ConfigMap maps to w1, twice, and the one named
				// for w2 to w2 as well.
				keys := []types.NamespacedName{{Namespace: testNamespace, Name: "w1"}, {Namespace: testNamespace, Name: "w1"}}
				if obj.Name == "for-w2" {
					keys = append(keys, types.NamespacedName{Namespace: testNamespace, Name: "w2"})
				}
				return keys
			})))
		s := serve(t, c)
		synctest.Wait()
		require.Equal(t, map[string]int{"w1": 1, "w2": 1}, n.get())

		md := f.metadata.Tracker()
		// for-w2 maps to w1 twice and to w2: w1 is reconciled once, and
		// the one worker is then held reconciling w2.
		require.NoError(t, md.Create(configMapGVR, configMap("for-w2", nil), testNamespace))
		synctest.Wait()
		require.Equal(t, map[string]int{"w1": 2, "w2": 2}, n.get())
		// Two more ConfigMaps change, each mapping to w1 twice, while the
		// worker is held: w1 waits in the queue once.
		require.NoError(t, md.Create(configMapGVR, configMap("a", nil), testNamespace))
		require.NoError(t, md.Create(configMapGVR, configMap("b", nil), testNamespace))
		synctest.Wait()
		close(hold)
		synctest.Wait()
		require.Equal(t, map[string]int{"w1": 3, "w2": 2}, n.get())

		require.NoError(t, s.stop(t))
	})
}

func TestWatchesMapsADeletedObjectAsAChangedOne(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    Map
	}{
		{"MapFunc", MapFunc(func(obj *metav1.PartialObjectMetadata) []types.NamespacedName {
			return []types.NamespacedName{{Namespace: obj.Namespace, Name: obj.Labels["widget"]}}
		})},
		{"References", byConfigLabel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				md := configMap("cm", map[string]string{"widget": "w1"})
				f := newFakeCluster(t, widgetReferring("w1", "cm"), widgetReferring("w2", "other"))
				require.NoError(t, f.metadata.Tracker().Create(configMapGVR, md, testNamespace))
				var n counter
				c := newWidgetController(t, f, humus.Telemetry{}, testSettings(), noStatus(&n), Watches(configMapGVR, tc.m))
				s := serve(t, c)
				synctest.Wait()
				require.Equal(t, map[string]int{"w1": 1, "w2": 1}, n.get())

				changed := md.DeepCopy()
				changed.Annotations = map[string]string{"changed": "yes"}
				require.NoError(t, f.metadata.Tracker().Update(configMapGVR, changed, testNamespace))
				synctest.Wait()
				require.Equal(t, map[string]int{"w1": 2, "w2": 1}, n.get(), "a change reconciles the object it maps to, and no other")

				require.NoError(t, f.metadata.Tracker().Delete(configMapGVR, testNamespace, "cm"))
				synctest.Wait()
				require.Equal(t, map[string]int{"w1": 3, "w2": 1}, n.get(), "so does a deletion")

				require.NoError(t, s.stop(t))
			})
		})
	}
}

func TestReferencesFollowAnObjectsReferenceAsItChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, widgetReferring("w1", "a"))
		md := f.metadata.Tracker()
		require.NoError(t, md.Create(configMapGVR, configMap("a", nil), testNamespace))
		require.NoError(t, md.Create(configMapGVR, configMap("b", nil), testNamespace))
		var n counter
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(), noStatus(&n), Watches(configMapGVR, byConfigLabel))
		s := serve(t, c)
		synctest.Wait()

		f.update(t, widgetGVR, widgetReferring("w1", "b"))
		synctest.Wait()
		require.Equal(t, 2, n.get()["w1"])
		require.NoError(t, md.Update(configMapGVR, configMap("a", map[string]string{"v": "2"}), testNamespace))
		synctest.Wait()
		require.Equal(t, 2, n.get()["w1"], "w1 no longer refers to a")
		require.NoError(t, md.Update(configMapGVR, configMap("b", map[string]string{"v": "2"}), testNamespace))
		synctest.Wait()
		require.Equal(t, 3, n.get()["w1"], "and now refers to b")

		require.NoError(t, s.stop(t))
	})
}

func TestWatchesMapFuncPanicIsRecoveredAndRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		tel := humustest.NewTelemetry(t)
		var n counter
		c := newWidgetController(t, f, tel.Telemetry, testSettings(), noStatus(&n),
			Watches(configMapGVR, MapFunc(func(obj *metav1.PartialObjectMetadata) []types.NamespacedName {
				if obj.Name == "bad" {
					panic("no widget for " + obj.Name)
				}
				return []types.NamespacedName{{Namespace: testNamespace, Name: "w1"}}
			})))
		s := serve(t, c)
		synctest.Wait()

		md := f.metadata.Tracker()
		require.NoError(t, md.Create(configMapGVR, configMap("bad", nil), testNamespace))
		synctest.Wait()
		require.Equal(t, 1, n.get()["w1"], "a panicking map maps to nothing")
		recs := recordsWithBody(tel, "map panicked")
		require.Len(t, recs, 1)
		a := attrs(recs[0])
		require.Equal(t, "string", a["exception.type"])
		require.Equal(t, "no widget for bad", a["exception.message"])
		require.Contains(t, a["exception.stacktrace"], "watches_test.go")
		require.Equal(t, testNamespace, a["k8s.namespace.name"])
		require.Equal(t, "bad", a["humus.kube.object.name"])
		var spans int
		for _, sp := range tel.Spans() {
			if sp.Name() == "map panicked" {
				spans++
				require.Equal(t, "panic: no widget for bad", sp.Status().Description)
				require.Len(t, sp.Events(), 1)
				require.Equal(t, "exception", sp.Events()[0].Name)
			}
		}
		require.Equal(t, 1, spans)

		// The informer goes on: the next change maps.
		require.NoError(t, md.Create(configMapGVR, configMap("good", nil), testNamespace))
		synctest.Wait()
		require.Equal(t, 2, n.get()["w1"])

		require.NoError(t, s.stop(t))
	})
}

func TestReferencesPanicIsRecoveredAndRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, widgetReferring("w1", "a"), widgetReferring("w2", "a"))
		require.NoError(t, f.metadata.Tracker().Create(configMapGVR, configMap("a", nil), testNamespace))
		tel := humustest.NewTelemetry(t)
		var n counter
		c := newWidgetController(t, f, tel.Telemetry, testSettings(), noStatus(&n),
			Watches(configMapGVR, References(func(w widget) []string {
				if w.Name == "w2" {
					panic("w2 refers to nothing I know")
				}
				return []string{w.Labels["config"]}
			})))
		s := serve(t, c)
		synctest.Wait()
		require.Len(t, recordsWithBody(tel, "references panicked"), 1)

		require.NoError(t, f.metadata.Tracker().Update(configMapGVR, configMap("a", map[string]string{"v": "2"}), testNamespace))
		synctest.Wait()
		require.Equal(t, map[string]int{"w1": 2, "w2": 1}, n.get(), "w2's panic indexed it under nothing; w1 is found")

		require.NoError(t, s.stop(t))
	})
}

func TestListersReadCopiesOfWhatTheControllerWatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, widgetReferring("w1", "a"), widgetReferring("w2", "b"))
		require.NoError(t, f.dynamic.Tracker().Create(configMapGVR, fullConfigMap("a", "1"), testNamespace))
		require.NoError(t, f.metadata.Tracker().Create(deploymentGVR, &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
			ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: testNamespace},
		}, testNamespace))
		var mu counter
		seen := map[string]string{}
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				mu.add(w.Name)
				cms, err := ListerFrom[corev1.ConfigMap](ctx, configMapGVR)
				if err != nil {
					return Result[widgetStatus]{}, err
				}
				cm, err := cms.Get(w.Namespace, w.Labels["config"])
				if apierrors.IsNotFound(err) {
					seen[w.Name] = "not found"
					return Result[widgetStatus]{}, nil
				}
				if err != nil {
					return Result[widgetStatus]{}, err
				}
				seen[w.Name] = cm.Data["value"]
				cm.Data["value"] = "changed by the reconciler"
				return Result[widgetStatus]{}, nil
			}),
			Owns(deploymentGVR),
			Watches(configMapGVR, byConfigLabel, CacheObjects()))

		_, err := NewLister[corev1.Secret](c, gvr("", "v1", "secrets"))
		require.ErrorContains(t, err, "doesn't watch /v1, Resource=secrets")
		_, err = NewLister[struct{ Name string }](c, configMapGVR)
		require.ErrorContains(t, err, "isn't")
		_, err = NewLister[corev1.ConfigMap](c, deploymentGVR)
		require.ErrorContains(t, err, "holds metadata only")
		_, err = ListerFrom[corev1.ConfigMap](context.Background(), configMapGVR)
		require.ErrorContains(t, err, "no reconcile's")
		widgets, err := NewLister[widget](c, widgetGVR)
		require.NoError(t, err)
		_, err = widgets.Get(testNamespace, "w1")
		require.ErrorContains(t, err, "hasn't synced", "before Serve")

		s := serve(t, c)
		synctest.Wait()
		// The Reconciler changed its copy; the cache's is as it was.
		require.Equal(t, map[string]string{"w1": "1", "w2": "not found"}, seen)
		cms, err := NewLister[corev1.ConfigMap](c, configMapGVR)
		require.NoError(t, err)
		cm, err := cms.Get(testNamespace, "a")
		require.NoError(t, err)
		require.Equal(t, "1", cm.Data["value"])

		w1, err := widgets.Get(testNamespace, "w1")
		require.NoError(t, err)
		require.Equal(t, "a", w1.Labels["config"])
		require.Nil(t, w1.ManagedFields, "the cache keeps no managed fields")
		all, err := widgets.List("", nil)
		require.NoError(t, err)
		require.Len(t, all, 2)
		sel, err := labels.Parse("config=b")
		require.NoError(t, err)
		some, err := widgets.List(testNamespace, sel)
		require.NoError(t, err)
		require.Len(t, some, 1)
		require.Equal(t, "w2", some[0].Name)
		none, err := widgets.List("elsewhere", nil)
		require.NoError(t, err)
		require.Empty(t, none)

		deployments, err := NewLister[metav1.PartialObjectMetadata](c, deploymentGVR)
		require.NoError(t, err)
		d, err := deployments.Get(testNamespace, "d")
		require.NoError(t, err)
		require.Equal(t, "d", d.Name)
		_, err = deployments.Get(testNamespace, "missing")
		require.True(t, apierrors.IsNotFound(err), "%v", err)
		_, err = deployments.List("", sel)
		require.ErrorContains(t, err, "keeps no labels", "an Owns' cache keeps only what Owns reads")

		// A change of the ConfigMap reaches the Reconciler's next read.
		f.update(t, configMapGVR, fullConfigMap("a", "2"))
		synctest.Wait()
		require.Equal(t, "2", seen["w1"])

		require.NoError(t, s.stop(t))
	})
}

func TestWatchesAndSelectorsAreChecked(t *testing.T) {
	f := newFakeCluster(t)
	settings := testSettings()
	settings.LabelSelector = "shard in (a"
	var n counter
	_, err := newController(&humus.Setup{}, f.clients(), nil, settings, widgets(), noStatus(&n),
		Owns(gvr("apps", "v1", "statefulsets"), LabelSelector("app in (x"), CacheObjects()),
		Owns(gvr("", "", "")),
		Watches(configMapGVR, nil),
		Watches(gvr("", "v1", "secrets"), MapFunc(nil), LabelSelector("!!")),
		Watches(gvr("", "v1", "services"), References(func(corev1.Namespace) []string { return nil })),
		Watches(deploymentGVR, byConfigLabel),
		Watches(widgetGVR, byConfigLabel),
		Owns(deploymentGVR, LabelSelector("app=web")),
	)
	require.Error(t, err)
	for _, want := range []string{
		`Settings.LabelSelector "shard in (a" doesn't parse`,
		`part 0: Owns(apps/v1, Resource=statefulsets)'s label selector "app in (x" doesn't parse`,
		`part 1: Owns(/, Resource=) has no Version`,
		"\nOwns(/, Resource=) has no Resource",
		`part 2: Watches(/v1, Resource=configmaps) has no Map`,
		`part 3: Watches(/v1, Resource=secrets)'s label selector "!!" doesn't parse`,
		"\nWatches(/v1, Resource=secrets)'s MapFunc is nil",
		`part 4: Watches(/v1, Resource=services): References takes a v1.Namespace, not the controller's kube.Object`,
		`kube: Watches(apps/v1, Resource=deployments) names apps/v1, Resource=deployments, as Owns(apps/v1, Resource=deployments) does`,
		`Watches(test.example.com/v1, Resource=widgets) names test.example.com/v1, Resource=widgets, as the controller's own resource does`,
	} {
		require.Contains(t, err.Error(), want)
	}
	require.Len(t, strings.Split(err.Error(), "\n"), 10, err.Error())
	require.NoError(t, CheckLabelSelector("app.kubernetes.io/managed-by=website,tier!=cache"))
	require.NoError(t, CheckLabelSelector(""))
}

func gvr(group, version, resource string) k8sschema.GroupVersionResource {
	return k8sschema.GroupVersionResource{Group: group, Version: version, Resource: resource}
}

// A MapFunc that maps by a label misses the object the old version mapped
// to unless both versions are mapped, as controller-runtime's
// EnqueueRequestsFromMapFunc maps them.
func TestWatchesMapsAnUpdatesOldObjectAndItsNewOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1), newWidget("w2", 1), newWidget("w3", 1))
		md := f.metadata.Tracker()
		require.NoError(t, md.Create(configMapGVR, configMap("cm", map[string]string{"widget": "w1"}), testNamespace))
		var n counter
		var maps counter
		byLabel := MapFunc(func(obj *metav1.PartialObjectMetadata) []types.NamespacedName {
			maps.add(obj.Labels["widget"])
			return []types.NamespacedName{{Namespace: obj.Namespace, Name: obj.Labels["widget"]}}
		})
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(), noStatus(&n), Watches(configMapGVR, byLabel))
		s := serve(t, c)
		synctest.Wait()
		require.Equal(t, map[string]int{"w1": 1, "w2": 1, "w3": 1}, n.get())

		require.NoError(t, md.Update(configMapGVR, configMap("cm", map[string]string{"widget": "w2"}), testNamespace))
		synctest.Wait()
		require.Equal(t, map[string]int{"w1": 2, "w2": 2, "w3": 1}, n.get(), "the label moved from w1 to w2 reconciles both")

		require.NoError(t, md.Update(configMapGVR, configMap("cm", nil), testNamespace))
		synctest.Wait()
		require.Equal(t, map[string]int{"w1": 2, "w2": 3, "w3": 1}, n.get(), "the label removed reconciles w2, which it mapped to")

		before := maps.get()
		require.NoError(t, md.Update(configMapGVR, configMap("cm", map[string]string{"widget": "w3"}), testNamespace))
		synctest.Wait()
		require.Equal(t, map[string]int{"w1": 2, "w2": 3, "w3": 2}, n.get())
		require.Equal(t, before[""]+1, maps.get()[""], "the old object is mapped once")
		require.Equal(t, before["w3"]+1, maps.get()["w3"], "and the new one once")

		require.NoError(t, s.stop(t))
	})
}

// A resync hands an update the same object twice: it is mapped once.
func TestWatchesMapsAResyncOnce(t *testing.T) {
	var maps counter
	w := mappedResource{mapFunc: func(obj *metav1.PartialObjectMetadata) []types.NamespacedName {
		maps.add(obj.Labels["widget"])
		return []types.NamespacedName{{Namespace: obj.Namespace, Name: obj.Labels["widget"]}}
	}}
	queue := workqueue.NewTyped[string]()
	defer queue.ShutDown()
	h := (&Controller{}).mappedHandler(w, nil, queue)
	at := func(rv, widget string) *metav1.PartialObjectMetadata {
		cm := configMap("cm", map[string]string{"widget": widget})
		cm.UID, cm.ResourceVersion = "cm-uid", rv
		return cm
	}
	h.OnUpdate(at("5", "w1"), at("5", "w1"))
	require.Equal(t, map[string]int{"w1": 1}, maps.get())
	h.OnUpdate(at("5", "w1"), at("6", "w2"))
	require.Equal(t, map[string]int{"w1": 2, "w2": 1}, maps.get())
	require.Equal(t, 2, queue.Len())
}
