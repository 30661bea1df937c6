package kube

import (
	"context"
	"fmt"
	"time"
)

// Shutdown stops the controller and waits for Serve to return: the
// controller stops taking keys, lets the
// reconciles in flight finish, shuts its work queue down without draining
// it (the backlog is left for the next leader, which lists every object
// anyway), releases the Lease, and stops its informers. It returns nil once
// Serve has returned.
//
// When ctx is done first, it cancels the reconciles in flight, waits for
// Serve to return, and returns an error wrapping ctx.Err(). Shutdown before
// Serve returns nil, and Serve then returns at once.
func (c *Controller) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	c.stopped = true
	serving := c.serving
	if serving {
		c.cancel()
	}
	c.mu.Unlock()
	if !serving {
		return nil
	}

	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
	}
	// Serve may have returned as ctx ended: then nothing was cancelled.
	select {
	case <-c.done:
		return nil
	default:
	}
	c.forceStop()
	<-c.done
	return fmt.Errorf("kube: shutting down controller %s: the reconciles in flight were cancelled: %w", c.settings.Name, ctx.Err())
}

// forceStop cancels the reconciles in flight.
func (c *Controller) forceStop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.force()
}

// teardown is how Serve stops what it started, each part once and in
// order: the workers, letting the reconciles in flight finish; then the
// Lease (the elector, or the member's loop and its release), released
// only after the workers are done and only if it wasn't lost; then the
// caches. lead and serveShard stop the first two (stopWork) before they
// judge whether the Lease was lost; Serve's defer stops the caches
// (stopInformers), whichever way it returns, and logs "slow stop" with what
// each took if they took longer than slowStop in all: none waits on the
// API server for long, so a slow stop is worth a look.
type teardown struct {
	workers, lease time.Duration
}

// slowStop is how long stopping the workers, the Lease and the caches may
// take before stopInformers logs what each took.
const slowStop = 2 * time.Second

// stopWork stops the workers, then the Lease, and records what each took.
func (td *teardown) stopWork(workers, lease func()) {
	td.workers = timed(workers)
	td.lease = timed(lease)
}

// stopInformers stops the caches, last, and logs a slow stop.
func (c *Controller) stopInformers(ctx context.Context, td *teardown, cs *informerSet) {
	took := timed(cs.stop)
	if td.workers+td.lease+took > slowStop {
		c.tel.Log().WarnContext(ctx, "slow stop", "controller", c.settings.Name,
			"workers", td.workers.Round(time.Millisecond).String(),
			"election", td.lease.Round(time.Millisecond).String(),
			"caches", took.Round(time.Millisecond).String())
	}
}

// timed runs stop and returns how long it took.
func timed(stop func()) time.Duration {
	start := time.Now()
	stop()
	return time.Since(start)
}
