package kube

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/z5labs/humus/kube/internal/sharding"
	ktel "github.com/z5labs/humus/kube/internal/telemetry"
	"github.com/z5labs/humus/kube/internal/tenure"
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
// object (its caches are those a leader keeps), unless CacheShare is on,
// and reconciles only its own keys.
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
// The cost: without CacheShare, every member caches every object and
// receives every event; only the reconciling is shared. The RBAC a member
// needs on Leases is get, list, watch, create, update and delete; with
// CacheShare, patch on the resource and on each Owns too (Controller.RBAC).
type Sharding struct {
	// Enabled turns sharding on; false (the default) elects one leader.
	Enabled bool
	// CacheShare makes each member cache, and hear, only its own share:
	// the objects of its keys, and their children. Each object carries
	// the label ShardLabel(Settings.Name), whose value is the identity of
	// the member that owns its key (for a child, its controller owner's
	// key), and each member's informers select only its own value, so
	// the API server filters their lists and watches. The members write
	// the label: one merge patch of that one label for an object created
	// without it, and one for each object whose key moves at a view
	// change (see the guide's Sharding section). It needs Enabled; false
	// (the default) caches every object in every member.
	CacheShare bool
}

// CheckSharding returns one error naming every mistake in s that keeps
// Sharding from working, or nil; with Sharding off, nil. A member's Lease
// is named Settings.Name-LeaderElection.Identity, which must be a DNS-1123
// subdomain of at most 253 bytes, and labelled with Settings.Name, which
// must be a label value (at most 63 bytes).
func CheckSharding(s Settings) error {
	if !s.Sharding.Enabled {
		if s.Sharding.CacheShare {
			return errors.New("kube: Settings.Sharding.CacheShare is on but Sharding.Enabled is off: a member caches its own share only when the replicas share the keys; turn Enabled on, or CacheShare off")
		}
		return nil
	}
	var errs []error
	if s.Sharding.CacheShare {
		if s.LeaderElection.Identity != "" {
			if msgs := validation.IsValidLabelValue(s.LeaderElection.Identity); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("kube: with Settings.Sharding.CacheShare on, each object's label %s holds its member's identity, and LeaderElection.Identity %q is not a label value: %s; use at most 63 letters, digits, '-', '_' and '.', such as the pod's name", ShardLabel(s.Name), s.LeaderElection.Identity, strings.Join(msgs, "; ")))
			}
		}
		if s.Name != "" {
			if msgs := validation.IsQualifiedName(ShardLabel(s.Name)); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("kube: with Settings.Sharding.CacheShare on, each object is labelled %s, which is not a label key: %s; give Settings.Name at most 63 letters, digits, '-', '_' and '.'", ShardLabel(s.Name), strings.Join(msgs, "; ")))
			}
		}
		if selectsOn(s.LabelSelector, ShardLabel(s.Name)) {
			errs = append(errs, fmt.Errorf("kube: with Settings.Sharding.CacheShare on, the members select on the label %s themselves, and Settings.LabelSelector %q selects on it too; take it out of LabelSelector", ShardLabel(s.Name), s.LabelSelector))
		}
	}
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

// ShardLabel returns the label key that carries an object's shard with
// Sharding.CacheShare on, for the controller named name (Settings.Name):
// "shard.humus.kube/" + name. Its value is a member's identity
// (LeaderElection.Identity).
func ShardLabel(name string) string { return shardLabelPrefix + name }

const shardLabelPrefix = "shard.humus.kube/"

// ShardLabels returns the labels an object a reconcile creates or
// applies should carry so that it is cached by the member that reconciles
// its owner: with Sharding.CacheShare on, ShardLabel(Settings.Name) set
// to this member's identity; otherwise, or when ctx is not a reconcile's
// context, nil. A child applied without them is labelled by its owner's
// member after it is created (one more write, and its event comes later);
// give them to every object the reconcile applies with an owner
// reference to the reconciled object, for example with an apply
// configuration's WithLabels. The map is new on each call.
func ShardLabels(ctx context.Context) map[string]string {
	s := scopeOf(ctx)
	if s == nil || s.c == nil || !s.c.settings.Sharding.CacheShare {
		return nil
	}
	st := s.c.settings
	return map[string]string{ShardLabel(st.Name): st.LeaderElection.Identity}
}

func shardLeaseName(s Settings) string { return s.Name + "-" + s.LeaderElection.Identity }

// serveShard is lead with Sharding on: the replica joins as a member,
// and its workers reconcile the keys it owns, until ctx ends, its Lease is
// lost, or the resource is no longer served. Then it stops the workers,
// letting the reconciles in flight finish, and the member's loop, and
// releases its Lease (unless lost), in that order, in td; Serve stops the
// informers after.
func (c *Controller) serveShard(ctx, workCtx context.Context, cs *informerSet, td *teardown, unserved <-chan error) error {
	sc, err := c.newShardCache(cs)
	if err != nil {
		return err
	}
	var agreed func()
	if sc != nil {
		agreed = sc.poke
		// run shuts the relabel queue down, but a member that fails
		// before it starts (newMember, watchOwn, Join) never runs it, and
		// the queue's own goroutines would outlive Serve. ShutDown is
		// idempotent, and this one comes after stopBackground's.
		defer sc.queue.ShutDown()
	}
	m, err := c.newMember(workCtx, cs, agreed)
	if err != nil {
		return err
	}
	if sc != nil {
		sc.lease = m
		if err := sc.watchOwn(m.Agreed); err != nil {
			return err
		}
	}
	var bg sync.WaitGroup
	bgCtx, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	stopBackground := func() {
		stopBg()
		bg.Wait()
	}
	defer stopBackground() // a failed join's informer
	spawn := func(f func(context.Context)) { bg.Go(func() { f(bgCtx) }) }
	if err := m.Join(ctx, spawn); err != nil {
		if ctx.Err() != nil {
			m.Leave(ctx)
			return nil
		}
		return fmt.Errorf("kube: controller %s joining its members: %w", c.settings.Name, err)
	}
	spawn(m.Run)
	if sc != nil {
		spawn(sc.run)
	}

	w := &workers{c: c, informers: cs, stopping: make(chan struct{})}
	err = w.work(ctx, withLease(workCtx, m), m.Tenure.Context(), "joined its members", unserved)
	// Leave releases the Lease unless it was lost.
	td.stopWork(w.stop, func() {
		stopBackground()
		m.Leave(ctx)
	})
	if cause := m.LostCause(); cause != nil {
		c.tel.Log().WarnContext(ctx, "lost the lease", "controller", c.settings.Name, "cause", cause.Error())
		return ErrLostLeadership
	}
	return err
}

// takeKey reports whether a worker of ctx reconciles key, and returns
// the reconcile's context: ctx itself without Sharding, and with it one
// the member may cancel, if the member takes key (sharding.Member.Take).
// A key not taken is forgotten by the queue: its owner has it. done ends
// the take.
func takeKey(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], key string) (rctx context.Context, done func(), ok bool) {
	var m *member
	if s := scopeOf(ctx); s != nil {
		m, _ = s.lease.(*member)
	}
	if m == nil {
		return ctx, func() {}, true
	}
	rctx, done, ok = m.Take(ctx, key)
	if !ok {
		queue.Forget(key)
		return nil, nil, false
	}
	return rctx, done, true
}

// member is a replica of a controller with Sharding on: the shard member
// (internal/sharding), and the tenure its Lease gives it, which a
// worker's scope asks whether it may work (Valid) and serveShard why it
// was lost (LostCause).
type member struct {
	*sharding.Member
	*tenure.Tenure
}

// newMember returns the controller's member, not yet joined. Its lost
// context derives from parent's values.
func (c *Controller) newMember(parent context.Context, cs *informerSet, agreed func()) (*member, error) {
	le := c.settings.LeaderElection
	t := tenure.New(parent, le.RenewDeadline, c.forceStop)
	m, err := sharding.New(sharding.Config{
		Identity:  le.Identity,
		Name:      c.settings.Name,
		LeaseName: shardLeaseName(c.settings),
		Namespace: le.Namespace,
		Durations: sharding.Durations{LeaseDuration: le.LeaseDuration, RenewDeadline: le.RenewDeadline, RetryPeriod: le.RetryPeriod},
		Client:    c.clients.kube,
		Queue:     cs.queue,
		Objects:   cs.resource,
		AddHandler: func(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) error {
			_, err := c.addHandler(inf, h)
			return err
		},
		Tenure:         t,
		Agreed:         agreed,
		ErrOtherHolder: errOtherHolder,
		Meter:          c.tel.Meter(),
		Attrs:          ktel.ControllerAttr(c.settings.Name),
		Log:            c.tel.Log(),
	})
	if err != nil {
		return nil, err
	}
	return &member{Member: m, Tenure: t}, nil
}
