package kube

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
)

func TestShutdownFinishesOnlyTheReconcileInFlightAndReleasesTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1), newWidget("w2", 2), newWidget("w3", 3))
		release := make(chan struct{})
		var mu sync.Mutex
		var reconciled []string
		var inFlightCancelled bool
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				mu.Lock()
				reconciled = append(reconciled, w.Name)
				mu.Unlock()
				<-release
				mu.Lock()
				inFlightCancelled = ctx.Err() != nil
				mu.Unlock()
				return Result[widgetStatus]{Status: &widgetStatus{Seen: w.Spec.Size}}, nil
			}))
		s := serve(t, c)
		synctest.Wait()
		require.Len(t, reconciled, 1, "one worker, its first reconcile in flight, two keys queued")
		require.Equal(t, "replica-1", holder(f.lease(t)))

		s.cancel()
		shutdown := make(chan error, 1)
		go func() { shutdown <- c.Shutdown(context.Background()) }()
		synctest.Wait()
		select {
		case err := <-shutdown:
			t.Fatalf("Shutdown returned %v with a reconcile in flight", err)
		default:
		}
		require.Equal(t, "replica-1", holder(f.lease(t)), "the Lease is held while a reconcile is in flight")

		close(release)
		require.NoError(t, <-shutdown)
		<-s.done
		require.NoError(t, s.err)

		require.Len(t, reconciled, 1, "the backlog is left for the next leader")
		require.False(t, inFlightCancelled, "the reconcile in flight finishes with its context live")
		require.Len(t, f.statusApplies(), 1, "the reconcile in flight applied its status")
		require.Empty(t, holder(f.lease(t)), "the Lease is released")
		require.Error(t, c.Synced().Healthy(context.Background()), "Synced is unhealthy once Serve returns")
		require.Equal(t, 1, f.idleCloses, "Serve closes its Client's idle connections once")
		require.Empty(t, f.idleHolder, "after the Lease is released")
	})
}

func TestShutdownDeadlineCancelsTheReconcilesInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		var cancelledAfter time.Duration
		start := time.Now()
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				<-ctx.Done()
				cancelledAfter = time.Since(start)
				return Result[widgetStatus]{}, ctx.Err()
			}))
		s := serve(t, c)
		synctest.Wait()

		s.cancel()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := c.Shutdown(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, 5*time.Second, cancelledAfter, "the reconcile in flight is cancelled when Shutdown's context ends")
		<-s.done
		require.NoError(t, s.err, "Serve's context ended: Serve itself didn't fail")
		require.Empty(t, holder(f.lease(t)), "the Lease is released once the cancelled reconcile returns")
	})
}

func TestShutdownBeforeServeReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t)
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				return Result[widgetStatus]{}, nil
			}))
		require.NoError(t, c.Shutdown(context.Background()))
		require.NoError(t, c.Serve(context.Background()))
		require.Error(t, c.Serve(context.Background()), "Serve runs once")
	})
}

func TestServeEndsWithAnErrorNamingAResourceThatIsNotServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t)
		// As the API server answers for a CRD that isn't installed.
		f.dynamic.PrependReactor("list", "widgets", func(clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "test.example.com", Resource: "widgets"}, "")
		})
		r := widgets()
		c, err := newController(&humus.Setup{}, f.clients(), nil, testSettings(), r,
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				return Result[widgetStatus]{}, nil
			}))
		require.NoError(t, err)
		err = c.Serve(context.Background())
		require.Error(t, err)
		require.Contains(t, err.Error(), "kube: listing test.example.com/v1, Resource=widgets")
		require.True(t, apierrors.IsNotFound(err))
	})
}

// TestControllerIsAHumusService runs the controller in real time under
// humustest.TestService, whose leak check covers the goroutines synctest
// can't see leave: none of the informers', the queue's or the election's
// outlives Serve.
func TestControllerIsAHumusService(t *testing.T) {
	f := newFakeCluster(t, newWidget("w1", 1))
	reconciled := make(chan struct{}, 1)
	c := newWidgetController(t, f, humustest.NewTelemetry(t).Telemetry, testSettings(),
		ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
			select {
			case reconciled <- struct{}{}:
			default:
			}
			return Result[widgetStatus]{Status: &widgetStatus{Seen: w.Spec.Size}}, nil
		}))
	var svc humus.Service = c
	served := humustest.TestService(t, svc)
	<-reconciled
	served.Stop()
	require.Empty(t, holder(f.lease(t)))
}

func TestShutdownAfterServeReturnedIsNilEvenWithItsContextDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				return Result[widgetStatus]{}, nil
			}))
		s := serve(t, c)
		synctest.Wait()
		s.cancel()
		<-s.done
		require.NoError(t, s.err)

		done, cancel := context.WithCancel(context.Background())
		cancel()
		for range 20 {
			require.NoError(t, c.Shutdown(done), "Serve returned cleanly: nothing in flight was cancelled")
		}
	})
}

func TestServeWithItsContextDoneReturnsAtOnceAndIsNeverSynced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		var calls atomic.Int32
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				calls.Add(1)
				return Result[widgetStatus]{}, nil
			}))
		require.Error(t, c.Synced().Healthy(context.Background()), "not synced before Serve")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.NoError(t, c.Serve(ctx))
		require.Error(t, c.Synced().Healthy(context.Background()))
		require.Zero(t, calls.Load())
		_, err := f.kube.CoordinationV1().Leases(leaseNamespace).Get(context.Background(), controllerName, metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "no Lease is taken")
		require.ErrorContains(t, c.Serve(context.Background()), "Serve was already called")
		require.NoError(t, c.Shutdown(ctx))
	})
}

func TestServeTwiceAtOnceLeavesTheFirstServing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				return Result[widgetStatus]{}, nil
			}))
		s := serve(t, c)
		synctest.Wait()
		require.ErrorContains(t, c.Serve(context.Background()), "Serve was already called")
		require.NoError(t, c.Synced().Healthy(context.Background()), "the first Serve goes on")
		// Two Shutdowns at once both wait for the one Serve.
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- c.Shutdown(context.Background()) }()
		}
		require.NoError(t, <-errs)
		require.NoError(t, <-errs)
		<-s.done
		require.NoError(t, s.err)
		require.Error(t, c.Synced().Healthy(context.Background()))
	})
}

func TestShutdownDeadlineWaitsForAReconcilerIgnoringItsContextAndAppliesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				time.Sleep(30 * time.Second) // ignores ctx
				return Result[widgetStatus]{Status: &widgetStatus{Message: "late"}}, nil
			}))
		s := serve(t, c)
		synctest.Wait()

		start := time.Now()
		s.cancel()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := c.Shutdown(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, 30*time.Second, time.Since(start), "Shutdown waits for the reconcile to return, as the spec says")
		<-s.done
		require.NoError(t, s.err)
		require.Empty(t, f.statusApplies(), "a cancelled reconcile applies nothing")
		require.Empty(t, holder(f.lease(t)), "the Lease is released once it returns")
	})
}

// TestASlowStopIsLoggedWithAndWithoutSharding stops a controller while a
// reconcile that takes 3s is in flight: the stop waits for it, and logs
// "slow stop" with what the workers took, a leader's as a shard member's
// (whose stop logged nothing).
func TestASlowStopIsLoggedWithAndWithoutSharding(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		name := "leader"
		if sharded {
			name = "member"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeCluster(t, newWidget("w1", 1))
				tel := humustest.NewTelemetry(t)
				settings := testSettings()
				settings.Sharding.Enabled = sharded
				started := make(chan struct{})
				var once sync.Once
				c := newWidgetController(t, f, tel.Telemetry, settings,
					ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
						once.Do(func() { close(started) })
						time.Sleep(3 * time.Second) // a reconcile of 3s, which Shutdown lets finish
						return Result[widgetStatus]{}, nil
					}))
				s := serve(t, c)
				<-started
				require.NoError(t, s.stop(t))
				recs := recordsWithBody(tel, "slow stop")
				require.Len(t, recs, 1)
				require.Equal(t, "3s", attrs(recs[0])["workers"])
			})
		})
	}
}

func TestServeGoesOnAfterAFirstListThatFailsForAWhile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A 500, as the API server answers a list at a version it doesn't
		// store while the conversion webhook is down: Serve ended with it
		// at once, and its Controller never synced once the webhook was
		// back (TestAControllerStartedWhileTheWebhookIsDownSyncsOnceItIsBack).
		f := newFakeCluster(t, newWidget("w1", 1))
		var failed atomic.Bool
		f.dynamic.PrependReactor("list", "widgets", func(clienttesting.Action) (bool, runtime.Object, error) {
			if failed.CompareAndSwap(false, true) {
				return true, nil, apierrors.NewInternalError(errors.New("conversion webhook for test.example.com/v2, Kind=Widget failed: connection refused"))
			}
			return false, nil, nil
		})
		tel := humustest.NewTelemetry(t)
		c := newWidgetController(t, f, tel.Telemetry, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				return Result[widgetStatus]{}, nil
			}))
		s := serve(t, c)
		synctest.Wait()
		require.True(t, failed.Load(), "the first list failed")
		require.NoError(t, c.Synced().Healthy(context.Background()), "the caches synced once a list succeeded")
		var warned bool
		for _, r := range tel.Records() {
			warned = warned || strings.Contains(r.Body().AsString(), "the first list failed")
		}
		require.True(t, warned, "the failed list is logged")
		require.NoError(t, s.stop(t))
	})
}
