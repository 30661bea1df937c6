//go:build controlplane

package faults_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus/controlplane/apptest"
	"github.com/z5labs/humus/controlplane/controlplanetest"
)

// TestTheCRDDeletedWhileTheAppRunsEndsItWith1NamingTheResource deletes the
// Memcached CRD under a running App: the API server deletes the
// Memcacheds, which the App finalizes, then the CRD; once memcacheds has
// stayed unserved for WatchTimeout, the App exits 1 with the error it
// gives for a CRD missing at its start, naming the resource, and no
// write is sent after the CRD is gone. It has a control plane of its
// own, since it deletes the CRD the other tests use.
func TestTheCRDDeletedWhileTheAppRunsEndsItWith1NamingTheResource(t *testing.T) {
	if controlplanetest.External() {
		t.Skip("deletes the Memcached CRD, which an existing cluster's other users may need")
	}
	e := apptest.NewEnv(t, controlplanetest.Start(t))
	e.InstallCRD(t, crdFile, crdName)
	ns := e.Namespace(t, "crd-deleted")
	s := fast
	s.WatchTimeout = 5 * time.Second
	r0 := startReplica(t, e, ns, "replica-0", s)
	e.WaitHolder(t, 30*time.Second, ns, lease, "replica-0")
	names := createMemcacheds(t, e, ns, 5, 1)
	waitConverged(t, e, ns, names)

	crds := e.Dynamic.Resource(controlplanetest.CRDGVR)
	require.NoError(t, crds.Delete(t.Context(), crdName, metav1.DeleteOptions{}))
	deleted := time.Now()
	// The API server removes the CRD once its Memcacheds are gone, which
	// needs the App's finalizer to run on each.
	controlplanetest.Eventually(t, time.Minute, "the CRD to be gone", func(ctx context.Context) (bool, error) {
		_, err := crds.Get(ctx, crdName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), controlplanetest.IgnoreNotFound(err)
	})
	gone := time.Now()
	code := r0.waitExit(t, s.WatchTimeout+30*time.Second)
	t.Logf("the CRD was gone %v after its deletion; the App exited %d %v after that (WatchTimeout %v)",
		gone.Sub(deleted).Round(time.Millisecond), code, time.Since(gone).Round(time.Millisecond), s.WatchTimeout)
	require.Equal(t, 1, code)
	require.Contains(t, r0.stderr.String(), "cache.example.com/v1beta1, Resource=memcacheds", "the error names the resource")
	require.Equal(t, len(names), finalizedCount(r0, ""), "each Memcached finalized once")
	// A deletion's event may still reach the App as the CRD goes, and
	// queue a key whose object is gone, which writes nothing: what must
	// not happen is a write.
	late := 0
	for _, ev := range r0.Events() {
		switch {
		case !ev.T.After(gone):
		case ev.Ev == "reconcile-start":
			late++
		case ev.Ev == "request" && ev.Method != http.MethodGet && !strings.Contains(ev.URL, "/leases/"):
			t.Errorf("a %s %s at %s, %v after the CRD was gone", ev.Method, ev.URL, ev.T.Format(time.StampMicro), ev.T.Sub(gone))
		}
	}
	t.Logf("reconciles started after the CRD was gone: %d", late)
}
