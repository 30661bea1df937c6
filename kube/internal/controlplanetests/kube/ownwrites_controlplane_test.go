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
	"k8s.io/client-go/dynamic"
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
// applied its ConfigMap, is still reconciled. Each count is read once the
// sentinel's later changes have been reconciled (gadgetCounter.settled).
func TestOwnWritesDontComeBackAsWorkAgainstTheAPIServer(t *testing.T) {
	h := startGadgetCounter(t, "sentinel", func(ctx context.Context, h *gadgetCounter, rkc kubernetes.Interface, g gadget, first bool) error {
		// The same data whatever the spec: an apply that changed the
		// ConfigMap would reconcile its Gadget once more, since only a
		// creation's event is dropped (kube/ownedwrites.go).
		if err := applyConfigMap(ctx, rkc, g, g.Name, nil); err != nil {
			return err
		}
		if g.Name == "racing" && first {
			// Lands after the controller's finalizer apply and before
			// its status apply, racing the events of both.
			h.setSize("racing", 2)
		}
		if g.Name == "racing-configmap" && first {
			// Lands right after the Reconciler's apply of the
			// ConfigMap, racing its event.
			h.poke("racing-configmap")
		}
		return nil
	},
		kube.Owns(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}),
		kube.Finalize("controller.humus.example.com/cleanup", func(context.Context, gadget) error { return nil }))

	h.create("g1", 3)
	h.seen("g1", 3)
	h.settled()
	require.Equal(t, 1, h.count("g1"), "a new object is reconciled once: its finalizer's add, its status apply and its ConfigMap's apply don't bring it back")

	h.setSize("g1", 2)
	h.seen("g1", 2)
	h.settled()
	require.Equal(t, 2, h.count("g1"), "a spec change is reconciled once")

	h.poke("g1")
	h.settled()
	require.Equal(t, 3, h.count("g1"), "another field manager's change to its ConfigMap is reconciled once")

	h.create("racing", 1)
	h.seen("racing", 2)
	h.settled()
	require.Equal(t, 2, h.count("racing"), "another field manager's change racing the controller's writes is reconciled, once")

	h.create("racing-configmap", 1)
	h.seen("racing-configmap", 1)
	h.settled()
	require.Equal(t, 2, h.count("racing-configmap"), "another field manager's change to its ConfigMap racing the Reconciler's apply is reconciled, once")
}

// gadgetCounter is a one-worker Gadget controller serving against a real
// API server, whose Reconciler counts its reconciles by object name and
// sets status.seen to spec.size; and what its tests do to the objects and
// their ConfigMaps as another field manager.
type gadgetCounter struct {
	t   *testing.T
	ctx context.Context
	res dynamic.ResourceInterface // the Gadgets in default
	kc  kubernetes.Interface

	mu         sync.Mutex
	reconciles map[string]int
	pokes      int

	sentinelSize      int
	sentinelConfigMap string
}

// startGadgetCounter serves a gadgetCounter whose Reconciler, after
// counting, calls reconcile with the clientset it builds on the Client, as
// a user's is, and whether this is the object's first reconcile; and
// creates the sentinel Gadget, whose ConfigMap is sentinelConfigMap.
func startGadgetCounter(t *testing.T, sentinelConfigMap string, reconcile func(ctx context.Context, h *gadgetCounter, rkc kubernetes.Interface, g gadget, first bool) error, parts ...kube.Part) *gadgetCounter {
	t.Helper()
	return startGadgetCounterOf(t, gadgets, sentinelConfigMap, reconcile, parts...)
}

// startGadgetCounterOf is startGadgetCounter of the Gadgets r declares
// (its CRD's labels, say).
func startGadgetCounterOf(t *testing.T, r kube.Resource[gadgetSpec, gadgetStatus], sentinelConfigMap string, reconcile func(ctx context.Context, h *gadgetCounter, rkc kubernetes.Interface, g gadget, first bool) error, parts ...kube.Part) *gadgetCounter {
	t.Helper()
	cluster, dyn, kc := startWithCRD(t, r)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	h := &gadgetCounter{t: t, ctx: ctx, res: dyn.Resource(gadgets.GVR()).Namespace("default"), kc: kc,
		reconciles: map[string]int{}, sentinelSize: 1, sentinelConfigMap: sentinelConfigMap}
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
	ctrl, err := kube.NewController(s, client, settings, r,
		kube.ReconcilerFunc[gadgetSpec, gadgetStatus](func(ctx context.Context, g gadget) (kube.Result[gadgetStatus], error) {
			h.mu.Lock()
			h.reconciles[g.Name]++
			first := h.reconciles[g.Name] == 1
			h.mu.Unlock()
			if err := reconcile(ctx, h, rkc, g, first); err != nil {
				return kube.Result[gadgetStatus]{}, err
			}
			return kube.Result[gadgetStatus]{Status: &gadgetStatus{Seen: g.Spec.Size}}, nil
		}), parts...)
	require.NoError(t, err)
	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ctrl.Serve(serveCtx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, ctrl.Shutdown(context.Background()))
		require.NoError(t, <-served)
	})
	h.create("sentinel", h.sentinelSize)
	h.seen("sentinel", int64(h.sentinelSize))
	return h
}

// applyConfigMap applies the ConfigMap name that g controls, with labels,
// as the Reconciler's field manager.
func applyConfigMap(ctx context.Context, rkc kubernetes.Interface, g gadget, name string, labels map[string]string) error {
	cm := corev1ac.ConfigMap(name, g.Namespace).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(g.APIVersion).WithKind(g.Kind).WithName(g.Name).WithUID(g.UID).WithController(true)).
		WithData(map[string]string{"owner": g.Name})
	if labels != nil {
		cm = cm.WithLabels(labels)
	}
	_, err := rkc.CoreV1().ConfigMaps(g.Namespace).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: "gadget-controller", Force: true})
	return err
}

// count is how many times the object name has been reconciled.
func (h *gadgetCounter) count(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reconciles[name]
}

// setSize changes an object's spec.size as another field manager.
func (h *gadgetCounter) setSize(name string, size int) {
	_, err := h.res.Patch(h.ctx, name, types.MergePatchType, []byte(`{"spec":{"size":`+strconv.Itoa(size)+`}}`),
		metav1.PatchOptions{FieldManager: "someone-else"})
	require.NoError(h.t, err)
}

// poke changes the label poked of the ConfigMap name as another field
// manager.
func (h *gadgetCounter) poke(name string) {
	h.mu.Lock()
	h.pokes++
	n := h.pokes
	h.mu.Unlock()
	_, err := h.kc.CoreV1().ConfigMaps("default").Patch(h.ctx, name, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"poked":"`+strconv.Itoa(n)+`"}}}`), metav1.PatchOptions{FieldManager: "someone-else"})
	require.NoError(h.t, err)
}

// create creates the Gadget name with spec.size size.
func (h *gadgetCounter) create(name string, size int) {
	_, err := h.res.Create(h.ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "controller.humus.example.com/v1",
		"kind":       "Gadget",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"size": int64(size)},
	}}, metav1.CreateOptions{})
	require.NoError(h.t, err)
}

// seen waits until the Gadget name's status shows size.
func (h *gadgetCounter) seen(name string, size int64) {
	h.t.Helper()
	require.Eventually(h.t, func() bool {
		got, err := h.res.Get(h.ctx, name, metav1.GetOptions{})
		require.NoError(h.t, err)
		seen, _, _ := unstructured.NestedInt64(got.Object, "status", "seen")
		return seen == size
	}, time.Minute, 50*time.Millisecond, "%s's status shows size %d", name, size)
}

// settled waits until changes to the sentinel and to its ConfigMap have
// been reconciled, twice over: one watch delivers a resource's events in
// order, and one worker takes keys in order, so by then any reconcile an
// earlier event queued has run, even one queued while its object was
// still being reconciled.
func (h *gadgetCounter) settled() {
	h.t.Helper()
	for range 2 {
		h.sentinelSize++
		want := h.count("sentinel") + 1
		h.setSize("sentinel", h.sentinelSize)
		require.Eventually(h.t, func() bool { return h.count("sentinel") >= want }, time.Minute, 20*time.Millisecond)
		want = h.count("sentinel") + 1
		h.poke(h.sentinelConfigMap)
		require.Eventually(h.t, func() bool { return h.count("sentinel") >= want }, time.Minute, 20*time.Millisecond)
	}
}
