package kube

import (
	"context"
	"sync"
	"time"
)

// tenure is a replica's right to work under a Lease it holds: a leader's
// (lease) or a shard member's (member), the deadline-and-loss half the two
// share. Its deadline is the start of the last Lease write that succeeded
// plus RenewDeadline, on the monotonic clock (see lease for why no other
// replica can hold the Lease before it). Once begun, the tenure holds until
// the deadline passes, read by a timer or from the clock, whichever comes
// first, or until it is lost (lose): then its context is cancelled with
// the cause, onLost runs once, and it is lost for good. A renewal that
// started at or after the deadline comes too late, and loses it too:
// after a pause (SIGSTOP, a frozen VM, CPU starvation) a renewal's timer
// can fire before the deadline's, while another replica may already hold
// the Lease.
type tenure struct {
	renewDeadline time.Duration
	onLost        func() // runs once, when a begun tenure is lost
	// ctx ends when the tenure is lost, with the cause; its values are
	// its parent's.
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	deadline time.Time   // of the last renewal; zero before the first
	begun    bool        // working: the leader leads, the member joined
	timer    *time.Timer // fires at deadline once begun
	lost     error       // why the tenure was lost; sticky
}

// newTenure returns a tenure not yet begun, whose context derives from
// parent's values, and whose deadline is renewDeadline after each renewal.
func newTenure(parent context.Context, renewDeadline time.Duration, onLost func()) *tenure {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	return &tenure{renewDeadline: renewDeadline, onLost: onLost, ctx: ctx, cancel: cancel}
}

// renewed records a Lease write that started at start and succeeded: the
// deadline moves to start+renewDeadline, unless the tenure was lost
// meanwhile, or has begun and the write started at or after its deadline
// (too late: the tenure is lost).
func (t *tenure) renewed(start time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lost == nil && t.begun && !start.Before(t.deadline) {
		t.loseLocked(errLeaseExpired)
	}
	if t.lost != nil {
		return
	}
	t.deadline = start.Add(t.renewDeadline)
	if t.timer != nil {
		t.timer.Reset(time.Until(t.deadline))
	}
}

// commence starts the work the tenure allows, until its deadline; once
// begun, it stays so.
func (t *tenure) commence() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.begun {
		return
	}
	t.begun = true
	t.timer = time.AfterFunc(time.Until(t.deadline), t.expire)
}

// hasBegun reports whether commence was called.
func (t *tenure) hasBegun() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.begun
}

// expire loses the tenure if its deadline has passed; the timer may fire
// early after a renewal moved the deadline on.
func (t *tenure) expire() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lost == nil && !time.Now().Before(t.deadline) {
		t.loseLocked(errLeaseExpired)
	}
}

// lose ends the tenure for good with cause, unless it was lost already.
// errNotLeading is a graceful end: onLost doesn't run for it.
func (t *tenure) lose(cause error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.loseLocked(cause)
}

func (t *tenure) loseLocked(cause error) {
	if t.lost != nil {
		return
	}
	t.lost = cause
	if t.timer != nil {
		t.timer.Stop()
	}
	t.cancel(cause)
	if t.begun && cause != errNotLeading && t.onLost != nil {
		go t.onLost()
	}
}

// lostErr is why the tenure was lost, or nil.
func (t *tenure) lostErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lost
}

// current returns why a Lease write mustn't be sent: the tenure was lost,
// or has begun and its deadline has passed by the clock now (which loses
// it). Otherwise nil.
func (t *tenure) current() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lost == nil && t.begun && !time.Now().Before(t.deadline) {
		t.loseLocked(errLeaseExpired)
	}
	return t.lost
}

// valid returns nil while the replica may work: the tenure has begun, is
// not lost, and its deadline, read from the clock now rather than from the
// timer, which a paused process fires late, has not passed. Otherwise it
// returns why not.
func (t *tenure) valid() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.lost != nil:
		return t.lost
	case !t.begun:
		return errNotLeading
	case !time.Now().Before(t.deadline):
		t.loseLocked(errLeaseExpired)
		return errLeaseExpired
	}
	return nil
}

// lostCause is why a begun tenure was lost other than gracefully, or nil.
func (t *tenure) lostCause() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.begun && t.lost != errNotLeading {
		return t.lost
	}
	return nil
}
