package kube

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
)

// queued records the keys echoFilter queues.
type queued []string

func (q *queued) add(key string) { *q = append(*q, key) }

func returns(uid, rv string) func() (*objectVersion, error) {
	return func() (*objectVersion, error) {
		v := version(uid, rv)
		return &v, nil
	}
}

func version(uid, rv string) objectVersion {
	return objectVersion{uid: types.UID("uid-" + uid), resourceVersion: rv}
}

func TestTheEventOfTheControllersOwnApplyIsNotQueued(t *testing.T) {
	var o echoFilter
	var q queued
	err := o.write("ns/w1", returns("w1", "2"))
	require.NoError(t, err)
	o.changed("ns/w1", version("w1", "2"), q.add)
	require.Empty(t, q)
	require.Empty(t, o.keys, "nothing is kept once the write's event has come")

	o.changed("ns/w1", version("w1", "2"), q.add)
	require.Equal(t, queued{"ns/w1"}, q, "a write is matched once")
}

func TestAChangeLandingAfterTheControllersApplyIsQueued(t *testing.T) {
	var o echoFilter
	var q queued
	err := o.write("ns/w1", returns("w1", "2"))
	require.NoError(t, err)
	o.changed("ns/w1", version("w1", "2"), q.add)
	o.changed("ns/w1", version("w1", "3"), q.add)
	require.Equal(t, queued{"ns/w1"}, q)
}

func TestAnEventBeforeItsApplysResponseIsHeldAndDropped(t *testing.T) {
	var o echoFilter
	var q queued
	err := o.write("ns/w1", func() (*objectVersion, error) {
		o.changed("ns/w1", version("w1", "2"), q.add) // the apply's own event
		require.Empty(t, q, "held while the apply is in flight")
		return returns("w1", "2")()
	})
	require.NoError(t, err)
	require.Empty(t, q)
	require.Empty(t, o.keys)
}

func TestAChangeRacingTheApplyIsQueuedOnceItReturns(t *testing.T) {
	var o echoFilter
	var q queued
	err := o.write("ns/w1", func() (*objectVersion, error) {
		o.changed("ns/w1", version("w1", "2"), q.add) // another manager's, before the apply
		o.changed("ns/w1", version("w1", "3"), q.add) // the apply's own
		require.Empty(t, q)
		return returns("w1", "3")()
	})
	require.NoError(t, err)
	require.Equal(t, queued{"ns/w1"}, q)
}

func TestEventsHeldDuringAFailedApplyAreQueued(t *testing.T) {
	var o echoFilter
	var q queued
	err := o.write("ns/w1", func() (*objectVersion, error) {
		o.changed("ns/w1", version("w1", "2"), q.add)
		return nil, errors.New("refused")
	})
	require.Error(t, err)
	require.Equal(t, queued{"ns/w1"}, q)
	require.Empty(t, o.keys)
}

func TestAnotherObjectOfTheSameNameIsQueued(t *testing.T) {
	var o echoFilter
	var q queued
	err := o.write("ns/w1", returns("w1", "2"))
	require.NoError(t, err)
	o.changed("ns/w1", version("w1-again", "2"), q.add)
	require.Equal(t, queued{"ns/w1"}, q, "the uid is part of what matches")
	o.deleted("ns/w1")
	require.Empty(t, o.keys, "a deleted object's writes are forgotten")
}

func TestANewObjectWithAFinalizerIsReconciledOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 3))
		var reconciles counter
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				reconciles.add(w.Name)
				return Result[widgetStatus]{Status: &widgetStatus{Seen: w.Spec.Size}}, nil
			}),
			Finalize(widgetFinalizer, func(context.Context, widget) error { return nil }))
		s := serve(t, c)
		synctest.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()

		require.Len(t, f.metadataApplies(), 1, "the finalizer is added")
		require.Len(t, f.statusApplies(), 1, "the status is applied")
		require.Equal(t, map[string]int{"w1": 1}, reconciles.get(), "neither write comes back as work")
		require.NoError(t, s.stop(t))
	})
}

// A no-op apply returns the object as it is, so its version can be another
// writer's change that landed while the apply was in flight: that change
// is still queued, told apart by what it changed.
func TestAnotherWritersChangeReturnedByANoOpApplyIsQueued(t *testing.T) {
	var o echoFilter
	var q queued
	annotated := func(writeScope) bool { return false } // the event changed an annotation
	err := o.write("ns/w1", func() (*objectVersion, error) {
		o.changedFrom("ns/w1", version("w1", "3"), annotated, q.add)
		return returns("w1", "3")()
	})
	require.NoError(t, err)
	require.Equal(t, queued{"ns/w1"}, q)

	// The same after the apply returned, when the event comes late.
	q = nil
	err = o.write("ns/w1", returns("w1", "4"))
	require.NoError(t, err)
	o.changedFrom("ns/w1", version("w1", "4"), annotated, q.add)
	require.Equal(t, queued{"ns/w1"}, q)
}

// A no-op apply returns the object at the version of whatever change came
// last. When that change was another writer's, touching only a status field
// the apply didn't write, or another manager's finalizer, it is news to the
// controller: its event is queued, not taken for the controller's own.
func TestAnotherWritersStatusOrFinalizerReturnedByANoOpApplyIsQueued(t *testing.T) {
	for _, tc := range []struct {
		name        string
		subresource string // the apply that finds the other writer's change
		change      func(u *unstructured.Unstructured)
	}{
		{"another manager's finalizer, by the status apply", "status", func(u *unstructured.Unstructured) {
			u.SetFinalizers(append(u.GetFinalizers(), "other.example.com/keep"))
		}},
		{"a status field the status apply didn't write", "status", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "set by another writer", "status", "message")
		}},
		{"the status, by the finalizer's apply", "", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "set by another writer", "status", "message")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeCluster(t, newWidget("w1", 3))
				var once sync.Once
				f.dynamic.PrependReactor("patch", "widgets", func(action clienttesting.Action) (bool, runtime.Object, error) {
					if action.GetSubresource() != tc.subresource {
						return false, nil, nil
					}
					handled := false
					var obj runtime.Object
					var err error
					once.Do(func() {
						// The apply writes what is there already, and
						// another writer's change lands first: the
						// answer is that change's version.
						handled = true
						var apply unstructured.Unstructured
						if err = apply.UnmarshalJSON(action.(clienttesting.PatchActionImpl).GetPatch()); err != nil {
							return
						}
						u := f.get(t, widgetGVR, testNamespace, "w1").DeepCopy()
						if tc.subresource == "status" {
							u.Object["status"] = apply.Object["status"]
						} else {
							u.SetFinalizers(apply.GetFinalizers())
						}
						tc.change(u)
						u.SetResourceVersion("another-writer")
						obj, err = u, f.dynamic.Tracker().Update(widgetGVR, u, testNamespace)
					})
					return handled, obj, err
				})
				var reconciles counter
				c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
					ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
						reconciles.add(w.Name)
						return Result[widgetStatus]{Status: &widgetStatus{Seen: w.Spec.Size, Message: w.Status.Message}}, nil
					}),
					Finalize(widgetFinalizer, func(context.Context, widget) error { return nil }))
				s := serve(t, c)
				synctest.Wait()
				time.Sleep(time.Minute)
				synctest.Wait()

				require.Equal(t, map[string]int{"w1": 2}, reconciles.get(), "the other writer's change reconciles once more")
				require.NoError(t, s.stop(t))
			})
		})
	}
}

// An apply that panics, which the reconcile recovers, still ends: left in
// flight, its key's events would be held, and lost, for good.
func TestAnApplyThatPanicsHoldsNoEventForGood(t *testing.T) {
	var o echoFilter
	var q queued
	require.Panics(t, func() {
		_ = o.write("ns/w1", func() (*objectVersion, error) {
			o.changed("ns/w1", version("w1", "2"), q.add)
			panic("the client panicked")
		})
	})
	require.Equal(t, queued{"ns/w1"}, q, "the event held meanwhile is queued")
	o.changed("ns/w1", version("w1", "3"), q.add)
	require.Equal(t, queued{"ns/w1", "ns/w1"}, q, "and a later one isn't held")
	require.Empty(t, o.keys)
}
