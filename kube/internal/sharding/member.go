package sharding

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/z5labs/humus/kube/internal/priorityqueue"
)

// A shard member's life: its Lease, created as it joins, renewed every
// RetryPeriod with the view it acknowledges, and released as it leaves;
// its loop; and its figures. What its view is, and how it takes keys under
// it, is view.go's; how kube makes one, config.go's.

// The label and annotations of a member's Lease.
const (
	// Label marks a member's Lease, with Settings.Name as its value,
	// so the members list each other by it.
	Label = "humus.kube/shard-of"
	// IdentityAnnotation is the member's identity, kept when it
	// releases its Lease (which empties holderIdentity).
	IdentityAnnotation = "humus.kube/shard-identity"
	// ViewAnnotation is the view the member has acknowledged: the
	// identities of the members it saw live, sorted, joined by commas; ""
	// before its first.
	ViewAnnotation = "humus.kube/shard-view"
	// InstanceAnnotation tells the member's process from another
	// with the same identity: a random UID each process draws as it
	// joins.
	InstanceAnnotation = "humus.kube/shard-instance"
)

// errLeaseDeleted is why a member stopped when its Lease was deleted by
// someone else.
var errLeaseDeleted = errors.New("kube: the member's Lease was deleted")

// ErrKeyMoved is the cause of a reconcile's context cancelled because its
// key moved to another member and the reconcile outlasted the view
// change's bound, LeaseDuration.
var ErrKeyMoved = errors.New("kube: the key moved to another member, and its reconcile outlasted the view change by LeaseDuration")

// errSameIdentity is why a member stopped when another process of its
// identity took its Lease over.
var errSameIdentity = errors.New("kube: another replica with this member's LeaderElection.Identity renewed its Lease; give each replica an identity of its own, such as its pod's name")

// Member is a replica of a controller with Sharding on: its Lease, what it
// knows of the others', and which keys it may reconcile.
type Member struct {
	// The deadline and the loss; begun once the member's Lease is
	// created, and its loss cancels the reconciles in flight.
	tenure         Tenure
	errOtherHolder error
	agreed         func() // Config.Agreed, or nil

	id        string
	instance  string // this process's, on its Lease
	name      string // Settings.Name, the Leases' label
	leaseName string
	ns        string
	le        Durations
	leases    coordinationclient.LeaseInterface
	informer  cache.SharedIndexInformer
	queue     *priorityqueue.Queue[string]
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
	moving time.Time
	// dropped are the keys not taken while no view was agreed, with the
	// priority each was handed out at.
	dropped map[string]priorityqueue.Priority
	peers   map[string]*peer // by Lease name, without own
	// mine holds the FNV-1a hash of each cached key that is the member's
	// own in the view countedView, kept by the resource informer's adds
	// and deletes (countObject), so that the keys gauge costs O(1) on
	// each reconcile's end, not a walk of every key; countedView is ""
	// until record first counts, and stale after a view change.
	mine        map[uint64]struct{}
	countedView string
}

// Join creates the member's Lease, then lists the others' with a
// consistent read, and starts the informer on them, which runs until ctx
// ends. The create comes before the list so that of two members joining
// at once, at least one sees the other from the start: the one that sees
// it waits for its acknowledgement.
func (m *Member) Join(ctx context.Context, run func(func(context.Context))) error {
	if err := m.create(ctx); err != nil {
		return err
	}
	list, err := m.leases.List(ctx, metav1.ListOptions{LabelSelector: Label + "=" + m.name})
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
func (m *Member) create(ctx context.Context) error {
	now := metav1.NewMicroTime(time.Now())
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        m.leaseName,
			Namespace:   m.ns,
			Labels:      map[string]string{Label: m.name},
			Annotations: map[string]string{IdentityAnnotation: m.id, ViewAnnotation: "", InstanceAnnotation: m.instance},
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
func (m *Member) waitOut(ctx context.Context) (*coordinationv1.Lease, error) {
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

// Run keeps the member's Lease renewed every RetryPeriod and its view
// agreed, until ctx ends or the Lease is lost.
func (m *Member) Run(ctx context.Context) {
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
		case <-m.tenure.Context().Done():
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

// write renews the member's Lease with v as its acknowledged view. A
// Lease deleted or taken by another is lost, and so is one whose deadline
// has passed by the clock now, unsent: after a pause past LeaseDuration
// (SIGSTOP, a frozen VM, CPU starvation) the renewal's timer can fire
// before the deadline's, and a renewal sent then would succeed, and give
// the member a fresh deadline, while the others have confirmed its Lease
// expired and taken its keys.
func (m *Member) write(ctx context.Context, v view) error {
	if err := m.tenure.Current(); err != nil {
		return err
	}
	m.mu.Lock()
	l := m.own.DeepCopy()
	m.mu.Unlock()
	now := metav1.NewMicroTime(time.Now())
	l.Spec.RenewTime = &now
	l.Annotations[ViewAnnotation] = v.key
	// A write still in flight once the Lease is lost is abandoned.
	wctx, cancel := context.WithTimeout(ctx, m.le.RenewDeadline)
	defer cancel()
	defer context.AfterFunc(m.tenure.Context(), cancel)()
	start := time.Now()
	got, err := m.leases.Update(wctx, l, metav1.UpdateOptions{})
	switch {
	case apierrors.IsNotFound(err):
		m.tenure.Lose(errLeaseDeleted)
		return err
	case apierrors.IsConflict(err):
		// A renewal of its own, abandoned at its timeout, may have landed:
		// the Lease is still its own while it holds this process's
		// instance.
		fresh, gerr := m.leases.Get(wctx, m.leaseName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(gerr):
			m.tenure.Lose(errLeaseDeleted)
		case gerr == nil && (fresh.Spec.HolderIdentity == nil || *fresh.Spec.HolderIdentity != m.id):
			m.tenure.Lose(m.errOtherHolder)
		case gerr == nil && fresh.Annotations[InstanceAnnotation] != m.instance:
			m.tenure.Lose(errSameIdentity)
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
	if m.tenure.LostErr() == nil {
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
func (m *Member) renewed(start time.Time, got *coordinationv1.Lease) {
	m.tenure.Renewed(start)
	if m.tenure.LostErr() != nil {
		return
	}
	m.mu.Lock()
	m.own = got
	m.mu.Unlock()
	m.tenure.Commence()
}

// Leave releases the member's Lease, so its keys move at once: an update
// with no holder, which the others see as its leaving, then a delete,
// both within RetryPeriod. A lost Lease is left alone.
func (m *Member) Leave(ctx context.Context) {
	m.mu.Lock()
	if m.tenure.LostErr() != nil || m.own == nil {
		m.mu.Unlock()
		return
	}
	l := m.own.DeepCopy()
	m.mu.Unlock()
	m.tenure.Release()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.le.RetryPeriod)
	defer cancel()
	l.Spec.HolderIdentity = ptr.To("")
	l.Annotations[ViewAnnotation] = ""
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
		if err != nil || fresh.Spec.HolderIdentity == nil || *fresh.Spec.HolderIdentity != m.id || fresh.Annotations[InstanceAnnotation] != m.instance {
			return
		}
		l.ResourceVersion = fresh.ResourceVersion
	}
	_ = m.leases.Delete(ctx, m.leaseName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &got.UID, ResourceVersion: &got.ResourceVersion}})
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

// record records the keys the member owns and the members in its view:
// their count kept by countObject, and counted anew, walking every key,
// only once the view has changed since.
func (m *Member) record(ctx context.Context) {
	m.mu.Lock()
	v, active := m.acked, m.active && m.tenure.LostErr() == nil
	var n int64
	if active {
		if m.countedView != v.key {
			clear(m.mine)
			for _, key := range m.objects.ListKeys() {
				if kh := fnv64a(key); v.ownerOf(kh) == m.id {
					m.mine[kh] = struct{}{}
				}
			}
			m.countedView = v.key
		}
		n = int64(len(m.mine))
	}
	m.mu.Unlock()
	m.inst.keys.Record(ctx, n, m.attrs)
	m.inst.members.Record(ctx, int64(len(v.ids)), m.attrs)
}

// countObject notes an object of the resource added to the cache, or
// deleted from it, in mine, if the view counted makes it the member's
// own. An add the walk in record saw already, or a delete of a key it
// didn't, leaves mine as it is: the informer notifies its handlers after
// its cache changes, in order.
func (m *Member) countObject(obj any, added bool) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	kh := fnv64a(key)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.countedView == "" || m.acked.key != m.countedView {
		return // record counts anew
	}
	switch {
	case !added:
		delete(m.mine, kh)
	case m.acked.ownerOf(kh) == m.id:
		m.mine[kh] = struct{}{}
	}
}
