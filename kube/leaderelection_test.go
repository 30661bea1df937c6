package kube

import (
	"context"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube/internal/tenure"
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
		first := reconcilesBy(t, f, &mu, by, "replica-1", "replica-1")
		s1 := serve(t, first)
		synctest.Wait()
		second := reconcilesBy(t, f, &mu, by, "replica-2", "replica-2")
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

// reconcilesBy returns a controller of identity on f whose reconciles are
// counted in by, under mu.
func reconcilesBy(t *testing.T, f *fakeCluster, mu *sync.Mutex, by map[string]int, identity, label string) *Controller {
	settings := testSettings()
	settings.LeaderElection.Identity = identity
	return newWidgetController(t, f, humus.Telemetry{}, settings,
		ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
			mu.Lock()
			by[label]++
			mu.Unlock()
			return Result[widgetStatus]{}, nil
		}))
}

func TestASecondProcessWithTheLeadersIdentityEndsServeAndNeverLeads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Two pods given one identity (a Deployment whose Identity isn't
		// the pod's name): client-go's elector takes a Lease naming its
		// own identity as its own, so both would lead at once.
		f := newFakeCluster(t, newWidget("w1", 1))
		var mu sync.Mutex
		by := map[string]int{}
		first := serve(t, reconcilesBy(t, f, &mu, by, "replica-1", "first"))
		synctest.Wait()
		require.Equal(t, "replica-1", holder(f.lease(t)))

		second := serve(t, reconcilesBy(t, f, &mu, by, "replica-1", "second"))
		start := time.Now()
		<-second.done
		require.ErrorIs(t, second.err, errLeaderSameIdentity)
		require.ErrorContains(t, second.err, `identity "replica-1"`)
		require.ErrorContains(t, second.err, "give each replica an identity of its own")
		// The first renews every RetryPeriod (2s), jittered by up to 1.2.
		require.Less(t, time.Since(start), 15*time.Second, "the second's Serve, ended once it saw the Lease renewed")

		time.Sleep(time.Minute)
		synctest.Wait()
		mu.Lock()
		require.Equal(t, map[string]int{"first": 1}, by, "reconciles by each process")
		mu.Unlock()
		require.Equal(t, "replica-1", holder(f.lease(t)))
		require.NoError(t, first.stop(t))
	})
}

func TestALeaseHeldWithThisIdentityByAProcessGoneIsTakenOnlyOnceItExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// This pod's previous process held the Lease and died without
		// releasing it; it may as well be alive elsewhere (a pod
		// partitioned from its node), so the Lease is taken as from any
		// other replica: once it has gone unrenewed for LeaseDuration.
		f := newFakeCluster(t, newWidget("w1", 1))
		f.holdLease(t, "replica-1", 15*time.Second)
		var mu sync.Mutex
		by := map[string]int{}
		s := serve(t, reconcilesBy(t, f, &mu, by, "replica-1", "new"))
		time.Sleep(10 * time.Second)
		synctest.Wait()
		mu.Lock()
		require.Empty(t, by, "reconciles before the previous process's Lease expired")
		mu.Unlock()

		time.Sleep(30 * time.Second)
		synctest.Wait()
		mu.Lock()
		require.Equal(t, map[string]int{"new": 1}, by, "reconciles once it expired")
		mu.Unlock()
		require.Equal(t, "replica-1", holder(f.lease(t)))
		require.NoError(t, s.stop(t))
	})
}

// leaseVersions gives the fake's Leases the API server's optimistic
// concurrency: each write bumps a Lease's resourceVersion, and an update
// naming another one is refused with a Conflict, as client-go's elector's
// renewal from its last read is once another process wrote the Lease.
func (f *fakeCluster) leaseVersions() {
	var mu sync.Mutex
	n := 0
	f.kube.PrependReactor("*", "leases", func(action clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		a, ok := action.(clienttesting.CreateAction) // an update's too
		if !ok {
			return false, nil, nil
		}
		switch action.GetVerb() {
		case "create":
			l := a.GetObject().(*coordinationv1.Lease).DeepCopy()
			n++
			l.ResourceVersion = strconv.Itoa(n)
			return true, l, f.kube.Tracker().Create(coordinationv1.SchemeGroupVersion.WithResource("leases"), l, l.Namespace)
		case "update":
			l := a.GetObject().(*coordinationv1.Lease).DeepCopy()
			old, err := f.kube.Tracker().Get(coordinationv1.SchemeGroupVersion.WithResource("leases"), l.Namespace, l.Name)
			if err != nil {
				return true, nil, err
			}
			if l.ResourceVersion != old.(*coordinationv1.Lease).ResourceVersion {
				return true, nil, apierrors.NewConflict(coordinationv1.Resource("leases"), l.Name, nil)
			}
			n++
			l.ResourceVersion = strconv.Itoa(n)
			return true, l, f.kube.Tracker().Update(coordinationv1.SchemeGroupVersion.WithResource("leases"), l, l.Namespace)
		}
		return false, nil, nil
	})
}

func TestALeaderThatSeesItsLeaseRenewedByAnotherProcessWithItsIdentityLosesIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		f.leaseVersions()
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				return Result[widgetStatus]{}, nil
			}))
		s := serve(t, c)
		synctest.Wait()
		require.Equal(t, "replica-1", holder(f.lease(t)))

		// Another process of its identity renews the Lease, as one that
		// took it while this one was paused past LeaseDuration would.
		l := f.lease(t)
		now := metav1.NewMicroTime(time.Now().Add(time.Second))
		l.Spec.RenewTime = &now
		_, err := f.kube.CoordinationV1().Leases(leaseNamespace).Update(context.Background(), l, metav1.UpdateOptions{})
		require.NoError(t, err)
		renewed := time.Now()
		<-s.done
		require.ErrorIs(t, s.err, ErrLostLeadership)
		// At its next renewal, refused as a Conflict, and the Get after it:
		// a RetryPeriod (2s) jittered by up to 1.2 of it, well before its
		// RenewDeadline (10s) runs out, which is how it would stop if it
		// took the Lease as another replica's.
		require.Less(t, time.Since(renewed), 5*time.Second, "the Lease lost after another process renewed it")
		require.NoError(t, c.Shutdown(context.Background()))
	})
}

// TestAWriteTheLeaseRefusesIsNotRecordedAsAFailure: a replica whose
// Lease is no longer valid is on its way out, and a reconcile's write
// that the lease's check refuses (ErrLeaseExpired, from the write hook,
// wrapped by net/http in a *url.Error) is not the object's failure: it
// was counted as an outage's (CommonFailure takes a *url.Error as a
// network error), logged as a failure and sent as a ReconcileFailed
// Warning Event. Now the key is forgotten with one DEBUG record.
func TestAWriteTheLeaseRefusesIsNotRecordedAsAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		tel := humustest.NewTelemetry(t)
		c := newWidgetController(t, f, tel.Telemetry, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				<-ctx.Done()
				// As a client's PATCH answers once the write hook refuses it.
				return Result[widgetStatus]{}, &url.Error{Op: "Patch", URL: "https://kube/apis/apps/v1/namespaces/ns/deployments/w1", Err: tenure.ErrLeaseExpired}
			}))
		s := serve(t, c)
		synctest.Wait()

		f.stealLease(t)
		<-s.done
		require.ErrorIs(t, s.err, ErrLostLeadership)
		require.NoError(t, c.Shutdown(context.Background()))
		synctest.Wait()
		require.Empty(t, recordsWithBody(tel, "reconcile failed"), "no failure logged")
		require.Empty(t, f.events(t, testNamespace), "no Warning Event")
		require.Len(t, recordsWithBody(tel, "reconcile stopped"), 1, "one DEBUG record")
	})
}
