package kube

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// queued records the keys ownWrites queues.
type queued []string

func (q *queued) add(key string) { *q = append(*q, key) }

func returns(uid, rv string) func() (*unstructured.Unstructured, error) {
	return func() (*unstructured.Unstructured, error) {
		u := &unstructured.Unstructured{Object: map[string]any{}}
		u.SetUID(types.UID("uid-" + uid))
		u.SetResourceVersion(rv)
		return u, nil
	}
}

func version(uid, rv string) objectVersion {
	return objectVersion{uid: types.UID("uid-" + uid), resourceVersion: rv}
}

func TestTheEventOfTheControllersOwnApplyIsNotQueued(t *testing.T) {
	var o ownWrites
	var q queued
	_, err := o.apply("ns/w1", returns("w1", "2"))
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
	_, err := o.apply("ns/w1", returns("w1", "2"))
	require.NoError(t, err)
	o.changed("ns/w1", version("w1", "2"), q.add)
	o.changed("ns/w1", version("w1", "3"), q.add)
	require.Equal(t, queued{"ns/w1"}, q)
}

func TestAnEventBeforeItsApplysResponseIsHeldAndDropped(t *testing.T) {
	var o ownWrites
	var q queued
	_, err := o.apply("ns/w1", func() (*unstructured.Unstructured, error) {
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
	_, err := o.apply("ns/w1", func() (*unstructured.Unstructured, error) {
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
	_, err := o.apply("ns/w1", func() (*unstructured.Unstructured, error) {
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
	_, err := o.apply("ns/w1", returns("w1", "2"))
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
