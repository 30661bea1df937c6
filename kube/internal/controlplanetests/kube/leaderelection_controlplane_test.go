//go:build controlplane

package kube_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane"
	"github.com/z5labs/humus/kube"
)

// leaseHolder is a TLS proxy in front of the API server that, while held,
// holds every Lease update until its client gives up, as a slow admission
// webhook on Leases does; it records when each apply (a PATCH) arrived.
type leaseHolder struct {
	srv  *httptest.Server
	held atomic.Bool

	mu      sync.Mutex
	applies []time.Time
}

func newLeaseHolder(t *testing.T, cluster *controlplane.Cluster) *leaseHolder {
	t.Helper()
	h := &leaseHolder{}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "https", Host: cluster.Server})
	proxy.Transport = &http.Transport{TLSClientConfig: cluster.TLS.Clone(), ForceAttemptHTTP2: true}
	proxy.FlushInterval = -1                    // watches stream
	proxy.ErrorLog = log.New(io.Discard, "", 0) // the held updates' client gives up
	h.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPatch {
			h.mu.Lock()
			h.applies = append(h.applies, time.Now())
			h.mu.Unlock()
		}
		if h.held.Load() && r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/leases/") {
			<-r.Context().Done()
			w.WriteHeader(http.StatusGatewayTimeout)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	h.srv.EnableHTTP2 = true
	h.srv.StartTLS()
	t.Cleanup(h.srv.Close)
	return h
}

// connection is a Connection to the API server through h.
func (h *leaseHolder) connection(cluster *controlplane.Cluster) kube.Connection {
	roots := x509.NewCertPool()
	roots.AddCert(h.srv.Certificate())
	return kube.Connection{
		Server: h.srv.Listener.Addr().String(),
		TLS:    &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		Token:  func(context.Context) (string, error) { return cluster.Token, nil },
	}
}

func (h *leaseHolder) appliesSince(t time.Time) []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []time.Time
	for _, a := range h.applies {
		if !a.Before(t) {
			out = append(out, a)
		}
	}
	return out
}

// TestALeaderWhoseLeaseUpdatesHangStopsBeforeAnotherTakesOver is the fault
// of a leader whose Lease updates hang (the API server reachable, a slow
// webhook on Leases): the old leader starts no reconcile and sends no
// apply once the standby has taken the Lease, and its Serve returns
// ErrLostLeadership.
func TestALeaderWhoseLeaseUpdatesHangStopsBeforeAnotherTakesOver(t *testing.T) {
	cluster, dyn, kc := startWithCRD(t, gadgets)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res := dyn.Resource(gadgets.GVR()).Namespace("default")
	for _, name := range []string{"g1", "g2", "g3"} {
		_, err := res.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "controller.humus.example.com/v1",
			"kind":       "Gadget",
			"metadata":   map[string]any{"name": name},
			"spec":       map[string]any{"size": int64(1)},
		}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	type start struct {
		identity string
		at       time.Time
	}
	var mu sync.Mutex
	var starts []start
	replica := func(identity string, conn kube.Connection) (*kube.Controller, chan error) {
		s := &humus.Setup{Host: humus.OSHost()}
		client, err := kube.NewClient(s, conn)
		require.NoError(t, err)
		settings := kube.DefaultSettings()
		settings.Name = "gadget-controller"
		settings.Workers = 3
		settings.LeaderElection.Namespace = "default"
		settings.LeaderElection.Identity = identity
		settings.LeaderElection.LeaseDuration = 3 * time.Second
		settings.LeaderElection.RenewDeadline = 2 * time.Second
		settings.LeaderElection.RetryPeriod = 500 * time.Millisecond
		var n atomic.Int32
		ctrl, err := kube.NewController(s, client, settings, gadgets,
			kube.ReconcilerFunc[gadgetSpec, gadgetStatus](func(ctx context.Context, g gadget) (kube.Result[gadgetStatus], error) {
				mu.Lock()
				starts = append(starts, start{identity, time.Now()})
				mu.Unlock()
				// A status that changes every time, so every reconcile
				// applies, and another one soon.
				return kube.Result[gadgetStatus]{Status: &gadgetStatus{Seen: n.Add(1)}, After: 100 * time.Millisecond}, nil
			}))
		require.NoError(t, err)
		serveCtx, stop := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- ctrl.Serve(serveCtx) }()
		t.Cleanup(func() {
			stop()
			_ = ctrl.Shutdown(context.Background())
		})
		return ctrl, served
	}
	holder := newLeaseHolder(t, cluster)
	_, oldServed := replica("replica-1", holder.connection(cluster))
	leaseHolderIs := func(id string) func() bool {
		return func() bool {
			l, err := kc.CoordinationV1().Leases("default").Get(ctx, "gadget-controller", metav1.GetOptions{})
			return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == id
		}
	}
	require.Eventually(t, leaseHolderIs("replica-1"), time.Minute, 50*time.Millisecond)
	direct := kube.Connection{Server: cluster.Server, TLS: cluster.TLS, Token: func(context.Context) (string, error) { return cluster.Token, nil }}
	_, newServed := replica("replica-2", direct)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(starts) > 10
	}, time.Minute, 50*time.Millisecond, "the leader reconciles")

	heldAt := time.Now()
	holder.held.Store(true)
	var lost error
	select {
	case lost = <-oldServed:
	case <-ctx.Done():
		t.Fatal("the old leader's Serve did not return")
	}
	require.ErrorIs(t, lost, kube.ErrLostLeadership)
	require.Eventually(t, leaseHolderIs("replica-2"), time.Minute, 50*time.Millisecond)
	l, err := kc.CoordinationV1().Leases("default").Get(ctx, "gadget-controller", metav1.GetOptions{})
	require.NoError(t, err)
	acquired := l.Spec.AcquireTime.Time
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range starts {
			if s.identity == "replica-2" {
				return true
			}
		}
		return false
	}, time.Minute, 50*time.Millisecond, "the new leader reconciles")

	mu.Lock()
	defer mu.Unlock()
	var last time.Time
	for _, s := range starts {
		if s.identity == "replica-1" {
			require.True(t, s.at.Before(acquired), "replica-1 started a reconcile at %v, after replica-2 acquired the Lease at %v", s.at, acquired)
			last = s.at
		}
	}
	require.Empty(t, holder.appliesSince(acquired), "replica-1 sent applies after replica-2 acquired the Lease at %v", acquired)
	t.Logf("Lease updates held at %v; replica-1's last reconcile +%v; replica-2 acquired +%v",
		heldAt.Format(time.StampMilli), last.Sub(heldAt).Round(time.Millisecond), acquired.Sub(heldAt).Round(time.Millisecond))
	select {
	case err := <-newServed:
		t.Fatalf("the new leader's Serve returned %v", err)
	default:
	}
}
