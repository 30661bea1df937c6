// Package tenure is a replica's right to work under a Lease it holds: a
// leader's (internal/leaderelection's Lease) or a shard member's, the
// deadline-and-loss half the two share.
//
// It owns Tenure, New and the causes of a loss both share (ErrLeaseExpired,
// ErrOtherHolder, ErrNotLeading). Its invariants: never two replicas at
// work under one Lease, so no renewal counts past the deadline (a write
// that started at or after it loses the tenure); the deadline is read from
// the clock, not only from the timer a paused process fires late; a loss
// is for good, cancels the tenure's context with its cause and runs onLost
// once (not for ErrNotLeading, a graceful end).
package tenure

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrLeaseExpired, ErrOtherHolder and ErrNotLeading are why a replica
// stopped working: the cause of its tenure's context. ErrNotLeading is a
// graceful end, or a tenure not begun.
var (
	ErrLeaseExpired = errors.New("kube: the Lease was not renewed within RenewDeadline")
	ErrOtherHolder  = errors.New("kube: another replica holds the Lease")
	ErrNotLeading   = errors.New("kube: the replica doesn't hold the Lease")
)

// Tenure is a replica's right to work under a Lease it holds: a leader's
// (internal/leaderelection's Lease) or a shard member's, the
// deadline-and-loss half the two share. Its deadline is the start of the
// last Lease write that succeeded plus RenewDeadline, on the monotonic
// clock (see leaderelection.Lease for why no other replica can hold the
// Lease before it). Once begun, the tenure holds until the deadline
// passes, read by a timer or from the clock, whichever comes first, or
// until it is lost (Lose): then its context is cancelled with
// the cause, onLost runs once, and it is lost for good. A renewal that
// started at or after the deadline comes too late, and loses it too:
// after a pause (SIGSTOP, a frozen VM, CPU starvation) a renewal's timer
// can fire before the deadline's, while another replica may already hold
// the Lease.
type Tenure struct {
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

// New returns a tenure not yet begun, whose context derives from
// parent's values, and whose deadline is renewDeadline after each renewal.
func New(parent context.Context, renewDeadline time.Duration, onLost func()) *Tenure {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	return &Tenure{renewDeadline: renewDeadline, onLost: onLost, ctx: ctx, cancel: cancel}
}

// Context ends when the tenure is lost, with the cause as its
// context.Cause; its values are its parent's.
func (t *Tenure) Context() context.Context { return t.ctx }

// Renewed records a Lease write that started at start and succeeded: the
// deadline moves to start+renewDeadline, unless the tenure was lost
// meanwhile, or has begun and the write started at or after its deadline
// (too late: the tenure is lost).
func (t *Tenure) Renewed(start time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lost == nil && t.begun && !start.Before(t.deadline) {
		t.loseLocked(ErrLeaseExpired)
	}
	if t.lost != nil {
		return
	}
	t.deadline = start.Add(t.renewDeadline)
	if t.timer != nil {
		t.timer.Reset(time.Until(t.deadline))
	}
}

// Commence starts the work the tenure allows, until its deadline; once
// begun, it stays so.
func (t *Tenure) Commence() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.begun {
		return
	}
	t.begun = true
	t.timer = time.AfterFunc(time.Until(t.deadline), t.expire)
}

// HasBegun reports whether Commence was called.
func (t *Tenure) HasBegun() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.begun
}

// expire loses the tenure if its deadline has passed; the timer may fire
// early after a renewal moved the deadline on.
func (t *Tenure) expire() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lost == nil && !time.Now().Before(t.deadline) {
		t.loseLocked(ErrLeaseExpired)
	}
}

// Lose ends the tenure for good with cause, unless it was lost already.
// ErrNotLeading is a graceful end: onLost doesn't run for it.
func (t *Tenure) Lose(cause error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.loseLocked(cause)
}

func (t *Tenure) loseLocked(cause error) {
	if t.lost != nil {
		return
	}
	t.lost = cause
	if t.timer != nil {
		t.timer.Stop()
	}
	t.cancel(cause)
	if t.begun && cause != ErrNotLeading && t.onLost != nil {
		go t.onLost()
	}
}

// Release ends the tenure gracefully, as a shard member leaves: it is
// lost, for good, with ErrNotLeading.
func (t *Tenure) Release() { t.Lose(ErrNotLeading) }

// LostErr is why the tenure was lost, or nil.
func (t *Tenure) LostErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lost
}

// Current returns why a Lease write mustn't be sent: the tenure was lost,
// or has begun and its deadline has passed by the clock now (which loses
// it). Otherwise nil.
func (t *Tenure) Current() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lost == nil && t.begun && !time.Now().Before(t.deadline) {
		t.loseLocked(ErrLeaseExpired)
	}
	return t.lost
}

// Valid returns nil while the replica may work: the tenure has begun, is
// not lost, and its deadline, read from the clock now rather than from the
// timer, which a paused process fires late, has not passed. Otherwise it
// returns why not.
func (t *Tenure) Valid() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.lost != nil:
		return t.lost
	case !t.begun:
		return ErrNotLeading
	case !time.Now().Before(t.deadline):
		t.loseLocked(ErrLeaseExpired)
		return ErrLeaseExpired
	}
	return nil
}

// LostCause is why a begun tenure was lost other than gracefully, or nil.
func (t *Tenure) LostCause() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.begun && t.lost != ErrNotLeading {
		return t.lost
	}
	return nil
}
