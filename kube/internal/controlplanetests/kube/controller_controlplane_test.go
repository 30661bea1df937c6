//go:build controlplane

package kube_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
)

type gadgetSpec struct {
	Size int32 `json:"size"`
}

type gadgetStatus struct {
	Seen int32 `json:"seen,omitempty"`
}

type gadget = kube.Object[gadgetSpec, gadgetStatus]

var gadgets = kube.Resource[gadgetSpec, gadgetStatus]{
	Group:   "controller.humus.example.com",
	Version: "v1",
	Kind:    "Gadget",
	Plural:  "gadgets",
	Scope:   kube.Namespaced,
}

// TestControllerAgainstTheAPIServer shows what only a real API server
// decides: the controller's status and finalizer applies are accepted
// under its field manager, removing the finalizer completes a deletion, and
// the Lease has no holder after shutdown.
func TestControllerAgainstTheAPIServer(t *testing.T) {
	cluster, dyn, kc := startWithCRD(t, gadgets)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	tel := humustest.NewTelemetry(t)
	s := &humus.Setup{Host: humus.OSHost(), Telemetry: tel.Telemetry}
	client, err := kube.NewClient(s, kube.Connection{
		Server: cluster.Server,
		TLS:    cluster.TLS,
		Token:  func(context.Context) (string, error) { return cluster.Token, nil },
	})
	require.NoError(t, err)

	const finalizer = "controller.humus.example.com/cleanup"
	var mu sync.Mutex
	finalized := 0
	settings := kube.DefaultSettings()
	settings.Name = "gadget-controller"
	settings.LeaderElection.Namespace = "default"
	settings.LeaderElection.Identity = "replica-1"
	ctrl, err := kube.NewController(s, client, settings, gadgets,
		kube.ReconcilerFunc[gadgetSpec, gadgetStatus](func(ctx context.Context, g gadget) (kube.Result[gadgetStatus], error) {
			return kube.Result[gadgetStatus]{Status: &gadgetStatus{Seen: g.Spec.Size}}, nil
		}),
		kube.Finalize(finalizer, func(ctx context.Context, g gadget) error {
			mu.Lock()
			defer mu.Unlock()
			finalized++
			return nil
		}))
	require.NoError(t, err)

	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ctrl.Serve(serveCtx) }()
	t.Cleanup(func() {
		stop()
		_ = ctrl.Shutdown(context.Background())
	})

	res := dyn.Resource(gadgets.GVR()).Namespace("default")
	_, err = res.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "controller.humus.example.com/v1",
		"kind":       "Gadget",
		"metadata":   map[string]any{"name": "g1"},
		"spec":       map[string]any{"size": int64(3)},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)

	var got *unstructured.Unstructured
	require.Eventually(t, func() bool {
		got, err = res.Get(ctx, "g1", metav1.GetOptions{})
		require.NoError(t, err)
		seen, _, _ := unstructured.NestedInt64(got.Object, "status", "seen")
		return seen == 3 && len(got.GetFinalizers()) == 1
	}, time.Minute, 100*time.Millisecond, "the status and the finalizer are applied")
	require.Equal(t, []string{finalizer}, got.GetFinalizers())
	managers := map[string]bool{}
	for _, mf := range got.GetManagedFields() {
		managers[mf.Manager+" "+string(mf.Operation)+" "+mf.Subresource] = true
	}
	require.True(t, managers["gadget-controller Apply "], "the finalizer, applied under the field manager: %v", managers)
	require.True(t, managers["gadget-controller Apply status"], "the status, applied under the field manager: %v", managers)

	require.NoError(t, res.Delete(ctx, "g1", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		_, err := res.Get(ctx, "g1", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, time.Minute, 100*time.Millisecond, "removing the finalizer completes the deletion")
	mu.Lock()
	require.Equal(t, 1, finalized)
	mu.Unlock()

	// The controller's applies name the object's uid, so that an apply
	// racing a deletion never recreates the object: the API server refuses
	// an apply naming a uid when no object exists.
	_, err = res.Apply(ctx, "g1", &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "controller.humus.example.com/v1",
		"kind":       "Gadget",
		"metadata":   map[string]any{"name": "g1", "namespace": "default", "uid": string(got.GetUID()), "finalizers": []any{finalizer}},
		"spec":       map[string]any{"size": int64(3)},
	}}, metav1.ApplyOptions{FieldManager: "gadget-controller", Force: true})
	require.True(t, apierrors.IsConflict(err), "an apply naming a deleted object's uid is refused: %v", err)
	_, err = res.Get(ctx, "g1", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "and creates nothing")

	lease, err := kc.CoordinationV1().Leases("default").Get(ctx, "gadget-controller", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "replica-1", ptrValue(lease.Spec.HolderIdentity))

	stop()
	require.NoError(t, ctrl.Shutdown(ctx))
	require.NoError(t, <-served)
	lease, err = kc.CoordinationV1().Leases("default").Get(ctx, "gadget-controller", metav1.GetOptions{})
	require.NoError(t, err)
	require.Empty(t, ptrValue(lease.Spec.HolderIdentity), "the Lease is released on shutdown")
}

func ptrValue(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
