package kube

import (
	"context"
	"crypto/tls"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	corev1 "k8s.io/api/core/v1"
)

// cacheShareSettings are testSettings with Sharding and its CacheShare on.
func cacheShareSettings() Settings {
	s := testSettings()
	s.Sharding.Enabled = true
	s.Sharding.CacheShare = true
	return s
}

func TestCheckShardingRefusesCacheShareWithoutEnabled(t *testing.T) {
	s := testSettings()
	s.Sharding.CacheShare = true
	require.EqualError(t, CheckSharding(s), "kube: Settings.Sharding.CacheShare is on but Sharding.Enabled is off: a member caches its own share only when the replicas share the keys; turn Enabled on, or CacheShare off")
	require.NoError(t, CheckSharding(cacheShareSettings()), "testSettings' name and identity suit CacheShare")
}

// An identity can name a Lease (a DNS-1123 subdomain, up to 253 bytes)
// and still not be a label value (up to 63 bytes), which CacheShare
// needs of it: the shard label's value is the identity.
func TestCheckShardingRefusesAnIdentityThatIsNotALabelValueWithCacheShare(t *testing.T) {
	s := cacheShareSettings()
	s.LeaderElection.Identity = strings.Repeat("m", 64)
	err := CheckSharding(s)
	require.ErrorContains(t, err, `with Settings.Sharding.CacheShare on, each object's label shard.humus.kube/widget-controller holds its member's identity, and LeaderElection.Identity "`+s.LeaderElection.Identity+`" is not a label value: must be no more than 63 bytes`)
	require.NotContains(t, err.Error(), "DNS-1123", "the Lease's name is fine")

	s.Sharding.CacheShare = false
	require.NoError(t, CheckSharding(s), "without CacheShare, the identity only names a Lease")
}

// A label key's name is at most 63 bytes, as a label value is: a Name
// that makes ShardLabel no label key isn't a label value either (it
// labels each member's Lease), and both are named.
func TestCheckShardingRefusesANameThatMakesNoLabelKeyWithCacheShare(t *testing.T) {
	s := cacheShareSettings()
	s.Name = strings.Repeat("w", 64)
	err := CheckSharding(s)
	require.ErrorContains(t, err, "with Settings.Sharding.CacheShare on, each object is labelled shard.humus.kube/"+s.Name+", which is not a label key: name part must be no more than 63 bytes; give Settings.Name at most 63 letters")
	require.ErrorContains(t, err, `Settings.Name "`+s.Name+`" labels each replica's Lease, and is not a label value`)

	s.Sharding.CacheShare = false
	require.NotContains(t, CheckSharding(s).Error(), "not a label key", "without CacheShare, no object is labelled")
}

func TestCheckShardingRefusesALabelSelectorOnTheShardLabelWithCacheShare(t *testing.T) {
	label := ShardLabel(controllerName)
	for _, sel := range []string{
		label + "=replica-1",
		"app=memcached," + label + " in (replica-1,replica-2)",
		"!" + label,
		label,
	} {
		s := cacheShareSettings()
		s.LabelSelector = sel
		require.EqualError(t, CheckSharding(s), "kube: with Settings.Sharding.CacheShare on, the members select on the label shard.humus.kube/widget-controller themselves, and Settings.LabelSelector \""+sel+"\" selects on it too; take it out of LabelSelector", sel)
		s.Sharding.CacheShare = false
		require.NoError(t, CheckSharding(s), "without CacheShare, %q is the user's", sel)
	}
	for _, sel := range []string{"app=memcached", ShardLabel("other-controller") + "=replica-1", "shard.humus.kube/widget-controller-2=x"} {
		s := cacheShareSettings()
		s.LabelSelector = sel
		require.NoError(t, CheckSharding(s), "%q selects on another label", sel)
	}
	// A selector that doesn't parse is checkLabelSelector's to name.
	s := cacheShareSettings()
	s.LabelSelector = "a in"
	require.NoError(t, CheckSharding(s))
	require.ErrorContains(t, s.check(), `Settings.LabelSelector "a in"`)
}

func TestCheckShardingNamesEveryCacheShareMistakeInOneError(t *testing.T) {
	s := cacheShareSettings()
	s.LeaderElection.Identity = "replica/1"
	s.LabelSelector = ShardLabel(s.Name) + "=x"
	err := CheckSharding(s)
	for _, want := range []string{
		`LeaderElection.Identity "replica/1" is not a label value`,
		`Settings.LabelSelector "shard.humus.kube/widget-controller=x" selects on it too`,
		`"widget-controller-replica/1" is not a DNS-1123 subdomain`, // the Lease's name
	} {
		require.ErrorContains(t, err, want)
	}

	// A Name that makes no label key makes a selector on it no selector:
	// checkLabelSelector names that one.
	s.Name = strings.Repeat("w", 64)
	s.LabelSelector = ShardLabel(s.Name) + "=x"
	err = s.check()
	for _, want := range []string{
		`LeaderElection.Identity "replica/1" is not a label value`,
		"which is not a label key",
		`Settings.LabelSelector "` + s.LabelSelector + `"`,
		"labels each replica's Lease, and is not a label value",
	} {
		require.ErrorContains(t, err, want)
	}
}

// NewController (and NewKindController) check Settings whole, Sharding
// among them: CheckSharding's errors come back from NewController,
// joined with the others.
func TestNewControllerReturnsCheckShardingsErrors(t *testing.T) {
	s := testSettings()
	s.Sharding.CacheShare = true
	s.Workers = 0
	want := CheckSharding(s).Error()

	hs := &humus.Setup{Host: humus.OSHost()}
	client, err := NewClient(hs, Connection{Server: "127.0.0.1:6443", TLS: &tls.Config{}})
	require.NoError(t, err)
	_, err = NewController(hs, client, s, widgets(), noopReconciler())
	require.ErrorContains(t, err, want)
	require.ErrorContains(t, err, "Settings.Workers is 0", "one error naming every mistake")

	_, err = NewKindController(hs, client, s, namespaces(),
		KindReconcilerFunc[corev1.Namespace](func(context.Context, corev1.Namespace) (time.Duration, error) { return 0, nil }))
	require.ErrorContains(t, err, want)

	s = cacheShareSettings()
	s.LabelSelector = ShardLabel(s.Name) + "=replica-1"
	_, err = NewController(hs, client, s, widgets(), noopReconciler())
	require.ErrorContains(t, err, CheckSharding(s).Error())
}

func TestShardLabelIsThePrefixAndTheName(t *testing.T) {
	require.Equal(t, "shard.humus.kube/widget-controller", ShardLabel("widget-controller"))
}

// ShardLabels reads the reconcile's Controller from its context: nil
// outside a reconcile, in a worker's context (no Controller) and in a
// ReconcileTest's (no CacheShare), and without CacheShare; the member's
// identity under ShardLabel(Settings.Name) inside a reconcile with it, a
// new map on each call.
func TestShardLabelsAreTheMembersIdentityInsideAReconcileWithCacheShare(t *testing.T) {
	ctx := context.Background()
	require.Nil(t, ShardLabels(ctx), "outside a reconcile")
	require.Nil(t, ShardLabels(withLease(ctx, nil)), "a worker's context, before its reconcile")
	rt, err := NewReconcileTest(controllerName)
	require.NoError(t, err)
	require.Nil(t, ShardLabels(rt.Context(ctx)), "a ReconcileTest's Controller has no CacheShare")

	f := newFakeCluster(t)
	sharded := testSettings()
	sharded.Sharding.Enabled = true
	c := newWidgetController(t, f, humus.Telemetry{}, sharded, noopReconciler())
	require.Nil(t, ShardLabels(withReconciling(ctx, c, testNamespace+"/w1")), "Sharding without CacheShare")
	leader := newWidgetController(t, f, humus.Telemetry{}, testSettings(), noopReconciler())
	require.Nil(t, ShardLabels(withReconciling(ctx, leader, testNamespace+"/w1")), "a leader's")

	c = newWidgetController(t, f, humus.Telemetry{}, cacheShareSettings(), noopReconciler())
	rctx := withReconciling(ctx, c, testNamespace+"/w1")
	got := ShardLabels(rctx)
	require.Equal(t, map[string]string{"shard.humus.kube/widget-controller": "replica-1"}, got)
	got["app"] = "mine"
	require.Equal(t, map[string]string{"shard.humus.kube/widget-controller": "replica-1"}, ShardLabels(rctx), "a new map on each call")
}

// A Reconciler of a member with CacheShare on is handed a context whose
// ShardLabels are its member's: the labels its children should carry.
// The Widgets already carry the label of the one member, so the member
// has nothing to label.
func TestAReconcileOfAMemberWithCacheShareIsHandedItsShardLabels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := cacheShareSettings()
		w1, w2, w3 := newWidget("w1", 1), newWidget("w2", 2), newWidget("w3", 3)
		for _, w := range []interface{ SetLabels(map[string]string) }{w1, w2, w3} {
			w.SetLabels(map[string]string{ShardLabel(s.Name): s.LeaderElection.Identity})
		}
		f := newFakeCluster(t, w1, w2, w3)
		var mu sync.Mutex
		got := map[string]map[string]string{}
		rec := ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
			mu.Lock()
			defer mu.Unlock()
			got[w.Name] = ShardLabels(ctx)
			return Result[widgetStatus]{}, nil
		})
		c := newWidgetController(t, f, humus.Telemetry{}, s, rec)
		srv := serve(t, c)
		// The member takes its keys once it has acknowledged its first
		// view, at a renewal (every RetryPeriod, by synctest's clock).
		reconciled := func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(got)
		}
		for deadline := time.Now().Add(time.Minute); reconciled() < 3 && time.Now().Before(deadline); {
			time.Sleep(s.LeaderElection.RetryPeriod)
			synctest.Wait()
		}
		mu.Lock()
		want := map[string]string{"shard.humus.kube/widget-controller": "replica-1"}
		require.Equal(t, map[string]map[string]string{"w1": want, "w2": want, "w3": want}, got)
		mu.Unlock()
		require.NoError(t, srv.stop(t))
	})
}
