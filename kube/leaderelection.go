package kube

import (
	"context"

	"github.com/z5labs/humus/kube/internal/leaderelection"
	"github.com/z5labs/humus/kube/internal/tenure"
)

// The leader's Lease lock and elector, around client-go's LeaderElector,
// are internal/leaderelection's; the deadline-and-loss half the leader and
// a shard member share is internal/tenure's. Serve campaigns and leads
// with them (serve.go).

// errOtherHolder and errLeaderSameIdentity are why a replica stopped
// working: the cause of its lead context (internal/tenure's ErrLeaseExpired
// is the third).
var (
	errOtherHolder        = tenure.ErrOtherHolder
	errLeaderSameIdentity = leaderelection.ErrSameIdentity
)

// newLease returns the controller's Lease lock: a LeaseLock on the Lease
// named Settings.Name in LeaderElection.Namespace, held as
// LeaderElection.Identity. Its lead context derives from parent's values.
func (c *Controller) newLease(parent context.Context, onLost func()) *leaderelection.Lease {
	le := c.settings.LeaderElection
	return leaderelection.NewLease(parent, leaderelection.Config{
		Name:          c.settings.Name,
		Namespace:     le.Namespace,
		Identity:      le.Identity,
		Client:        c.clients.kube.CoordinationV1(),
		LeaseDuration: le.LeaseDuration,
		RenewDeadline: le.RenewDeadline,
		RetryPeriod:   le.RetryPeriod,
	}, onLost)
}

// mayWork returns nil if ctx's reconcile may take a key or send an apply:
// its replica holds the Lease within its deadline. It returns why not
// otherwise, and nil for a context without a lease, which only the
// package's tests make.
func mayWork(ctx context.Context) error { return scopeOf(ctx).mayWork() }

// mayWork is mayWork for the scope s, which may be nil.
func (s *scope) mayWork() error {
	if s != nil && s.lease != nil {
		return s.lease.Valid()
	}
	return nil
}
