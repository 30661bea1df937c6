//go:build controlplane

package kube_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/kube"
)

// TestAChangeDuringTheBacklogIsReconciledFirst is issue 30 on the API
// server: 300 Gadgets are created with no controller running, then a
// controller with one worker starts, each reconcile taking 20ms. Once it
// has reconciled its first Gadget, a user changes the last Gadget of the
// list and creates a new one. Before the priority queue both waited
// behind the whole initial list, first in, first out; now each is
// reconciled while most of the list still waits.
func TestAChangeDuringTheBacklogIsReconciledFirst(t *testing.T) {
	cluster, dyn, kc := startWithCRD(t, gadgets)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const ns, n = "backlog", 300
	_, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	res := dyn.Resource(gadgets.GVR()).Namespace(ns)
	newGadget := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "controller.humus.example.com/v1",
			"kind":       "Gadget",
			"metadata":   map[string]any{"name": name},
			"spec":       map[string]any{"size": int64(1)},
		}}
	}
	for i := range n {
		_, err := res.Create(ctx, newGadget(fmt.Sprintf("g%05d", i)), metav1.CreateOptions{})
		require.NoError(t, err)
	}

	s := &humus.Setup{Host: humus.OSHost()}
	client, err := kube.NewClient(s, kube.Connection{
		Server: cluster.Server,
		TLS:    cluster.TLS,
		Token:  func(context.Context) (string, error) { return cluster.Token, nil },
	})
	require.NoError(t, err)
	var mu sync.Mutex
	var order []string // name@size, in the order reconciled
	settings := kube.DefaultSettings()
	settings.Name = "gadget-backlog"
	settings.Namespace = ns
	settings.Workers = 1
	settings.LeaderElection.Namespace = ns
	settings.LeaderElection.Identity = "replica-0"
	ctrl, err := kube.NewController(s, client, settings, gadgets,
		kube.ReconcilerFunc[gadgetSpec, gadgetStatus](func(ctx context.Context, g gadget) (kube.Result[gadgetStatus], error) {
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			order = append(order, fmt.Sprintf("%s@%d", g.Name, g.Spec.Size))
			mu.Unlock()
			return kube.Result[gadgetStatus]{}, nil
		}))
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- ctrl.Serve(context.Background()) }()
	t.Cleanup(func() { _ = ctrl.Shutdown(context.Background()) })
	reconciled := func(entry string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return slices.Contains(order, entry)
		}
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) > 0
	}, time.Minute, 5*time.Millisecond, "the controller reconciles its first Gadget")

	_, err = res.Patch(ctx, fmt.Sprintf("g%05d", n-1), types.MergePatchType, []byte(`{"spec":{"size":2}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	_, err = res.Create(ctx, newGadget("new"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, reconciled(fmt.Sprintf("g%05d@2", n-1)), time.Minute, 5*time.Millisecond)
	require.Eventually(t, reconciled("new@1"), time.Minute, 5*time.Millisecond)
	mu.Lock()
	done := len(order)
	mu.Unlock()
	t.Logf("both changes reconciled after %d reconciles of the %d Gadgets' initial list", done-2, n)
	require.Less(t, done, n/2, "the changes are reconciled while most of the initial list waits")

	require.NoError(t, ctrl.Shutdown(ctx))
	require.NoError(t, <-served)
}
