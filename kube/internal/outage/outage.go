// Package outage is a controller's backoff while the API server refuses
// every reconcile alike: it tells an outage from an object failing on its
// own, holds the keys that fail in an outage rather than backing each off,
// probes for the API server's return, and queues every held key again at
// once when a reconcile succeeds after it.
//
// It owns Outage (with Probing, which key is the probe, for tests), New
// and CommonFailure. Its invariants: a failure that isn't CommonFailure's
// is backed off by the queue as ever; the first success after an outage
// of After or more queues every held key again, and forgets the outage;
// and while an outage is on, either a probe is queued or nothing is held.
// That last one is what keeps held keys from waiting for good: one held
// key is the probe, queued to be reconciled when it is due, its delay
// doubling from ProbeMin to ProbeMax (or the retry cap, if shorter); in
// the outage's first After, every held key is queued by its own backoff.
// One function keeps it (handOnLocked): whenever the probe's key leaves
// (Left: its reconcile panicked, failed with a Terminal error or one of
// its own such as a 409, or the replica no longer reconciles it, because
// Sharding moved it to another member, the Lease is no longer valid, or
// the controller is stopping), another held key becomes the probe, due
// when the probe was, or at once if that has passed; and a key that fails
// alike while no probe is pending becomes the probe. A key that left
// isn't held: it is backed off on its own, dropped as a Terminal error or
// a panic is, or another member's. A reconcile of a key whose object is
// gone succeeds, and ends the outage as any success does.
//
// A probe queued after a delay, by a key no worker holds, is Low in the
// controller's queue: due, it waits behind the keys ready at Low (an
// initial list's, a resync's, retries), each of which is a reconcile as
// good as the probe at seeing the API server's return, since any success
// ends the outage. A probe due at once is a plain add (Normal), as
// client-go's and controller-runtime's AddAfter(key, d ≤ 0) are.
//
// A failed reconcile raises its object's backoff, from Settings.RetryBaseDelay
// doubling to Settings.RetryMaxDelay, as the spec has it. But when the API server
// refuses every request alike for a while, say the controller's
// ClusterRoleBinding deleted for 40s, an object that changes every second
// is reconciled on each change and fails each time, and its backoff
// climbs to RetryMaxDelay (1,000s by default): it waited that long after
// the API server came back, while an annotation on it fixed it in under a
// second (issue 24). The failures were the API server's, not the object's.
//
// So the controller tells an outage from an object failing on its own: an
// outage is failures the API server answers alike for every object (401,
// 403, 429, a 5xx, a timeout, or no answer at all: CommonFailure) with no
// reconcile succeeding for After. A key that fails so in an outage
// isn't backed off on its own: it is held, and once a reconcile succeeds
// after the outage, every held key is queued again at once. Meanwhile one
// reconcile at a time is the outage's probe: the key that failed last is
// queued again after a delay that doubles from ProbeMin to
// ProbeMax (or RetryMaxDelay, if shorter), so that the API server's
// return is seen; a probe whose key fails for a reason of its own is
// backed off as such, and another held key probes in its place. An
// object that changes is reconciled at once, as ever.
// So an outage costs fewer requests than each key's own backoff did (a
// key's first retries come within a second), and ends for every object
// within seconds of the API server's return. A key failing alone while
// others succeed is backed off on its own, as before; one failing alone in
// a controller with nothing else to do looks like an outage, and is
// retried every ProbeMax rather than backed off to RetryMaxDelay.
package outage

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/workqueue"
)

// The outage's timings.
const (
	// After is how long reconciles must fail alike, with none
	// succeeding, before it is an outage.
	After = time.Second

	// ProbeMin and ProbeMax bound the probe's delay, which
	// doubles from the first to the second while the outage lasts.
	ProbeMin = time.Second
	ProbeMax = 15 * time.Second
)

// Outage is what a controller's queue knows of the API server refusing
// every reconcile alike: see the package doc.
type Outage struct {
	queue workqueue.TypedRateLimitingInterface[string]
	now   func() time.Time
	// probeMax is ProbeMax, or RetryMaxDelay if it is shorter.
	probeMax time.Duration

	mu    sync.Mutex
	since time.Time           // the first common failure since the last success; zero if none
	held  map[string]struct{} // the keys that failed so since
	probe time.Duration       // the last probe's delay; 0 before the first
	next  time.Time           // when the pending probe is due
	// probeKey is the pending probe's key, "" if none.
	probeKey string
}

// New returns the outage of queue, whose keys are backed off to retryMax
// (Settings.RetryMaxDelay) at most.
func New(queue workqueue.TypedRateLimitingInterface[string], retryMax time.Duration) *Outage {
	return &Outage{queue: queue, now: time.Now, probeMax: min(ProbeMax, retryMax), held: map[string]struct{}{}}
}

// Failed notes key's failure with err, and backs key off: in an outage
// it is held, to be queued again when the outage ends, and queued as the
// probe if the probe is due or none is pending; otherwise the queue backs
// it off as ever, and a failure that isn't CommonFailure's leaves the
// outage (Left).
func (o *Outage) Failed(key string, err error) {
	if !CommonFailure(err) {
		o.queue.AddRateLimited(key)
		o.Left(key)
		return
	}
	o.mu.Lock()
	now := o.now()
	if o.since.IsZero() {
		o.since = now
	}
	o.held[key] = struct{}{}
	if now.Sub(o.since) < After {
		// Not an outage yet: backed off as ever, so queued, and the
		// probe if none is.
		if o.probeKey == "" {
			o.probeKey = key
		}
		o.mu.Unlock()
		o.queue.AddRateLimited(key)
		return
	}
	var probe string
	var delay time.Duration
	switch {
	case !now.Before(o.next):
		// The probe is due: key probes next, after a longer delay.
		o.probe = min(max(2*o.probe, ProbeMin), o.probeMax)
		o.next = now.Add(o.probe)
		o.probeKey = key
		probe, delay = key, o.probe
	case key == o.probeKey:
		// The probe's key, reconciled early for a change, keeps its
		// place as the probe: the work queue lets a change end a key's
		// delay (kube/internal/priorityqueue), so it is delayed anew.
		probe, delay = key, o.next.Sub(now)
	default:
		// Held; the probe, if none is pending (handOnLocked).
		probe, delay, _ = o.handOnLocked(now)
	}
	o.mu.Unlock()
	if probe != "" {
		o.queue.AddAfter(probe, delay)
	}
}

// Left notes that key left the outage other than by failing alike: its
// reconcile failed on its own (a panic, a Terminal error, an error that
// isn't CommonFailure's: the queue backs it off on its own, or drops
// it), or the replica no longer reconciles it (with Sharding, another
// member owns it now; the replica's Lease is no longer valid; the
// controller is stopping). key is no longer held, and if it was the
// probe, another held key probes in its place (handOnLocked).
func (o *Outage) Left(key string) {
	o.mu.Lock()
	delete(o.held, key)
	if o.probeKey == key {
		o.probeKey = ""
	}
	probe, delay, ok := o.handOnLocked(o.now())
	o.mu.Unlock()
	if ok {
		o.queue.AddAfter(probe, delay)
	}
}

// handOnLocked keeps the outage's invariant, and is the one place that
// does: while keys are held, one of them is the probe, and queued. With
// keys held and no probe (the probe's key left, or failed alike after
// leaving), it makes a held key the probe, and reports it and its delay
// for the caller to queue once o.mu is unlocked: due when the probe was
// (next), or at once if that has passed. In the outage's first After
// every held key is queued by its own backoff, so the new probe is
// already queued and ok is false. o.mu is held.
func (o *Outage) handOnLocked(now time.Time) (key string, delay time.Duration, ok bool) {
	if o.probeKey != "" || len(o.held) == 0 {
		return "", 0, false
	}
	for k := range o.held {
		key = k
		break
	}
	o.probeKey = key
	if now.Sub(o.since) < After {
		return "", 0, false
	}
	return key, max(o.next.Sub(now), 0), true
}

// Probing reports whether key is the pending probe of an outage: reconciles
// have failed alike for After or more, and key is the one queued to see
// the API server's return.
func (o *Outage) Probing(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.probeKey == key && o.now().Sub(o.since) >= After
}

// Succeeded notes a reconcile that succeeded: an outage, if there was one,
// is over, and every key that failed in it is queued again.
func (o *Outage) Succeeded() {
	o.mu.Lock()
	if o.since.IsZero() {
		o.mu.Unlock()
		return
	}
	var keys []string
	if o.now().Sub(o.since) >= After {
		keys = make([]string, 0, len(o.held))
		for k := range o.held {
			keys = append(keys, k)
		}
	}
	o.since, o.probe, o.next, o.probeKey = time.Time{}, 0, time.Time{}, ""
	clear(o.held)
	o.mu.Unlock()
	for _, k := range keys {
		o.queue.Add(k)
	}
}

// CommonFailure reports whether err is one the API server answers every
// object alike when it refuses the controller as a whole: 401
// Unauthorized, 403 Forbidden, 429 Too Many Requests, a 5xx or a timeout,
// or a request that got no answer (a network error, or a deadline).
func CommonFailure(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		return code == http.StatusUnauthorized || code == http.StatusForbidden || code == http.StatusTooManyRequests ||
			code >= http.StatusInternalServerError || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded)
}
