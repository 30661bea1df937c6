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

// TestOwnWritesDontComeBackAsWorkAgainstTheAPIServer counts reconciles
// against a real API server: a new object is reconciled once, its
// finalizer's add, its status apply and the Reconciler's apply that
// creates the ConfigMap it controls (Owns) don't bring it back; a spec change is
// reconciled once; another field manager's change to its ConfigMap is
// reconciled once; and a change by another field manager that lands
// while the controller writes the object, or right after the Reconciler
// applied its ConfigMap, is still reconciled.
//
// Each count is read once later changes to a sentinel object and to its
// ConfigMap have been reconciled, twice over: one watch delivers a
// resource's events in order, and one worker takes keys in order, so by
// then any reconcile the counted object's own writes had queued would
// have run, even one queued while the object was still being reconciled.
func TestOwnWritesDontComeBackAsWorkAgainstTheAPIServer(t *testing.T) {
	cluster, dyn, kc := startWithCRD(t, gadgets)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res := dyn.Resource(gadgets.GVR()).Namespace("default")

	// setSize changes an object's spec.size as another field manager.
	setSize := func(name string, size int) {
		_, err := res.Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"size":`+strconv.Itoa(size)+`}}`),
			metav1.PatchOptions{FieldManager: "someone-else"})
		require.NoError(t, err)
	}
	// poke changes the label poked of an object's ConfigMap as another
	// field manager.
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
	// The Reconciler's clientset is built on the Client, as a user's is.
	rkc, err := kubernetes.NewForConfig(client.Config())
	require.NoError(t, err)
	ctrl, err := kube.NewController(s, client, settings, gadgets,
		kube.ReconcilerFunc[gadgetSpec, gadgetStatus](func(ctx context.Context, g gadget) (kube.Result[gadgetStatus], error) {
			mu.Lock()
			reconciles[g.Name]++
			first := reconciles[g.Name] == 1
			mu.Unlock()
			cm := corev1ac.ConfigMap(g.Name, g.Namespace).
				WithOwnerReferences(metav1ac.OwnerReference().
					WithAPIVersion(g.APIVersion).WithKind(g.Kind).WithName(g.Name).WithUID(g.UID).WithController(true)).
				// The same data whatever the spec: an apply that
				// changed the ConfigMap would reconcile its Gadget once
				// more, since only a creation's event is dropped
				// (kube/ownedwrites.go).
				WithData(map[string]string{"owner": g.Name})
			if _, err := rkc.CoreV1().ConfigMaps(g.Namespace).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: "gadget-controller", Force: true}); err != nil {
				return kube.Result[gadgetStatus]{}, err
			}
			if g.Name == "racing" && first {
				// Lands after the controller's finalizer apply and before
				// its status apply, racing the events of both.
				setSize("racing", 2)
			}
			if g.Name == "racing-configmap" && first {
				// Lands right after the Reconciler's apply of the
				// ConfigMap, racing its event.
				poke("racing-configmap")
			}
			return kube.Result[gadgetStatus]{Status: &gadgetStatus{Seen: g.Spec.Size}}, nil
		}),
		kube.Owns(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}),
		kube.Finalize("controller.humus.example.com/cleanup", func(context.Context, gadget) error { return nil }))
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
	// settled waits until changes to the sentinel and to its ConfigMap
	// have been reconciled, twice over.
	settled := func() {
		t.Helper()
		for range 2 {
			sentinelSize++
			want := count("sentinel") + 1
			setSize("sentinel", sentinelSize)
			require.Eventually(t, func() bool { return count("sentinel") >= want }, time.Minute, 20*time.Millisecond)
			want = count("sentinel") + 1
			poke("sentinel")
			require.Eventually(t, func() bool { return count("sentinel") >= want }, time.Minute, 20*time.Millisecond)
		}
	}

	create("g1", 3)
	seen("g1", 3)
	settled()
	require.Equal(t, 1, count("g1"), "a new object is reconciled once: its finalizer's add, its status apply and its ConfigMap's apply don't bring it back")

	setSize("g1", 2)
	seen("g1", 2)
	settled()
	require.Equal(t, 2, count("g1"), "a spec change is reconciled once")

	poke("g1")
	settled()
	require.Equal(t, 3, count("g1"), "another field manager's change to its ConfigMap is reconciled once")

	create("racing", 1)
	seen("racing", 2)
	settled()
	require.Equal(t, 2, count("racing"), "another field manager's change racing the controller's writes is reconciled, once")

	create("racing-configmap", 1)
	seen("racing-configmap", 1)
	settled()
	require.Equal(t, 2, count("racing-configmap"), "another field manager's change to its ConfigMap racing the Reconciler's apply is reconciled, once")
}
