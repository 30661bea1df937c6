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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

const widgetFinalizer = "test.example.com/cleanup"

func TestFinalizerIsAddedBeforeTheFirstReconcileAndRunsInPlaceOfIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		var reconciles, finalizes counter
		var appliedBefore int
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				if reconciles.add(w.Name) == 1 {
					appliedBefore = len(f.metadataApplies())
				}
				return Result[widgetStatus]{}, nil
			}),
			Finalize(widgetFinalizer, func(ctx context.Context, w widget) error {
				finalizes.add(w.Name)
				return nil
			}))
		s := serve(t, c)
		synctest.Wait()

		require.Equal(t, 1, appliedBefore, "the finalizer is applied before the first reconcile")
		applies := f.metadataApplies()
		require.Len(t, applies, 1)
		require.Equal(t, controllerName, applies[0].fieldManager)
		require.Equal(t, []string{widgetFinalizer}, f.get(t, widgetGVR, testNamespace, "w1").GetFinalizers())
		before := reconciles.get()["w1"]

		f.markDeleted(t, widgetGVR, testNamespace, "w1")
		synctest.Wait()

		require.Equal(t, map[string]int{"w1": 1}, finalizes.get())
		require.Equal(t, before, reconciles.get()["w1"], "a deleting object is finalized, not reconciled")
		require.False(t, f.exists(widgetGVR, testNamespace, "w1"), "removing the finalizer completes the deletion")
		require.Len(t, f.metadataApplies(), 2)
		_, hasFinalizers := f.metadataApplies()[1].body["metadata"].(map[string]any)["finalizers"]
		require.False(t, hasFinalizers, "the finalizer is removed by applying the metadata without it")
		require.NoError(t, s.stop(t))
	})
}

func TestFinalizerErrorRetriesWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWidget("w1", 1)
		w.SetFinalizers([]string{widgetFinalizer})
		f := newFakeCluster(t, w)
		f.markDeleted(t, widgetGVR, testNamespace, "w1")
		settings := testSettings()
		settings.RetryBaseDelay = time.Second
		var finalizes times
		c := newWidgetController(t, f, humus.Telemetry{}, settings,
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				t.Error("a deleting object is not reconciled")
				return Result[widgetStatus]{}, nil
			}),
			Finalize(widgetFinalizer, func(ctx context.Context, w widget) error {
				if finalizes.add() < 3 {
					return errors.New("the cloud is down")
				}
				return nil
			}))
		s := serve(t, c)
		synctest.Wait()
		time.Sleep(10 * time.Second)
		synctest.Wait()

		at := finalizes.get()
		require.Len(t, at, 3)
		require.Equal(t, time.Second, at[1].Sub(at[0]))
		require.Equal(t, 2*time.Second, at[2].Sub(at[1]))
		require.False(t, f.exists(widgetGVR, testNamespace, "w1"))
		require.NoError(t, s.stop(t))
	})
}

func TestPanicInReconcileIsRecoveredAndNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("bad", 1), newWidget("good", 2))
		var reconciles counter
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				reconciles.add(w.Name)
				if w.Name == "bad" {
					var m map[string]int
					m["boom"]++ // a nil map: the developer's mistake
				}
				return Result[widgetStatus]{Status: &widgetStatus{Seen: w.Spec.Size}}, nil
			}))
		s := serve(t, c)
		synctest.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()

		// The controller's own status apply doesn't come back as work
		// (internal/echoes), so "good" is reconciled once.
		require.Equal(t, map[string]int{"bad": 1, "good": 1}, reconciles.get(),
			"the panicking object is not retried; the other is reconciled")
		for _, a := range f.statusApplies() {
			require.Equal(t, "good", a.name, "a panic has no Result, so no status is applied")
		}
		require.NoError(t, s.stop(t))
	})
}

func TestPanicInFinalizerIsRecoveredNotRetriedAndKeepsTheFinalizer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bad := newWidget("bad", 1)
		bad.SetFinalizers([]string{widgetFinalizer})
		f := newFakeCluster(t, bad, newWidget("good", 2))
		f.markDeleted(t, widgetGVR, testNamespace, "bad")
		var reconciles, finalizes counter
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				reconciles.add(w.Name)
				return Result[widgetStatus]{}, nil
			}),
			Finalize(widgetFinalizer, func(ctx context.Context, w widget) error {
				finalizes.add(w.Name)
				panic("finalizer bug")
			}))
		s := serve(t, c)
		synctest.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()

		require.Equal(t, map[string]int{"bad": 1}, finalizes.get(), "not retried")
		// Adding the finalizer is the controller's own write, which
		// doesn't come back as work (internal/echoes): one reconcile.
		require.Equal(t, 1, reconciles.get()["good"], "another object is still reconciled")
		require.True(t, f.exists(widgetGVR, testNamespace, "bad"))
		require.Equal(t, []string{widgetFinalizer}, f.get(t, widgetGVR, testNamespace, "bad").GetFinalizers(),
			"the object keeps its finalizer until a fixed controller reconciles it")
		require.NoError(t, s.stop(t))
	})
}

func TestFinalizerApplyNeverRecreatesAnObjectDeletedInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		// The object is deleted after the cache saw it, and before the
		// controller's apply of its finalizer reaches the server.
		var once sync.Once
		f.dynamic.PrependReactor("patch", "widgets", func(action clienttesting.Action) (bool, runtime.Object, error) {
			once.Do(func() { _ = f.dynamic.Tracker().Delete(widgetGVR, testNamespace, "w1") })
			return false, nil, nil
		})
		var reconciles counter
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				reconciles.add(w.Name)
				return Result[widgetStatus]{}, nil
			}),
			Finalize(widgetFinalizer, func(ctx context.Context, w widget) error { return nil }))
		s := serve(t, c)
		synctest.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()

		require.False(t, f.exists(widgetGVR, testNamespace, "w1"), "an apply names the object's uid, so it never creates a new one")
		require.Empty(t, reconciles.get())
		require.NoError(t, s.stop(t))
	})
}

func TestFinalizerFailingForeverStopsOnceTheObjectIsForceRemoved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWidget("w1", 1)
		w.SetFinalizers([]string{widgetFinalizer, "other.example.com/keep"})
		f := newFakeCluster(t, w)
		f.markDeleted(t, widgetGVR, testNamespace, "w1")
		tel := humustest.NewTelemetry(t)
		settings := testSettings()
		settings.RetryBaseDelay = time.Second
		settings.RetryMaxDelay = time.Second
		var finalizes atomic.Int32
		c := newWidgetController(t, f, tel.Telemetry, settings,
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				t.Error("a deleting object is not reconciled")
				return Result[widgetStatus]{}, nil
			}),
			Finalize(widgetFinalizer, func(ctx context.Context, w widget) error {
				finalizes.Add(1)
				return errors.New("the cloud is down")
			}))
		s := serve(t, c)
		synctest.Wait()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		require.GreaterOrEqual(t, finalizes.Load(), int32(5), "retried every RetryMaxDelay")

		// Someone removes every finalizer by hand, and the deletion completes.
		require.NoError(t, f.dynamic.Tracker().Delete(widgetGVR, testNamespace, "w1"))
		synctest.Wait()
		calls, warns := finalizes.Load(), len(recordsWithBody(tel, "reconcile failed"))
		time.Sleep(time.Minute)
		synctest.Wait()
		require.Equal(t, calls, finalizes.Load(), "a gone object is never finalized again")
		require.Len(t, recordsWithBody(tel, "reconcile failed"), warns, "nor recorded as failing")
		require.Empty(t, f.metadataApplies(), "f never succeeded, so the finalizer was never removed by the controller")
		require.False(t, f.exists(widgetGVR, testNamespace, "w1"), "nor was the object recreated")
		require.NoError(t, s.stop(t))
	})
}

func TestDeletingObjectWithOnlyAnotherControllersFinalizerIsLeftAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWidget("w1", 1)
		w.SetFinalizers([]string{"other.example.com/keep"})
		f := newFakeCluster(t, w)
		f.markDeleted(t, widgetGVR, testNamespace, "w1")
		var finalizes atomic.Int32
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				t.Error("a deleting object is not reconciled")
				return Result[widgetStatus]{}, nil
			}),
			Finalize(widgetFinalizer, func(ctx context.Context, w widget) error {
				finalizes.Add(1)
				return nil
			}))
		s := serve(t, c)
		synctest.Wait()
		require.Zero(t, finalizes.Load(), "f runs only for an object that carries this controller's finalizer")
		require.Empty(t, f.applies, "the controller's finalizer is not added to an object being deleted")
		require.Equal(t, []string{"other.example.com/keep"}, f.get(t, widgetGVR, testNamespace, "w1").GetFinalizers())
		require.NoError(t, s.stop(t))
	})
}

// The cache can still show a finalized object, finalizer and all, when its
// key comes round again before the informer sees it deleted: a change made
// while f ran queues the key once more. f must not run a second time.
func TestFinalizeRunsOnceWhenTheCacheStillShowsTheFinalizedObject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWidget("w1", 1)
		w.SetFinalizers([]string{widgetFinalizer})
		now := metav1.Now()
		w.SetDeletionTimestamp(&now)
		f := newFakeCluster(t, w)
		var finalizes counter
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(context.Context, widget) (Result[widgetStatus], error) {
				t.Error("a deleting object is finalized, not reconciled")
				return Result[widgetStatus]{}, nil
			}),
			Finalize(widgetFinalizer, func(ctx context.Context, w widget) error {
				finalizes.add(w.Name)
				return nil
			}))
		stale := w.DeepCopy()

		_, err := c.typed.reconcileObject(t.Context(), cached(t, stale))
		require.NoError(t, err)
		require.False(t, f.exists(widgetGVR, testNamespace, "w1"), "removing the finalizer completes the deletion")

		_, err = c.typed.reconcileObject(t.Context(), cached(t, stale))
		require.NoError(t, err, "the object is gone: there is nothing left to do")
		require.Equal(t, map[string]int{"w1": 1}, finalizes.get(), "f runs once")
	})
}

// When the object is gone before the finalizer is removed (deleted by
// another path, or finalized by an earlier leader), removing it is done.
func TestRemovingTheFinalizerOfAnObjectThatIsGoneIsDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWidget("w1", 1)
		w.SetFinalizers([]string{widgetFinalizer})
		now := metav1.Now()
		w.SetDeletionTimestamp(&now)
		f := newFakeCluster(t)
		var finalizes counter
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(context.Context, widget) (Result[widgetStatus], error) {
				return Result[widgetStatus]{}, nil
			}),
			Finalize(widgetFinalizer, func(ctx context.Context, w widget) error {
				finalizes.add(w.Name)
				return nil
			}))

		_, err := c.typed.reconcileObject(t.Context(), cached(t, w))
		require.NoError(t, err)
		require.Equal(t, map[string]int{"w1": 1}, finalizes.get())
		require.False(t, f.exists(widgetGVR, testNamespace, "w1"), "the remove's apply, which names the uid, never recreates the object")
	})
}

// cached is u as the resource's cache holds it.
func cached(t testing.TB, u *unstructured.Unstructured) *cachedObject {
	t.Helper()
	o, err := newCachedObject(u.DeepCopy())
	require.NoError(t, err)
	return o
}

// The DELETED event of a finalized object can come before the answer of the
// apply that removed its finalizer, the answer and the watch traveling on
// different HTTP/2 streams; a retried removal can find the object gone.
// Either way nothing is kept of the object once it is gone: its uid among
// the finalized, or its own write, would stay for the life of the process,
// as nothing else would remove them.
func TestAFinalizedObjectGoneBeforeItsRemovalsAnswerKeepsNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		removed bool // the removal removed the finalizer; else it found the object gone
	}{
		{"the DELETED event before the answer", true},
		{"a retried removal finding the object gone", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWidget("w1", 1)
				w.SetFinalizers([]string{widgetFinalizer})
				f := newFakeCluster(t, w)
				f.markDeleted(t, widgetGVR, testNamespace, "w1")
				var c *Controller
				goneFromCache := func() {
					for {
						if cachedVersion((*c.listerCaches[widgetGVR].informer.Load()).GetIndexer(), testNamespace+"/w1").UID == "" {
							break
						}
						time.Sleep(time.Millisecond)
					}
					// The informer's handler runs after its cache has
					// dropped the object: let it.
					time.Sleep(time.Millisecond)
				}
				f.dynamic.PrependReactor("patch", "widgets", func(action clienttesting.Action) (bool, runtime.Object, error) {
					pa, ok := action.(clienttesting.PatchActionImpl)
					if !ok || pa.GetSubresource() != "" || strings.Contains(string(pa.GetPatch()), "finalizers") {
						return false, nil, nil
					}
					if !tc.removed {
						if err := f.dynamic.Tracker().Delete(widgetGVR, testNamespace, "w1"); err != nil {
							t.Error(err)
						}
						goneFromCache()
						return f.apply(action)
					}
					handled, obj, err := f.apply(action)
					goneFromCache()
					return handled, obj, err
				})
				var finalizes counter
				c = newWidgetController(t, f, humus.Telemetry{}, testSettings(),
					ReconcilerFunc[widgetSpec, widgetStatus](func(context.Context, widget) (Result[widgetStatus], error) {
						t.Error("a deleting object is finalized, not reconciled")
						return Result[widgetStatus]{}, nil
					}),
					Finalize(widgetFinalizer, func(ctx context.Context, w widget) error {
						finalizes.add(w.Name)
						return nil
					}))
				s := serve(t, c)
				synctest.Wait()
				time.Sleep(time.Minute)
				synctest.Wait()

				require.Equal(t, map[string]int{"w1": 1}, finalizes.get())
				require.False(t, f.exists(widgetGVR, testNamespace, "w1"))
				var finalized []any
				c.finalized.Range(func(uid, _ any) bool {
					finalized = append(finalized, uid)
					return true
				})
				require.Empty(t, finalized, "the uid of an object gone isn't kept")
				require.Zero(t, c.echoes.Keys(), "nor its own write")
				require.NoError(t, s.stop(t))
			})
		})
	}
}
