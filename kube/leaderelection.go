package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/z5labs/humus/kube/internal/tenure"
)

// A replica's right to work is not client-go's: LeaderElector.Run cancels
// its leading context only once renew has given up, after RenewDeadline of
// retries and, with ReleaseOnCancel, after a release that may hang as long
// again; and a replica paused past LeaseDuration goes on retrying on
// waking. Meanwhile another replica may have taken the Lease. So the
// controller keeps its own deadline, from the Lease updates it sees
// succeed, through lease, a resourcelock.Interface around client-go's
// LeaseLock, which LeaderElector still uses to acquire and renew.

// errLeaseExpired and errOtherHolder are why a replica stopped working: the
// cause of its lead context (package tenure's, shared with a shard member).
var (
	errLeaseExpired       = tenure.ErrLeaseExpired
	errOtherHolder        = tenure.ErrOtherHolder
	errRenewFailed        = errors.New("kube: client-go's elector stopped renewing the Lease")
	errNotLeading         = tenure.ErrNotLeading
	errLeaderSameIdentity = errors.New("kube: another process holds the Lease with this replica's LeaderElection.Identity")
)

// sentRenewals is how many of the renewal times a replica sent it
// remembers, to tell its own renewals from another process's.
const sentRenewals = 16

// lease is the Lease lock a controller's elector uses, and the replica's
// right to work, its tenure. Its deadline is the start of the last Lease
// create or update that succeeded plus RenewDeadline, read on the
// monotonic clock:
// the other replicas take the Lease no sooner than LeaseDuration after
// they saw that update, which was sent after it started, so a deadline
// RenewDeadline after it ends LeaseDuration−RenewDeadline (5s by default)
// before any other replica can hold the Lease, even if the clocks' rates
// differ a little.
//
// Once the deadline has passed, or a Get shows another holder, the replica
// has lost the Lease for good: its lead context is cancelled, onLost runs,
// and every later Create or Update fails at once without being sent, so
// that client-go's release after a failed renewal neither waits nor
// touches the Lease. A release on a graceful stop (an Update with no
// holder) is sent, within releaseTimeout.
type lease struct {
	resourcelock.Interface // client-go's LeaseLock
	// The deadline and the loss; begun once OnStartedLeading has run,
	// and its onLost runs once, when the Lease is lost while leading.
	*tenure.Tenure

	releaseTimeout time.Duration

	mu       sync.Mutex
	stopping bool // Serve is stopping the elector, to release the Lease
	// sent are the renewTimes of the last sentRenewals records this
	// replica sent as the holder, in microseconds, the Lease's precision;
	// seen is the renewTime of a Lease held with this replica's identity
	// by another process, as last seen before this replica led.
	sent []int64
	seen *int64

	started chan struct{} // closed when the replica starts leading
}

// newLease returns the controller's Lease lock: a LeaseLock on the Lease
// named Settings.Name in LeaderElection.Namespace, held as
// LeaderElection.Identity. Its lead context derives from parent's values.
func (c *Controller) newLease(parent context.Context, onLost func()) *lease {
	le := c.settings.LeaderElection
	return &lease{
		Interface: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: c.settings.Name, Namespace: le.Namespace},
			Client:     c.clients.kube.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
		},
		Tenure:         tenure.New(parent, le.RenewDeadline, onLost),
		releaseTimeout: le.RetryPeriod,
		started:        make(chan struct{}),
	}
}

// Get is LeaseLock's Get. A record naming another holder while the replica
// leads loses the Lease at once. Once the Lease is lost, Get fails at once
// without being sent, and a Get in flight is abandoned: client-go's
// release after a failed renewal starts with a Get, under a timeout of
// RenewDeadline of its own, which against an API server that doesn't
// answer (etcd frozen) held Serve's return, and the App's exit, that long
// past the deadline.
func (l *lease) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	if lost := l.LostErr(); lost != nil {
		return nil, nil, lost
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(l.Context(), cancel)()
	rec, raw, err := l.Interface.Get(ctx)
	if err != nil {
		return rec, raw, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if rec.HolderIdentity != l.Identity() {
		if l.HasBegun() && !l.stopping {
			l.Lose(errOtherHolder)
		}
		return rec, raw, nil
	}
	return l.sameHolderLocked(rec), raw, nil
}

// sameHolderLocked checks a record naming this replica's identity as the
// holder, which client-go's elector takes as its own: a renewal this
// replica didn't send was sent by another process given the same
// LeaderElection.Identity (two pods sharing a name from a misconfigured
// Deployment), and the two would lead at once. Leading, such a renewal
// loses the Lease. Before leading, the record is handed to the elector as
// another holder's, so that it takes the Lease only once it expires, as
// from any other replica: its holder may be this pod's previous process,
// dead, or alive elsewhere, as a pod partitioned from its node; and if it
// is renewed meanwhile, Serve ends with errLeaderSameIdentity.
func (l *lease) sameHolderLocked(rec *resourcelock.LeaderElectionRecord) *resourcelock.LeaderElectionRecord {
	renewed := rec.RenewTime.UnixMicro()
	if slices.Contains(l.sent, renewed) || l.LostErr() != nil {
		return rec
	}
	if l.HasBegun() {
		if !l.stopping {
			l.Lose(fmt.Errorf("%w (Lease %s, identity %q): its renewal at %s was not this process's; give each replica an identity of its own, as a pod's name", errLeaderSameIdentity, l.Describe(), l.Identity(), rec.RenewTime.UTC().Format(time.RFC3339Nano)))
		}
		return rec
	}
	if l.seen != nil && *l.seen != renewed {
		l.Lose(fmt.Errorf("%w (Lease %s, identity %q): another process renewed it while this one waited to take it; give each replica an identity of its own, as a pod's name", errLeaderSameIdentity, l.Describe(), l.Identity()))
		return rec
	}
	l.seen = &renewed
	other := *rec
	other.HolderIdentity = rec.HolderIdentity + " (another process)"
	return &other
}

// Create is LeaseLock's Create, which takes a Lease that doesn't exist.
func (l *lease) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, rec, l.Interface.Create)
}

// Update is LeaseLock's Update, which takes, renews or releases the Lease.
func (l *lease) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, rec, l.Interface.Update)
}

// write sends rec unless the Lease was lost, and moves the deadline on if
// it succeeds. A release, rec with no holder, is bounded by
// releaseTimeout.
func (l *lease) write(ctx context.Context, rec resourcelock.LeaderElectionRecord, send func(context.Context, resourcelock.LeaderElectionRecord) error) error {
	if lost := l.LostErr(); lost != nil {
		return lost
	}
	if rec.HolderIdentity == "" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.releaseTimeout)
		defer cancel()
		return send(ctx, rec)
	}
	l.mu.Lock()
	if rec.HolderIdentity == l.Identity() {
		l.sent = append(l.sent, rec.RenewTime.UnixMicro())
		if len(l.sent) > sentRenewals {
			l.sent = l.sent[1:]
		}
	}
	l.mu.Unlock()
	// A renewal still in flight once the Lease is lost is abandoned.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(l.Context(), cancel)()
	start := time.Now()
	if err := send(ctx, rec); err != nil {
		return err
	}
	l.Renewed(start)
	return nil
}

// startLeading is the elector's OnStartedLeading: the replica took the
// Lease, and leads until the deadline passes, another holder is seen, or
// electionCtx (client-go's leading context) ends, whichever is first.
func (l *lease) startLeading(electionCtx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.Commence()
	context.AfterFunc(electionCtx, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		// On a graceful stop the elector's context ends before it
		// releases the Lease, which the lease must still send.
		if !l.stopping {
			l.Lose(errRenewFailed)
		}
	})
	close(l.started)
}

// stopping marks the elector being stopped by Serve, on a graceful stop:
// its leading context ending, and the release's record with no holder, no
// longer count as a lost Lease.
func (l *lease) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopping = true
}

// done ends the lead context and its timer, once the elector has returned.
func (l *lease) done() { l.Lose(errNotLeading) }

// newElector returns the controller's leader elector on l. Every
// controller elects a leader: there is no option to turn it off. The Lease
// is released when the elector's context is cancelled (ReleaseOnCancel),
// which Serve does only after the reconciles in flight have finished, as
// ReleaseOnCancel's doc requires; after a lost Lease, l refuses the
// release without sending it.
func (c *Controller) newElector(l *lease) (*leaderelection.LeaderElector, error) {
	le := c.settings.LeaderElection
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Name:            c.settings.Name,
		Lock:            l,
		LeaseDuration:   le.LeaseDuration,
		RenewDeadline:   le.RenewDeadline,
		RetryPeriod:     le.RetryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: l.startLeading,
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("kube: leader election for controller %s: %w", c.settings.Name, err)
	}
	return elector, nil
}

// mayWork returns nil if ctx's reconcile may take a key or send an apply:
// its replica holds the Lease within its deadline. It returns why not
// otherwise, and nil for a context without a lease, which only the
// package's tests make.
func mayWork(ctx context.Context) error {
	if s := scopeOf(ctx); s != nil && s.lease != nil {
		return s.lease.Valid()
	}
	return nil
}
