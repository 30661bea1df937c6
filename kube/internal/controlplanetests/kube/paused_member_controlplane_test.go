//go:build controlplane

package kube_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane"
	"github.com/z5labs/humus/kube"
)

// pausedShardSettings are the settings of the members of
// TestAShardMemberPausedPastLeaseDurationDoesNoWorkOnWaking.
func pausedShardSettings(ns, id string) kube.Settings {
	settings := kube.DefaultSettings()
	settings.Name = "gadget-paused"
	settings.Namespace = ns
	settings.Workers = 2
	settings.Sharding.Enabled = true
	settings.LeaderElection.Namespace = ns
	settings.LeaderElection.Identity = id
	settings.LeaderElection.LeaseDuration = 4 * time.Second
	settings.LeaderElection.RenewDeadline = 3 * time.Second
	settings.LeaderElection.RetryPeriod = time.Second
	return settings
}

// TestPausedShardMemberProcess is the member that
// TestAShardMemberPausedPastLeaseDurationDoesNoWorkOnWaking pauses, in a
// process of its own: it runs only when that test starts it, with
// HUMUS_PAUSED_MEMBER set to its identity. It prints "reconcile NAME
// UNIXNANO" as each reconcile starts, and "served ERROR" once Serve
// returns.
func TestPausedShardMemberProcess(t *testing.T) {
	id := os.Getenv("HUMUS_PAUSED_MEMBER")
	if id == "" {
		t.Skip("a member process of TestAShardMemberPausedPastLeaseDurationDoesNoWorkOnWaking")
	}
	cluster, err := controlplane.FromKubeconfig(os.Getenv("HUMUS_SHARD_KUBECONFIG"))
	require.NoError(t, err)
	s := &humus.Setup{Host: humus.OSHost()}
	client, err := kube.NewClient(s, kube.Connection{
		Server: cluster.Server,
		TLS:    cluster.TLS,
		Token:  func(context.Context) (string, error) { return cluster.Token, nil },
	})
	require.NoError(t, err)
	var mu sync.Mutex
	ctrl, err := kube.NewController(s, client, pausedShardSettings(os.Getenv("HUMUS_SHARD_NAMESPACE"), id), gadgets,
		kube.ReconcilerFunc[gadgetSpec, gadgetStatus](func(ctx context.Context, g gadget) (kube.Result[gadgetStatus], error) {
			mu.Lock()
			fmt.Printf("reconcile %s %d\n", g.Name, time.Now().UnixNano())
			mu.Unlock()
			return kube.Result[gadgetStatus]{Status: &gadgetStatus{Seen: g.Spec.Size}, After: time.Second}, nil
		}))
	require.NoError(t, err)
	err = ctrl.Serve(context.Background())
	mu.Lock()
	fmt.Printf("served %v\n", err)
	mu.Unlock()
}

// TestAShardMemberPausedPastLeaseDurationDoesNoWorkOnWaking runs two
// members in the test's process and a third in a process of its own over
// 60 Gadgets, stops the third (SIGSTOP) until the others have taken every
// one of its Gadgets, well past LeaseDuration, and continues it (SIGCONT):
// on waking, its timers all overdue, it starts no reconcile, and its Serve
// returns ErrLostLeadership. A member that renewed its Lease on waking,
// before its deadline's timer ran, would have worked on beside the others.
func TestAShardMemberPausedPastLeaseDurationDoesNoWorkOnWaking(t *testing.T) {
	cluster, dyn, kc := startWithCRD(t, gadgets)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const ns, n = "paused", 60
	_, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	res := dyn.Resource(gadgets.GVR()).Namespace(ns)
	for i := range n {
		_, err := res.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "controller.humus.example.com/v1",
			"kind":       "Gadget",
			"metadata":   map[string]any{"name": fmt.Sprintf("g%03d", i)},
			"spec":       map[string]any{"size": int64(1)},
		}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	// The paused member's reconciles, as it prints them.
	var pmu sync.Mutex
	var paused []shardReconcileAt
	var served string
	cmd := exec.Command(os.Args[0], "-test.run=^TestPausedShardMemberProcess$")
	cmd.Env = append(os.Environ(), "HUMUS_PAUSED_MEMBER=member-p",
		"HUMUS_SHARD_KUBECONFIG="+cluster.Kubeconfig, "HUMUS_SHARD_NAMESPACE="+ns)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
	})
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			pmu.Lock()
			switch {
			case len(f) == 3 && f[0] == "reconcile":
				ns, _ := strconv.ParseInt(f[2], 10, 64)
				paused = append(paused, shardReconcileAt{name: f[1], member: "member-p", start: time.Unix(0, ns)})
			case len(f) > 0 && f[0] == "served":
				served = sc.Text()
			}
			pmu.Unlock()
		}
	}()
	pausedSince := func(t time.Time) map[string]time.Time {
		pmu.Lock()
		defer pmu.Unlock()
		out := map[string]time.Time{}
		for _, r := range paused {
			if !r.start.Before(t) {
				out[r.name] = r.start
			}
		}
		return out
	}

	s := &humus.Setup{Host: humus.OSHost()}
	client, err := kube.NewClient(s, kube.Connection{
		Server: cluster.Server,
		TLS:    cluster.TLS,
		Token:  func(context.Context) (string, error) { return cluster.Token, nil },
	})
	require.NoError(t, err)
	rec := &shardReconciles{busy: map[string]string{}}
	var stops []func()
	for _, id := range []string{"member-1", "member-2"} {
		ctrl, err := kube.NewController(s, client, pausedShardSettings(ns, id), gadgets, rec.reconciler(id))
		require.NoError(t, err)
		served := make(chan error, 1)
		go func() { served <- ctrl.Serve(context.Background()) }()
		t.Cleanup(func() { _ = ctrl.Shutdown(context.Background()) })
		stops = append(stops, func() {
			require.NoError(t, ctrl.Shutdown(ctx))
			require.NoError(t, <-served)
		})
	}

	// Settled: the paused member reconciles its share.
	var mine map[string]time.Time
	require.Eventually(t, func() bool {
		mine = pausedSince(time.Now().Add(-3 * time.Second))
		return len(mine) > n/6
	}, time.Minute, 100*time.Millisecond, "member-p reconciles its share")
	time.Sleep(3 * time.Second) // the joins' view changes are over
	mine = pausedSince(time.Now().Add(-2 * time.Second))

	require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	stopped := time.Now()
	var took time.Time
	require.Eventually(t, func() bool {
		for name := range mine {
			at := rec.firstOther(name, stopped, "member-p")
			if at.IsZero() {
				return false
			}
			took = later(took, at)
		}
		return true
	}, time.Minute, 100*time.Millisecond, "the others take member-p's %d Gadgets", len(mine))
	t.Logf("the others took member-p's %d Gadgets %v after it stopped", len(mine), took.Sub(stopped).Round(time.Millisecond))
	time.Sleep(2 * time.Second) // paused well past LeaseDuration
	require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
	resumed := time.Now()
	select {
	case <-read:
	case <-ctx.Done():
		t.Fatal("member-p kept serving after it woke")
	}
	_ = cmd.Wait()
	t.Logf("member-p ended %v after it woke: %s", time.Since(resumed).Round(time.Millisecond), served)
	require.Contains(t, served, kube.ErrLostLeadership.Error())
	for name, at := range pausedSince(stopped) {
		t.Errorf("member-p reconciled %s at %v, %v after it was stopped", name, at, at.Sub(stopped))
	}
	rec.mu.Lock()
	require.Empty(t, rec.overlap)
	rec.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
