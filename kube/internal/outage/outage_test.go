package outage

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
)

func TestCommonFailures(t *testing.T) {
	gr := schema.GroupResource{Resource: "widgets"}
	for _, tc := range []struct {
		err    error
		common bool
	}{
		{apierrors.NewUnauthorized("revoked"), true},
		{apierrors.NewForbidden(gr, "w", errors.New("RBAC")), true},
		{apierrors.NewTooManyRequests("APF", 1), true},
		{apierrors.NewInternalError(errors.New("etcd")), true},
		{apierrors.NewServiceUnavailable("starting"), true},
		{apierrors.NewTimeoutError("slow", 1), true},
		{fmt.Errorf("kube: applying: %w", apierrors.NewGenericServerResponse(http.StatusBadGateway, "patch", gr, "w", "", 0, false)), true},
		{fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Err: errors.New("connection refused")}), true},
		{context.DeadlineExceeded, true},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "Widget"}, "w", nil), false},
		{apierrors.NewConflict(gr, "w", errors.New("changed")), false},
		{apierrors.NewNotFound(gr, "w"), false},
		{errors.New("the Reconciler's own"), false},
	} {
		require.Equal(t, tc.common, CommonFailure(tc.err), "%v", tc.err)
	}
}

// TestAProbeThatFailsOnItsOwnHandsTheProbeOn: in an outage the held keys
// wait for the probe's success; when the probe's key fails for a reason of
// its own (the API server back, the object invalid), another held key
// probes in its place, or the held keys waited for good.
func TestAProbeThatFailsOnItsOwnHandsTheProbeOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
		defer q.ShutDown()
		o := New(q, time.Hour)
		forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "widgets"}, "w", errors.New("RBAC"))
		take := func() string {
			k, _ := q.Get()
			q.Done(k)
			return k
		}
		o.Failed("a", forbidden)
		o.Failed("b", forbidden)
		require.ElementsMatch(t, []string{"a", "b"}, []string{take(), take()}, "backed off, within After")
		time.Sleep(After)
		o.Failed("a", forbidden) // the probe
		o.Failed("b", forbidden) // held
		require.Equal(t, "a", take(), "the probe, after ProbeMin")
		o.Failed("a", apierrors.NewInvalid(schema.GroupKind{Kind: "Widget"}, "a", nil))
		// a is backed off on its own, and b probes in its place, due
		// when a was: at once.
		got := make(chan string, 2)
		go func() { got <- take(); got <- take() }()
		time.Sleep(time.Minute)
		synctest.Wait()
		require.Len(t, got, 2, "the held key b was never queued again")
		require.ElementsMatch(t, []string{"a", "b"}, []string{<-got, <-got})
	})
}

// recordingQueue is a work queue whose adds the test reads: queued is
// every key added since the last take, with its delay.
type recordingQueue struct {
	workqueue.TypedRateLimitingInterface[string]
	queued map[string]time.Duration
}

func newRecordingQueue() *recordingQueue {
	return &recordingQueue{
		TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		queued:                     map[string]time.Duration{},
	}
}

func (q *recordingQueue) Add(key string) { q.queued[key] = 0 }
func (q *recordingQueue) AddAfter(key string, d time.Duration) {
	if was, ok := q.queued[key]; !ok || d < was {
		q.queued[key] = d
	}
}
func (q *recordingQueue) AddRateLimited(key string) { q.AddAfter(key, 5*time.Millisecond) }

// take returns the keys queued since the last take, and forgets them.
func (q *recordingQueue) take() map[string]time.Duration {
	out := q.queued
	q.queued = map[string]time.Duration{}
	return out
}

// outageOn returns an outage on q whose held keys are keys, the first of
// them its probe, After into the outage.
func outageOn(t *testing.T, q *recordingQueue, keys ...string) *Outage {
	t.Helper()
	o := New(q, time.Hour)
	for _, k := range keys {
		o.Failed(k, forbidden)
	}
	time.Sleep(After)
	for _, k := range keys {
		o.Failed(k, forbidden)
	}
	require.True(t, o.Probing(keys[0]), "the first key to fail after After probes")
	q.take()
	return o
}

var forbidden = apierrors.NewForbidden(schema.GroupResource{Resource: "widgets"}, "w", errors.New("RBAC"))

// TestWhileAnOutageIsOnAProbeIsQueuedOrNothingIsHeld: every way a probe's
// key can leave the outage (its reconcile panicked, failed with a
// Terminal error or one of its own, or its key moved to another member,
// was dropped at shutdown or by a lost Lease: all Left, or Failed with an
// error not CommonFailure's) hands the probe to another held key, queued;
// with no other held key, the next key to fail alike probes, even before
// the probe period's end, where it was held and never queued again.
func TestWhileAnOutageIsOnAProbeIsQueuedOrNothingIsHeld(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "widgets"}, "a", errors.New("changed"))
	for _, leave := range []struct {
		name string
		f    func(o *Outage, key string)
	}{
		{"Left", func(o *Outage, key string) { o.Left(key) }},
		{"failed on its own", func(o *Outage, key string) { o.Failed(key, conflict) }},
	} {
		t.Run(leave.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := newRecordingQueue()
				defer q.ShutDown()
				o := outageOn(t, q, "a", "b")
				leave.f(o, "a")
				got := q.take()
				delete(got, "a") // backed off on its own, if it failed so
				require.Equal(t, map[string]time.Duration{"b": ProbeMin}, got, "b probes, due when a was")
				require.True(t, o.Probing("b"))

				// b, the only held key, leaves too, before it is due:
				// nothing is held.
				time.Sleep(100 * time.Millisecond)
				leave.f(o, "b")
				got = q.take()
				delete(got, "b")
				require.Empty(t, got, "nothing is held, so nothing probes")

				// A key failing alike before the probe is due (the
				// same key back from its backoff, or another) probes,
				// when the probe was due: nothing else would queue it.
				time.Sleep(100 * time.Millisecond)
				o.Failed("c", forbidden)
				require.Equal(t, map[string]time.Duration{"c": ProbeMin - 200*time.Millisecond}, q.take(), "c probes, when b was due")
				require.True(t, o.Probing("c"))
				o.Failed("c", forbidden)
				require.Len(t, q.take(), 1, "the probe, delayed")
				o.Failed("d", forbidden)
				require.Empty(t, q.take(), "d is held behind the probe c")
				o.Left("c")
				got = q.take()
				require.Contains(t, got, "d", "d probes in c's place")
				require.Positive(t, got["d"], "when c was due")

				o.Succeeded()
				require.Equal(t, map[string]time.Duration{"d": 0}, q.take(), "the held keys, queued at once")
			})
		})
	}
}

// TestAProbesOwnFailureAloneLeavesTheNextFailureAProbe is issue 36's: the
// only held key, as the probe, fails with a 409 of its own; back from its
// backoff it fails alike within the probe period, and was held with no
// probe pending, never queued again.
func TestAProbesOwnFailureAloneLeavesTheNextFailureAProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newRecordingQueue()
		defer q.ShutDown()
		o := New(q, time.Hour)
		o.Failed("a", forbidden)
		time.Sleep(30 * time.Second)
		o.Failed("a", forbidden)
		q.take()
		o.Failed("a", apierrors.NewConflict(schema.GroupResource{Resource: "widgets"}, "a", errors.New("changed")))
		require.Contains(t, q.take(), "a", "backed off on its own")
		time.Sleep(10 * time.Millisecond)
		o.Failed("a", forbidden)
		require.Contains(t, q.take(), "a", "the probe once more")
		require.True(t, o.Probing("a"))
	})
}
