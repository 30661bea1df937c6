package kube

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// Sharding shares a controller's objects among its replicas, so that
// each reconciles about 1/N of them, instead of one leader reconciling
// all of them while the others stand by. It is off by default, and then
// the replicas elect one leader, as LeaderElection says.
//
// With Sharding on, every replica is a member: it holds a Lease of its own
// in LeaderElection.Namespace, named Settings.Name-LeaderElection.Identity
// and labelled humus.kube/shard-of=Settings.Name, renewed every
// RetryPeriod, and lists and watches the others' with a client-go
// informer. An object's key belongs to one live member, chosen by
// rendezvous hashing of the key over the members' identities, so a member
// joining or leaving moves about 1/N of the keys. Each member caches every
// object (its caches are those a leader keeps), and reconciles only its
// own keys.
//
// No key is reconciled by two members at once. Each member publishes on
// its Lease the view it has acknowledged, the identities of the members
// it sees live; a member takes the keys it gains in a view only once
// every live member it sees has acknowledged that view, and before it
// acknowledges a new view it stops taking the keys it loses there and
// waits for their reconciles in flight. While a view changes, each member
// goes on with the keys that stay its own, and the keys that move wait:
// about one Lease write and one watch event, unless a member is slow to
// notice or a reconcile of a key that moves is slow. That wait is bounded
// by LeaseDuration, the time a crashed member's keys wait: a reconcile of
// a key that moves still running then has its context cancelled, the
// controller sends none of its applies from then on, and its member
// acknowledges the view without waiting for it to return, so the key's
// new owner may reconcile it while a Reconciler that ignores its context
// runs on (as a leader's may after a lost Lease).
// A member that stops renewing stops working RenewDeadline after its last
// renewal, as a leader does, and the others take its keys once they have
// seen its Lease unrenewed for LeaseDuration and a Get of it confirms it;
// a member that stops gracefully lets its reconciles in flight finish and
// releases its Lease, whose keys move at once. A member whose Lease is
// lost (unrenewed for RenewDeadline, deleted, or taken) stops all work
// and Serve returns ErrLostLeadership, as a leader's does. Each replica
// needs an identity of its own: a replica that finds its Lease held and
// renewed by another process of its identity returns an error saying so
// from Serve, and one whose Lease such a process took over stops as one
// whose Lease is lost.
//
// The cost: every member caches every object and receives every event;
// only the reconciling is shared. The RBAC a member needs on Leases is
// get, list, watch, create, update and delete.
type Sharding struct {
	// Enabled turns sharding on; false (the default) elects one leader.
	Enabled bool
}

// The label and annotations of a member's Lease.
const (
	// shardLabel marks a member's Lease, with Settings.Name as its value,
	// so the members list each other by it.
	shardLabel = "humus.kube/shard-of"
	// shardIdentityAnnotation is the member's identity, kept when it
	// releases its Lease (which empties holderIdentity).
	shardIdentityAnnotation = "humus.kube/shard-identity"
	// shardViewAnnotation is the view the member has acknowledged: the
	// identities of the members it saw live, sorted, joined by commas; ""
	// before its first.
	shardViewAnnotation = "humus.kube/shard-view"
	// shardInstanceAnnotation tells the member's process from another
	// with the same identity: a random UID each process draws as it
	// joins.
	shardInstanceAnnotation = "humus.kube/shard-instance"
)

// errLeaseDeleted is why a member stopped when its Lease was deleted by
// someone else.
var errLeaseDeleted = errors.New("kube: the member's Lease was deleted")

// errKeyMoved is the cause of a reconcile's context cancelled because its
// key moved to another member and the reconcile outlasted the view
// change's bound, LeaseDuration.
var errKeyMoved = errors.New("kube: the key moved to another member, and its reconcile outlasted the view change by LeaseDuration")

// errSameIdentity is why a member stopped when another process of its
// identity took its Lease over.
var errSameIdentity = errors.New("kube: another replica with this member's LeaderElection.Identity renewed its Lease; give each replica an identity of its own, such as its pod's name")

// CheckSharding returns one error naming every mistake in s that keeps
// Sharding from working, or nil; with Sharding off, nil. A member's Lease
// is named Settings.Name-LeaderElection.Identity, which must be a DNS-1123
// subdomain of at most 253 bytes, and labelled with Settings.Name, which
// must be a label value (at most 63 bytes).
func CheckSharding(s Settings) error {
	if !s.Sharding.Enabled {
		return nil
	}
	var errs []error
	if s.Name != "" && s.LeaderElection.Identity != "" {
		name := shardLeaseName(s)
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			fix := "use an identity of lower-case letters, digits, '-' and '.', such as the pod's name"
			if len(validation.IsDNS1123Subdomain(s.Name)) > 0 {
				fix = "make Settings.Name a DNS-1123 subdomain (see CheckName)"
			}
			errs = append(errs, fmt.Errorf("kube: with Settings.Sharding on, each replica's Lease is named Settings.Name-LeaderElection.Identity, and %q is not a DNS-1123 subdomain: %s; %s", name, strings.Join(msgs, "; "), fix))
		}
	}
	if s.Name != "" {
		if msgs := validation.IsValidLabelValue(s.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("kube: with Settings.Sharding on, Settings.Name %q labels each replica's Lease, and is not a label value: %s", s.Name, strings.Join(msgs, "; ")))
		}
	}
	return errors.Join(errs...)
}

func shardLeaseName(s Settings) string { return s.Name + "-" + s.LeaderElection.Identity }

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
func (v view) owner(key string) string {
	kh := fnv64a(key)
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

// member is a replica of a controller with Sharding on: its Lease, what it
// knows of the others', and which keys it may reconcile.
type member struct {
	// The deadline and the loss; begun once the member's Lease is
	// created, and its onLost cancels the reconciles in flight.
	*tenure

	id        string
	instance  string // this process's, on its Lease
	name      string // Settings.Name, the Leases' label
	leaseName string
	ns        string
	le        LeaderElection
	leases    coordinationclient.LeaseInterface
	informer  cache.SharedIndexInformer
	queue     workqueue.TypedRateLimitingInterface[string]
	objects   cache.Indexer
	inst      shardInstruments
	attrs     metric.MeasurementOption
	log       *slog.Logger

	wake chan struct{} // a change worth a step

	mu       sync.Mutex
	own      *coordinationv1.Lease // as last written
	acked    view                  // the view on own, acknowledged
	active   bool                  // every live member has acknowledged acked
	owned    view                  // the view the keys were last taken under
	hasOwned bool
	// want is the view of the members live now, which the member
	// acknowledges next; since, the views it acknowledged while not
	// active, after owned. While not active, it takes only the keys that
	// are its own in all of them (keeps).
	want     view
	since    []view
	inflight map[string]*take
	// moving is when a reconcile in flight of a key that moves first held
	// the acknowledgement of want; zero when none does.
	moving  time.Time
	dropped map[string]struct{} // keys not taken while no view was agreed
	peers   map[string]*peer    // by Lease name, without own
}

// shardInstruments are a member's figures of what it owns.
type shardInstruments struct {
	keys    metric.Int64Gauge
	members metric.Int64Gauge
}

func newShardInstruments(m metric.Meter) (shardInstruments, error) {
	keys, err1 := m.Int64Gauge("humus.kube.controller.shard.keys",
		metric.WithUnit("{object}"),
		metric.WithDescription("Objects in the cache this member reconciles under the view it acknowledged, with Sharding on."))
	members, err2 := m.Int64Gauge("humus.kube.controller.shard.members",
		metric.WithUnit("{member}"),
		metric.WithDescription("Members in the view this member acknowledged, itself included, with Sharding on."))
	if err := errors.Join(err1, err2); err != nil {
		return shardInstruments{}, fmt.Errorf("kube: creating the sharding instruments: %w", err)
	}
	return shardInstruments{keys: keys, members: members}, nil
}

// newMember returns the controller's member, not yet joined. Its lost
// context derives from parent's values.
func (c *Controller) newMember(parent context.Context, cs *caches) (*member, error) {
	inst, err := newShardInstruments(c.tel.meter)
	if err != nil {
		return nil, err
	}
	le := c.settings.LeaderElection
	m := &member{
		id:        le.Identity,
		instance:  string(uuid.NewUUID()),
		name:      c.settings.Name,
		leaseName: shardLeaseName(c.settings),
		ns:        le.Namespace,
		le:        le,
		leases:    c.clients.kube.CoordinationV1().Leases(le.Namespace),
		queue:     cs.queue,
		objects:   cs.resource.GetIndexer(),
		inst:      inst,
		attrs:     controllerAttr(c.settings.Name),
		tenure:    newTenure(parent, le.RenewDeadline, c.forceStop),
		log:       c.tel.log,
		wake:      make(chan struct{}, 1),
		inflight:  map[string]*take{},
		dropped:   map[string]struct{}{},
		peers:     map[string]*peer{},
	}
	selector := shardLabel + "=" + c.settings.Name
	m.informer = coordinationinformers.NewFilteredLeaseInformer(c.clients.kube, le.Namespace, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = selector })
	if _, err := c.watch(m.informer, cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.seen(obj) },
		UpdateFunc: func(_, obj any) { m.seen(obj) },
		DeleteFunc: m.gone,
	}); err != nil {
		return nil, err
	}
	return m, nil
}

// join creates the member's Lease, then lists the others' with a
// consistent read, and starts the informer on them, which runs until ctx
// ends. The create comes before the list so that of two members joining
// at once, at least one sees the other from the start: the one that sees
// it waits for its acknowledgement.
func (m *member) join(ctx context.Context, run func(func(context.Context))) error {
	if err := m.create(ctx); err != nil {
		return err
	}
	list, err := m.leases.List(ctx, metav1.ListOptions{LabelSelector: shardLabel + "=" + m.name})
	if err != nil {
		return fmt.Errorf("kube: listing the members' Leases in %s: %w", m.ns, err)
	}
	for i := range list.Items {
		m.seen(&list.Items[i])
	}
	run(m.informer.RunWithContext)
	if !cache.WaitForCacheSync(ctx.Done(), m.informer.HasSynced) {
		return ctx.Err()
	}
	return nil
}

// create creates the member's Lease, holding no view yet. If a Lease of
// its name exists, left by an earlier process of the same identity, it
// waits until that one has stayed unchanged for LeaseDuration (or was
// released) before taking it over, as a leader waits out a Lease; if it
// sees it renewed meanwhile, another live process has this identity, and
// it returns an error saying so (see waitOut).
func (m *member) create(ctx context.Context) error {
	now := metav1.NewMicroTime(time.Now())
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        m.leaseName,
			Namespace:   m.ns,
			Labels:      map[string]string{shardLabel: m.name},
			Annotations: map[string]string{shardIdentityAnnotation: m.id, shardViewAnnotation: "", shardInstanceAnnotation: m.instance},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(m.id),
			LeaseDurationSeconds: ptr.To(int32(m.le.LeaseDuration / time.Second)),
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}
	for {
		start := time.Now()
		got, err := m.leases.Create(ctx, l, metav1.CreateOptions{})
		if err == nil {
			m.renewed(start, got)
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("kube: creating the member's Lease %s/%s: %w", m.ns, m.leaseName, err)
		}
		old, err := m.waitOut(ctx)
		if err != nil {
			return err
		}
		if old == nil {
			continue // deleted meanwhile: create it
		}
		l.ResourceVersion = old.ResourceVersion
		l.UID = old.UID
		start = time.Now()
		got, err = m.leases.Update(ctx, l, metav1.UpdateOptions{})
		if err == nil {
			m.renewed(start, got)
			return nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return fmt.Errorf("kube: taking over the member's Lease %s/%s: %w", m.ns, m.leaseName, err)
		}
	}
}

// waitOut returns the member's existing Lease once it is released or has
// stayed unchanged for LeaseDuration, or nil once it is gone. A Lease
// held and renewed while it waits is another live process's with the
// same identity (only a member writes its own Lease; the others only
// delete it once expired): two members with one identity would own the
// same keys, so it returns an error naming the Lease and its holder
// rather than wait for it. A process that crashed, or a pod restarted
// under its old name, leaves its Lease unrenewed, and is waited out.
func (m *member) waitOut(ctx context.Context) (*coordinationv1.Lease, error) {
	var rv string
	var since time.Time
	for {
		l, err := m.leases.Get(ctx, m.leaseName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil, nil
		case err != nil:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		case l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "":
			return l, nil
		case rv != "" && l.ResourceVersion != rv:
			return nil, fmt.Errorf("kube: the member's Lease %s/%s is held by %q and was renewed while this replica waited to take it over: another replica runs with the same LeaderElection.Identity; give each replica an identity of its own, such as its pod's name",
				m.ns, m.leaseName, *l.Spec.HolderIdentity)
		case rv == "":
			rv, since = l.ResourceVersion, time.Now()
		case time.Since(since) >= m.le.LeaseDuration:
			return l, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(m.le.RetryPeriod):
		}
	}
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
func (m *member) seen(obj any) {
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
	p.identity = l.Annotations[shardIdentityAnnotation]
	p.view = l.Annotations[shardViewAnnotation]
	p.released = l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == ""
	m.mu.Unlock()
	m.poke()
}

// gone records a member's Lease deleted. A released one is gone at once;
// one deleted without a release (by hand) still counts until it expires,
// since its member may still be at work until its own deadline; an
// expired one (deleted by confirmExpired) is gone too.
func (m *member) gone(obj any) {
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

func (m *member) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// run keeps the member's Lease renewed every RetryPeriod and its view
// agreed, until ctx ends or the Lease is lost.
func (m *member) run(ctx context.Context) {
	renew := time.NewTimer(m.le.RetryPeriod)
	defer renew.Stop()
	for {
		next := m.step(ctx)
		expiry := time.NewTimer(next)
		if next <= 0 {
			expiry.Stop()
		}
		select {
		case <-ctx.Done():
			expiry.Stop()
			return
		case <-m.ctx.Done():
			expiry.Stop()
			return
		case <-m.wake:
		case <-expiry.C:
		case <-renew.C:
			m.mu.Lock()
			v := m.acked
			m.mu.Unlock()
			_ = m.write(ctx, v)
			m.record(ctx)
			renew.Reset(m.le.RetryPeriod)
		}
		expiry.Stop()
	}
}

// step confirms the members that look expired, acknowledges the view of
// the live members once the keys it loses there are no longer in flight
// (or their reconciles have outlasted LeaseDuration, and are cancelled),
// and takes the keys it gains once every live member has acknowledged it.
// It returns how long until it has to look again (the next member would
// expire, or a reconcile of a key that moves outlasts its bound), or 0.
func (m *member) step(ctx context.Context) time.Duration {
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
	var gained []string
	if !agreed {
		m.active = false
	} else if !m.active {
		m.active = true
		m.since = nil
		for _, key := range m.objects.ListKeys() {
			if m.acked.owner(key) != m.id {
				continue
			}
			_, dropped := m.dropped[key]
			if dropped || !m.hasOwned || m.owned.owner(key) != m.id {
				gained = append(gained, key)
			}
		}
		m.owned, m.hasOwned = m.acked, true
		clear(m.dropped)
	}
	m.mu.Unlock()
	for _, key := range gained {
		m.queue.Add(key)
	}
	if len(gained) > 0 || agreed {
		m.record(ctx)
	}
	return m.nextExpiry()
}

// releaseLocked checks that no reconcile is in flight of a key that
// isn't the member's own in want, so that it can acknowledge want. While
// some are, it returns how long they may still take; once they have
// outlasted LeaseDuration from when the first held the acknowledgement,
// it cancels them with errKeyMoved, forgets them, and returns 0.
func (m *member) releaseLocked(ctx context.Context, want view) time.Duration {
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
		m.inflight[key].cancel(errKeyMoved)
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
func (m *member) confirmExpired(ctx context.Context) {
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
func (m *member) nextExpiry() time.Duration {
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

// write renews the member's Lease with v as its acknowledged view. A
// Lease deleted or taken by another is lost, and so is one whose deadline
// has passed by the clock now, unsent: after a pause past LeaseDuration
// (SIGSTOP, a frozen VM, CPU starvation) the renewal's timer can fire
// before the deadline's, and a renewal sent then would succeed, and give
// the member a fresh deadline, while the others have confirmed its Lease
// expired and taken its keys.
func (m *member) write(ctx context.Context, v view) error {
	if err := m.current(); err != nil {
		return err
	}
	m.mu.Lock()
	l := m.own.DeepCopy()
	m.mu.Unlock()
	now := metav1.NewMicroTime(time.Now())
	l.Spec.RenewTime = &now
	l.Annotations[shardViewAnnotation] = v.key
	// A write still in flight once the Lease is lost is abandoned.
	wctx, cancel := context.WithTimeout(ctx, m.le.RenewDeadline)
	defer cancel()
	defer context.AfterFunc(m.ctx, cancel)()
	start := time.Now()
	got, err := m.leases.Update(wctx, l, metav1.UpdateOptions{})
	switch {
	case apierrors.IsNotFound(err):
		m.lose(errLeaseDeleted)
		return err
	case apierrors.IsConflict(err):
		// A renewal of its own, abandoned at its timeout, may have landed:
		// the Lease is still its own while it holds this process's
		// instance.
		fresh, gerr := m.leases.Get(wctx, m.leaseName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(gerr):
			m.lose(errLeaseDeleted)
		case gerr == nil && (fresh.Spec.HolderIdentity == nil || *fresh.Spec.HolderIdentity != m.id):
			m.lose(errOtherHolder)
		case gerr == nil && fresh.Annotations[shardInstanceAnnotation] != m.instance:
			m.lose(errSameIdentity)
		case gerr == nil:
			m.mu.Lock()
			m.own.ResourceVersion = fresh.ResourceVersion
			m.mu.Unlock()
		}
		return err
	case err != nil:
		return err
	}
	m.mu.Lock()
	if m.lostErr() == nil {
		if v.key != m.acked.key {
			m.since = append(m.since, v)
		}
		m.acked = v
	}
	m.mu.Unlock()
	m.renewed(start, got)
	return nil
}

// renewed records the member's Lease write that started at start and
// succeeded, got: its deadline moves to start+RenewDeadline, unless the
// Lease was lost meanwhile or the write started at or after the deadline,
// too late (see tenure); the first begins its tenure.
func (m *member) renewed(start time.Time, got *coordinationv1.Lease) {
	m.tenure.renewed(start)
	if m.lostErr() != nil {
		return
	}
	m.mu.Lock()
	m.own = got
	m.mu.Unlock()
	m.commence()
}

// take is a key a member has taken: its reconcile's context's cancel.
type take struct {
	cancel context.CancelCauseFunc
}

// begin reports whether the member takes key now, and returns the
// reconcile's context, derived from ctx: its Lease is valid, and key is
// its own in the view every live member has acknowledged or, while a view
// changes, in every view since the last agreed one (keeps). A key taken
// must be handed to end, with its take, once its reconcile has returned.
func (m *member) begin(ctx context.Context, key string) (context.Context, *take, bool) {
	if m.valid() != nil {
		return nil, nil, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.active && m.acked.owner(key) != m.id {
		return nil, nil, false
	}
	if !m.active && !m.keeps(key) {
		m.dropped[key] = struct{}{}
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
func (m *member) keeps(key string) bool {
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
func (m *member) end(key string, t *take) {
	m.mu.Lock()
	if m.inflight[key] == t {
		delete(m.inflight, key)
	}
	m.mu.Unlock()
	t.cancel(nil)
	m.poke()
}

// record records the keys the member owns and the members in its view.
func (m *member) record(ctx context.Context) {
	m.mu.Lock()
	v, active := m.acked, m.active && m.lostErr() == nil
	m.mu.Unlock()
	var n int64
	if active {
		for _, key := range m.objects.ListKeys() {
			if v.owner(key) == m.id {
				n++
			}
		}
	}
	m.inst.keys.Record(ctx, n, m.attrs)
	m.inst.members.Record(ctx, int64(len(v.ids)), m.attrs)
}

// leave releases the member's Lease, so its keys move at once: an update
// with no holder, which the others see as its leaving, then a delete,
// both within RetryPeriod. A lost Lease is left alone.
func (m *member) leave(ctx context.Context) {
	m.mu.Lock()
	if m.lostErr() != nil || m.own == nil {
		m.mu.Unlock()
		return
	}
	l := m.own.DeepCopy()
	m.mu.Unlock()
	m.lose(errNotLeading)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.le.RetryPeriod)
	defer cancel()
	l.Spec.HolderIdentity = ptr.To("")
	l.Annotations[shardViewAnnotation] = ""
	// A renewal abandoned as the member stopped may have landed: a
	// conflict is retried on the Lease as it is, while it is still ours.
	var got *coordinationv1.Lease
	for {
		var err error
		got, err = m.leases.Update(ctx, l, metav1.UpdateOptions{})
		if err == nil {
			break
		}
		if !apierrors.IsConflict(err) {
			return
		}
		fresh, err := m.leases.Get(ctx, m.leaseName, metav1.GetOptions{})
		if err != nil || fresh.Spec.HolderIdentity == nil || *fresh.Spec.HolderIdentity != m.id || fresh.Annotations[shardInstanceAnnotation] != m.instance {
			return
		}
		l.ResourceVersion = fresh.ResourceVersion
	}
	_ = m.leases.Delete(ctx, m.leaseName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &got.UID, ResourceVersion: &got.ResourceVersion}})
}

// takeKey reports whether a worker of ctx reconciles key, and returns
// the reconcile's context: ctx itself without Sharding, and with it one
// the member may cancel, if the member takes key (begin). A key not taken
// is forgotten by the queue: its owner has it. done ends the take.
func takeKey(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], key string) (rctx context.Context, done func(), ok bool) {
	m, isMember := ctx.Value(leaseKey{}).(*member)
	if !isMember {
		return ctx, func() {}, true
	}
	rctx, t, ok := m.begin(ctx, key)
	if !ok {
		queue.Forget(key)
		return nil, nil, false
	}
	return rctx, func() { m.end(key, t) }, true
}

// serveShard is lead with Sharding on: the replica joins as a member,
// and its workers reconcile the keys it owns, until ctx ends, its Lease is
// lost, or the resource is no longer served. Then it stops the workers,
// lets the reconciles in flight finish, releases its Lease (unless lost),
// and stops the informers.
func (c *Controller) serveShard(ctx, workCtx context.Context, cs *caches, unserved <-chan error) error {
	m, err := c.newMember(workCtx, cs)
	if err != nil {
		cs.stop()
		return err
	}
	var bg sync.WaitGroup
	bgCtx, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		stopBg()
		bg.Wait()
		cs.stop()
	}()
	spawn := func(f func(context.Context)) { bg.Go(func() { f(bgCtx) }) }
	if err := m.join(ctx, spawn); err != nil {
		if ctx.Err() != nil {
			m.leave(ctx)
			return nil
		}
		return fmt.Errorf("kube: controller %s joining its members: %w", c.settings.Name, err)
	}
	spawn(m.run)

	w := &workers{c: c, caches: cs, stopping: make(chan struct{})}
	err = w.work(ctx, context.WithValue(workCtx, leaseKey{}, m), m.ctx, "joined its members", unserved)
	w.stop()
	stopBg()
	bg.Wait()
	if cause := m.lostCause(); cause != nil {
		c.tel.log.WarnContext(ctx, "lost the lease", "controller", c.settings.Name, "cause", cause.Error())
		return ErrLostLeadership
	}
	m.leave(ctx)
	return err
}
