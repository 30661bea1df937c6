package sharding

import (
	"context"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/z5labs/humus/kube/internal/priorityqueue"
)

// A shard member's view: which member owns a key among the live ones,
// what a member knows of the others' Leases, how the members agree on a
// view, step by step, and which keys a member takes meanwhile.

// view is a set of members' identities, as a member acknowledges it.
type view struct {
	ids    []string // sorted
	hashes []uint64 // of ids, in their order
	key    string   // ids joined by commas: the annotation's value
}

func newView(ids []string) view {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	v := view{ids: ids, key: strings.Join(ids, ",")}
	for _, id := range ids {
		v.hashes = append(v.hashes, mix64(fnv64a(id)))
	}
	return v
}

// owner returns the member key belongs to in v, by rendezvous (highest
// random weight) hashing: each member scores the key, and the highest
// score wins. A member leaving moves only its own keys, each to the member
// that scored second; a member joining takes from each the keys it scores
// highest: about 1/N of them. "" for an empty view.
func (v view) owner(key string) string { return v.ownerOf(fnv64a(key)) }

// ownerOf is owner of the key whose FNV-1a hash is kh.
func (v view) ownerOf(kh uint64) string {
	best, bestScore := "", uint64(0)
	for i, id := range v.ids {
		if s := mix64(kh ^ v.hashes[i]); best == "" || s > bestScore {
			best, bestScore = id, s
		}
	}
	return best
}

func fnv64a(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

// mix64 is splitmix64's finalizer, which spreads FNV's poorly mixed high
// bits over the whole word.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// peer is what a member knows of another member's Lease.
type peer struct {
	identity   string
	view       string    // the view it acknowledged
	rv         string    // its Lease's stamp, when last seen changed
	observedAt time.Time // when this member last saw it change
	released   bool      // released (no holder) or deleted after that: gone
	expired    bool      // unchanged for LeaseDuration, confirmed by a Get
}

// stamp tells one write of a Lease from another: its resourceVersion,
// and its renewTime, which every write of a member moves on.
func stamp(l *coordinationv1.Lease) string {
	var renew string
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.Format(time.RFC3339Nano)
	}
	return l.ResourceVersion + "/" + renew
}

// seen records a member's Lease as listed or watched.
func (m *Member) seen(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Name == m.leaseName {
		return
	}
	m.mu.Lock()
	p := m.peers[l.Name]
	if p == nil {
		p = &peer{}
		m.peers[l.Name] = p
	}
	if st := stamp(l); p.observedAt.IsZero() || st != p.rv {
		p.rv, p.observedAt, p.expired = st, time.Now(), false
	}
	p.identity = l.Annotations[IdentityAnnotation]
	p.view = l.Annotations[ViewAnnotation]
	p.released = l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == ""
	m.mu.Unlock()
	m.poke()
}

// gone records a member's Lease deleted. A released one is gone at once;
// one deleted without a release (by hand) still counts until it expires,
// since its member may still be at work until its own deadline; an
// expired one (deleted by confirmExpired) is gone too.
func (m *Member) gone(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Name == m.leaseName {
		return
	}
	m.mu.Lock()
	if p := m.peers[l.Name]; p != nil && (p.released || p.expired) {
		delete(m.peers, l.Name)
	}
	m.mu.Unlock()
	m.poke()
}

func (m *Member) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// step confirms the members that look expired, acknowledges the view of
// the live members once the keys it loses there are no longer in flight
// (or their reconciles have outlasted LeaseDuration, and are cancelled),
// and takes the keys it gains once every live member has acknowledged it.
// It returns how long until it has to look again (the next member would
// expire, or a reconcile of a key that moves outlasts its bound), or 0.
func (m *Member) step(ctx context.Context) time.Duration {
	m.confirmExpired(ctx)

	m.mu.Lock()
	live := []string{m.id}
	for _, p := range m.peers {
		if !p.released && !p.expired && p.identity != "" {
			live = append(live, p.identity)
		}
	}
	want := newView(live)
	m.want = want
	if want.key != m.acked.key {
		m.active = false
		if wait := m.releaseLocked(ctx, want); wait > 0 {
			m.mu.Unlock()
			// end() wakes the step sooner.
			if next := m.nextExpiry(); next > 0 && next < wait {
				return next
			}
			return wait
		}
		m.mu.Unlock()
		if err := m.write(ctx, want); err != nil {
			return m.le.RetryPeriod
		}
		m.mu.Lock()
	}
	agreed := want.key == m.acked.key
	for _, p := range m.peers {
		if !p.released && !p.expired && p.view != m.acked.key {
			agreed = false
		}
	}
	// The keys gained are queued at low priority, as an initial list's
	// are; a key dropped meanwhile, at the priority it was handed out at.
	type gain struct {
		key  string
		prio priorityqueue.Priority
	}
	var gained []gain
	took := false // the member takes up acked now
	if !agreed {
		m.active = false
	} else if !m.active {
		m.active, took = true, true
		m.since = nil
		for _, key := range m.objects.ListKeys() {
			if m.acked.owner(key) != m.id {
				continue
			}
			prio, dropped := m.dropped[key]
			if dropped || !m.hasOwned || m.owned.owner(key) != m.id {
				if !dropped {
					prio = priorityqueue.Low
				}
				gained = append(gained, gain{key, prio})
			}
		}
		m.owned, m.hasOwned = m.acked, true
		clear(m.dropped)
	}
	m.mu.Unlock()
	for _, g := range gained {
		m.queue.AddWithPriority(g.key, g.prio)
	}
	if len(gained) > 0 || agreed {
		m.record(ctx)
	}
	if took && m.agreed != nil {
		m.agreed()
	}
	return m.nextExpiry()
}

// releaseLocked checks that no reconcile is in flight of a key that
// isn't the member's own in want, so that it can acknowledge want. While
// some are, it returns how long they may still take; once they have
// outlasted LeaseDuration from when the first held the acknowledgement,
// it cancels them with ErrKeyMoved, forgets them, and returns 0.
func (m *Member) releaseLocked(ctx context.Context, want view) time.Duration {
	var moving []string
	for key := range m.inflight {
		if want.owner(key) != m.id {
			moving = append(moving, key)
		}
	}
	if len(moving) == 0 {
		m.moving = time.Time{}
		return 0
	}
	if m.moving.IsZero() {
		m.moving = time.Now()
	}
	if wait := m.le.LeaseDuration - time.Since(m.moving); wait > 0 {
		return wait
	}
	slices.Sort(moving)
	for _, key := range moving {
		m.inflight[key].cancel(ErrKeyMoved)
		delete(m.inflight, key)
	}
	m.moving = time.Time{}
	m.log.WarnContext(ctx, "cancelled reconciles of keys that moved to another member", "controller", m.name,
		"keys", strings.Join(moving, ","), "after", m.le.LeaseDuration.String())
	return 0
}

// confirmExpired Gets the Lease of each member unchanged for LeaseDuration
// by this member's clock: unchanged still, or deleted, it has expired; its
// member stopped working at its own deadline, RenewDeadline after its
// last renewal. Changed, the informer was behind, and it is live. An
// expired Lease is deleted, on the condition that it is still the one
// confirmed (its uid and resourceVersion), so that a member that joins
// later doesn't wait LeaseDuration for a member that crashed long ago (a
// breaker saw every join stall all members 10s, LeaseDuration, for each
// SIGKILLed member's Lease left behind).
func (m *Member) confirmExpired(ctx context.Context) {
	m.mu.Lock()
	var due []string
	for name, p := range m.peers {
		if !p.released && !p.expired && time.Since(p.observedAt) >= m.le.LeaseDuration {
			due = append(due, name)
		}
	}
	m.mu.Unlock()
	for _, name := range due {
		l, err := m.leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			continue
		}
		m.mu.Lock()
		if p := m.peers[name]; p != nil {
			switch {
			case err != nil:
				delete(m.peers, name)
			case stamp(l) == p.rv:
				p.expired = true
			}
		}
		expired := err == nil && m.peers[name] != nil && m.peers[name].expired
		m.mu.Unlock()
		if err == nil {
			m.seen(l)
		}
		if expired {
			uid, rv := l.UID, l.ResourceVersion
			_ = m.leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
		}
	}
}

// nextExpiry returns how long until the next live member would expire, or
// 0 if none would.
func (m *Member) nextExpiry() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var next time.Duration
	for _, p := range m.peers {
		if p.released || p.expired {
			continue
		}
		d := time.Until(p.observedAt.Add(m.le.LeaseDuration))
		if d <= 0 {
			d = time.Millisecond
		}
		if next == 0 || d < next {
			next = d
		}
	}
	return next
}

// take is a key a member has taken: its reconcile's context's cancel.
type take struct {
	cancel context.CancelCauseFunc
}

// Take reports whether the member takes key now (begin), and returns
// the reconcile's context, derived from ctx, which the member cancels
// with ErrKeyMoved if key moves and the reconcile outlasts the view
// change's bound, and done, which ends the take once the reconcile has
// returned (end).
func (m *Member) Take(ctx context.Context, key string) (rctx context.Context, done func(), ok bool) {
	rctx, t, ok := m.begin(ctx, key)
	if !ok {
		return nil, nil, false
	}
	return rctx, func() { m.end(key, t) }, true
}

// begin reports whether the member takes key now, and returns the
// reconcile's context, derived from ctx: its Lease is valid, and key is
// its own in the view every live member has acknowledged or, while a view
// changes, in every view since the last agreed one (keeps). A key taken
// must be handed to end, with its take, once its reconcile has returned.
func (m *Member) begin(ctx context.Context, key string) (context.Context, *take, bool) {
	if m.tenure.Valid() != nil {
		return nil, nil, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.active && m.acked.owner(key) != m.id {
		return nil, nil, false
	}
	if !m.active && !m.keeps(key) {
		// The worker holds key: the queue knows its priority.
		prio, _ := m.queue.Held(key)
		if was, ok := m.dropped[key]; !ok || prio > was {
			m.dropped[key] = prio
		}
		return nil, nil, false
	}
	ctx, cancel := context.WithCancelCause(ctx)
	t := &take{cancel: cancel}
	m.inflight[key] = t
	return ctx, t, true
}

// keeps reports whether key is the member's own in the view it last
// took keys under, in every view it has acknowledged since, and in the
// view it acknowledges next: no other member takes it in any of them,
// and it doesn't hold the next acknowledgement. m.mu is held.
func (m *Member) keeps(key string) bool {
	if !m.hasOwned || m.owned.owner(key) != m.id || m.want.owner(key) != m.id {
		return false
	}
	for _, v := range m.since {
		if v.owner(key) != m.id {
			return false
		}
	}
	return true
}

// end ends t, key's take, once its reconcile has returned.
func (m *Member) end(key string, t *take) {
	m.mu.Lock()
	if m.inflight[key] == t {
		delete(m.inflight, key)
	}
	m.mu.Unlock()
	t.cancel(nil)
	m.poke()
}

// Agreement is a view every live member has acknowledged: the members
// it names, and which of them owns a key.
type Agreement struct{ v view }

// Owner returns the member key belongs to in a (rendezvous hashing over
// Members); "" for none.
func (a Agreement) Owner(key string) string { return a.v.owner(key) }

// Members returns the identities of a's members, sorted; a new slice.
func (a Agreement) Members() []string { return slices.Clone(a.v.ids) }

// AgreementOf returns the agreement on the members of identities ids, as
// the members reach it, for tests and tools that need to know which
// member owns a key.
func AgreementOf(ids ...string) Agreement { return Agreement{newView(ids)} }

// Key tells one view from another: its members' identities joined by
// commas.
func (a Agreement) Key() string { return a.v.key }

// Agreed returns the view the member works under, which every live member
// has acknowledged, while it has one and its tenure is valid; ok is false
// while a view changes, before the member joined, and once its tenure is
// lost or past its deadline. A member takes a key (Take) only if it is
// its own in this view, or in every view since the last agreed one.
func (m *Member) Agreed() (a Agreement, ok bool) {
	if m.tenure.Valid() != nil {
		return Agreement{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.active {
		return Agreement{}, false
	}
	return Agreement{m.acked}, true
}

// Owner returns the member key belongs to among the members of
// identities ids, as a view of them says (owner); "" for none.
func Owner(key string, ids []string) string { return newView(ids).owner(key) }
