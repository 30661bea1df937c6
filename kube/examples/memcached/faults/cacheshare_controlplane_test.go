//go:build controlplane

package faults_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/z5labs/humus/controlplane/apptest"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/examples/appconfig"
	"github.com/z5labs/humus/kube/examples/memcached/app"
)

// shardLabel returns the label that carries a Memcached's member, and its
// Deployment's, with Sharding.CacheShare on: its value is the identity of
// the replica whose key it is (a Deployment's: its Memcached's key).
func shardLabel() string { return kube.ShardLabel(app.FieldManager) }

// The metrics a member's cache share is read from, by their Prometheus
// names: the objects each informer caches (humus.kube.controller.cache.objects,
// its informer in humus.kube.informer as a GVR string such as
// "apps/v1, Resource=deployments"), and the keys the member owns under
// its view (humus.kube.controller.shard.keys).
const (
	metricCacheObjects = "humus_kube_controller_cache_objects"
	labelInformer      = "humus_kube_informer"
	metricShardKeys    = "humus_kube_controller_shard_keys"
)

// shareInformers returns the informers of a member's share, by the end of
// their humus.kube.informer: the Memcacheds and the Deployments they own.
func shareInformers() []string { return []string{"Resource=memcacheds", "Resource=deployments"} }

// cacheShared returns the shard members' settings with each caching only
// its share (SHARDING_CACHE=share), and serving its metrics: sharded's
// timings and workers.
func cacheShared() settings {
	s := sharded
	s.CacheShare = true
	s.Metrics = true
	return s
}

// TestShardedReplicasCacheOnlyTheirShareThroughAJoinALeaveAKillAndAPause is
// the cache-share issue's proof against the whole App, with children:
// three replicas of the Memcached App run with SHARDING=true and
// SHARDING_CACHE=share over 300 Memcacheds, each of which has a
// Deployment. At every step:
//
//   - every Memcached and its Deployment carry the shard label naming the
//     one replica that reconciled it since the members agreed (its owner);
//   - each replica's caches of Memcacheds and of Deployments hold exactly
//     its share (the cache gauge, summed over its informers of each
//     resource: its strays' metadata informers hold none at steady state),
//     and its shard.keys gauge is its share too;
//   - a change the test makes to a Memcached while the view changes is
//     reconciled by the Memcached's new owner after it was made.
//
// The steps, while the Memcacheds are resized over and over: a fourth
// replica joins and takes about a quarter, from all three, relabelled to
// it; one gets SIGTERM, exits 0, and only its Memcacheds move to the
// others; one gets SIGKILL, and only its Memcacheds move once its Lease
// has expired; and one is stopped (SIGSTOP) until the last takes its
// share, past its RenewDeadline, then continued (SIGCONT): it starts no
// reconcile and sends no write (as the replica recorded and as a witness
// proxy in front of it saw), exits 1 with a lost Lease, and leaves the
// labels as the last replica set them. No Memcached is reconciled by two
// replicas at once throughout, and every list of Memcacheds or
// Deployments a replica sent selected on the shard label. It has a
// control plane of its own, so as not to lengthen TestFaults.
//
// The Memcacheds' names and the namespace are fixed, so the shares and
// the keys that move are the same on every run.
func TestShardedReplicasCacheOnlyTheirShareThroughAJoinALeaveAKillAndAPause(t *testing.T) {
	if controlplanetest.External() {
		t.Skip("the test's namespace has a fixed name, so that the shares are the same on every run")
	}
	began := time.Now()
	e := apptest.NewEnv(t, controlplanetest.Start(t))
	e.InstallCRD(t, crdFile, crdName)
	const ns, n = "cacheshare", 300
	_, err := e.Kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Logf("the control plane was up in %v", time.Since(began).Round(time.Millisecond))

	// replica-0 and replica-3 reach the API server through witnesses:
	// replica-3 is the one paused, replica-0 the one that takes its share.
	w0, w3 := newWitness(t, e), newWitness(t, e)
	s0, s3 := cacheShared(), cacheShared()
	s0.Kubeconfig, s3.Kubeconfig = w0.kubeconfig, w3.kubeconfig

	reps := map[string]*replica{}
	reps["replica-0"] = startReplica(t, e, ns, "replica-0", s0)
	for _, id := range []string{"replica-1", "replica-2"} {
		reps[id] = startReplica(t, e, ns, id, cacheShared())
	}
	joined := waitView(t, e, ns, "replica-0", "replica-1", "replica-2")
	names := createMemcacheds(t, e, ns, n, 1)
	waitConverged(t, e, ns, names)
	t.Logf("three replicas joined %v after starting, and converged %d Memcacheds and their Deployments %v after that",
		joined.Sub(began).Round(time.Millisecond), n, time.Since(joined).Round(time.Millisecond))

	// Every Memcached was made once all three had joined: each was
	// reconciled by one replica, its owner, which labelled it and its
	// Deployment, and caches those two of its own and no other.
	owners := ownersSince(t, reps, ns, names, joined)
	share := shares(owners)
	t.Logf("the three replicas' shares: %v", share)
	require.Len(t, share, 3)
	for id, got := range share {
		requireAbout(t, n, 3, got, id+"'s share of the Memcacheds")
	}
	waitLabelled(t, e, ns, owners, joined)
	waitCacheShares(t, reps, owners, "replica-0", "replica-1", "replica-2")

	// From here on the Memcacheds are resized, one after another, over
	// and over: each replica always has its own at work, so a handover
	// that overlapped would show, and some are changed as each view
	// changes.
	c := startResizer(t, e, ns, names)

	// A fourth joins: about a quarter move, all to it, relabelled, out of
	// the others' caches and into its.
	started := time.Now()
	reps["replica-3"] = startReplica(t, e, ns, "replica-3", s3)
	agreed := waitView(t, e, ns, "replica-0", "replica-1", "replica-2", "replica-3")
	before := owners
	owners = ownersSince(t, reps, ns, names, agreed)
	var moved []string
	for _, name := range names {
		if owners[name] != before[name] {
			moved = append(moved, name)
			require.Equal(t, "replica-3", owners[name], "%s moved from %s, not to the new replica", name, before[name])
		}
	}
	t.Logf("replica-3 started, joined %v later and took %d of %d", agreed.Sub(started).Round(time.Millisecond), len(moved), n)
	requireAbout(t, n, 4, len(moved), "the Memcacheds that move to the fourth")
	waitLabelled(t, e, ns, owners, agreed)
	waitCacheShares(t, reps, owners, "replica-0", "replica-1", "replica-2", "replica-3")
	requireChangesReconciled(t, reps, ns, owners, moved, c, started, agreed, true)

	// SIGTERM: replica-1 finishes its reconciles in flight and releases
	// its Lease; its Memcacheds move to the other three at once,
	// relabelled to them.
	termed := time.Now()
	require.NoError(t, reps["replica-1"].proc.Signal(syscall.SIGTERM))
	require.Equal(t, 0, reps["replica-1"].waitExit(t, 30*time.Second))
	handover, last := movedAfter(t, reps, ns, owners, "replica-1", termed)
	t.Logf("replica-1 exited 0; every replica that took its Memcacheds had begun %v after its SIGTERM (2 RetryPeriods: %v), and reconciled the last %v after",
		handover.Round(time.Millisecond), 2*cacheShared().RetryPeriod, last.Round(time.Millisecond))
	require.LessOrEqual(t, handover, 2*cacheShared().RetryPeriod, "the handover after a SIGTERM")
	agreed = waitView(t, e, ns, "replica-0", "replica-2", "replica-3")
	before = owners
	owners = requireOnlyMoved(t, ownersSince(t, reps, ns, names, agreed), owners, "replica-1")
	waitLabelled(t, e, ns, owners, termed)
	waitCacheShares(t, reps, owners, "replica-0", "replica-2", "replica-3")
	requireChangesReconciled(t, reps, ns, owners, ownedBy(before, "replica-1"), c, termed, agreed, false)

	// SIGKILL: replica-2 stops at once, its Lease left behind; the others
	// take its Memcacheds once they have seen its Lease unrenewed for
	// LeaseDuration, and label them, and their Deployments, their own.
	killed := time.Now()
	reps["replica-2"].kill()
	handover, last = movedAfter(t, reps, ns, owners, "replica-2", killed)
	bound := cacheShared().LeaseDuration + cacheShared().RetryPeriod
	t.Logf("every replica that took replica-2's Memcacheds had begun %v after its SIGKILL (LeaseDuration + RetryPeriod: %v), and reconciled the last %v after",
		handover.Round(time.Millisecond), bound, last.Round(time.Millisecond))
	// The margin is the sharding test's: see it.
	require.Less(t, handover, bound+3*time.Second, "the handover after a SIGKILL, within LeaseDuration + RetryPeriod and a margin of 3s")
	agreed = waitView(t, e, ns, "replica-0", "replica-3")
	before = owners
	owners = requireOnlyMoved(t, ownersSince(t, reps, ns, names, agreed), owners, "replica-2")
	waitLabelled(t, e, ns, owners, killed)
	waitCacheShares(t, reps, owners, "replica-0", "replica-3")
	requireChangesReconciled(t, reps, ns, owners, ownedBy(before, "replica-2"), c, killed, agreed, true)

	// SIGSTOP: replica-3 stops renewing; once its Lease has gone unrenewed
	// for LeaseDuration (past its RenewDeadline), replica-0 takes its
	// Memcacheds and relabels them. Continued, replica-3 does no work, has
	// lost its Lease, and exits 1.
	require.NoError(t, reps["replica-3"].proc.Pause())
	paused := time.Now()
	handover, last = movedAfter(t, reps, ns, owners, "replica-3", paused)
	agreed = waitView(t, e, ns, "replica-0")
	t.Logf("replica-0 had begun on paused replica-3's Memcacheds %v after its SIGSTOP, and reconciled the last %v after",
		handover.Round(time.Millisecond), last.Round(time.Millisecond))
	before = owners
	owners = requireOnlyMoved(t, ownersSince(t, reps, ns, names, agreed), owners, "replica-3")
	waitLabelled(t, e, ns, owners, paused)
	require.NoError(t, reps["replica-3"].proc.Continue())
	continued := time.Now()
	code := reps["replica-3"].waitExit(t, 30*time.Second)
	t.Logf("replica-3 was stopped for %v (RenewDeadline %v, LeaseDuration %v), and exited %d %v after SIGCONT",
		continued.Sub(paused).Round(time.Millisecond), cacheShared().RenewDeadline, cacheShared().LeaseDuration,
		code, time.Since(continued).Round(time.Millisecond))
	require.Greater(t, continued.Sub(paused), cacheShared().RenewDeadline, "replica-3's stop, past its RenewDeadline")
	require.Equal(t, 1, code, "the exit of replica-3, continued past its RenewDeadline")
	require.Contains(t, reps["replica-3"].stderr.String(), lostLease)
	requireNoWorkAfter(t, reps["replica-3"], paused)
	requireNoWriteSentAfter(t, w3, w0, agreed)
	// What it left is as replica-0 labelled it: it relabelled nothing as
	// it woke.
	requireLabelled(t, e, ns, owners)
	waitCacheShares(t, reps, owners, "replica-0")
	requireChangesReconciled(t, reps, ns, owners, ownedBy(before, "replica-3"), c, paused, agreed, true)

	// Every change was reconciled, each Memcached's Deployment is as its
	// last spec says, and no Deployment was left without its Memcached.
	c.stop()
	waitConverged(t, e, ns, names)
	requireLabelled(t, e, ns, owners)

	// No Memcached was ever reconciled by two replicas at once. A killed
	// replica's reconciles in flight ended as it was killed; a paused
	// one's as it was paused: it sent nothing after (above).
	byReplica := map[string][]event{}
	total := 0
	counts := map[string]int{}
	for id, r := range reps {
		evs := r.Events()
		switch id {
		case "replica-2":
			evs = endOpen(evs, killed)
		case "replica-3":
			evs = endOpen(cutAt(evs, paused), paused)
		}
		byReplica[id] = evs
		counts[id] = r.count("reconcile-start", "")
		total += counts[id]
		requireListsSelectTheShard(t, r)
	}
	requireNoOverlap(t, byReplica, time.Now())
	t.Logf("%d reconciles (by replica: %v), none of one Memcached by two replicas at once; %v in all", total, counts, time.Since(began).Round(time.Millisecond))

	require.NoError(t, reps["replica-0"].proc.Signal(syscall.SIGTERM))
	require.Equal(t, 0, reps["replica-0"].waitExit(t, 30*time.Second), "replica-0's exit")
	leases, err := e.Kube.CoordinationV1().Leases(ns).List(t.Context(), metav1.ListOptions{LabelSelector: shardOf})
	require.NoError(t, err)
	require.Empty(t, leases.Items, "every replica deleted its Lease as it stopped, and the others those of replica-2 and replica-3 once they expired")
}

// requireAbout checks that got of n keys is within 3 standard deviations
// of n/k, as the count of n keys each hashed to one of k members
// (binomial: n/k ± 3·sqrt(n·(1/k)·(1-1/k))), such as 100 ± 24 of 300 keys
// among 3 and 75 ± 22 among 4: the names are fixed, so it is the same
// count on every run, and rendezvous hashing's spread is kube's own unit
// test's.
func requireAbout(t *testing.T, n, k, got int, what string) {
	t.Helper()
	p := 1 / float64(k)
	require.InDelta(t, float64(n)*p, float64(got), 3*math.Sqrt(float64(n)*p*(1-p)), "%s: %d of %d, about 1/%d", what, got, n, k)
}

// shares counts the Memcacheds of each owner.
func shares(owners map[string]string) map[string]int {
	share := map[string]int{}
	for _, id := range owners {
		share[id]++
	}
	return share
}

// ownedBy returns the names owners gives to id, sorted.
func ownedBy(owners map[string]string, id string) []string {
	var names []string
	for name, o := range owners {
		if o == id {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// labelMismatch returns a line for each object in ns, among the
// Memcacheds owners names and their Deployments, whose shard label isn't
// its owner's identity, and each such Memcached or Deployment missing;
// at most 5 lines, then how many more.
func labelMismatch(ctx context.Context, e apptest.Env, ns string, owners map[string]string) ([]string, error) {
	ms, err := e.Dynamic.Resource(app.Memcached.GVR()).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	ds, err := e.Kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	got := map[string]map[string]string{"Memcached": {}, "Deployment": {}}
	has := map[string]map[string]bool{"Memcached": {}, "Deployment": {}}
	for _, m := range ms.Items {
		got["Memcached"][m.GetName()], has["Memcached"][m.GetName()] = m.GetLabels()[shardLabel()], true
	}
	for _, d := range ds.Items {
		got["Deployment"][d.Name], has["Deployment"][d.Name] = d.Labels[shardLabel()], true
	}
	var bad []string
	for _, name := range slices.Sorted(maps.Keys(owners)) {
		for _, kind := range []string{"Memcached", "Deployment"} {
			switch {
			case !has[kind][name]:
				bad = append(bad, fmt.Sprintf("%s %s is missing", kind, name))
			case got[kind][name] != owners[name]:
				bad = append(bad, fmt.Sprintf("%s %s is labelled %s=%q, its owner is %s", kind, name, shardLabel(), got[kind][name], owners[name]))
			}
		}
	}
	if len(bad) > 5 {
		bad = append(bad[:5], fmt.Sprintf("and %d more", len(bad)-5))
	}
	return bad, nil
}

// waitLabelled waits, up to 30s, until each Memcached owners names, and
// its Deployment, carries the shard label naming its owner, and logs how long
// after since that was.
func waitLabelled(t *testing.T, e apptest.Env, ns string, owners map[string]string, since time.Time) {
	t.Helper()
	var bad []string
	var last error
	err := pollUntil(30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		b, err := labelMismatch(ctx, e, ns, owners)
		if err != nil {
			last = err // a list cut short by the deadline, or refused a moment: again
			return false, nil
		}
		bad = b
		return len(bad) == 0, nil
	})
	require.NoError(t, err, "waiting for every Memcached and Deployment to be labelled with its owner (last list error: %v):\n%s", last, strings.Join(bad, "\n"))
	t.Logf("every Memcached and Deployment was labelled with its owner %v after %s", time.Since(since).Round(time.Millisecond), since.Format(time.StampMilli))
}

// requireLabelled checks, once, that each Memcached owners names, and its
// Deployment, carries the shard label naming its owner.
func requireLabelled(t *testing.T, e apptest.Env, ns string, owners map[string]string) {
	t.Helper()
	bad, err := labelMismatch(t.Context(), e, ns, owners)
	require.NoError(t, err)
	require.Empty(t, bad, "the shard labels")
}

// cacheShare is what one replica's /metrics say it caches: for each of
// shareInformers, the objects its informers of that resource hold, summed
// (-1 when none reports), and its shard.keys (-1 when unreported).
type cacheShare struct {
	Cached map[string]int
	Keys   int
}

// scrapeCacheShare reads r's /metrics.
func scrapeCacheShare(ctx context.Context, r *replica) (cacheShare, error) {
	got := cacheShare{Cached: map[string]int{}, Keys: -1}
	for _, inf := range shareInformers() {
		got.Cached[inf] = -1
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.metrics+appconfig.MetricsPath, nil)
	if err != nil {
		return got, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return got, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return got, fmt.Errorf("GET %s of %s: %s", appconfig.MetricsPath, r.id, resp.Status)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return got, err
	}
	if f, ok := families[metricCacheObjects]; ok {
		for _, m := range f.GetMetric() {
			var informer string
			for _, l := range m.GetLabel() {
				if l.GetName() == labelInformer {
					informer = l.GetValue()
				}
			}
			for _, inf := range shareInformers() {
				if strings.HasSuffix(informer, inf) {
					got.Cached[inf] = max(got.Cached[inf], 0) + int(m.GetGauge().GetValue())
				}
			}
		}
	}
	if f, ok := families[metricShardKeys]; ok && len(f.GetMetric()) > 0 {
		got.Keys = int(f.GetMetric()[0].GetGauge().GetValue())
	}
	return got, nil
}

// waitCacheShares waits, up to 30s, until each of the replicas live
// reports caching exactly its share of the Memcacheds and of their
// Deployments (its count in owners), and as many keys owned.
func waitCacheShares(t *testing.T, reps map[string]*replica, owners map[string]string, live ...string) {
	t.Helper()
	share := shares(owners)
	var running []*replica
	for _, id := range live {
		running = append(running, reps[id])
	}
	got := map[string]cacheShare{}
	var last error
	err := pollUntil(30*time.Second, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		ok := true
		for _, r := range running {
			s, err := scrapeCacheShare(ctx, r)
			if err != nil {
				last = err // a scrape may fail as the replica stops: again
				return false, nil
			}
			got[r.id] = s
			want := share[r.id]
			ok = ok && s.Keys == want
			for _, inf := range shareInformers() {
				ok = ok && s.Cached[inf] == want
			}
		}
		return ok, nil
	})
	require.NoError(t, err, "waiting for each replica to cache only its share %v; they report %+v (-1: not reported; %s and %s, with %s); last scrape error: %v",
		share, got, metricCacheObjects, metricShardKeys, labelInformer, last)
	t.Logf("each replica caches its share of Memcacheds and of Deployments, and no more: %v", share)
}

// resizer resizes Memcacheds, one after another, over and over, at most
// one every 10ms, recording when each resize was stored.
type resizer struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	mu      sync.Mutex
	changed map[string][]time.Time // by name, when the API server answered each resize, in order
}

// startResizer resizes names in ns until stop is called, recording
// each resize.
func startResizer(t *testing.T, e apptest.Env, ns string, names []string) *resizer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &resizer{cancel: cancel, changed: map[string][]time.Time{}}
	ri := e.Dynamic.Resource(app.Memcached.GVR()).Namespace(ns)
	c.wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			name := names[i%len(names)]
			patch := fmt.Appendf(nil, `{"spec":{"size":%d}}`, 1+(i/len(names)+1)%3)
			if _, err := ri.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "test"}); err == nil {
				c.mu.Lock()
				c.changed[name] = append(c.changed[name], time.Now())
				c.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	})
	t.Cleanup(func() { c.stop() })
	return c
}

// stop stops the resizing, and waits for it to end.
func (c *resizer) stop() {
	c.once.Do(func() {
		c.cancel()
		c.wg.Wait()
	})
}

// between returns, for each name changed from from to to, the first
// such change's time.
func (c *resizer) between(from, to time.Time) map[string]time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]time.Time{}
	for name, ts := range c.changed {
		for _, at := range ts {
			if !at.Before(from) && !at.After(to) {
				out[name] = at
				break
			}
		}
	}
	return out
}

// requireChangesReconciled waits, up to 30s, until each of moved that c
// changed from from to to, while the view changed, has been reconciled by
// its new owner (in owners) since that change. With some, at least one of
// moved must have been changed then, so that the check can't pass for
// want of a change.
func requireChangesReconciled(t *testing.T, reps map[string]*replica, ns string, owners map[string]string, moved []string, c *resizer, from, to time.Time, some bool) {
	t.Helper()
	changed := c.between(from, to)
	var during []string
	for _, name := range moved {
		if _, ok := changed[name]; ok {
			during = append(during, name)
		}
	}
	if some {
		require.NotEmpty(t, during, "the Memcacheds that moved and were changed during the view change (%v long)", to.Sub(from).Round(time.Millisecond))
	}
	var missing string
	err := pollUntil(30*time.Second, 100*time.Millisecond, func(context.Context) (bool, error) {
		for _, name := range during {
			key, at := ns+"/"+name, changed[name]
			if !slices.ContainsFunc(reps[owners[name]].Events(), func(ev event) bool {
				return ev.Ev == "reconcile-start" && ev.Key == key && ev.T.After(at)
			}) {
				missing = fmt.Sprintf("%s, changed at %s, by %s", name, at.Format(time.StampMilli), owners[name])
				return false, nil
			}
		}
		return true, nil
	})
	require.NoError(t, err, "waiting for each Memcached changed during the view change to be reconciled by its new owner since; not yet: %s", missing)
	t.Logf("%d of the %d Memcacheds that moved were changed during the view change (%v long), and each was reconciled by its new owner after",
		len(during), len(moved), to.Sub(from).Round(time.Millisecond))
}

// cutAt returns the events before at: a paused replica's, whose
// reconciles in flight it froze, and which sent nothing after it woke
// (requireNoWorkAfter, requireNoWriteSentAfter).
func cutAt(events []event, at time.Time) []event {
	return slices.DeleteFunc(slices.Clone(events), func(ev event) bool { return ev.T.After(at) })
}

// requireListsSelectTheShard checks that every list of Memcacheds or of
// Deployments r sent (a GET of the collection; watches aren't recorded)
// selected on the shard label, and that r listed each of the two with its
// own identity at least once: the API server sent it only its share. A
// list may also select the strays, with a selector such as "notin".
func requireListsSelectTheShard(t *testing.T, r *replica) {
	t.Helper()
	lists := 0
	own := map[string]int{"memcacheds": 0, "deployments": 0}
	for _, ev := range r.Events() {
		if ev.Ev != "request" || ev.Method != http.MethodGet {
			continue
		}
		u, err := url.Parse(ev.URL)
		if err != nil {
			continue
		}
		resource := u.Path[strings.LastIndex(u.Path, "/")+1:]
		if _, ok := own[resource]; !ok {
			continue
		}
		lists++
		sel := u.Query().Get("labelSelector")
		require.Contains(t, sel, shardLabel(), "%s listed %s without selecting on the shard label", r.id, ev.URL)
		if slices.Contains(strings.Split(sel, ","), shardLabel()+"="+r.id) {
			own[resource]++
		}
	}
	t.Logf("%s sent %d lists of Memcacheds or Deployments, each selecting on %s; its own share: %v", r.id, lists, shardLabel(), own)
	// The Deployments' informer opens a watch that streams its initial
	// list (client-go's watch-list), whose span ends only with the watch:
	// it may not be recorded yet. The Memcacheds' is a list.
	require.Positive(t, own["memcacheds"], "%s's lists of memcacheds that selected %s=%s", r.id, shardLabel(), r.id)
}
