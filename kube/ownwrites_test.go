package kube

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"k8s.io/apimachinery/pkg/types"
)

// queued records the keys ownWrites queues.
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
	var o ownWrites
	var q queued
	err := o.apply("ns/w1", returns("w1", "2"))
	require.NoError(t, err)
	o.changed("ns/w1", version("w1", "2"), q.add)
	require.Empty(t, q)
	require.Empty(t, o.keys, "nothing is kept once the write's event has come")

	o.changed("ns/w1", version("w1", "2"), q.add)
	require.Equal(t, queued{"ns/w1"}, q, "a write is matched once")
}

func TestAChangeLandingAfterTheControllersApplyIsQueued(t *testing.T) {
	var o ownWrites
	var q queued
	err := o.apply("ns/w1", returns("w1", "2"))
	require.NoError(t, err)
	o.changed("ns/w1", version("w1", "2"), q.add)
	o.changed("ns/w1", version("w1", "3"), q.add)
	require.Equal(t, queued{"ns/w1"}, q)
}

func TestAnEventBeforeItsApplysResponseIsHeldAndDropped(t *testing.T) {
	var o ownWrites
	var q queued
	err := o.apply("ns/w1", func() (*objectVersion, error) {
		o.changed("ns/w1", version("w1", "2"), q.add) // the apply's own event
		require.Empty(t, q, "held while the apply is in flight")
		return returns("w1", "2")()
	})
	require.NoError(t, err)
	require.Empty(t, q)
	require.Empty(t, o.keys)
}

func TestAChangeRacingTheApplyIsQueuedOnceItReturns(t *testing.T) {
	var o ownWrites
	var q queued
	err := o.apply("ns/w1", func() (*objectVersion, error) {
		o.changed("ns/w1", version("w1", "2"), q.add) // another manager's, before the apply
		o.changed("ns/w1", version("w1", "3"), q.add) // the apply's own
		require.Empty(t, q)
		return returns("w1", "3")()
	})
	require.NoError(t, err)
	require.Equal(t, queued{"ns/w1"}, q)
}

func TestEventsHeldDuringAFailedApplyAreQueued(t *testing.T) {
	var o ownWrites
	var q queued
	err := o.apply("ns/w1", func() (*objectVersion, error) {
		o.changed("ns/w1", version("w1", "2"), q.add)
		return nil, errors.New("refused")
	})
	require.Error(t, err)
	require.Equal(t, queued{"ns/w1"}, q)
	require.Empty(t, o.keys)
}

func TestAnotherObjectOfTheSameNameIsQueued(t *testing.T) {
	var o ownWrites
	var q queued
	err := o.apply("ns/w1", returns("w1", "2"))
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
	var o ownWrites
	var q queued
	annotated := func() bool { return false } // the event changed an annotation
	err := o.apply("ns/w1", func() (*objectVersion, error) {
		o.changedFrom("ns/w1", version("w1", "3"), annotated, q.add)
		return returns("w1", "3")()
	})
	require.NoError(t, err)
	require.Equal(t, queued{"ns/w1"}, q)

	// The same after the apply returned, when the event comes late.
	q = nil
	err = o.apply("ns/w1", returns("w1", "4"))
	require.NoError(t, err)
	o.changedFrom("ns/w1", version("w1", "4"), annotated, q.add)
	require.Equal(t, queued{"ns/w1"}, q)
}

func TestOnlyStatusOrFinalizersChanged(t *testing.T) {
	obj := cachedOfJSON
	base := `{"metadata":{"name":"w1","resourceVersion":"1"},"spec":{"size":1}`
	for _, tc := range []struct {
		name string
		new  string
		want bool
	}{
		{"status", `{"metadata":{"name":"w1","resourceVersion":"2"},"spec":{"size":1},"status":{"ready":true}}`, true},
		{"finalizers", `{"metadata":{"name":"w1","resourceVersion":"2","finalizers":["f"]},"spec":{"size":1}}`, true},
		{"annotation", `{"metadata":{"name":"w1","resourceVersion":"2","annotations":{"a":"b"}},"spec":{"size":1}}`, false},
		{"spec", `{"metadata":{"name":"w1","resourceVersion":"2"},"spec":{"size":2}}`, false},
		{"undecodable", `{`, false},
		// Fields are compared as their bytes, which newCachedObject's
		// encoding keeps alike for equal values; written otherwise, a
		// field counts as changed, and the key is queued.
		{"the spec written otherwise", `{"metadata":{"name":"w1","resourceVersion":"2"},"spec":{"size": 1}}`, false},
		{"metadata's fields in another order", `{"metadata":{"resourceVersion":"2","name":"w1"},"spec":{"size":1},"status":{}}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, onlyStatusOrFinalizersChanged(obj(base+`}`), obj(tc.new)))
		})
	}
}
