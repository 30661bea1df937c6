package echoes

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
)

// queued records the keys Filter queues.
type queued []string

func (q *queued) add(key string) { *q = append(*q, key) }

func returns(uid, rv string) func() (*Version, error) {
	return func() (*Version, error) {
		v := version(uid, rv)
		return &v, nil
	}
}

func version(uid, rv string) Version {
	return Version{UID: types.UID("uid-" + uid), ResourceVersion: rv}
}

func TestTheEventOfTheControllersOwnApplyIsNotQueued(t *testing.T) {
	var o Filter
	var q queued
	err := o.Write("ns/w1", returns("w1", "2"))
	require.NoError(t, err)
	o.Changed("ns/w1", version("w1", "2"), q.add)
	require.Empty(t, q)
	require.Zero(t, o.Keys(), "nothing is kept once the write's event has come")

	o.Changed("ns/w1", version("w1", "2"), q.add)
	require.Equal(t, queued{"ns/w1"}, q, "a write is matched once")
}

func TestAChangeLandingAfterTheControllersApplyIsQueued(t *testing.T) {
	var o Filter
	var q queued
	err := o.Write("ns/w1", returns("w1", "2"))
	require.NoError(t, err)
	o.Changed("ns/w1", version("w1", "2"), q.add)
	o.Changed("ns/w1", version("w1", "3"), q.add)
	require.Equal(t, queued{"ns/w1"}, q)
}

func TestAnEventBeforeItsApplysResponseIsHeldAndDropped(t *testing.T) {
	var o Filter
	var q queued
	err := o.Write("ns/w1", func() (*Version, error) {
		o.Changed("ns/w1", version("w1", "2"), q.add) // the apply's own event
		require.Empty(t, q, "held while the apply is in flight")
		return returns("w1", "2")()
	})
	require.NoError(t, err)
	require.Empty(t, q)
	require.Zero(t, o.Keys())
}

func TestAChangeRacingTheApplyIsQueuedOnceItReturns(t *testing.T) {
	var o Filter
	var q queued
	err := o.Write("ns/w1", func() (*Version, error) {
		o.Changed("ns/w1", version("w1", "2"), q.add) // another manager's, before the apply
		o.Changed("ns/w1", version("w1", "3"), q.add) // the apply's own
		require.Empty(t, q)
		return returns("w1", "3")()
	})
	require.NoError(t, err)
	require.Equal(t, queued{"ns/w1"}, q)
}

func TestEventsHeldDuringAFailedApplyAreQueued(t *testing.T) {
	var o Filter
	var q queued
	err := o.Write("ns/w1", func() (*Version, error) {
		o.Changed("ns/w1", version("w1", "2"), q.add)
		return nil, errors.New("refused")
	})
	require.Error(t, err)
	require.Equal(t, queued{"ns/w1"}, q)
	require.Zero(t, o.Keys())
}

func TestAnotherObjectOfTheSameNameIsQueued(t *testing.T) {
	var o Filter
	var q queued
	err := o.Write("ns/w1", returns("w1", "2"))
	require.NoError(t, err)
	o.Changed("ns/w1", version("w1-again", "2"), q.add)
	require.Equal(t, queued{"ns/w1"}, q, "the uid is part of what matches")
	o.Deleted("ns/w1")
	require.Zero(t, o.Keys(), "a deleted object's writes are forgotten")
}

// A no-op apply returns the object as it is, so its version can be another
// writer's change that landed while the apply was in flight: that change
// is still queued, told apart by what it changed.
func TestAnotherWritersChangeReturnedByANoOpApplyIsQueued(t *testing.T) {
	var o Filter
	var q queued
	annotated := func(Scope) bool { return false } // the event changed an annotation
	err := o.Write("ns/w1", func() (*Version, error) {
		o.ChangedFrom("ns/w1", version("w1", "3"), annotated, q.add)
		return returns("w1", "3")()
	})
	require.NoError(t, err)
	require.Equal(t, queued{"ns/w1"}, q)

	// The same after the apply returned, when the event comes late.
	q = nil
	err = o.Write("ns/w1", returns("w1", "4"))
	require.NoError(t, err)
	o.ChangedFrom("ns/w1", version("w1", "4"), annotated, q.add)
	require.Equal(t, queued{"ns/w1"}, q)
}

// A no-op apply returns the object at the version of whatever change came
// last. When that change was another writer's, touching only a status field
// the apply didn't write, or another manager's finalizer, it is news to the
// controller: its event is queued, not taken for the controller's own.
// An apply that panics, which the reconcile recovers, still ends: left in
// flight, its key's events would be held, and lost, for good.
func TestAnApplyThatPanicsHoldsNoEventForGood(t *testing.T) {
	var o Filter
	var q queued
	require.Panics(t, func() {
		_ = o.Write("ns/w1", func() (*Version, error) {
			o.Changed("ns/w1", version("w1", "2"), q.add)
			panic("the client panicked")
		})
	})
	require.Equal(t, queued{"ns/w1"}, q, "the event held meanwhile is queued")
	o.Changed("ns/w1", version("w1", "3"), q.add)
	require.Equal(t, queued{"ns/w1", "ns/w1"}, q, "and a later one isn't held")
	require.Zero(t, o.Keys())
}
