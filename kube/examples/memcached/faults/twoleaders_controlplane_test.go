//go:build controlplane

package faults_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/z5labs/humus/controlplane/apptest"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/kube/examples/memcached/app"
)

// testNeverTwoLeaders shows the spec's promise that a lost Lease stops all
// work at once, whatever client-go's renew loop is still doing, under the
// two faults that broke it: the leader's Lease updates held by a slow
// admission webhook, and the leader stopped (SIGSTOP) past LeaseDuration
// and continued. In both, no reconcile or apply by the old leader starts
// once the new one has acquired the Lease, and the old App exits 1 with
// ErrLostLeadership. Each replica reaches the API server through a witness
// of its own, a proxy that records the writes it passes on, so the old
// leader's silence is also shown as the API server was sent it, not only
// as the replica recorded it.
func testNeverTwoLeaders(t *testing.T, e apptest.Env) {
	t.Run("TheLeadersLeaseUpdatesHeldByAWebhookNoWorkAfterTheNewLeaderAcquired", func(t *testing.T) {
		ns := e.Namespace(t, "held-renewals")
		hook := holdLeaseUpdates(t, e, ns, "replica-1")
		w0, w1, s0, s1 := witnessed(t, e)
		r0 := startReplica(t, e, ns, "replica-0", s0)
		e.WaitHolder(t, 30*time.Second, ns, lease, "replica-0")
		r1 := startReplica(t, e, ns, "replica-1", s1)
		names := createMemcacheds(t, e, ns, 40, 1)
		waitConverged(t, e, ns, names)
		// The webhook answers the leader's renewals until it holds them.
		controlplanetest.Eventually(t, 30*time.Second, "the webhook to see a renewal", func(context.Context) (bool, error) {
			return hook.seen.Load() > 0, nil
		})
		stop := keepResizing(t, e, ns, names)

		hook.hold()
		held := time.Now()
		e.WaitHolder(t, 60*time.Second, ns, lease, "replica-1")
		acquired := acquireTime(t, e, ns)
		code := r0.waitExit(t, 60*time.Second)
		t.Logf("held at %s; replica-1 acquired at %s (%v later); replica-0 exited %d, %v after the hold",
			held.Format(time.StampMilli), acquired.Format(time.StampMilli), acquired.Sub(held).Round(time.Millisecond),
			code, time.Since(held).Round(time.Millisecond))
		hook.release()
		require.Equal(t, 1, code)
		require.Contains(t, r0.stderr.String(), lostLease)
		requireNoWorkAfter(t, r0, acquired)

		stop()
		waitConverged(t, e, ns, names)
		requireNoWriteSentAfter(t, w0, w1, acquired)
		require.NoError(t, r1.proc.Signal(syscall.SIGTERM))
		require.Equal(t, 0, r1.waitExit(t, 30*time.Second))
	})

	t.Run("TheLeaderStoppedPastLeaseDurationDoesNoWorkOnceContinued", func(t *testing.T) {
		ns := e.Namespace(t, "sigstop")
		w0, w1, s0, s1 := witnessed(t, e)
		r0 := startReplica(t, e, ns, "replica-0", s0)
		e.WaitHolder(t, 30*time.Second, ns, lease, "replica-0")
		r1 := startReplica(t, e, ns, "replica-1", s1)
		names := createMemcacheds(t, e, ns, 40, 1)
		waitConverged(t, e, ns, names)
		stop := keepResizing(t, e, ns, names)

		require.NoError(t, r0.proc.Pause())
		paused := time.Now()
		e.WaitHolder(t, 60*time.Second, ns, lease, "replica-1")
		acquired := acquireTime(t, e, ns)
		// Let the new leader work a moment, as the old one sleeps on.
		controlplanetest.Eventually(t, 30*time.Second, "replica-1 to reconcile", func(context.Context) (bool, error) {
			return r1.count("reconcile-start", "") > 0, nil
		})
		// The fault's length, past LeaseDuration as the 25s was
		// past 15s: nothing to await.
		if d := fast.LeaseDuration + time.Second - time.Since(paused); d > 0 {
			time.Sleep(d)
		}
		require.NoError(t, r0.proc.Continue())
		continued := time.Now()
		code := r0.waitExit(t, 30*time.Second)
		t.Logf("replica-0 stopped for %v (LeaseDuration %v); replica-1 acquired %v after the stop; replica-0 exited %d, %v after SIGCONT",
			continued.Sub(paused).Round(time.Millisecond), fast.LeaseDuration, acquired.Sub(paused).Round(time.Millisecond),
			code, time.Since(continued).Round(time.Millisecond))
		require.Equal(t, 1, code)
		require.Contains(t, r0.stderr.String(), lostLease)
		requireNoWorkAfter(t, r0, acquired)

		stop()
		waitConverged(t, e, ns, names)
		requireNoWriteSentAfter(t, w0, w1, acquired)
		require.NoError(t, r1.proc.Signal(syscall.SIGTERM))
		require.Equal(t, 0, r1.waitExit(t, 30*time.Second))
	})
}

// witnessed returns a witness for each of two replicas, and the fast
// settings that make each reach the API server through its own.
func witnessed(t *testing.T, e apptest.Env) (w0, w1 *witness, s0, s1 settings) {
	t.Helper()
	w0, w1 = newWitness(t, e), newWitness(t, e)
	s0, s1 = fast, fast
	s0.Kubeconfig, s1.Kubeconfig = w0.kubeconfig, w1.kubeconfig
	return w0, w1, s0, s1
}

// requireNoWorkAfter fails the test if r started a reconcile, or sent a
// write other than to its Lease, after at.
func requireNoWorkAfter(t *testing.T, r *replica, at time.Time) {
	t.Helper()
	late := 0
	var last time.Time // the old leader's last work before at
	for _, ev := range r.Events() {
		write := ev.Ev == "request" && ev.Method != http.MethodGet && !strings.Contains(ev.URL, "/leases/")
		if !ev.T.After(at) {
			if ev.Ev == "reconcile-start" || write {
				last = ev.T
			}
			continue
		}
		if ev.Ev == "reconcile-start" || write {
			late++
			t.Errorf("%s, the old leader, at %s (%v after the new leader acquired): %s %s %s %s", r.id,
				ev.T.Format(time.StampMicro), ev.T.Sub(at).Round(time.Millisecond), ev.Ev, ev.Key, ev.Method, ev.URL)
			if late == 10 {
				t.FailNow()
			}
		}
	}
	if !last.IsZero() {
		t.Logf("%s's last reconcile start or write was at %s, %v before the new leader acquired", r.id, last.Format(time.StampMilli), at.Sub(last).Round(time.Millisecond))
	}
}

// acquireTime returns the acquireTime of the Lease of ns, which its holder
// sets by its own clock as it takes the Lease.
func acquireTime(t *testing.T, e apptest.Env, ns string) time.Time {
	t.Helper()
	l, err := e.Kube.CoordinationV1().Leases(ns).Get(t.Context(), lease, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, l.Spec.AcquireTime)
	return l.Spec.AcquireTime.Time
}

// keepResizing resizes the Memcacheds names, one after another, over and
// over, so that the leader always has work, until the returned function is
// called.
func keepResizing(t *testing.T, e apptest.Env, ns string, names []string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ri := e.Dynamic.Resource(app.Memcached.GVR()).Namespace(ns)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			patch := fmt.Appendf(nil, `{"spec":{"size":%d}}`, 1+i/len(names)%3)
			_, _ = ri.Patch(ctx, names[i%len(names)], types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "test"})
		}
	})
	stop = func() {
		cancel()
		wg.Wait()
	}
	t.Cleanup(stop)
	return stop
}

// leaseHook is a validating admission webhook on the Leases of one
// namespace that, once hold is called, holds every update that doesn't
// make allowed the holder, as an overloaded webhook or a partial outage
// does, until release or the API server's timeout for it (30s).
type leaseHook struct {
	seen     atomic.Int64
	mu       sync.Mutex
	held     chan struct{} // closed by release; nil until hold
	released bool
}

func (h *leaseHook) hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = make(chan struct{})
}

func (h *leaseHook) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held != nil && !h.released {
		close(h.held)
		h.released = true
	}
}

// holdLeaseUpdates serves a leaseHook over TLS from the test, and
// registers it with the API server for UPDATEs of Leases in ns; updates
// whose new holder is allowed are never held.
func holdLeaseUpdates(t *testing.T, e apptest.Env, ns, allowed string) *leaseHook {
	t.Helper()
	h := &leaseHook{}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		var l coordinationv1.Lease
		_ = json.Unmarshal(review.Request.Object.Raw, &l)
		h.seen.Add(1)
		h.mu.Lock()
		held := h.held
		h.mu.Unlock()
		if held != nil && ptr.Deref(l.Spec.HolderIdentity, "") != allowed {
			select {
			case <-held:
			case <-r.Context().Done():
				return
			}
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(review)
	}))
	t.Cleanup(func() {
		h.release()
		srv.Close()
	})
	caBundle := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	hooks := e.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	cfg, err := hooks.Create(t.Context(), &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "hold-leases-" + ns},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "hold-leases.faults.humus.example.com",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(srv.URL + "/validate"), CABundle: caBundle},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"v1"},
					Resources: []string{"leases"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](30),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
		}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = hooks.Delete(context.Background(), cfg.Name, metav1.DeleteOptions{}) })
	return h
}
