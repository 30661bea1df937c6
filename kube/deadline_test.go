package kube

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

// leaseHold holds Lease updates, as a slow admission webhook on Leases
// does, once hold is called and until release is; it records the holder
// each update held names. Its reactor is installed before the controller
// starts: client-go's fakes don't guard their reactor chains.
type leaseHold struct {
	holding  atomic.Bool
	released chan struct{}
	once     sync.Once

	mu      sync.Mutex
	holders []string
}

func (f *fakeCluster) leaseHold() *leaseHold {
	h := &leaseHold{released: make(chan struct{})}
	f.kube.PrependReactor("update", "leases", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if !h.holding.Load() {
			return false, nil, nil
		}
		l := action.(clienttesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		h.mu.Lock()
		h.holders = append(h.holders, holder(l))
		h.mu.Unlock()
		// The fake holds its lock while a reactor runs, and the
		// controller's Events go through the same fake, so the update
		// can't block here: it fails as a webhook's timeout does. The
		// control-plane test holds real updates.
		select {
		case <-h.released:
			return false, nil, nil
		default:
			return true, nil, apierrors.NewTimeoutError("the admission webhook on Leases timed out", 0)
		}
	})
	return h
}

func (h *leaseHold) hold()    { h.holding.Store(true) }
func (h *leaseHold) release() { h.once.Do(func() { close(h.released) }) }

// held returns the holders the updates held named.
func (h *leaseHold) held() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.holders...)
}

// reconcileLog records when each reconcile started and when its context
// was cancelled.
type reconcileLog struct {
	mu        sync.Mutex
	starts    []time.Time
	cancelled []time.Time
}

func (r *reconcileLog) reconciler() Reconciler[widgetSpec, widgetStatus] {
	return ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
		r.mu.Lock()
		r.starts = append(r.starts, time.Now())
		r.mu.Unlock()
		<-ctx.Done()
		r.mu.Lock()
		r.cancelled = append(r.cancelled, time.Now())
		r.mu.Unlock()
		// A Reconciler that reports what it saw even when cancelled.
		return Result[widgetStatus]{Status: &widgetStatus{Message: "cancelled"}}, nil
	})
}

func (r *reconcileLog) get() (starts, cancelled []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.starts...), append([]time.Time(nil), r.cancelled...)
}

func TestHeldRenewalsStopTheWorkAtTheLeaseDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1), newWidget("w2", 2))
		lh := f.leaseHold()
		defer lh.release()
		var log reconcileLog
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(), log.reconciler())
		s := serve(t, c)
		synctest.Wait()
		starts, _ := log.get()
		require.Len(t, starts, 1)

		// The Lease was taken just now; every renewal from now on hangs.
		lh.hold()
		heldAt := time.Now()
		time.Sleep(15 * time.Second) // LeaseDuration: another replica may take the Lease now
		synctest.Wait()

		starts, cancelled := log.get()
		require.Len(t, starts, 1, "no key is taken once the deadline passed")
		require.Len(t, cancelled, 1, "the reconcile in flight is cancelled, though the renewal still hangs")
		require.LessOrEqual(t, cancelled[0].Sub(heldAt), 10*time.Second,
			"by RenewDeadline after the last renewal that succeeded")
		require.Empty(t, f.statusApplies(), "a replica past its deadline applies nothing")

		lh.release()
		<-s.done
		require.ErrorIs(t, s.err, ErrLostLeadership)
		require.NotContains(t, lh.held(), "", "a lost Lease is never released")
		require.Equal(t, "replica-1", holder(f.lease(t)))
	})
}

func TestARenewalThatSucceedsPastTheDeadlineDoesNotResumeTheWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// As a replica paused past LeaseDuration, whose renewal in flight
		// completes once it wakes.
		f := newFakeCluster(t, newWidget("w1", 1), newWidget("w2", 2))
		lh := f.leaseHold()
		defer lh.release()
		var log reconcileLog
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(), log.reconciler())
		s := serve(t, c)
		synctest.Wait()

		lh.hold()
		time.Sleep(20 * time.Second)
		synctest.Wait()
		lh.release() // the held renewal succeeds, late
		<-s.done
		require.ErrorIs(t, s.err, ErrLostLeadership)

		starts, cancelled := log.get()
		require.Len(t, starts, 1, "no key is taken after the late renewal")
		require.Len(t, cancelled, 1)
		require.Empty(t, f.statusApplies())
		require.NotContains(t, lh.held(), "", "a lost Lease is never released")
	})
}

func TestAnotherHolderSeenStopsTheWorkAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1), newWidget("w2", 2))
		var log reconcileLog
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(), log.reconciler())
		s := serve(t, c)
		synctest.Wait()

		stolenAt := time.Now()
		f.stealLease(t)
		time.Sleep(5 * time.Second) // one RetryPeriod, jittered by up to 1.2 of it
		synctest.Wait()
		starts, cancelled := log.get()
		require.Len(t, starts, 1)
		require.Len(t, cancelled, 1, "the next renewal sees replica-2 and stops the work, within RenewDeadline")
		require.LessOrEqual(t, cancelled[0].Sub(stolenAt), 5*time.Second)
		<-s.done
		require.ErrorIs(t, s.err, ErrLostLeadership)
		require.Empty(t, f.statusApplies())
		require.Equal(t, "replica-2", holder(f.lease(t)))
	})
}

func TestNoLeaseRequestIsSentOnceTheLeaseIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// client-go's release after a failed renewal starts with a Get,
		// under a timeout of RenewDeadline of its own: against an API
		// server that doesn't answer (etcd frozen), it held Serve's
		// return, and the App's exit, that long past the deadline (the
		// fake can't hold a request: it holds its lock meanwhile). The
		// reconcile in flight is cancelled as the Lease is lost, and
		// before the elector is stopped.
		f := newFakeCluster(t, newWidget("w1", 1))
		var log reconcileLog
		var late atomic.Int32
		f.kube.PrependReactor("*", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
			if _, cancelled := log.get(); len(cancelled) > 0 {
				late.Add(1)
			}
			return false, nil, nil
		})
		lh := f.leaseHold()
		defer lh.release()
		// The fake's record of idle connections closed reads the Lease.
		cl := f.clients()
		cl.closeIdle = func() {}
		c, err := newController(&humus.Setup{}, cl, nil, testSettings(), widgets(), log.reconciler())
		require.NoError(t, err)
		s := serve(t, c)
		synctest.Wait()

		lh.hold()
		<-s.done
		require.ErrorIs(t, s.err, ErrLostLeadership)
		_, cancelled := log.get()
		require.Len(t, cancelled, 1)
		require.Zero(t, late.Load(), "Lease requests sent once the Lease was lost")
	})
}
