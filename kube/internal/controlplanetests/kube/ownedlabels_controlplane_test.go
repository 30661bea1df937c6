//go:build controlplane

package kube_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
)

// TestALabelSelectedOwnsAgainstTheAPIServer: a controller Owns ConfigMaps
// with a set-based label selector, and its Reconciler applies, through a
// clientset built on the Client (protobuf answers), one ConfigMap the
// selector selects ("-sel") and one it doesn't ("-other"). The created
// child the Owns hears doesn't come back as work, which needs its labels
// read from the API server's answer; the one it doesn't hear queues
// nothing, ever. Counting is ordered by a sentinel Gadget: with one
// worker, once the sentinel's later changes are reconciled, every earlier
// event has been.
func TestALabelSelectedOwnsAgainstTheAPIServer(t *testing.T) {
	cluster, dyn, kc := startWithCRD(t, gadgets)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res := dyn.Resource(gadgets.GVR()).Namespace("default")

	setSize := func(name string, size int) {
		_, err := res.Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"size":`+strconv.Itoa(size)+`}}`),
			metav1.PatchOptions{FieldManager: "someone-else"})
		require.NoError(t, err)
	}
	pokes := 0
	poke := func(name string) {
		pokes++
		_, err := kc.CoreV1().ConfigMaps("default").Patch(ctx, name, types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"poked":"`+strconv.Itoa(pokes)+`"}}}`), metav1.PatchOptions{FieldManager: "someone-else"})
		require.NoError(t, err)
	}

	var mu sync.Mutex
	reconciles := map[string]int{}
	count := func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return reconciles[name]
	}
	s := &humus.Setup{Host: humus.OSHost(), Telemetry: humustest.NewTelemetry(t).Telemetry}
	client, err := kube.NewClient(s, kube.Connection{
		Server: cluster.Server,
		TLS:    cluster.TLS,
		Token:  func(context.Context) (string, error) { return cluster.Token, nil },
	})
	require.NoError(t, err)
	settings := kube.DefaultSettings()
	settings.Name = "gadget-controller"
	settings.Workers = 1
	settings.LeaderElection.Namespace = "default"
	settings.LeaderElection.Identity = "replica-1"
	rkc, err := kubernetes.NewForConfig(client.Config())
	require.NoError(t, err)
	apply := func(ctx context.Context, g gadget, name, team string) error {
		cm := corev1ac.ConfigMap(name, g.Namespace).
			WithLabels(map[string]string{"example.com/team": team, "empty": ""}).
			WithOwnerReferences(metav1ac.OwnerReference().
				WithAPIVersion(g.APIVersion).WithKind(g.Kind).WithName(g.Name).WithUID(g.UID).WithController(true)).
			WithData(map[string]string{"owner": g.Name})
		_, err := rkc.CoreV1().ConfigMaps(g.Namespace).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: "gadget-controller", Force: true})
		return err
	}
	ctrl, err := kube.NewController(s, client, settings, gadgets,
		kube.ReconcilerFunc[gadgetSpec, gadgetStatus](func(ctx context.Context, g gadget) (kube.Result[gadgetStatus], error) {
			mu.Lock()
			reconciles[g.Name]++
			mu.Unlock()
			if err := apply(ctx, g, g.Name+"-sel", "a"); err != nil {
				return kube.Result[gadgetStatus]{}, err
			}
			if err := apply(ctx, g, g.Name+"-other", "c"); err != nil {
				return kube.Result[gadgetStatus]{}, err
			}
			return kube.Result[gadgetStatus]{Status: &gadgetStatus{Seen: g.Spec.Size}}, nil
		}),
		kube.Owns(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"},
			kube.LabelSelector("example.com/team in (a,b),empty,!missing")))
	require.NoError(t, err)
	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ctrl.Serve(serveCtx) }()
	defer func() {
		stop()
		require.NoError(t, ctrl.Shutdown(context.Background()))
		require.NoError(t, <-served)
	}()

	create := func(name string, size int) {
		_, err := res.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "controller.humus.example.com/v1",
			"kind":       "Gadget",
			"metadata":   map[string]any{"name": name},
			"spec":       map[string]any{"size": int64(size)},
		}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	seen := func(name string, size int64) {
		t.Helper()
		require.Eventually(t, func() bool {
			got, err := res.Get(ctx, name, metav1.GetOptions{})
			require.NoError(t, err)
			seen, _, _ := unstructured.NestedInt64(got.Object, "status", "seen")
			return seen == size
		}, time.Minute, 50*time.Millisecond, "%s's status shows size %d", name, size)
	}
	sentinelSize := 1
	create("sentinel", sentinelSize)
	seen("sentinel", 1)
	settled := func() {
		t.Helper()
		for range 2 {
			sentinelSize++
			want := count("sentinel") + 1
			setSize("sentinel", sentinelSize)
			require.Eventually(t, func() bool { return count("sentinel") >= want }, time.Minute, 20*time.Millisecond)
			want = count("sentinel") + 1
			poke("sentinel-sel")
			require.Eventually(t, func() bool { return count("sentinel") >= want }, time.Minute, 20*time.Millisecond)
		}
	}

	create("g1", 3)
	seen("g1", 3)
	settled()
	require.Equal(t, 1, count("g1"), "a new object is reconciled once")

	poke("g1-sel")
	settled()
	require.Equal(t, 2, count("g1"), "another field manager's change to its selected ConfigMap is reconciled once")

	poke("g1-other")
	poke("g1-other")
	settled()
	require.Equal(t, 2, count("g1"), "a change to its unselected ConfigMap queues nothing")

	setSize("g1", 2)
	seen("g1", 2)
	settled()
	require.Equal(t, 3, count("g1"), "a spec change is reconciled once")

	// A second Gadget, created while the first's children exist.
	create("g2", 1)
	seen("g2", 1)
	settled()
	require.Equal(t, 1, count("g2"), "a second new object is reconciled once")
	require.Equal(t, 3, count("g1"))

	// The unselected child deleted: the Owns never saw it, nothing queued.
	require.NoError(t, kc.CoreV1().ConfigMaps("default").Delete(ctx, "g2-other", metav1.DeleteOptions{}))
	settled()
	require.Equal(t, 1, count("g2"), "the deletion of its unselected ConfigMap queues nothing")

	// The selected child deleted: queued once, and the recreation's event dropped.
	require.NoError(t, kc.CoreV1().ConfigMaps("default").Delete(ctx, "g2-sel", metav1.DeleteOptions{}))
	settled()
	require.Equal(t, 2, count("g2"), "the deletion of its selected ConfigMap reconciles it once; the recreation doesn't come back")
}
