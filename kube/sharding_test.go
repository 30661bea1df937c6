package kube

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/z5labs/humus/kube/internal/sharding"
	"github.com/z5labs/humus/kube/internal/tenure"
)

func TestCheckShardingNamesEveryMistake(t *testing.T) {
	s := testSettings()
	s.Name = strings.Repeat("w", 70)
	s.LeaderElection.Identity = "Pod_1"
	require.NoError(t, CheckSharding(s), "Sharding off checks nothing")

	s.Sharding.Enabled = true
	err := CheckSharding(s)
	require.ErrorContains(t, err, `"`+s.Name+`-Pod_1" is not a DNS-1123 subdomain`)
	require.ErrorContains(t, err, "is not a label value")
	require.ErrorContains(t, s.check(), "Settings.Sharding on")

	s = testSettings()
	s.Sharding.Enabled = true
	require.NoError(t, s.check())
}

func TestCheckShardingBlamesTheNameOrTheIdentityAsTheyAre(t *testing.T) {
	// With Name "UPPER" it said "use an identity of lower-case letters…"
	// of the identity "me", which was fine.
	s := testSettings()
	s.Sharding.Enabled = true
	s.Name = "UPPER"
	s.LeaderElection.Identity = "me"
	err := CheckSharding(s)
	require.ErrorContains(t, err, `"UPPER-me" is not a DNS-1123 subdomain`)
	require.ErrorContains(t, err, "make Settings.Name a DNS-1123 subdomain")
	require.NotContains(t, err.Error(), "use an identity")

	s.Name = "widgets"
	s.LeaderElection.Identity = "Pod_1"
	err = CheckSharding(s)
	require.ErrorContains(t, err, "use an identity of lower-case letters")
	require.NotContains(t, err.Error(), "make Settings.Name")
}

// shardRun records, for each key, which member is reconciling it now, and
// every reconcile's member, start and end, by synctest's clock.
type shardRun struct {
	mu      sync.Mutex
	busy    map[string]string
	overlap []string
	log     []shardReconcile
}

type shardReconcile struct {
	key, member string
	start, end  time.Time
}

func (r *shardRun) reconciler(member string) ReconcilerFunc[widgetSpec, widgetStatus] {
	return func(ctx context.Context, w widget) (Result[widgetStatus], error) {
		key := w.Namespace + "/" + w.Name
		r.mu.Lock()
		if other := r.busy[key]; other != "" {
			r.overlap = append(r.overlap, fmt.Sprintf("%s reconciled by %s while %s was at %v", key, member, other, time.Now()))
		}
		r.busy[key] = member
		start := time.Now()
		r.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
		r.mu.Lock()
		r.busy[key] = ""
		r.log = append(r.log, shardReconcile{key: key, member: member, start: start, end: time.Now()})
		r.mu.Unlock()
		return Result[widgetStatus]{After: time.Second}, nil
	}
}

// since returns the reconciles that started at or after t.
func (r *shardRun) since(t time.Time) []shardReconcile {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []shardReconcile
	for _, rec := range r.log {
		if !rec.start.Before(t) {
			out = append(out, rec)
		}
	}
	return out
}

// firstBy returns when each key was first reconciled at or after t by a
// member other than not.
func (r *shardRun) firstBy(t time.Time, not string) map[string]time.Time {
	out := map[string]time.Time{}
	for _, rec := range r.since(t) {
		if _, ok := out[rec.key]; !ok && rec.member != not {
			out[rec.key] = rec.start
		}
	}
	return out
}

func (r *shardRun) overlaps() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.overlap...)
}

// delayedWatches gives a member its own fake clientset, on f's tracker,
// whose Lease watches deliver every event delay late: a member slow to
// notice.
func delayedWatches(f *fakeCluster, delay time.Duration) *kubefake.Clientset {
	slow := kubefake.NewClientset()
	slow.ReactionChain = f.kube.ReactionChain
	slow.WatchReactionChain = f.kube.WatchReactionChain
	tracker := f.kube.Tracker()
	slow.PrependWatchReactor("leases", func(action clienttesting.Action) (bool, watch.Interface, error) {
		w, err := tracker.Watch(action.GetResource(), action.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		return true, newDelayedWatch(w, delay), nil
	})
	return slow
}

type delayedWatch struct {
	src  watch.Interface
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

func newDelayedWatch(src watch.Interface, delay time.Duration) *delayedWatch {
	d := &delayedWatch{src: src, out: make(chan watch.Event), stop: make(chan struct{})}
	type timed struct {
		ev watch.Event
		at time.Time
	}
	buf := make(chan timed, 1000)
	go func() {
		defer close(buf)
		for ev := range src.ResultChan() {
			select {
			case buf <- timed{ev, time.Now().Add(delay)}:
			case <-d.stop:
				return
			}
		}
	}()
	go func() {
		defer close(d.out)
		for t := range buf {
			select {
			case <-time.After(time.Until(t.at)):
			case <-d.stop:
				return
			}
			select {
			case d.out <- t.ev:
			case <-d.stop:
				return
			}
		}
	}()
	return d
}

func (d *delayedWatch) ResultChan() <-chan watch.Event { return d.out }
func (d *delayedWatch) Stop() {
	d.once.Do(func() {
		close(d.stop)
		d.src.Stop()
	})
}

// TestNoKeyIsReconciledByTwoMembersAtOnce runs members through joins, a
// graceful leave, a member that stops renewing and a member slow to
// notice, all reconciling 40 Widgets again every second, each reconcile
// taking 100ms, and checks that no Widget is ever reconciled by two
// members at once, and that the keys settle on their owners.
func TestNoKeyIsReconciledByTwoMembersAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 40
		var objs []runtime.Object
		var keys []string
		for i := range n {
			objs = append(objs, newWidget(fmt.Sprintf("w%d", i), int64(i)))
			keys = append(keys, fmt.Sprintf("%s/w%d", testNamespace, i))
		}
		f := newFakeCluster(t, objs...)
		// Once stall is set, m3's Lease updates fail. The reactor is in
		// place from the start: the fake's reactor chain is read without
		// its lock.
		var stall atomic.Bool
		f.kube.PrependReactor("update", "leases", func(action clienttesting.Action) (bool, runtime.Object, error) {
			if l, ok := action.(clienttesting.UpdateAction).GetObject().(*coordinationv1.Lease); ok && stall.Load() && l.Name == controllerName+"-m3" {
				return true, nil, errors.New("the API server is unreachable")
			}
			return false, nil, nil
		})
		run := &shardRun{busy: map[string]string{}}
		le := testSettings().LeaderElection
		start := func(id string, cl clients) *serving {
			s := testSettings()
			s.Sharding.Enabled = true
			s.LeaderElection.Identity = id
			// Enough workers that no queue backs up: a key moved is
			// reconciled as soon as its new owner takes it.
			s.Workers = 4
			c, err := newController(&humus.Setup{}, cl, nil, s, widgets(), run.reconciler(id))
			require.NoError(t, err)
			return serve(t, c)
		}
		// owners checks that every key was reconciled, from after on, by
		// its owner among ids only.
		owners := func(after time.Time, ids ...string) {
			t.Helper()
			v := newView(ids)
			seen := map[string]bool{}
			for _, rec := range run.since(after) {
				require.Equal(t, v.owner(rec.key), rec.member, "%s at %v", rec.key, rec.start)
				seen[rec.key] = true
			}
			require.Len(t, seen, n, "every key is reconciled")
		}

		// m1 is slow to notice the others, by lag: every view change
		// waits for its acknowledgement, and it sees the others' a lag
		// late, so every move takes up to two lags longer.
		const lag = time.Second
		slow := f.clients()
		slow.kube = delayedWatches(f, lag)
		m1 := start("m1", slow)
		// Every 50ms a Widget changes, which queues its key on every
		// member, owner or not.
		churn := make(chan struct{})
		churned := make(chan struct{})
		go func() {
			defer close(churned)
			for i := 0; ; i++ {
				select {
				case <-churn:
					return
				case <-time.After(50 * time.Millisecond):
				}
				u := f.get(t, widgetGVR, testNamespace, fmt.Sprintf("w%d", i%n)).DeepCopy()
				u.Object["spec"] = map[string]any{"size": int64(i)}
				u.SetResourceVersion(f.nextResourceVersion())
				if err := f.dynamic.Tracker().Update(widgetGVR, u, testNamespace); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		synctest.Wait()
		time.Sleep(3 * time.Second)
		// Each starts once the others' informers watch: client-go's fake
		// loses the events between an informer's list and its watch,
		// which the API server's watch never does.
		m2 := start("m2", f.clients())
		synctest.Wait()
		m3 := start("m3", f.clients())
		time.Sleep(10 * time.Second)
		settled := time.Now()
		time.Sleep(5 * time.Second)
		owners(settled, "m1", "m2", "m3")

		// A fourth joins: m1, slow, keeps reconciling the keys m4 takes
		// from it until it notices m4, a lag late.
		m4 := start("m4", f.clients())
		time.Sleep(15 * time.Second)
		settled = time.Now()
		time.Sleep(5 * time.Second)
		owners(settled, "m1", "m2", "m3", "m4")

		// m2 leaves gracefully: its keys move within 2 RetryPeriods,
		// even with the slow member's lags.
		left := time.Now()
		require.NoError(t, m2.stop(t))
		stopped := time.Now()
		_, err := f.kube.CoordinationV1().Leases(leaseNamespace).Get(context.Background(), controllerName+"-m2", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "the Lease is deleted: %v", err)
		time.Sleep(10 * time.Second)
		moved := run.firstBy(stopped, "m2")
		for _, k := range keys {
			if newView([]string{"m1", "m2", "m3", "m4"}).owner(k) == "m2" {
				require.Contains(t, moved, k)
				require.LessOrEqual(t, moved[k].Sub(left), 2*le.RetryPeriod, "%s moved", k)
			}
		}
		settled = time.Now()
		time.Sleep(5 * time.Second)
		owners(settled, "m1", "m3", "m4")

		// m3 stops renewing: it stops working by its RenewDeadline, and
		// Serve returns ErrLostLeadership; the others take its keys once
		// its Lease has expired.
		stalled := time.Now()
		stall.Store(true)
		<-m3.done
		require.ErrorIs(t, m3.err, ErrLostLeadership)
		require.LessOrEqual(t, time.Since(stalled), le.RenewDeadline+le.RetryPeriod)
		time.Sleep(30 * time.Second)
		for _, rec := range run.since(stalled) {
			if rec.member == "m3" {
				require.Less(t, rec.start.Sub(stalled), le.RenewDeadline+le.RetryPeriod, "m3 stops by its deadline")
			}
		}
		moved = run.firstBy(stalled, "m3")
		var latest time.Duration
		for _, k := range keys {
			if newView([]string{"m1", "m3", "m4"}).owner(k) == "m3" {
				require.Contains(t, moved, k)
				latest = max(latest, moved[k].Sub(stalled))
			}
		}
		require.LessOrEqual(t, latest, le.LeaseDuration+le.RetryPeriod+2*lag, "m3's keys move once its Lease has expired (and the slow member has seen it)")
		t.Logf("m3's keys moved %v after it stopped renewing", latest)
		settled = time.Now()
		time.Sleep(5 * time.Second)
		owners(settled, "m1", "m4")

		close(churn)
		<-churned
		require.Empty(t, run.overlaps())
		require.NoError(t, m1.stop(t))
		require.NoError(t, m4.stop(t))
	})
}

// TestACrashedMembersLeaseIsDeletedOnceExpired leaves the Lease of a member
// that crashed (never renewed again, never released) and shows that the
// live member deletes it once confirmed expired, so that a member joining
// later takes its keys within 2 RetryPeriods instead of waiting
// LeaseDuration for the dead one (a breaker saw every join stall 10s for
// each SIGKILLed member's Lease left behind).
func TestACrashedMembersLeaseIsDeletedOnceExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 20
		var objs []runtime.Object
		for i := range n {
			objs = append(objs, newWidget(fmt.Sprintf("w%d", i), int64(i)))
		}
		f := newFakeCluster(t, objs...)
		le := testSettings().LeaderElection
		dead := controllerName + "-dead"
		renewed := metav1.NewMicroTime(time.Now())
		_, err := f.kube.CoordinationV1().Leases(leaseNamespace).Create(context.Background(), &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: dead, Namespace: leaseNamespace,
				Labels:      map[string]string{sharding.Label: controllerName},
				Annotations: map[string]string{sharding.IdentityAnnotation: "dead", sharding.ViewAnnotation: "dead"},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptrTo("dead"),
				LeaseDurationSeconds: ptrTo(int32(le.LeaseDuration / time.Second)),
				RenewTime:            &renewed,
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)

		run := &shardRun{busy: map[string]string{}}
		start := func(id string) *serving {
			s := testSettings()
			s.Sharding.Enabled = true
			s.LeaderElection.Identity = id
			c, err := newController(&humus.Setup{}, f.clients(), nil, s, widgets(), run.reconciler(id))
			require.NoError(t, err)
			return serve(t, c)
		}
		m1 := start("m1")
		time.Sleep(le.LeaseDuration + 3*le.RetryPeriod)
		synctest.Wait()
		_, err = f.kube.CoordinationV1().Leases(leaseNamespace).Get(context.Background(), dead, metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "the crashed member's Lease is deleted once expired: %v", err)

		joined := time.Now()
		m2 := start("m2")
		time.Sleep(2 * le.RetryPeriod)
		synctest.Wait()
		first := run.firstBy(joined, "m1")
		require.NotEmpty(t, first, "m2 reconciles its keys within 2 RetryPeriods of joining")
		require.Empty(t, run.overlaps())
		require.NoError(t, m2.stop(t))
		require.NoError(t, m1.stop(t))
	})
}

// pauser cuts a member off from its Lease and the others' while paused,
// as a process stopped (SIGSTOP) and continued sees them, or a member
// whose Lease traffic stalls: it stops renewing and stops noticing.
type pauser struct {
	mu      sync.Mutex
	paused  bool
	changed chan struct{} // closed, and replaced, on every change
}

func newPauser() *pauser { return &pauser{changed: make(chan struct{})} }

func (p *pauser) set(paused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused != paused {
		p.paused = paused
		close(p.changed)
		p.changed = make(chan struct{})
	}
}

func (p *pauser) state() (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused, p.changed
}

// wait returns once p is not paused.
func (p *pauser) wait() {
	for {
		paused, changed := p.state()
		if !paused {
			return
		}
		<-changed
	}
}

// pausedLeases gives a member its own fake clientset, on f's tracker,
// that p cuts off from the Leases: while p is paused, every Lease request
// hangs until p resumes (then goes through), and its Lease watches hold
// every event until p resumes (then deliver them in order).
func pausedLeases(f *fakeCluster, p *pauser) *kubefake.Clientset {
	c := kubefake.NewClientset()
	c.ReactionChain = f.kube.ReactionChain
	c.WatchReactionChain = f.kube.WatchReactionChain
	tracker := f.kube.Tracker()
	c.PrependReactor("*", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		p.wait()
		return false, nil, nil // on to f's reactors
	})
	c.PrependWatchReactor("leases", func(action clienttesting.Action) (bool, watch.Interface, error) {
		w, err := tracker.Watch(action.GetResource(), action.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		return true, newPausedWatch(w, p), nil
	})
	return c
}

// pausedWatch forwards src's events while its pauser is not paused, and
// holds them (in a queue of its own: the fake tracker's watch panics once
// 100 are unread) while it is.
type pausedWatch struct {
	src  watch.Interface
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

func newPausedWatch(src watch.Interface, p *pauser) *pausedWatch {
	w := &pausedWatch{src: src, out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(w.out)
		in := src.ResultChan()
		var queue []watch.Event
		for {
			paused, changed := p.state()
			if in == nil && len(queue) == 0 {
				return
			}
			var send chan watch.Event
			var next watch.Event
			if !paused && len(queue) > 0 {
				send, next = w.out, queue[0]
			}
			select {
			case ev, ok := <-in:
				if !ok {
					in = nil
					continue
				}
				queue = append(queue, ev)
			case send <- next:
				queue = queue[1:]
			case <-changed:
			case <-w.stop:
				return
			}
		}
	}()
	return w
}

func (w *pausedWatch) ResultChan() <-chan watch.Event { return w.out }
func (w *pausedWatch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.src.Stop()
	})
}

// TestAMemberPausedDuringAViewChangeNeverSharesAKey pauses a member (it
// stops renewing and stops noticing) as a view changes, with 40 Widgets
// reconciled again every second and one changed every 50ms. Paused for
// less than RenewDeadline while a fourth member joins, it holds the
// change: it keeps reconciling its keys under the old view, and the new
// member takes none until it resumes and acknowledges. Paused past
// LeaseDuration while a member leaves, it stops working by its own
// deadline, RenewDeadline after its last renewal, and the others take its
// keys only once its Lease has expired; resumed, its Serve returns
// ErrLostLeadership. No Widget is ever reconciled by two members at once.
func TestAMemberPausedDuringAViewChangeNeverSharesAKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 40
		var objs []runtime.Object
		var keys []string
		for i := range n {
			objs = append(objs, newWidget(fmt.Sprintf("w%d", i), int64(i)))
			keys = append(keys, fmt.Sprintf("%s/w%d", testNamespace, i))
		}
		f := newFakeCluster(t, objs...)
		run := &shardRun{busy: map[string]string{}}
		le := testSettings().LeaderElection
		start := func(id string, cl clients) *serving {
			s := testSettings()
			s.Sharding.Enabled = true
			s.LeaderElection.Identity = id
			s.Workers = 4
			c, err := newController(&humus.Setup{}, cl, nil, s, widgets(), run.reconciler(id))
			require.NoError(t, err)
			return serve(t, c)
		}
		owners := func(after time.Time, ids ...string) {
			t.Helper()
			v := newView(ids)
			seen := map[string]bool{}
			for _, rec := range run.since(after) {
				require.Equal(t, v.owner(rec.key), rec.member, "%s at %v", rec.key, rec.start)
				seen[rec.key] = true
			}
			require.Len(t, seen, n, "every key is reconciled")
		}
		by := func(member string, from, to time.Time) int {
			k := 0
			for _, rec := range run.since(from) {
				if rec.member == member && rec.start.Before(to) {
					k++
				}
			}
			return k
		}

		p := newPauser()
		t.Cleanup(func() { p.set(false) }) // before the members stop
		paused := f.clients()
		paused.kube = pausedLeases(f, p)
		m1 := start("m1", f.clients())
		churn := make(chan struct{})
		churned := make(chan struct{})
		go func() {
			defer close(churned)
			for i := 0; ; i++ {
				select {
				case <-churn:
					return
				case <-time.After(50 * time.Millisecond):
				}
				u := f.get(t, widgetGVR, testNamespace, fmt.Sprintf("w%d", i%n)).DeepCopy()
				u.Object["spec"] = map[string]any{"size": int64(i)}
				u.SetResourceVersion(f.nextResourceVersion())
				if err := f.dynamic.Tracker().Update(widgetGVR, u, testNamespace); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		synctest.Wait()
		time.Sleep(3 * time.Second)
		// One at a time: client-go's fake loses the events between an
		// informer's list and its watch.
		m2 := start("m2", paused)
		synctest.Wait()
		m3 := start("m3", f.clients())
		time.Sleep(10 * time.Second)
		settled := time.Now()
		time.Sleep(5 * time.Second)
		owners(settled, "m1", "m2", "m3")

		// m2 pauses as m4 joins, for half of RenewDeadline: no member
		// takes a key under the new view until m2 has acknowledged it,
		// and m2 goes on with its keys under the old one meanwhile.
		p.set(true)
		pausedAt := time.Now()
		m4 := start("m4", f.clients())
		time.Sleep(le.RenewDeadline / 2)
		p.set(false)
		resumed := time.Now()
		require.Positive(t, by("m2", pausedAt, resumed), "m2 reconciles its keys while paused")
		require.Zero(t, by("m4", pausedAt, resumed), "m4 takes no key before m2 acknowledges the view it joined")
		time.Sleep(3 * le.RetryPeriod)
		settled = time.Now()
		time.Sleep(5 * time.Second)
		owners(settled, "m1", "m2", "m3", "m4")
		select {
		case <-m2.done:
			t.Fatalf("m2, paused for less than RenewDeadline, stopped: %v", m2.err)
		default:
		}

		// m2 pauses as m4 leaves, past LeaseDuration: it works until its
		// deadline, and its keys move only once its Lease has expired.
		p.set(true)
		pausedAt = time.Now()
		require.NoError(t, m4.stop(t))
		time.Sleep(le.LeaseDuration + 2*le.RetryPeriod)
		p.set(false)
		<-m2.done
		require.ErrorIs(t, m2.err, ErrLostLeadership)
		for _, rec := range run.since(pausedAt) {
			if rec.member == "m2" {
				require.Less(t, rec.start.Sub(pausedAt), le.RenewDeadline, "m2 stops by its deadline, RenewDeadline after its last renewal")
			}
		}
		moved := run.firstBy(pausedAt, "m2")
		var earliest, latest time.Duration
		for _, k := range keys {
			if newView([]string{"m1", "m2", "m3"}).owner(k) != "m2" {
				continue
			}
			require.Contains(t, moved, k)
			d := moved[k].Sub(pausedAt)
			if earliest == 0 || d < earliest {
				earliest = d
			}
			latest = max(latest, d)
		}
		t.Logf("m2's keys moved %v to %v after it paused", earliest, latest)
		require.Greater(t, earliest, le.RenewDeadline, "m2's keys move only after its deadline")
		require.LessOrEqual(t, latest, le.LeaseDuration+le.RetryPeriod, "m2's keys move once its Lease has expired")
		settled = time.Now()
		time.Sleep(5 * time.Second)
		owners(settled, "m1", "m3")

		close(churn)
		<-churned
		require.Empty(t, run.overlaps())
		require.NoError(t, m1.stop(t))
		require.NoError(t, m3.stop(t))
	})
}

// leaseVersions gives f's Leases the API server's optimistic concurrency,
// which client-go's fake tracker lacks: every update gets a new
// resourceVersion, and one that names another than the stored one fails
// with a conflict.
func leaseVersions(f *fakeCluster) {
	var mu sync.Mutex
	next := 0
	gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
	tracker := f.kube.Tracker()
	f.kube.PrependReactor("update", "leases", func(action clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		l, ok := action.(clienttesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if !ok {
			return false, nil, nil
		}
		cur, err := tracker.Get(gvr, l.Namespace, l.Name)
		if err != nil {
			return false, nil, nil // the tracker's NotFound
		}
		if rv := cur.(*coordinationv1.Lease).ResourceVersion; l.ResourceVersion != rv {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), l.Name, fmt.Errorf("resourceVersion %q, stored %q", l.ResourceVersion, rv))
		}
		next++
		l = l.DeepCopy()
		l.ResourceVersion = fmt.Sprintf("lease-%d", next)
		return true, l, tracker.Update(gvr, l, l.Namespace)
	})
}

// TestTwoProcessesWithOneMemberIdentityAreToldApart runs a second process
// with a member's identity: it sees the member's Lease renewed as it
// waits to take it over, and its Serve fails, naming the Lease and the
// identity, having reconciled nothing. Then the Lease is taken over by
// another process of that identity (as one would once it had waited out
// renewals that stalled): the member's next renewal conflicts, it sees
// another process's instance on its Lease, and it stops with
// ErrLostLeadership, leaving the Lease as the other wrote it.
func TestTwoProcessesWithOneMemberIdentityAreToldApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var objs []runtime.Object
		for i := range 10 {
			objs = append(objs, newWidget(fmt.Sprintf("w%d", i), int64(i)))
		}
		f := newFakeCluster(t, objs...)
		leaseVersions(f)
		run := &shardRun{busy: map[string]string{}}
		le := testSettings().LeaderElection
		start := func(as string) *serving {
			s := testSettings()
			s.Sharding.Enabled = true
			s.LeaderElection.Identity = "m1"
			c, err := newController(&humus.Setup{}, f.clients(), nil, s, widgets(), run.reconciler(as))
			require.NoError(t, err)
			return serve(t, c)
		}
		by := func(process string) int {
			k := 0
			for _, rec := range run.since(time.Time{}) {
				if rec.member == process {
					k++
				}
			}
			return k
		}
		first := start("first")
		synctest.Wait()
		time.Sleep(3 * time.Second)
		require.Positive(t, by("first"), "the first process works")

		began := time.Now()
		second := start("second")
		select {
		case <-second.done:
		case <-time.After(3 * le.RetryPeriod):
			t.Fatal("the second process with m1's identity is still waiting for the first's Lease")
		}
		t.Logf("the second process failed %v after it started: %v", time.Since(began), second.err)
		require.ErrorContains(t, second.err, `Lease `+leaseNamespace+`/`+controllerName+`-m1 is held by "m1" and was renewed`)
		require.ErrorContains(t, second.err, "another replica runs with the same LeaderElection.Identity")
		require.Zero(t, by("second"), "the second process reconciles nothing")
		select {
		case <-first.done:
			t.Fatalf("the first process stopped: %v", first.err)
		default:
		}

		leases := f.kube.CoordinationV1().Leases(leaseNamespace)
		l, err := leases.Get(context.Background(), controllerName+"-m1", metav1.GetOptions{})
		require.NoError(t, err)
		require.NotEmpty(t, l.Annotations[sharding.InstanceAnnotation])
		l.Annotations[sharding.InstanceAnnotation] = "another"
		now := metav1.NewMicroTime(time.Now())
		l.Spec.RenewTime = &now
		_, err = leases.Update(context.Background(), l, metav1.UpdateOptions{})
		require.NoError(t, err)
		took := time.Now()
		select {
		case <-first.done:
		case <-time.After(2 * le.RetryPeriod):
			t.Fatal("the first process kept working on a Lease another process of its identity took")
		}
		t.Logf("the first process stopped %v after its Lease was taken", time.Since(took))
		require.ErrorIs(t, first.err, ErrLostLeadership)
		l, err = leases.Get(context.Background(), controllerName+"-m1", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, "another", l.Annotations[sharding.InstanceAnnotation], "the Lease is left as the other process wrote it")
		require.Empty(t, run.overlaps())
	})
}

// TestASlowReconcileOfAKeyThatMovesStopsNoMember hangs m1's reconcile of a
// key that moves to m3 as m3 joins, ignoring its context, with 30 Widgets
// reconciled again every second. m1 doesn't acknowledge the view with m3
// while that reconcile runs, and every member used to stop until it
// returned: here m1 and m2 go on with the keys that stay theirs, and once
// the hang has held the view change for LeaseDuration its context is
// cancelled (sharding.ErrKeyMoved: no apply of it is sent), m1 acknowledges, and
// m3 takes its keys.
func TestASlowReconcileOfAKeyThatMovesStopsNoMember(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 30
		var objs []runtime.Object
		var keys []string
		for i := range n {
			objs = append(objs, newWidget(fmt.Sprintf("w%d", i), int64(i)))
			keys = append(keys, fmt.Sprintf("%s/w%d", testNamespace, i))
		}
		two, three := newView([]string{"m1", "m2"}), newView([]string{"m1", "m2", "m3"})
		var hung string // a key of m1's that moves to m3
		for _, k := range keys {
			if two.owner(k) == "m1" && three.owner(k) == "m3" {
				hung = k
				break
			}
		}
		require.NotEmpty(t, hung)
		f := newFakeCluster(t, objs...)
		run := &shardRun{busy: map[string]string{}}
		le := testSettings().LeaderElection

		// Once armed, m1's next reconcile of hung blocks until release,
		// whatever its context says.
		var armed atomic.Bool
		hanging, release := make(chan struct{}), make(chan struct{})
		var hungCtx context.Context
		var cancelledAt time.Time
		var mu sync.Mutex
		start := func(id string) *serving {
			s := testSettings()
			s.Sharding.Enabled = true
			s.LeaderElection.Identity = id
			s.Workers = 4
			inner := run.reconciler(id)
			rec := ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				if id == "m1" && w.Namespace+"/"+w.Name == hung && armed.CompareAndSwap(true, false) {
					mu.Lock()
					hungCtx = ctx
					mu.Unlock()
					context.AfterFunc(ctx, func() {
						mu.Lock()
						defer mu.Unlock()
						cancelledAt = time.Now()
					})
					close(hanging)
					<-release
					return Result[widgetStatus]{Status: &widgetStatus{Message: "from the hung reconcile"}}, nil
				}
				return inner(ctx, w)
			})
			c, err := newController(&humus.Setup{}, f.clients(), nil, s, widgets(), rec)
			require.NoError(t, err)
			return serve(t, c)
		}
		m1 := start("m1")
		synctest.Wait()
		m2 := start("m2")
		time.Sleep(10 * time.Second)
		armed.Store(true)
		<-hanging
		joined := time.Now()
		m3 := start("m3")
		// Cleanups run last first: the hang ends before the members stop.
		t.Cleanup(func() {
			select {
			case <-release:
			default:
				close(release)
			}
		})

		// For LeaseDuration the hang holds m1's acknowledgement: m1 and m2
		// go on with the keys that stay theirs, and m3 takes none.
		time.Sleep(le.LeaseDuration - time.Second)
		during := run.since(joined.Add(le.RetryPeriod))
		stayed := map[string]int{}
		for _, rec := range during {
			require.NotEqual(t, "m3", rec.member, "m3 took %s before m1 acknowledged", rec.key)
			require.Equal(t, two.owner(rec.key), three.owner(rec.key), "%s moves, and %s reconciled it during the change", rec.key, rec.member)
			stayed[rec.member]++
		}
		t.Logf("reconciles during the view change: %v", stayed)
		require.Positive(t, stayed["m1"], "m1 reconciles its keys that stay")
		require.Positive(t, stayed["m2"], "m2 reconciles its keys that stay")

		// Past the bound, the hung reconcile is cancelled and m3 takes its
		// keys, hung among them.
		time.Sleep(3 * le.RetryPeriod)
		mu.Lock()
		cancelled, ctx := cancelledAt, hungCtx
		mu.Unlock()
		require.False(t, cancelled.IsZero(), "the hung reconcile's context is cancelled")
		require.ErrorIs(t, context.Cause(ctx), sharding.ErrKeyMoved)
		require.Error(t, ctx.Err(), "the hung reconcile's applies are sent") // applyStatus checks ctx.Err()
		first := run.firstBy(joined, "")
		require.Contains(t, first, hung)
		require.False(t, first[hung].Before(cancelled), "m3 reconciles %s only once m1's reconcile is cancelled", hung)
		t.Logf("the hung reconcile was cancelled %v after m3 joined", cancelled.Sub(joined))
		settled := time.Now()
		time.Sleep(5 * time.Second)
		seen := map[string]bool{}
		for _, rec := range run.since(settled) {
			require.Equal(t, three.owner(rec.key), rec.member, "%s at %v", rec.key, rec.start)
			seen[rec.key] = true
		}
		require.Len(t, seen, n, "every key is reconciled, the hung one by m3")

		// The hung reconcile returns: its status apply is refused (its
		// context is cancelled), and that is no failure of the object's,
		// since the key is m3's now: no Warning Event.
		close(release)
		synctest.Wait()
		require.Empty(t, f.events(t, testNamespace), "a reconcile cancelled because its key moved is not recorded as a failure")
		require.Empty(t, run.overlaps())
		require.NoError(t, m3.stop(t))
		require.NoError(t, m2.stop(t))
		require.NoError(t, m1.stop(t))
	})
}

// testView is a view of the members' identities, whose owner of a key
// is internal/sharding's.
type testView []string

func newView(ids []string) testView { return ids }

func (v testView) owner(key string) string { return sharding.Owner(key, v) }

// TestAMembersTenureIsTheOneItsLeaseRenews: a member's right to work,
// which its workers ask (Valid) and Serve asks why it was lost
// (LostCause), is the tenure its Lease's writes renew in
// internal/sharding, as when the two were one member: begun by the
// Lease's creation, and lost past RenewDeadline without a renewal.
func TestAMembersTenureIsTheOneItsLeaseRenews(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t)
		s := testSettings()
		s.Sharding.Enabled = true
		c := newWidgetController(t, f, humus.Telemetry{}, s, noopReconciler())
		_, work, err := c.begin(t.Context())
		require.NoError(t, err)
		objects := cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{})
		m, err := c.newMember(work, &informerSet{queue: c.newQueue(), resource: objects}, nil)
		require.NoError(t, err)
		require.ErrorIs(t, m.Valid(), tenure.ErrNotLeading, "before it joins")

		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		require.NoError(t, m.Join(ctx, func(run func(context.Context)) { go run(ctx) }))
		require.NoError(t, m.Valid(), "the Lease's creation began the tenure the member works under")
		require.NoError(t, m.LostCause())

		time.Sleep(s.LeaderElection.RenewDeadline + time.Second) // not renewed: no Run
		require.ErrorIs(t, m.Valid(), tenure.ErrLeaseExpired)
		require.ErrorIs(t, m.LostCause(), tenure.ErrLeaseExpired)
		synctest.Wait()
		require.Error(t, work.Err(), "the loss stops the reconciles in flight")
		cancel()
		synctest.Wait()
	})
}
