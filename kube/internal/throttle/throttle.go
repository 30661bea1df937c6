// Package throttle is the Client transport's congestion window: a layer
// that limits how many requests are in flight at once, and adapts that
// limit to the API server's 429 Too Many Requests answers as TCP does its
// congestion window, so that a controller's workers can't starve its own
// Lease renewals.
//
// It owns Window and New. Its invariants: a watch and a request on Leases
// (coordination.k8s.io) never wait; before any 429 nothing waits; a
// request that waits does so in its own context, and one whose context
// ends gives its room on.
package throttle

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/z5labs/humus/kube/internal/apitransport"
)

// The API server's priority and fairness (APF) queues a client's requests
// by its FlowSchema: a controller's Lease renewals and its workers' writes
// share one priority level, and when that level is full the API server
// answers 429 Too Many Requests to whichever request finds its queue full.
// The Client has no client-side rate limit (QPS -1), so sixteen workers
// kept the controller's own queue full, and its renewals, which wait in
// that same queue, lost the Lease (issue 24). The fix for a cluster is a
// FlowSchema that sends the controller's Lease requests to the
// leader-election priority level, as Kubernetes does for its own
// controllers (the Memcached example's deploy files carry one); without
// it, the transport keeps the controller from starving itself: its
// requests other than the Lease's back off on a 429 before the Lease's do.

// The congestion window's settings: how far it may grow, and how often it
// grows back by one.
const (
	// congestionMax is the window before any 429, and the most it grows
	// to: so many requests in flight that it limits nothing.
	congestionMax = 1 << 16

	// congestionHold is how long the window stays as a 429 left it, and
	// congestionGrowth how often it then grows by one while no 429 comes:
	// each step past what the API server's queue holds costs a 429, which
	// may fall on a Lease request, so the window probes for room seldom.
	congestionHold   = 10 * time.Second
	congestionGrowth = time.Second
)

// Window is the transport's layer that limits how many requests, other
// than the Lease's and watches, are in flight at once, and adapts that
// limit to the API server's 429 answers as TCP does its congestion window:
// each 429, to a Lease request too, halves the limit, down to the requests
// in flight when it came and at least one; congestionHold after the last
// 429, and then every congestionGrowth without one, it grows by one, up to
// congestionMax.
// Before any 429 it limits nothing.
//
// A request over the limit waits, in its own context, for one in flight to
// end; client-go's retry of a 429, after the Retry-After the API server
// sends, waits again. So once the API server answers 429, the workers'
// requests queue in the controller, at one in flight if need be, and the
// API server's queue has room for the Lease's renewals, which never wait
// here: a request on Leases (coordination.k8s.io), the leader's and a shard
// member's, and a watch, which APF doesn't hold a seat for once it has
// started, pass straight through.
type Window struct {
	next    http.RoundTripper
	isWatch func(*http.Request) bool
	now     func() time.Time

	mu       sync.Mutex
	limit    int
	inFlight int
	grown    time.Time       // when the window last grew or shrank
	waiting  []chan struct{} // requests waiting for room, in arrival order
}

// New returns a Window over next, which limits nothing until the API
// server answers 429; isWatch reports a watch, which passes straight
// through.
func New(next http.RoundTripper, isWatch func(*http.Request) bool) *Window {
	return &Window{next: next, isWatch: isWatch, now: time.Now, limit: congestionMax}
}

// RoundTrip sends r through the window: a watch or a Lease request at
// once, any other once the window has room, or an error wrapping
// context.Cause if r's context ends first.
func (c *Window) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.isWatch(r) {
		return c.next.RoundTrip(r)
	}
	if isLease(r) {
		// A Lease request never waits, but its 429 says the window let
		// the workers fill the API server's queue: it shrinks the window
		// as theirs do, or the Lease's renewals would be refused until a
		// worker's request happened to meet a 429 of its own.
		resp, err := c.next.RoundTrip(r)
		if err == nil && resp.StatusCode == http.StatusTooManyRequests {
			c.mu.Lock()
			c.shrinkLocked(c.inFlight)
			c.mu.Unlock()
		}
		return resp, err
	}
	if err := c.acquire(r.Context()); err != nil {
		if r.Body != nil {
			_ = r.Body.Close() // a RoundTripper always closes the body
		}
		return nil, err
	}
	resp, err := c.next.RoundTrip(r)
	c.release(err == nil && resp.StatusCode == http.StatusTooManyRequests)
	return resp, err
}

// acquire waits for room in the window, or for ctx to end.
func (c *Window) acquire(ctx context.Context) error {
	c.mu.Lock()
	c.growLocked()
	if c.inFlight < c.limit && len(c.waiting) == 0 {
		c.inFlight++
		c.mu.Unlock()
		return nil
	}
	ready := make(chan struct{})
	c.waiting = append(c.waiting, ready)
	c.mu.Unlock()
	select {
	case <-ready:
		return nil // release counted this request in flight
	case <-ctx.Done():
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, w := range c.waiting {
			if w == ready {
				c.waiting = append(c.waiting[:i], c.waiting[i+1:]...)
				return fmt.Errorf("kube: waiting for the API server to accept more requests (it answered 429 Too Many Requests): %w", context.Cause(ctx))
			}
		}
		// release handed this request room as ctx ended: hand it on.
		c.inFlight--
		c.wakeLocked()
		return fmt.Errorf("kube: waiting for the API server to accept more requests (it answered 429 Too Many Requests): %w", context.Cause(ctx))
	}
}

// release ends a request, which the API server answered 429 if throttled,
// and lets the next waiting ones in while there is room.
func (c *Window) release(throttled bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if throttled {
		c.shrinkLocked(c.inFlight)
	}
	c.inFlight--
	c.growLocked()
	c.wakeLocked()
}

// shrinkLocked halves the window on a 429, from the requests in flight
// if fewer, down to one, and holds it so for congestionHold.
func (c *Window) shrinkLocked(inFlight int) {
	c.limit = max(1, min(c.limit, inFlight)/2)
	c.grown = c.now().Add(congestionHold - congestionGrowth)
}

// growLocked raises the window by one for each congestionGrowth since it
// last grew, or since congestionHold after it last shrank.
func (c *Window) growLocked() {
	if c.limit >= congestionMax {
		return
	}
	now := c.now()
	if n := int(now.Sub(c.grown) / congestionGrowth); n > 0 {
		c.limit = min(congestionMax, c.limit+n)
		c.grown = c.grown.Add(time.Duration(n) * congestionGrowth)
	}
}

// wakeLocked lets waiting requests in while the window has room.
func (c *Window) wakeLocked() {
	for len(c.waiting) > 0 && c.inFlight < c.limit {
		c.inFlight++
		close(c.waiting[0])
		c.waiting = c.waiting[1:]
	}
}

// isLease reports whether r is a request on Leases (coordination.k8s.io),
// the leader's or a shard member's.
func isLease(r *http.Request) bool {
	if r.URL == nil {
		return false
	}
	group, resource := apitransport.GroupResource(r.URL.Path)
	return group == "coordination.k8s.io" && resource == "leases"
}
