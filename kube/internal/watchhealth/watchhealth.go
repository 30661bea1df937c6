// Package watchhealth is what an informer's lists and watches say of its
// cache: whether its watch is open, since when it has been broken, and
// whether its resource has stayed unserved (a deleted CRD).
//
// It owns Health and New. Its invariants: only a watch that started
// opens it, never a list alone; the informer's own stop (its context
// ended) is not its watch breaking; a nil *Health records nothing; once
// stopped, nothing more is recorded and onUnserved never runs.
package watchhealth

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Health is what an informer's lists and watches say of its cache:
// whether its watch is open, since when it has been broken, and since when
// its resource has been unserved (a list or watch answered NotFound, as
// for a deleted CRD). client-go's reflector retries a refused watch
// without telling its watch error handler, so the health is read from the
// calls themselves: package kube's newInformer records each list, each watch start and
// each watch stop in its informer's Health. Only a watch started
// opens it: a list that succeeds says the resource is served, but the
// informer sees no change until its watch starts, and the watch after a
// list can still be refused (after an API server's restart, one whose
// watch cache is behind the list answers "Too large resource version"),
// leaving the informer in backoff with the list's cache.
type Health struct {
	name    string
	timeout time.Duration
	// onUnserved runs when the resource has stayed unserved for timeout;
	// nil for an owned resource.
	onUnserved func(error)

	mu          sync.Mutex
	up          bool
	brokenSince time.Time // zero while up, or before the first call
	changed     chan struct{}
	unserved    *time.Timer // running while unserved
	stopped     bool
}

// New returns the health of the watch of the informer of name (a
// resource, for messages), not yet open, stale once broken for longer
// than timeout; onUnserved, unless nil, runs once the resource has stayed
// unserved for timeout.
func New(name string, timeout time.Duration, onUnserved func(error)) *Health {
	return &Health{name: name, timeout: timeout, onUnserved: onUnserved, changed: make(chan struct{})}
}

// Name is the name the health was made with.
func (h *Health) Name() string { return h.name }

// Called records the outcome of a list or, if watch, a watch start. A nil
// h records nothing.
func (h *Health) Called(ctx context.Context, err error, watch bool) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped || ctx.Err() != nil {
		return // the informer stopping isn't its watch breaking
	}
	if err == nil {
		if h.unserved != nil {
			h.unserved.Stop()
			h.unserved = nil
		}
		if watch {
			h.set(true)
		}
		return
	}
	if h.up || h.brokenSince.IsZero() {
		h.brokenSince = time.Now()
	}
	h.set(false)
	if apierrors.IsNotFound(err) && h.onUnserved != nil && h.unserved == nil {
		h.unserved = time.AfterFunc(h.timeout, func() {
			h.mu.Lock()
			still := h.unserved != nil && !h.stopped
			h.mu.Unlock()
			if still {
				h.onUnserved(err)
			}
		})
	}
}

// Closed records that the informer's watch was stopped: unless the
// informer itself is stopping (ctx ended), it has no watch until its next
// list or watch succeeds, which client-go's reflector may start only after
// its backoff. A nil h records nothing.
func (h *Health) Closed(ctx context.Context) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped || ctx.Err() != nil || !h.up {
		return
	}
	h.brokenSince = time.Now()
	h.set(false)
}

func (h *Health) set(up bool) {
	if up {
		h.brokenSince = time.Time{}
	}
	if h.up != up {
		h.up = up
		close(h.changed)
		h.changed = make(chan struct{})
	}
}

// Open reports whether the watch is open, and returns a channel closed
// when that changes.
func (h *Health) Open() (bool, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.up, h.changed
}

// Stale returns an error if the watch has been broken for longer than
// timeout.
func (h *Health) Stale() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.up || h.brokenSince.IsZero() {
		return nil
	}
	if d := time.Since(h.brokenSince); d > h.timeout {
		return fmt.Errorf("the cache of %s has had no watch for %v, longer than Settings.WatchTimeout %v", h.name, d.Truncate(time.Second), h.timeout)
	}
	return nil
}

// Stop ends the health's timer: an unserved resource no longer ends
// anything, and no later call is recorded.
func (h *Health) Stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	if h.unserved != nil {
		h.unserved.Stop()
		h.unserved = nil
	}
}
