//go:build controlplane

package faults_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus/controlplane"
	"github.com/z5labs/humus/controlplane/apptest"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/kube/examples/memcached/app"
)

// TestWatchHistoryCompactedAndAFreshWatchCacheNoUpdateIsMissed stops the
// App (SIGSTOP) while its Memcacheds are resized, waits until etcd has
// compacted the history its watches would resume from, restarts the API
// server (a fresh watch cache) and continues the App: its watches get 410
// Gone, it lists again, and every resize is applied. It has a control
// plane of its own, whose API server compacts every 2s (default 5m).
func TestWatchHistoryCompactedAndAFreshWatchCacheNoUpdateIsMissed(t *testing.T) {
	if controlplanetest.External() {
		t.Skip("restarts the API server, which an existing cluster's is not")
	}
	e := apptest.NewEnv(t, controlplanetest.Start(t, controlplanetest.WithAPIServerFlags("--etcd-compaction-interval=2s")))
	e.InstallCRD(t, crdFile, crdName)
	ns := e.Namespace(t, "compacted")
	// A Lease that outlives the stop: the App is paused, not lost.
	s := settings{LeaseDuration: time.Minute, RenewDeadline: 40 * time.Second, RetryPeriod: time.Second, Workers: 2}
	r0 := startReplica(t, e, ns, "replica-0", s)
	e.WaitHolder(t, 30*time.Second, ns, lease, "replica-0")
	names := createMemcacheds(t, e, ns, 20, 1)
	waitConverged(t, e, ns, names)

	ri := e.Dynamic.Resource(app.Memcached.GVR()).Namespace(ns)
	list, err := ri.List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	seen := list.GetResourceVersion() // the App's watches are at or near it

	require.NoError(t, r0.proc.Pause())
	stopped := time.Now()
	for _, n := range names {
		resize(t, e, ns, n, 2)
	}
	// Compacted past seen: a read at exactly seen is 410 Gone.
	controlplanetest.Eventually(t, 30*time.Second, "etcd to compact the history", func(ctx context.Context) (bool, error) {
		_, err := ri.List(ctx, metav1.ListOptions{ResourceVersion: seen, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return true, nil
		}
		return false, err
	})
	require.NoError(t, e.Cluster.Restart(t.Context(), controlplane.KubeAPIServer))
	require.NoError(t, r0.proc.Continue())
	t.Logf("replica-0 was stopped for %v, across a compaction and an API server restart", time.Since(stopped).Round(time.Millisecond))

	waitConverged(t, e, ns, names)
	holder, err := e.Holder(t.Context(), ns, lease)
	require.NoError(t, err)
	require.Equal(t, "replica-0", holder)
	require.NoError(t, r0.proc.Signal(syscall.SIGTERM))
	require.Equal(t, 0, r0.waitExit(t, 30*time.Second))
}
