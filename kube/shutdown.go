package kube

import (
	"context"
	"fmt"
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
