//go:build controlplane

package kube_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/kube"
)

// shareCaches records, for each member, what its caches held at its last
// reconcile: the Gadgets and the ConfigMaps, by name.
type shareCaches struct {
	mu     sync.Mutex
	at     map[string]time.Time
	held   map[string][2][]string
	errors []string
}

func (s *shareCaches) record(ctx context.Context, member string) {
	var held [2][]string
	gl, err := kube.ListerFrom[gadget](ctx, gadgets.GVR())
	if err == nil {
		var gs []gadget
		if gs, err = gl.List("", labels.Everything()); err == nil {
			for _, g := range gs {
				held[0] = append(held[0], g.Name)
			}
		}
	}
	if err == nil {
		var cl kube.Lister[metav1.PartialObjectMetadata]
		if cl, err = kube.ListerFrom[metav1.PartialObjectMetadata](ctx, corev1.SchemeGroupVersion.WithResource("configmaps")); err == nil {
			var cms []metav1.PartialObjectMetadata
			if cms, err = cl.List("", labels.Everything()); err == nil {
				for _, cm := range cms {
					held[1] = append(held[1], cm.Name)
				}
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.errors = append(s.errors, err.Error())
		return
	}
	s.at[member] = time.Now()
	s.held[member] = held
}

// TestCacheShareCachesOnlyEachMembersShareOnTheAPIServer runs three
// members with Sharding.CacheShare on, in the test's process, over 120
// Gadgets, each with a ConfigMap child applied with kube.ShardLabels (but
// one, applied without, which its member labels after its creation):
// every object ends labelled with the member that reconciles it, and each
// member's caches (read through its Listers) hold exactly its share of the
// Gadgets and of the ConfigMaps. A fourth member joins while users change
// Gadgets (their changes converge, and it caches exactly its share), one
// member stops gracefully and one is cut off from its Lease: their
// objects are relabelled to, cached by and reconciled by the others, and
// no Gadget is reconciled by two members at once.
func TestCacheShareCachesOnlyEachMembersShareOnTheAPIServer(t *testing.T) {
	cluster, dyn, kc := startWithCRD(t, gadgets)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()

	const ns, n = "cacheshare", 120
	res := createGadgets(ctx, t, kc, dyn, ns, n, map[string]any{"team": "a"}, "user")
	// A ConfigMap no Gadget controls: no member labels it or caches it.
	_, err := kc.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unowned"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	s := &humus.Setup{Host: humus.OSHost()}
	conn := kube.Connection{
		Server: cluster.Server,
		TLS:    cluster.TLS,
		Token:  func(context.Context) (string, error) { return cluster.Token, nil },
	}
	client, err := kube.NewClient(s, conn)
	require.NoError(t, err)
	settings := kube.DefaultSettings()
	settings.Name = "gadget-shares"
	settings.Namespace = ns
	settings.Workers = 2
	settings.Sharding.Enabled = true
	settings.Sharding.CacheShare = true
	settings.LeaderElection.Namespace = ns
	settings.LeaderElection.LeaseDuration = 4 * time.Second
	settings.LeaderElection.RenewDeadline = 3 * time.Second
	settings.LeaderElection.RetryPeriod = time.Second
	label := kube.ShardLabel(settings.Name)
	rec := &shardReconciles{busy: map[string]string{}}
	caches := &shareCaches{at: map[string]time.Time{}, held: map[string][2][]string{}}

	start := func(id string, client *kube.Client) shardMember {
		st := settings
		st.LeaderElection.Identity = id
		cs, err := kubernetes.NewForConfig(client.Config())
		require.NoError(t, err)
		inner := rec.reconciler(id)
		r := kube.ReconcilerFunc[gadgetSpec, gadgetStatus](func(ctx context.Context, g gadget) (kube.Result[gadgetStatus], error) {
			shard := kube.ShardLabels(ctx)
			if g.Name == "g000" {
				shard = nil // its member labels it after it is created
			}
			cm := corev1ac.ConfigMap(g.Name, g.Namespace).
				WithLabels(shard).
				WithOwnerReferences(gadgets.ControllerReference(g)).
				WithData(map[string]string{"size": fmt.Sprint(g.Spec.Size)})
			if _, err := cs.CoreV1().ConfigMaps(g.Namespace).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: st.Name, Force: true}); err != nil {
				return kube.Result[gadgetStatus]{}, err
			}
			caches.record(ctx, id)
			return inner(ctx, g)
		})
		ctrl, err := kube.NewController(s, client, st, gadgets, r, kube.Owns(corev1.SchemeGroupVersion.WithResource("configmaps")))
		require.NoError(t, err)
		return serveMember(t, ctrl)
	}
	stop := func(m shardMember) { m.stop(ctx, t) }
	converged := gadgetsConverged(ctx, t, res, n)
	// labelled returns each Gadget's and each ConfigMap's label, by name;
	// a ConfigMap's under "cm/".
	labelled := func() map[string]string {
		out := map[string]string{}
		l, err := res.List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, g := range l.Items {
			out[g.GetName()] = g.GetLabels()[label]
		}
		cms, err := kc.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, cm := range cms.Items {
			if cm.Name != "kube-root-ca.crt" {
				out["cm/"+cm.Name] = cm.Labels[label]
			}
		}
		return out
	}
	// settle waits until every Gadget and its ConfigMap are labelled with
	// the member that alone reconciled the Gadget since, and every member
	// in ids has reconciled since and cached exactly its share; it returns
	// the owners.
	settle := func(what string, ids ...string) map[string]string {
		t.Helper()
		var owners map[string]string
		var why string
		from := time.Now()
		ok := false
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
			since := time.Now()
			time.Sleep(5 * time.Second) // every Gadget comes round again after 2s
			ms := rec.members(since)
			owners, why = map[string]string{}, ""
			for name, by := range ms {
				if len(by) != 1 {
					why = fmt.Sprintf("%s reconciled by %v", name, by)
				}
				for m := range by {
					owners[name] = m
				}
			}
			if why == "" && len(owners) != n {
				why = fmt.Sprintf("%d of %d Gadgets reconciled", len(owners), n)
			}
			if why != "" {
				continue
			}
			got := labelled()
			for name, m := range owners {
				if got[name] != m || got["cm/"+name] != m {
					why = fmt.Sprintf("%s reconciled by %s, labelled %q, its ConfigMap %q", name, m, got[name], got["cm/"+name])
					break
				}
			}
			if got["cm/unowned"] != "" {
				why = "the unowned ConfigMap was labelled " + got["cm/unowned"]
			}
			if why != "" {
				continue
			}
			want := map[string][]string{}
			for name, m := range owners {
				want[m] = append(want[m], name)
			}
			caches.mu.Lock()
			for _, id := range ids {
				held := caches.held[id]
				slices.Sort(want[id])
				slices.Sort(held[0])
				slices.Sort(held[1])
				switch {
				case caches.at[id].Before(since):
					why = id + " hasn't reconciled since"
				case !slices.Equal(held[0], want[id]):
					why = fmt.Sprintf("%s caches %d Gadgets, its share is %d", id, len(held[0]), len(want[id]))
				case !slices.Equal(held[1], want[id]):
					why = fmt.Sprintf("%s caches %d ConfigMaps, its share is %d", id, len(held[1]), len(want[id]))
				}
			}
			require.Empty(t, caches.errors, "a member's Lister")
			caches.mu.Unlock()
			if why == "" {
				ok = true
				break
			}
		}
		require.True(t, ok, "%s: not settled within a minute: %s", what, why)
		share := map[string]int{}
		for _, m := range owners {
			share[m]++
		}
		t.Logf("%s: settled within %v; shares %v", what, time.Since(from).Round(time.Millisecond), share)
		require.ElementsMatch(t, ids, slices.Collect(maps.Keys(share)))
		return owners
	}

	began := time.Now()
	holder := newLeaseHolder(t, cluster)
	client3, err := kube.NewClient(s, holder.connection(cluster))
	require.NoError(t, err)
	m1, m2, m3 := start("member-1", client), start("member-2", client), start("member-3", client3)
	require.Eventually(t, converged, time.Minute, 200*time.Millisecond, "every Gadget converges")
	t.Logf("%d Gadgets converged on three members in %v", n, time.Since(began).Round(time.Millisecond))
	before := settle("three members", "member-1", "member-2", "member-3")
	// The label is the members' field manager's, written by a merge patch
	// (an update); the user's label and field manager are as they were.
	g, err := res.Get(ctx, "g000", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "a", g.GetLabels()["team"])
	managers := map[string]string{}
	for _, mf := range g.GetManagedFields() {
		if mf.FieldsV1 != nil {
			managers[mf.Manager+" "+string(mf.Operation)] = string(mf.FieldsV1.Raw)
		}
	}
	require.Contains(t, managers["user Update"], `"f:team"`, "the user still owns its label")
	require.Contains(t, managers["gadget-shares-shard Update"], `"f:`+label+`"`, "the members' field manager owns the shard label")
	require.NotContains(t, managers["gadget-shares-shard Update"], `"f:team"`)

	// A fourth joins while users change every Gadget's size: the changes
	// converge, about a quarter of the Gadgets move, all to member-4.
	m4 := start("member-4", client)
	for i := range n {
		size := int64(1 + (i+1)%3)
		_, err := res.Patch(ctx, fmt.Sprintf("g%03d", i), "application/merge-patch+json", fmt.Appendf(nil, `{"spec":{"size":%d}}`, size), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	require.Eventually(t, converged, time.Minute, 200*time.Millisecond, "every user's change during the join converges")
	after := settle("member-4 joined", "member-1", "member-2", "member-3", "member-4")
	moved := 0
	for name, m := range after {
		if m != before[name] {
			moved++
			require.Equal(t, "member-4", m, "%s moved from %s", name, before[name])
		}
	}
	t.Logf("member-4 took %d of %d", moved, n)
	require.InDelta(t, n/4, moved, n/4*0.5, "about a quarter move")

	// member-2 stops gracefully: its objects are relabelled to, cached
	// and reconciled by the others.
	stop(m2)
	left := settle("member-2 left", "member-1", "member-3", "member-4")
	for name, m := range left {
		if after[name] != "member-2" {
			require.Equal(t, after[name], m, "%s, not member-2's, moved", name)
		}
	}

	// member-3 is cut off from its Lease: it stops with ErrLostLeadership,
	// and its objects are relabelled to, cached and reconciled by the
	// others once its Lease has expired.
	held := time.Now()
	holder.held.Store(true)
	select {
	case err := <-m3.served:
		require.ErrorIs(t, err, kube.ErrLostLeadership)
	case <-ctx.Done():
		t.Fatal("member-3 kept serving without its Lease")
	}
	bound := settings.LeaderElection.LeaseDuration + settings.LeaderElection.RetryPeriod + 3*time.Second
	var latest time.Duration
	var notYet string
	controlplanetest.Eventually(t, bound+30*time.Second, "member-3's objects to move", func(context.Context) (bool, error) {
		latest, notYet = rec.moved(left, "member-3", held)
		return notYet == "", nil
	})
	t.Logf("member-3's objects reconciled by others within %v of its Lease updates being held (LeaseDuration + RetryPeriod: %v)", latest.Round(time.Millisecond), settings.LeaderElection.LeaseDuration+settings.LeaderElection.RetryPeriod)
	settle("member-3 cut off", "member-1", "member-4")
	holder.held.Store(false)

	rec.mu.Lock()
	require.Empty(t, rec.overlap, "no Gadget reconciled by two members at once")
	rec.mu.Unlock()
	stop(m1)
	stop(m4)
}
