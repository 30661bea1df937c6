package tenure

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestATenureIsValidOnlyBeforeItsDeadlineByTheClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lost := make(chan struct{})
		tn := New(context.Background(), 10*time.Second, func() { close(lost) })
		require.ErrorIs(t, tn.Valid(), ErrNotLeading, "before it begins")
		require.NoError(t, tn.LostCause())

		tn.Renewed(time.Now())
		tn.Commence()
		require.True(t, tn.HasBegun())
		require.NoError(t, tn.Valid())
		tn.Renewed(time.Now().Add(-9 * time.Second)) // a renewal that took 9s
		require.NoError(t, tn.Valid())

		time.Sleep(time.Second)
		require.ErrorIs(t, tn.Valid(), ErrLeaseExpired)
		<-lost
		require.ErrorIs(t, context.Cause(tn.Context()), ErrLeaseExpired)
		require.ErrorIs(t, tn.LostCause(), ErrLeaseExpired)
		tn.Renewed(time.Now())
		require.ErrorIs(t, tn.Valid(), ErrLeaseExpired, "a loss is for good")
	})
}

// TestAWriteAfterThePauseIsRefused is a process paused past its deadline
// whose deadline's timer hasn't fired yet on waking (SIGSTOP, a frozen VM,
// CPU starvation): Current reads the deadline from the clock, and a
// renewal that started after it doesn't count.
func TestAWriteAfterThePauseIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := New(context.Background(), 10*time.Second, nil)
		tn.Renewed(time.Now())
		tn.Commence()
		require.NoError(t, tn.Current())

		tn.mu.Lock()
		tn.timer.Stop()
		tn.mu.Unlock()
		time.Sleep(15 * time.Second)
		require.NoError(t, tn.LostErr(), "the timer hasn't fired")
		require.ErrorIs(t, tn.Current(), ErrLeaseExpired)
		require.ErrorIs(t, tn.LostErr(), ErrLeaseExpired)
	})
}

func TestARenewalStartedAtTheDeadlineLosesTheTenure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := New(context.Background(), 10*time.Second, nil)
		start := time.Now()
		tn.Renewed(start)
		tn.Commence()
		tn.mu.Lock()
		tn.timer.Stop()
		tn.mu.Unlock()
		tn.Renewed(start.Add(10 * time.Second))
		require.ErrorIs(t, tn.LostErr(), ErrLeaseExpired)
	})
}

func TestOnLostRunsOnceAndNotOnAGracefulEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs atomic.Int32
		tn := New(context.Background(), 10*time.Second, func() { runs.Add(1) })
		tn.Renewed(time.Now())
		tn.Commence()
		tn.Lose(ErrNotLeading)
		synctest.Wait()
		require.Zero(t, runs.Load())
		require.NoError(t, tn.LostCause(), "a graceful end")
		require.ErrorIs(t, context.Cause(tn.Context()), ErrNotLeading)

		other := errors.New("other")
		tn = New(context.Background(), 10*time.Second, func() { runs.Add(1) })
		tn.Lose(other)
		synctest.Wait()
		require.Zero(t, runs.Load(), "not begun")

		tn = New(context.Background(), 10*time.Second, func() { runs.Add(1) })
		tn.Renewed(time.Now())
		tn.Commence()
		tn.Lose(ErrOtherHolder)
		tn.Lose(other)
		synctest.Wait()
		require.Equal(t, int32(1), runs.Load())
		require.ErrorIs(t, tn.LostCause(), ErrOtherHolder)
	})
}
