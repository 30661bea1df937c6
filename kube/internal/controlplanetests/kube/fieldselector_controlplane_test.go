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

// TestFieldSelectorLimitsTheController: with Settings.FieldSelector on one
// of the CRD's selectableFields, the API server sends the controller only
// the matching objects, so it reconciles only those, from its first list
// and its watch; a field the CRD doesn't declare selectable is refused
// with a 400 Bad Request, which ends Serve.
func TestFieldSelectorLimitsTheController(t *testing.T) {
	cluster, dyn, _ := startWithCRD(t, colored)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res := dyn.Resource(colored.GVR()).Namespace("default")
	create := func(name, color string) {
		t.Helper()
		_, err := res.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": colored.Group + "/" + colored.Version,
			"kind":       colored.Kind,
			"metadata":   map[string]any{"name": name},
			"spec":       map[string]any{"color": color, "size": int64(1)},
		}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	create("a", "blue")
	create("b", "red")

	tel := humustest.NewTelemetry(t)
	s := &humus.Setup{Host: humus.OSHost(), Telemetry: tel.Telemetry}
	client, err := kube.NewClient(s, kube.Connection{
		Server: cluster.Server,
		TLS:    cluster.TLS,
		Token:  func(context.Context) (string, error) { return cluster.Token, nil },
	})
	require.NoError(t, err)
	settings := func(name, selector string) kube.Settings {
		st := kube.DefaultSettings()
		st.Name = name
		st.LeaderElection.Namespace = "default"
		st.LeaderElection.Identity = "replica-1"
		st.FieldSelector = selector
		return st
	}

	var mu sync.Mutex
	seen := map[string]int{}
	ctrl, err := kube.NewController(s, client, settings("blue-controller", "spec.color=blue"), colored,
		kube.ReconcilerFunc[colorSpec, struct{}](func(ctx context.Context, o kube.Object[colorSpec, struct{}]) (kube.Result[struct{}], error) {
			mu.Lock()
			defer mu.Unlock()
			seen[o.Name]++
			return kube.Result[struct{}]{}, nil
		}))
	require.NoError(t, err)
	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ctrl.Serve(serveCtx) }()
	t.Cleanup(func() {
		stop()
		_ = ctrl.Shutdown(context.Background())
	})
	saw := func(name string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return seen[name] > 0
		}
	}
	require.Eventually(t, saw("a"), time.Minute, 50*time.Millisecond, "the listed blue object")
	// e is created before d: once d, created last, is reconciled, the
	// watch has sent every earlier event it was going to send.
	create("e", "red")
	create("d", "blue")
	require.Eventually(t, saw("d"), time.Minute, 50*time.Millisecond, "the watched blue object")
	mu.Lock()
	require.Zero(t, seen["b"], "a red object, listed")
	require.Zero(t, seen["e"], "a red object, watched")
	mu.Unlock()
	stop()
	require.NoError(t, ctrl.Shutdown(ctx))
	require.NoError(t, <-served)

	bad, err := kube.NewController(s, client, settings("other-controller", "spec.other=x"), colored,
		kube.ReconcilerFunc[colorSpec, struct{}](func(context.Context, kube.Object[colorSpec, struct{}]) (kube.Result[struct{}], error) {
			return kube.Result[struct{}]{}, nil
		}))
	require.NoError(t, err, "it parses: only the API server knows which fields it selects by")
	err = bad.Serve(ctx)
	require.Error(t, err)
	require.True(t, apierrors.IsBadRequest(err), "%v", err)
	t.Log(err)
}
