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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// stealLease makes another replica the Lease's holder, as one that took it
// while this replica couldn't renew; this replica's updates then conflict,
// as the API server's would on the changed resourceVersion.
func (f *fakeCluster) stealLease(t testing.TB) {
	t.Helper()
	var stolen atomic.Bool
	f.kube.PrependReactor("update", "leases", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if !stolen.Load() {
			return false, nil, nil
		}
		return true, nil, apierrors.NewConflict(coordinationv1.Resource("leases"), controllerName, nil)
	})
	l := f.lease(t).DeepCopy()
	now := metav1.NewMicroTime(time.Now())
	l.Spec.HolderIdentity = ptr.To("replica-2")
	l.Spec.LeaseDurationSeconds = ptr.To[int32](3600)
	l.Spec.AcquireTime = &now
	l.Spec.RenewTime = &now
	require.NoError(t, f.kube.Tracker().Update(coordinationv1.SchemeGroupVersion.WithResource("leases"), l, leaseNamespace))
	stolen.Store(true)
}

func TestLostLeaseCancelsReconcilesInFlightAndServeReturnsErrLostLeadership(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1), newWidget("w2", 2))
		var mu sync.Mutex
		var reconciled []string
		var cancelledAt time.Time
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				mu.Lock()
				reconciled = append(reconciled, w.Name)
				mu.Unlock()
				<-ctx.Done()
				mu.Lock()
				cancelledAt = time.Now()
				mu.Unlock()
				return Result[widgetStatus]{}, ctx.Err()
			}))
		s := serve(t, c)
		synctest.Wait()
		require.Len(t, reconciled, 1)

		stolenAt := time.Now()
		f.stealLease(t)
		<-s.done
		require.ErrorIs(t, s.err, ErrLostLeadership)

		mu.Lock()
		defer mu.Unlock()
		require.Len(t, reconciled, 1, "no key is taken once the Lease is lost")
		require.False(t, cancelledAt.IsZero(), "the reconcile in flight is cancelled")
		lostAfter := cancelledAt.Sub(stolenAt)
		require.LessOrEqual(t, lostAfter, 15*time.Second, "renewal fails within RenewDeadline and a RetryPeriod")
		require.Equal(t, "replica-2", holder(f.lease(t)), "the other replica's Lease is left alone")
		require.NoError(t, c.Shutdown(context.Background()))
	})
}

func TestOnlyTheLeaseHolderReconcilesAndAStandbyTakesOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		var mu sync.Mutex
		by := map[string]int{}
		controller := func(identity string) *Controller {
			settings := testSettings()
			settings.LeaderElection.Identity = identity
			return newWidgetController(t, f, humus.Telemetry{}, settings,
				ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
					mu.Lock()
					by[identity]++
					mu.Unlock()
					return Result[widgetStatus]{}, nil
				}))
		}
		first := controller("replica-1")
		s1 := serve(t, first)
		synctest.Wait()
		second := controller("replica-2")
		s2 := serve(t, second)
		synctest.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()

		require.NoError(t, second.Synced().Healthy(context.Background()), "a standby's caches are synced too")
		mu.Lock()
		require.Equal(t, map[string]int{"replica-1": 1}, by)
		mu.Unlock()

		require.NoError(t, s1.stop(t))
		require.Empty(t, holder(f.lease(t)))
		// The standby takes the released Lease on its next try, without
		// waiting out LeaseDuration, and reconciles every object.
		time.Sleep(5 * time.Second) // a RetryPeriod of 2s, jittered by up to 1.2 of it
		synctest.Wait()
		require.Equal(t, "replica-2", holder(f.lease(t)))
		mu.Lock()
		require.Equal(t, map[string]int{"replica-1": 1, "replica-2": 1}, by)
		mu.Unlock()
		require.NoError(t, s2.stop(t))
	})
}

func TestNothingIsAppliedAfterTheLeaseIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				<-ctx.Done()
				// A Reconciler that reports what it saw even when cancelled.
				return Result[widgetStatus]{Status: &widgetStatus{Message: "cancelled"}}, nil
			}))
		s := serve(t, c)
		synctest.Wait()

		f.stealLease(t)
		<-s.done
		require.ErrorIs(t, s.err, ErrLostLeadership)
		require.Empty(t, f.statusApplies(), "a replica that lost the Lease applies nothing")
		require.NoError(t, c.Shutdown(context.Background()))
	})
}
