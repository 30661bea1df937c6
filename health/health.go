// Package health reports whether parts of an App are healthy, and serves
// that as Kubernetes' readiness and liveness probes over HTTP.
//
// A Monitor says whether something is healthy now. Readiness and Liveness
// group Monitors into Probes, and NewProbes serves them at /readyz and
// /livez on an address the App chooses, listening through the Host.
package health

import (
	"context"
	"errors"
	"sync/atomic"
)

// Monitor reports whether something is healthy now: Healthy returns nil
// when it is, and an error saying why when it isn't. Healthy must be safe
// for concurrent use, and should return quickly; a probe calls it on every
// request, with the request's context.
type Monitor interface {
	Healthy(ctx context.Context) error
}

// MonitorFunc is a function that is a Monitor.
type MonitorFunc func(ctx context.Context) error

// Healthy returns f(ctx).
func (f MonitorFunc) Healthy(ctx context.Context) error { return f(ctx) }

// ErrUnhealthy is what a Binary's Healthy returns while it is unhealthy.
var ErrUnhealthy = errors.New("health: unhealthy")

// Binary is a Monitor that is healthy or not as it is marked. Its zero value
// is unhealthy until MarkHealthy is called. It is safe for concurrent use,
// and must not be copied after first use.
type Binary struct {
	healthy atomic.Bool
}

// MarkHealthy makes b healthy.
func (b *Binary) MarkHealthy() { b.healthy.Store(true) }

// MarkUnhealthy makes b unhealthy.
func (b *Binary) MarkUnhealthy() { b.healthy.Store(false) }

// Healthy returns nil when b is marked healthy, and ErrUnhealthy otherwise.
func (b *Binary) Healthy(context.Context) error {
	if b.healthy.Load() {
		return nil
	}
	return ErrUnhealthy
}
