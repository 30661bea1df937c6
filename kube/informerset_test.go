package kube

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"github.com/z5labs/humus/kube/internal/watchhealth"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// widgetOutage makes the API server unreachable for the widgets' lists and
// watches, as an outage does for a replica's informers, from break_ until
// restore: their watches end, and every list and watch is refused, which
// leaves the informer in client-go's watch-retry backoff with the cache of
// the time its watch broke. Its reactors are installed before the
// controller starts: client-go's fakes don't guard their reactor chains.
type widgetOutage struct {
	f    *fakeCluster
	down atomic.Bool

	mu      sync.Mutex
	watches []watch.Interface
}

func (f *fakeCluster) widgetOutage() *widgetOutage {
	o := &widgetOutage{f: f}
	refused := apierrors.NewServiceUnavailable("the API server is down")
	f.dynamic.PrependReactor("list", "widgets", func(clienttesting.Action) (bool, runtime.Object, error) {
		if o.down.Load() {
			return true, nil, refused
		}
		return false, nil, nil
	})
	f.dynamic.PrependWatchReactor("widgets", func(action clienttesting.Action) (bool, watch.Interface, error) {
		if o.down.Load() {
			return true, nil, refused
		}
		w, err := f.dynamic.Tracker().Watch(widgetGVR, action.GetNamespace())
		if err == nil {
			o.mu.Lock()
			o.watches = append(o.watches, w)
			o.mu.Unlock()
		}
		return true, w, err
	})
	return o
}

func (o *widgetOutage) break_() {
	o.down.Store(true)
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, w := range o.watches {
		w.Stop()
	}
	o.watches = nil
}

func (o *widgetOutage) restore() { o.down.Store(false) }

// withoutErrorBackoff leaves only the logging of apimachinery's error
// handlers, which the reflector's watch error handler calls, until the
// test ends. The other, a rate limit of 1ms, stamps the real time once,
// as its package is initialized, and sleeps for the time since: in a
// synctest bubble, whose clock starts in 2000, the first error would
// sleep for decades, and the reflector would never try again.
func withoutErrorBackoff(t *testing.T) {
	handlers := utilruntime.ErrorHandlers
	utilruntime.ErrorHandlers = handlers[:1]
	t.Cleanup(func() { utilruntime.ErrorHandlers = handlers })
}

// holdLease makes another replica the Lease's holder, renewed just now,
// for LeaseDuration: a replica started now is a standby until it expires.
func (f *fakeCluster) holdLease(t testing.TB, identity string, d time.Duration) {
	t.Helper()
	now := metav1.NewMicroTime(time.Now())
	_, err := f.kube.CoordinationV1().Leases(leaseNamespace).Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: controllerName, Namespace: leaseNamespace},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(identity),
			LeaseDurationSeconds: ptr.To(int32(d / time.Second)),
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// sizesSeen records the size each reconcile saw.
type sizesSeen struct {
	mu    sync.Mutex
	sizes []int64
}

func (s *sizesSeen) reconciler() Reconciler[widgetSpec, widgetStatus] {
	return ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.sizes = append(s.sizes, w.Spec.Size)
		return Result[widgetStatus]{}, nil
	})
}

func (s *sizesSeen) get() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.sizes...)
}

func TestANewLeaderWorksOnlyOnceItsCachesHaveCaughtUp(t *testing.T) {
	withoutErrorBackoff(t)
	synctest.Test(t, func(t *testing.T) {
		// The fault: after an outage of the API server, the
		// standby that took the Lease reconciled from a cache still in
		// client-go's watch-retry backoff, at generation 1 / size 1 where
		// the stored object was at generation 2 / size 3.
		f := newFakeCluster(t, newWidget("w1", 1))
		out := f.widgetOutage()
		f.holdLease(t, "replica-2", 15*time.Second)
		var seen sizesSeen
		settings := testSettings()
		settings.CatchUpTimeout = 5 * time.Minute // longer than any backoff here
		c := newWidgetController(t, f, humus.Telemetry{}, settings, seen.reconciler())
		s := serve(t, c)
		synctest.Wait()
		require.NoError(t, c.Synced().Healthy(context.Background()), "the standby's caches have synced")

		// The widgets' watch breaks, and w1 changes meanwhile: the cache
		// still holds size 1.
		out.break_()
		synctest.Wait()
		// (client-go's tracker keeps an object's resourceVersion as given:
		// the API server would make it a later one.)
		w1 := newWidget("w1", 3)
		w1.SetResourceVersion("2")
		f.update(t, widgetGVR, w1)

		// replica-2's Lease expires (15s): this replica takes it, but
		// works only once its cache has caught up.
		time.Sleep(20 * time.Second)
		synctest.Wait()
		require.Equal(t, "replica-1", holder(f.lease(t)))
		require.Empty(t, seen.get(), "reconciles before the cache caught up")

		// Past WatchTimeout (30s) without a watch, the cache is stale.
		time.Sleep(15 * time.Second)
		synctest.Wait()
		require.ErrorContains(t, c.Synced().Healthy(context.Background()), "has had no watch for")
		require.Empty(t, seen.get(), "reconciles before the cache caught up")

		// Once the API server answers again, the reflector's next try
		// lists w1 at size 3, and the workers start.
		out.restore()
		time.Sleep(2 * time.Minute) // longer than client-go's backoff cap, 30s jittered up to twice
		synctest.Wait()
		require.NoError(t, c.Synced().Healthy(context.Background()), "the cache caught up")
		sizes := seen.get()
		require.NotEmpty(t, sizes)
		// Every reconcile saw w1 as stored: the watch counts as open once
		// the reflector's list has returned, before the informer has
		// stored what it listed, and the workers wait for a quorum list's
		// resourceVersions too (they saw [1 3] without it).
		// (w1 may be reconciled twice: the standby's queue held it from
		// its add, and the relist's update may reach the queue after a
		// worker has taken it.)
		for _, size := range sizes {
			require.Equal(t, int64(3), size, "a size a reconcile saw, of %v", sizes)
		}
		require.NoError(t, s.stop(t))
	})
}

func TestANewLeaderWhoseCachesDontCatchUpWithinCatchUpTimeoutReleasesTheLeaseAndServeEnds(t *testing.T) {
	withoutErrorBackoff(t)
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		out := f.widgetOutage()
		f.holdLease(t, "replica-2", 15*time.Second)
		var seen sizesSeen
		settings := testSettings()
		settings.CatchUpTimeout = 10 * time.Second
		c := newWidgetController(t, f, humus.Telemetry{}, settings, seen.reconciler())
		s := serve(t, c)
		synctest.Wait()
		out.break_()
		start := time.Now()

		// The Lease is taken once replica-2's expires, after 15s, and
		// tried every RetryPeriod (2s) jittered by up to 1.2 of it.
		var acquired time.Time
		for acquired.IsZero() {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			if holder(f.lease(t)) == "replica-1" {
				acquired = time.Now()
			}
			require.Less(t, time.Since(start), time.Minute, "the Lease's takeover")
		}
		<-s.done
		require.ErrorContains(t, s.err, "kube: controller "+controllerName+" took the Lease: kube: the caches of "+widgetGVR.String()+" have not caught up with the API server within 10s")
		require.InDelta(t, settings.CatchUpTimeout, time.Since(acquired), float64(100*time.Millisecond), "Serve ends CatchUpTimeout after the Lease was taken")
		require.Empty(t, seen.get(), "reconciles from a cache that had not caught up")
		require.Empty(t, holder(f.lease(t)), "the Lease is released, for a replica that can work")
	})
}

func TestAWatchIsOpenOnlyFromItsStartUntilItsStopNotOnAListThatSucceeds(t *testing.T) {
	withoutErrorBackoff(t)
	synctest.Test(t, func(t *testing.T) {
		// The CI fault: after an API server's restart, an informer's list
		// succeeded and its watch was then refused (a watch cache behind
		// the list answers "Too large resource version"), leaving it in
		// backoff with the list's cache; counted open on the list, it let
		// a new leader's catch-up pass on a cache 30s behind.
		f := newFakeCluster(t, newWidget("w1", 1))
		var refuse atomic.Bool
		refuse.Store(true)
		var mu sync.Mutex
		var started []watch.Interface
		f.dynamic.PrependWatchReactor("widgets", func(action clienttesting.Action) (bool, watch.Interface, error) {
			if refuse.Load() {
				return true, nil, apierrors.NewTooManyRequests("storage is (re)initializing", 1)
			}
			w, err := f.dynamic.Tracker().Watch(widgetGVR, action.GetNamespace())
			if err == nil {
				mu.Lock()
				started = append(started, w)
				mu.Unlock()
			}
			return true, w, err
		})
		h := watchhealth.New(widgetGVR.String(), 30*time.Second, nil)
		inf, err := newResourceInformer(clients{dynamic: f.dynamic}, h, widgetGVR, "", selectors{}, 0)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); inf.RunWithContext(ctx) }()
		synctest.Wait()
		require.True(t, inf.HasSynced(), "the list is stored")
		open, _ := h.Open()
		require.False(t, open, "open with its list stored and its watch refused")

		refuse.Store(false)
		time.Sleep(2 * time.Minute) // past client-go's backoff, 30s at most jittered up to twice
		synctest.Wait()
		open, _ = h.Open()
		require.True(t, open, "open once its watch has started")

		// The watch ends, as when the API server goes away, and the next
		// one is refused: from the stream's end, no watch is open.
		refuse.Store(true)
		mu.Lock()
		for _, w := range started {
			w.Stop()
		}
		mu.Unlock()
		synctest.Wait()
		open, _ = h.Open()
		require.False(t, open, "open after its watch ended")

		// The informer's own stop is not its watch breaking.
		refuse.Store(false)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		open, _ = h.Open()
		require.True(t, open, "open once its watch has started again")
		cancel()
		<-done
		open, _ = h.Open()
		require.True(t, open, "the informer's stop recorded as its watch breaking")
	})
}

// TestANewLeadersCatchUpEndsWhenAListedObjectIsDeletedBeforeItsCacheLooks
// deletes an object just after the new leader's quorum list saw it, and
// creates another, as under create/delete churn: the informer handles the
// DELETED event before the catch-up looks, so the cache never holds the
// listed version. The catch-up counted the key as older in the cache for
// good, and after CatchUpTimeout Serve ended with "1 objects are older in
// it than on the API server", releasing the Lease to a replica that would
// fail the same way; now the cache, past the list's resourceVersion, is
// current, and the leader works at once.
func TestANewLeadersCatchUpEndsWhenAListedObjectIsDeletedBeforeItsCacheLooks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w1, w2 := newWidget("w1", 1), newWidget("w2", 2)
		w1.SetResourceVersion("1")
		w2.SetResourceVersion("2")
		f := newFakeCluster(t, w1, w2)
		// Armed once the standby's caches have synced, the next list of
		// Widgets (the new leader's quorum list) answers as the API server
		// does at resourceVersion 5, and w2 is deleted (6) and w3 created
		// (7) just after; the list answers once the informer has stored
		// both, before the catch-up looks at the cache.
		var armed atomic.Bool
		var c *Controller
		cached := func(name string) bool {
			_, ok, _ := c.current.Load().resource.GetIndexer().GetByKey(testNamespace + "/" + name)
			return ok
		}
		tracker := f.dynamic.Tracker()
		widgetKind := schema.GroupVersionKind{Group: "test.example.com", Version: "v1", Kind: "Widget"}
		f.dynamic.PrependReactor("list", "widgets", func(action clienttesting.Action) (bool, runtime.Object, error) {
			if !armed.CompareAndSwap(true, false) {
				return false, nil, nil
			}
			obj, err := tracker.List(widgetGVR, widgetKind, action.GetNamespace())
			if err != nil {
				return true, nil, err
			}
			l := obj.(*unstructured.UnstructuredList)
			l.SetResourceVersion("5")
			if err := tracker.Delete(widgetGVR, testNamespace, "w2"); err != nil {
				return true, nil, err
			}
			w3 := newWidget("w3", 3)
			w3.SetResourceVersion("7")
			if err := tracker.Create(widgetGVR, w3, testNamespace); err != nil {
				return true, nil, err
			}
			for cached("w2") || !cached("w3") {
				time.Sleep(time.Millisecond)
			}
			return true, l, nil
		})
		f.holdLease(t, "replica-2", 15*time.Second)
		var seen sizesSeen
		settings := testSettings()
		settings.CatchUpTimeout = 10 * time.Second
		c = newWidgetController(t, f, humus.Telemetry{}, settings, seen.reconciler())
		s := serve(t, c)
		synctest.Wait()
		require.NoError(t, c.Synced().Healthy(context.Background()), "the standby's caches have synced")
		armed.Store(true)

		// replica-2's Lease expires after 15s, and is taken within a
		// jittered RetryPeriod.
		time.Sleep(20*time.Second + settings.CatchUpTimeout)
		synctest.Wait()
		select {
		case <-s.done:
			t.Fatalf("Serve ended: %v", s.err)
		default:
		}
		require.False(t, armed.Load(), "the new leader listed the Widgets")
		require.Equal(t, "replica-1", holder(f.lease(t)))
		require.Subset(t, seen.get(), []int64{1, 3}, "w1 and w3 reconciled")
		require.NotContains(t, seen.get(), int64(2), "w2, gone from the cache before the workers started, reconciled")
		require.NoError(t, s.stop(t))
	})
}

// TestSelectorsReachEveryListAndWatchOfTheResource: Settings.LabelSelector
// and Settings.FieldSelector limit the resource's informer, its list and its
// watch, and the new leader's catch-up list (listVersions), as the API
// server must see them to send only the selected objects.
func TestSelectorsReachEveryListAndWatchOfTheResource(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		settings := testSettings()
		settings.LabelSelector = "shard=a"
		settings.FieldSelector = "spec.size=1"
		var n counter
		c := newWidgetController(t, f, humus.Telemetry{}, settings, noStatus(&n))
		s := serve(t, c)
		synctest.Wait()
		require.NoError(t, s.stop(t))

		var lists, watches int
		for _, a := range f.dynamic.Actions() {
			if a.GetResource() != widgetGVR || (a.GetVerb() != "list" && a.GetVerb() != "watch") {
				continue
			}
			var l, fs string
			switch a := a.(type) {
			case clienttesting.ListAction:
				lists++
				l, fs = a.GetListRestrictions().Labels.String(), a.GetListRestrictions().Fields.String()
			case clienttesting.WatchAction:
				watches++
				l, fs = a.GetWatchRestrictions().Labels.String(), a.GetWatchRestrictions().Fields.String()
			}
			require.Equal(t, "shard=a", l, "%s", a.GetVerb())
			require.Equal(t, "spec.size=1", fs, "%s", a.GetVerb())
		}
		require.GreaterOrEqual(t, lists, 2, "the informer's list and the catch-up's")
		require.GreaterOrEqual(t, watches, 1)
	})
}

// TestSyncedNamesTheListTheAPIServerForbids: a controller whose
// ServiceAccount lacks list on a watched resource never syncs that cache,
// and Synced, its readiness, names the cache and the API server's 403,
// which names the verb, the resource and the scope, rather than only
// "its caches have not synced".
func TestSyncedNamesTheListTheAPIServerForbids(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		forbidden := apierrors.NewForbidden(configMapGVR.GroupResource(), "",
			errors.New(`User "system:serviceaccount:ns:sa" cannot list resource "configmaps" in API group "" at the cluster scope`))
		f.metadata.PrependReactor("list", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, forbidden
		})
		var n counter
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(), noStatus(&n),
			Watches(configMapGVR, MapFunc(func(*metav1.PartialObjectMetadata) []types.NamespacedName { return nil })))
		s := serve(t, c)
		synctest.Wait()
		err := c.Synced().Healthy(context.Background())
		require.ErrorContains(t, err, "its caches have not synced: the cache of /v1, Resource=configmaps: ")
		require.ErrorContains(t, err, `cannot list resource "configmaps" in API group "" at the cluster scope`)
		require.NoError(t, s.stop(t))
	})
}
