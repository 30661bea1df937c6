// Package leaderelection is a controller's Lease lock and leader elector,
// around client-go's LeaderElector (package kube's Serve campaigns and
// leads with them): the Lease, its renewals and release, and the
// replica's right to work under it, a tenure.
//
// It owns Lease, NewLease, Config, Campaign, Election and the causes of a
// loss of its own (ErrRenewFailed, ErrSameIdentity). Its invariants: never
// two leaders, so no renewal counts past the deadline, RenewDeadline after
// the start of the last Lease write that succeeded, which ends
// LeaseDuration-RenewDeadline before any other replica can take the Lease;
// a lost Lease stops the work (the lead context ends with the cause, and
// onLost runs once) and is lost for good: no later Lease request is sent,
// so client-go's release after a failed renewal neither waits nor touches
// the Lease; a renewal this process didn't send, under its identity, is
// another process's, and never lets two lead; the Lease is released only
// on a graceful stop, once the work has stopped, within RetryPeriod.
package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
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

// ErrRenewFailed and ErrSameIdentity are why a leader stopped working,
// besides tenure's causes: the cause of its lead context.
var (
	ErrRenewFailed  = errors.New("kube: client-go's elector stopped renewing the Lease")
	ErrSameIdentity = errors.New("kube: another process holds the Lease with this replica's LeaderElection.Identity")
)

// Config is the Lease a controller's replicas elect a leader by, and the
// elector's durations: package kube's Settings.Name and LeaderElection.
type Config struct {
	// Name is the Lease's, and the controller's (Settings.Name).
	Name      string
	Namespace string
	Identity  string
	// Client is the coordination.k8s.io client the Lease goes through.
	Client coordinationclient.LeasesGetter

	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// sentRenewals is how many of the renewal times a replica sent it
// remembers, to tell its own renewals from another process's.
const sentRenewals = 16

// Lease is the Lease lock a controller's elector uses, and the replica's
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
type Lease struct {
	resourcelock.Interface // client-go's LeaseLock
	// The deadline and the loss; begun once OnStartedLeading has run,
	// and its onLost runs once, when the Lease is lost while leading.
	*tenure.Tenure

	cfg Config

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

// NewLease returns the controller's Lease lock: a LeaseLock on the Lease
// named cfg.Name in cfg.Namespace, held as cfg.Identity. Its lead context
// derives from parent's values; onLost runs once, when the Lease is lost
// while leading.
func NewLease(parent context.Context, cfg Config, onLost func()) *Lease {
	return &Lease{
		Interface: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: cfg.Name, Namespace: cfg.Namespace},
			Client:     cfg.Client,
			LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
		},
		Tenure:         tenure.New(parent, cfg.RenewDeadline, onLost),
		cfg:            cfg,
		releaseTimeout: cfg.RetryPeriod,
		started:        make(chan struct{}),
	}
}

// Started is closed when the replica starts leading.
func (l *Lease) Started() <-chan struct{} { return l.started }

// Get is LeaseLock's Get. A record naming another holder while the replica
// leads loses the Lease at once. Once the Lease is lost, Get fails at once
// without being sent, and a Get in flight is abandoned: client-go's
// release after a failed renewal starts with a Get, under a timeout of
// RenewDeadline of its own, which against an API server that doesn't
// answer (etcd frozen) held Serve's return, and the App's exit, that long
// past the deadline.
func (l *Lease) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
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
			l.Lose(tenure.ErrOtherHolder)
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
// is renewed meanwhile, Serve ends with ErrSameIdentity.
func (l *Lease) sameHolderLocked(rec *resourcelock.LeaderElectionRecord) *resourcelock.LeaderElectionRecord {
	renewed := rec.RenewTime.UnixMicro()
	if slices.Contains(l.sent, renewed) || l.LostErr() != nil {
		return rec
	}
	if l.HasBegun() {
		if !l.stopping {
			l.Lose(fmt.Errorf("%w (Lease %s, identity %q): its renewal at %s was not this process's; give each replica an identity of its own, as a pod's name", ErrSameIdentity, l.Describe(), l.Identity(), rec.RenewTime.UTC().Format(time.RFC3339Nano)))
		}
		return rec
	}
	if l.seen != nil && *l.seen != renewed {
		l.Lose(fmt.Errorf("%w (Lease %s, identity %q): another process renewed it while this one waited to take it; give each replica an identity of its own, as a pod's name", ErrSameIdentity, l.Describe(), l.Identity()))
		return rec
	}
	l.seen = &renewed
	other := *rec
	other.HolderIdentity = rec.HolderIdentity + " (another process)"
	return &other
}

// Create is LeaseLock's Create, which takes a Lease that doesn't exist.
func (l *Lease) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, rec, l.Interface.Create)
}

// Update is LeaseLock's Update, which takes, renews or releases the Lease.
func (l *Lease) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, rec, l.Interface.Update)
}

// write sends rec unless the Lease was lost, and moves the deadline on if
// it succeeds. A release, rec with no holder, is bounded by
// releaseTimeout.
func (l *Lease) write(ctx context.Context, rec resourcelock.LeaderElectionRecord, send func(context.Context, resourcelock.LeaderElectionRecord) error) error {
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
func (l *Lease) startLeading(electionCtx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.Commence()
	context.AfterFunc(electionCtx, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		// On a graceful stop the elector's context ends before it
		// releases the Lease, which the lease must still send.
		if !l.stopping {
			l.Lose(ErrRenewFailed)
		}
	})
	close(l.started)
}

// stopping marks the elector being stopped by Serve, on a graceful stop:
// its leading context ending, and the release's record with no holder, no
// longer count as a lost Lease.
func (l *Lease) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopping = true
}

// done ends the lead context and its timer, once the elector has returned.
func (l *Lease) done() { l.Lose(tenure.ErrNotLeading) }

// newElector returns the controller's leader elector on l. Every
// controller elects a leader: there is no option to turn it off. The Lease
// is released when the elector's context is cancelled (ReleaseOnCancel),
// which Serve does only after the reconciles in flight have finished, as
// ReleaseOnCancel's doc requires; after a lost Lease, l refuses the
// release without sending it.
func newElector(l *Lease) (*leaderelection.LeaderElector, error) {
	cfg := l.cfg
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Name:            cfg.Name,
		Lock:            l,
		LeaseDuration:   cfg.LeaseDuration,
		RenewDeadline:   cfg.RenewDeadline,
		RetryPeriod:     cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: l.startLeading,
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("kube: leader election for controller %s: %w", cfg.Name, err)
	}
	return elector, nil
}

// Election is client-go's LeaderElector running on a Lease.
type Election struct {
	l      *Lease
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Campaign runs the controller's elector on l, with ctx's values.
func Campaign(ctx context.Context, l *Lease) (*Election, error) {
	elector, err := newElector(l)
	if err != nil {
		return nil, err
	}
	e := &Election{l: l}
	electionCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.cancel = cancel
	e.wg.Go(func() { elector.Run(electionCtx) })
	return e, nil
}

// Stop stops the elector, which releases the Lease unless it was lost,
// and waits for it. Only the workers' being done makes the release safe,
// as ReleaseOnCancel's doc requires.
func (e *Election) Stop() {
	e.l.stop()
	e.cancel()
	e.wg.Wait()
	e.l.done()
}
