//go:build controlplane

package kube_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/kube"
)

// TestANewLeaderCatchesUpUnderCreateDeleteChurn hands the Lease over five
// times, each by a graceful stop, while Gadgets are created and deleted as
// fast as the API server takes them: each new leader's quorum list holds
// Gadgets deleted before its cache is looked at. Each new leader used to
// wait for a deleted Gadget's version in its cache until CatchUpTimeout,
// then release the Lease and end Serve ("objects are older in it than on
// the API server"); now each catches up and reconciles within seconds.
func TestANewLeaderCatchesUpUnderCreateDeleteChurn(t *testing.T) {
	cluster, dyn, kc := startWithCRD(t, gadgets)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	const ns, pool = "churn", 200
	_, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	res := dyn.Resource(gadgets.GVR()).Namespace(ns)
	churnGadget := func(i int) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "controller.humus.example.com/v1",
			"kind":       "Gadget",
			"metadata":   map[string]any{"name": fmt.Sprintf("g%05d", i)},
			"spec":       map[string]any{"size": int64(1)},
		}}
	}
	for i := range pool {
		_, err := res.Create(ctx, churnGadget(i), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	// The churn: create one, delete the oldest, as fast as the API server
	// answers, through a client without client-go's rate limit.
	cfg := cluster.RESTConfig()
	cfg.QPS, cfg.Burst = -1, 0
	fast, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	churnRes := fast.Resource(gadgets.GVR()).Namespace(ns)
	churnCtx, stopChurn := context.WithCancel(ctx)
	type churnResult struct {
		n   int
		err error
	}
	churned := make(chan churnResult, 1)
	go func() {
		i := pool
		var err error
		defer func() { churned <- churnResult{i - pool, err} }()
		for churnCtx.Err() == nil {
			if _, err = churnRes.Create(churnCtx, churnGadget(i), metav1.CreateOptions{}); err != nil {
				return
			}
			if err = churnRes.Delete(churnCtx, fmt.Sprintf("g%05d", i-pool), metav1.DeleteOptions{}); err != nil {
				return
			}
			i++
		}
	}()

	s := &humus.Setup{Host: humus.OSHost()}
	client, err := kube.NewClient(s, kube.Connection{
		Server: cluster.Server,
		TLS:    cluster.TLS,
		Token:  func(context.Context) (string, error) { return cluster.Token, nil },
	})
	require.NoError(t, err)
	var mu sync.Mutex
	first := map[string]time.Time{} // each replica's first reconcile
	type replica struct {
		ctrl   *kube.Controller
		served chan error
	}
	start := func(id string) replica {
		settings := kube.DefaultSettings()
		settings.Name = "gadget-churn"
		settings.Namespace = ns
		settings.Workers = 4
		settings.CatchUpTimeout = 20 * time.Second
		settings.LeaderElection.Namespace = ns
		settings.LeaderElection.Identity = id
		settings.LeaderElection.LeaseDuration = 4 * time.Second
		settings.LeaderElection.RenewDeadline = 3 * time.Second
		settings.LeaderElection.RetryPeriod = 500 * time.Millisecond
		ctrl, err := kube.NewController(s, client, settings, gadgets,
			kube.ReconcilerFunc[gadgetSpec, gadgetStatus](func(ctx context.Context, g gadget) (kube.Result[gadgetStatus], error) {
				mu.Lock()
				if _, ok := first[id]; !ok {
					first[id] = time.Now()
				}
				mu.Unlock()
				return kube.Result[gadgetStatus]{}, nil
			}))
		require.NoError(t, err)
		r := replica{ctrl: ctrl, served: make(chan error, 1)}
		go func() { r.served <- ctrl.Serve(context.Background()) }()
		t.Cleanup(func() { _ = ctrl.Shutdown(context.Background()) })
		return r
	}
	reconciled := func(id string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			_, ok := first[id]
			return ok
		}
	}
	leader := start("replica-0")
	require.Eventually(t, reconciled("replica-0"), time.Minute, 20*time.Millisecond, "the first leader reconciles")
	for i := 1; i <= 5; i++ {
		id := fmt.Sprintf("replica-%d", i)
		next := start(id)
		require.Eventually(t, func() bool { return next.ctrl.Synced().Healthy(ctx) == nil }, time.Minute, 20*time.Millisecond, "%s's caches sync", id)
		handed := time.Now()
		require.NoError(t, leader.ctrl.Shutdown(ctx))
		require.NoError(t, <-leader.served)
		require.Eventually(t, reconciled(id), 15*time.Second, 20*time.Millisecond, "%s catches up and reconciles", id)
		mu.Lock()
		t.Logf("%s reconciled %v after the old leader's Shutdown began", id, first[id].Sub(handed).Round(time.Millisecond))
		mu.Unlock()
		select {
		case err := <-next.served:
			t.Fatalf("%s's Serve ended: %v", id, err)
		default:
		}
		leader = next
	}
	select {
	case r := <-churned:
		t.Fatalf("the churn stopped after %d Gadgets: %v", r.n, r.err)
	default:
	}
	stopChurn()
	r := <-churned
	t.Logf("%d Gadgets created and deleted meanwhile", r.n)
	require.Greater(t, r.n, 100, "churn")
	require.NoError(t, leader.ctrl.Shutdown(ctx))
	require.NoError(t, <-leader.served)
}
