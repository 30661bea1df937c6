//go:build controlplane

package kube_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/kube"
)

// shardReconciles records every reconcile of the members in the test's
// process, with its member, start and end, and any reconcile that started
// while another member's of the same object was in flight.
type shardReconciles struct {
	mu      sync.Mutex
	busy    map[string]string
	overlap []string
	log     []shardReconcileAt
}

type shardReconcileAt struct {
	name, member string
	start, end   time.Time
}

func (r *shardReconciles) reconciler(member string) kube.ReconcilerFunc[gadgetSpec, gadgetStatus] {
	return func(ctx context.Context, g gadget) (kube.Result[gadgetStatus], error) {
		r.mu.Lock()
		if other := r.busy[g.Name]; other != "" {
			r.overlap = append(r.overlap, fmt.Sprintf("%s by %s while %s's was in flight, at %v", g.Name, member, other, time.Now()))
		}
		r.busy[g.Name] = member
		start := time.Now()
		r.mu.Unlock()
		// A reconcile of some length, so that an overlap has room to show.
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
		r.mu.Lock()
		r.busy[g.Name] = ""
		r.log = append(r.log, shardReconcileAt{name: g.Name, member: member, start: start, end: time.Now()})
		r.mu.Unlock()
		return kube.Result[gadgetStatus]{Status: &gadgetStatus{Seen: g.Spec.Size}, After: 2 * time.Second}, nil
	}
}

// members returns, for each object reconciled at or after t, the members
// that reconciled it.
func (r *shardReconciles) members(t time.Time) map[string]map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]map[string]bool{}
	for _, rec := range r.log {
		if rec.start.Before(t) {
			continue
		}
		if out[rec.name] == nil {
			out[rec.name] = map[string]bool{}
		}
		out[rec.name][rec.member] = true
	}
	return out
}

// firstOther returns when name was first reconciled at or after t by a
// member other than not, or the zero time.
func (r *shardReconciles) firstOther(name string, t time.Time, not string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.log {
		if rec.name == name && rec.member != not && !rec.start.Before(t) {
			return rec.start
		}
	}
	return time.Time{}
}

// moved returns how long after t the last of member's objects in owners
// was first reconciled by another member, or the name of one that wasn't
// yet.
func (r *shardReconciles) moved(owners map[string]string, member string, t time.Time) (latest time.Duration, notYet string) {
	for name, m := range owners {
		if m != member {
			continue
		}
		at := r.firstOther(name, t, member)
		if at.IsZero() {
			return 0, name
		}
		latest = max(latest, at.Sub(t))
	}
	return latest, ""
}

// owners returns each object's one member since t, and fails if an object
// had two or none.
func (r *shardReconciles) owners(t *testing.T, since time.Time, n int) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, ms := range r.members(since) {
		require.Len(t, ms, 1, "%s reconciled by %v since %v", name, ms, since)
		for m := range ms {
			out[name] = m
		}
	}
	require.Len(t, out, n, "every object is reconciled")
	return out
}

// shardMember is a member serving in the test's process, and its Serve's
// result.
type shardMember struct {
	ctrl   *kube.Controller
	served chan error
}

// serveMember serves ctrl until the test ends.
func serveMember(t *testing.T, ctrl *kube.Controller) shardMember {
	m := shardMember{ctrl: ctrl, served: make(chan error, 1)}
	go func() { m.served <- ctrl.Serve(context.Background()) }()
	t.Cleanup(func() { _ = ctrl.Shutdown(context.Background()) })
	return m
}

// stop shuts m down gracefully, and fails unless its Serve returns nil.
func (m shardMember) stop(ctx context.Context, t *testing.T) {
	require.NoError(t, m.ctrl.Shutdown(ctx))
	require.NoError(t, <-m.served)
}

// createGadgets creates namespace ns and n Gadgets in it, g000 on, sized
// 1, 2, 3 in turn, with labels, under the field manager manager ("" for
// the client's default), and returns their resource.
func createGadgets(ctx context.Context, t *testing.T, kc kubernetes.Interface, dyn dynamic.Interface, ns string, n int, labels map[string]any, manager string) dynamic.ResourceInterface {
	t.Helper()
	_, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	res := dyn.Resource(gadgets.GVR()).Namespace(ns)
	for i := range n {
		md := map[string]any{"name": fmt.Sprintf("g%03d", i)}
		if labels != nil {
			md["labels"] = labels
		}
		_, err := res.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "controller.humus.example.com/v1",
			"kind":       "Gadget",
			"metadata":   md,
			"spec":       map[string]any{"size": int64(1 + i%3)},
		}}, metav1.CreateOptions{FieldManager: manager})
		require.NoError(t, err)
	}
	return res
}

// gadgetsConverged reports whether res holds n Gadgets, each with its
// status.seen at its spec.size.
func gadgetsConverged(ctx context.Context, t *testing.T, res dynamic.ResourceInterface, n int) func() bool {
	return func() bool {
		l, err := res.List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, g := range l.Items {
			seen, _, _ := unstructured.NestedInt64(g.Object, "status", "seen")
			size, _, _ := unstructured.NestedInt64(g.Object, "spec", "size")
			if seen != size {
				return false
			}
		}
		return len(l.Items) == n
	}
}

// TestShardingAgainstTheAPIServer runs three members with Sharding on,
// in the test's process, over 300 Gadgets: all converge, each object is
// reconciled by one member at a time, the three share them within 20% of
// a third each; a fourth takes about a quarter; one stopped gracefully
// hands its objects over within 2 RetryPeriods, and one whose Lease
// updates hang stops with ErrLostLeadership and its objects move within
// LeaseDuration and a RetryPeriod (and a margin of 3s for a loaded
// machine).
func TestShardingAgainstTheAPIServer(t *testing.T) {
	cluster, dyn, kc := startWithCRD(t, gadgets)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	const ns, n = "sharding", 300
	res := createGadgets(ctx, t, kc, dyn, ns, n, nil, "")

	s := &humus.Setup{Host: humus.OSHost()}
	client, err := kube.NewClient(s, kube.Connection{
		Server: cluster.Server,
		TLS:    cluster.TLS,
		Token:  func(context.Context) (string, error) { return cluster.Token, nil },
	})
	require.NoError(t, err)
	settings := kube.DefaultSettings()
	settings.Name = "gadget-shards"
	settings.Namespace = ns
	settings.Workers = 2
	settings.Sharding.Enabled = true
	settings.LeaderElection.Namespace = ns
	settings.LeaderElection.LeaseDuration = 4 * time.Second
	settings.LeaderElection.RenewDeadline = 3 * time.Second
	settings.LeaderElection.RetryPeriod = time.Second
	rec := &shardReconciles{busy: map[string]string{}}

	start := func(id string, client *kube.Client) shardMember {
		st := settings
		st.LeaderElection.Identity = id
		ctrl, err := kube.NewController(s, client, st, gadgets, rec.reconciler(id))
		require.NoError(t, err)
		return serveMember(t, ctrl)
	}
	stop := func(m shardMember) { m.stop(ctx, t) }
	converged := gadgetsConverged(ctx, t, res, n)

	began := time.Now()
	// member-3 reaches the API server through a proxy that can hold its
	// Lease updates, as a member cut off from it, or killed, stops renewing.
	holder := newLeaseHolder(t, cluster)
	client3, err := kube.NewClient(s, holder.connection(cluster))
	require.NoError(t, err)
	m1, m2, m3 := start("member-1", client), start("member-2", client), start("member-3", client3)
	require.Eventually(t, converged, time.Minute, 200*time.Millisecond, "every Gadget converges")
	t.Logf("300 Gadgets converged on three members in %v", time.Since(began).Round(time.Millisecond))

	// Settled: every object reconciled by one member, about a third each.
	time.Sleep(2 * settings.LeaderElection.RetryPeriod) // the joins' view changes are over
	settled := time.Now()
	time.Sleep(5 * time.Second) // every object comes round again after 2s
	before := rec.owners(t, settled, n)
	share := map[string]int{}
	for _, m := range before {
		share[m]++
	}
	t.Logf("the three members' shares: %v", share)
	require.Len(t, share, 3)
	for m, got := range share {
		require.InDelta(t, n/3, got, n/3*0.2, "%s's share", m)
	}

	// A fourth joins: about a quarter move, all to it.
	m4 := start("member-4", client)
	time.Sleep(3 * settings.LeaderElection.RetryPeriod)
	settled = time.Now()
	time.Sleep(5 * time.Second)
	after := rec.owners(t, settled, n)
	moved := 0
	for name, m := range after {
		if m != before[name] {
			moved++
			require.Equal(t, "member-4", m, "%s moved from %s", name, before[name])
		}
	}
	t.Logf("member-4 took %d of %d", moved, n)
	require.InDelta(t, n/4, moved, n/4*0.3, "about a quarter move")

	// member-2 stops gracefully: its objects move within 2 RetryPeriods.
	left := time.Now()
	stop(m2)
	time.Sleep(3 * settings.LeaderElection.RetryPeriod)
	latest, notYet := rec.moved(after, "member-2", left)
	require.Empty(t, notYet, "an object of member-2's not moved")
	t.Logf("member-2's objects moved within %v of its Shutdown", latest.Round(time.Millisecond))
	require.LessOrEqual(t, latest, 2*settings.LeaderElection.RetryPeriod)

	// member-3 stops renewing: it stops at its RenewDeadline, its Serve
	// returns ErrLostLeadership, and its objects move within
	// LeaseDuration and a RetryPeriod, and a margin (below).
	settled = time.Now()
	time.Sleep(5 * time.Second)
	owners := rec.owners(t, settled, n)
	held := time.Now()
	holder.held.Store(true)
	select {
	case err := <-m3.served:
		require.ErrorIs(t, err, kube.ErrLostLeadership)
	case <-ctx.Done():
		t.Fatal("member-3 kept serving without its Lease")
	}
	t.Logf("member-3 stopped %v after its Lease updates were held", time.Since(held).Round(time.Millisecond))
	// Its Lease expires LeaseDuration after the others last saw it
	// renewed, which is before held; then a Get confirms it, the view
	// changes in one Lease write and one watch event each, and the
	// members reconcile what they gained. The margin of 3s over
	// LeaseDuration + RetryPeriod is for a loaded machine, as the
	// Memcached faults' SIGKILL handover has (3.48s when this test was
	// written).
	bound := settings.LeaderElection.LeaseDuration + settings.LeaderElection.RetryPeriod + 3*time.Second
	controlplanetest.Eventually(t, bound, "member-3's objects to move", func(context.Context) (bool, error) {
		latest, notYet = rec.moved(owners, "member-3", held)
		return notYet == "", nil
	})
	t.Logf("member-3's objects moved within %v of its Lease updates being held (LeaseDuration + RetryPeriod: %v)", latest.Round(time.Millisecond), settings.LeaderElection.LeaseDuration+settings.LeaderElection.RetryPeriod)
	require.LessOrEqual(t, latest, bound)
	holder.held.Store(false)

	rec.mu.Lock()
	require.Empty(t, rec.overlap, "no Gadget reconciled by two members at once")
	total := len(rec.log)
	rec.mu.Unlock()
	t.Logf("%d reconciles, none overlapping", total)
	stop(m1)
	stop(m4)
	leases, err := kc.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: "humus.kube/shard-of=gadget-shards"})
	require.NoError(t, err)
	// member-3's Lease, which it lost, was deleted by the others as they
	// confirmed it expired, which is when they took its Gadgets.
	require.Empty(t, leases.Items, "every member deleted its Lease on its graceful stop, and the others member-3's once expired")
}

// TestShardMemberProcess is one member of BenchmarkShardingThroughput, in
// a process of its own: it runs only when the benchmark starts it, with
// HUMUS_SHARD_MEMBER set to its identity, and serves until SIGTERM. Its
// Reconciler burns about 20ms of CPU per Gadget, a stand-in for rendering
// templates or diffing large objects.
func TestShardMemberProcess(t *testing.T) {
	id := os.Getenv("HUMUS_SHARD_MEMBER")
	if id == "" {
		t.Skip("a member process of BenchmarkShardingThroughput")
	}
	cluster, err := controlplane.FromKubeconfig(os.Getenv("HUMUS_SHARD_KUBECONFIG"))
	require.NoError(t, err)
	ns := os.Getenv("HUMUS_SHARD_NAMESPACE")
	s := &humus.Setup{Host: humus.OSHost()}
	client, err := kube.NewClient(s, kube.Connection{
		Server: cluster.Server,
		TLS:    cluster.TLS,
		Token:  func(context.Context) (string, error) { return cluster.Token, nil },
	})
	require.NoError(t, err)
	settings := kube.DefaultSettings()
	settings.Name = "gadget-bench"
	settings.Namespace = ns
	settings.Sharding.Enabled = true
	settings.LeaderElection.Namespace = ns
	settings.LeaderElection.Identity = id
	ctrl, err := kube.NewController(s, client, settings, gadgets,
		kube.ReconcilerFunc[gadgetSpec, gadgetStatus](func(ctx context.Context, g gadget) (kube.Result[gadgetStatus], error) {
			start := time.Now()
			for time.Since(start) < 20*time.Millisecond { //nolint:revive // burning CPU is the point
			}
			return kube.Result[gadgetStatus]{Status: &gadgetStatus{Seen: g.Spec.Size}}, nil
		}))
	require.NoError(t, err)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	require.NoError(t, ctrl.Serve(ctx))
}

// BenchmarkShardingThroughput converges 500 Gadgets, each of whose
// reconciles burns about 20ms of CPU, on one member and on two, each a
// process of its own with GOMAXPROCS=1 and 1 worker, and prints how long
// each took, from the members' start to the last status applied.
func BenchmarkShardingThroughput(b *testing.B) {
	cluster := controlplanetest.Start(b)
	cfg := cluster.RESTConfig()
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(b, err)
	kc, err := kubernetes.NewForConfig(cfg)
	require.NoError(b, err)
	ext, err := apiextensionsclient.NewForConfig(cfg)
	require.NoError(b, err)
	crd, err := gadgets.CRD()
	require.NoError(b, err)
	_, err = ext.ApiextensionsV1().CustomResourceDefinitions().Create(b.Context(), crd, metav1.CreateOptions{})
	require.NoError(b, err)
	require.Eventually(b, func() bool {
		_, err := dyn.Resource(gadgets.GVR()).Namespace("default").List(b.Context(), metav1.ListOptions{Limit: 1})
		return err == nil
	}, time.Minute, 100*time.Millisecond, "the CRD is served")
	const n = 500
	for _, replicas := range []int{1, 2} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				ctx := b.Context()
				ns := fmt.Sprintf("bench-%d-%d", replicas, i)
				_, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
				require.NoError(b, err)
				res := dyn.Resource(gadgets.GVR()).Namespace(ns)
				for j := range n {
					_, err := res.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
						"apiVersion": "controller.humus.example.com/v1",
						"kind":       "Gadget",
						"metadata":   map[string]any{"name": fmt.Sprintf("g%03d", j)},
						"spec":       map[string]any{"size": int64(1)},
					}}, metav1.CreateOptions{})
					require.NoError(b, err)
				}
				began := time.Now()
				var procs []*exec.Cmd
				for r := range replicas {
					cmd := exec.Command(os.Args[0], "-test.run=^TestShardMemberProcess$")
					cmd.Env = append(os.Environ(), "GOMAXPROCS=1",
						fmt.Sprintf("HUMUS_SHARD_MEMBER=member-%d", r),
						"HUMUS_SHARD_KUBECONFIG="+cluster.Kubeconfig,
						"HUMUS_SHARD_NAMESPACE="+ns)
					require.NoError(b, cmd.Start())
					procs = append(procs, cmd)
				}
				require.Eventually(b, func() bool {
					l, err := res.List(ctx, metav1.ListOptions{})
					require.NoError(b, err)
					for _, g := range l.Items {
						if seen, _, _ := unstructured.NestedInt64(g.Object, "status", "seen"); seen != 1 {
							return false
						}
					}
					return len(l.Items) == n
				}, 5*time.Minute, 100*time.Millisecond)
				took := time.Since(began)
				for _, p := range procs {
					_ = p.Process.Signal(syscall.SIGTERM)
					_ = p.Wait()
				}
				b.ReportMetric(took.Seconds(), "s/converge")
				b.Logf("%d Gadgets of 20ms CPU converged on %d member(s), GOMAXPROCS=1 and 1 worker each, in %v", n, replicas, took.Round(time.Millisecond))
			}
		})
	}
}
