package kube_test

import (
	"context"
	"crypto/tls"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/kube"
)

// rbacOf builds, without connecting, a Controller of Memcached with
// settings and parts, and returns its RBAC.
func rbacOf(t *testing.T, settings kube.Settings, parts ...kube.Part) kube.RBAC {
	t.Helper()
	return rbacOfResource(t, Memcached, settings, parts...)
}

// rbacOfResource is rbacOf of a Controller of r.
func rbacOfResource(t *testing.T, r kube.Resource[MemcachedSpec, MemcachedStatus], settings kube.Settings, parts ...kube.Part) kube.RBAC {
	t.Helper()
	s := &humus.Setup{Host: humus.OSHost()}
	client, err := kube.NewClient(s, kube.Connection{Server: "127.0.0.1:6443", TLS: &tls.Config{}})
	require.NoError(t, err)
	rec := kube.ReconcilerFunc[MemcachedSpec, MemcachedStatus](func(context.Context, kube.Object[MemcachedSpec, MemcachedStatus]) (kube.Result[MemcachedStatus], error) {
		return kube.Result[MemcachedStatus]{}, nil
	})
	ctrl, err := kube.NewController(s, client, settings, r, rec, parts...)
	require.NoError(t, err)
	return ctrl.RBAC()
}

func rbacSettings() kube.Settings {
	s := kube.DefaultSettings()
	s.Name = "memcached-controller"
	s.LeaderElection.Namespace = "memcached-system"
	s.LeaderElection.Identity = "memcached-controller-0"
	return s
}

// TestMemcachedRBACYAML is the RBAC's golden test, as the CRD's: the
// Controller of the spec's Memcached, owning Deployments, watching the
// ConfigMaps its objects name and finalizing, with the Reconciler's own
// rules added, bound to its ServiceAccount. Rewrite it with -update.
func TestMemcachedRBACYAML(t *testing.T) {
	r := rbacOf(t, rbacSettings(),
		kube.Owns(appsv1.SchemeGroupVersion.WithResource("deployments")),
		kube.Watches(corev1.SchemeGroupVersion.WithResource("configmaps"),
			kube.References(func(m kube.Object[MemcachedSpec, MemcachedStatus]) []string { return []string{m.Spec.ConfigMapName} })),
		kube.Finalize("cache.example.com/finalizer", func(context.Context, kube.Object[MemcachedSpec, MemcachedStatus]) error { return nil }),
	)
	// The Reconciler's own: it applies Deployments (an apply that creates
	// is checked for create too).
	r.Add("", rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"patch", "create"}})
	got, err := r.YAML("memcached-system", "memcached-controller")
	require.NoError(t, err)
	const golden = "testdata/memcacheds.rbac.yaml"
	if *update {
		require.NoError(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
}

// TestControllerRBAC pins the rules each of a Controller's parts and
// settings adds, and where they go.
func TestControllerRBAC(t *testing.T) {
	rule := func(group, resource string, verbs ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{resource}, Verbs: verbs}
	}
	leases := rule("coordination.k8s.io", "leases", "create", "get", "update")
	events := rule("events.k8s.io", "events", "create", "patch")
	status := rule("cache.example.com", "memcacheds/status", "patch")

	t.Run("AloneItListsWatchesAndAppliesStatus", func(t *testing.T) {
		r := rbacOf(t, rbacSettings())
		require.Equal(t, "memcached-controller", r.ClusterRole.Name)
		require.Equal(t, []rbacv1.PolicyRule{
			rule("cache.example.com", "memcacheds", "list", "watch"),
			status,
			events,
		}, r.ClusterRole.Rules)
		require.Len(t, r.Roles, 1)
		require.Equal(t, "memcached-controller-leader-election", r.Roles[0].Name)
		require.Equal(t, "memcached-system", r.Roles[0].Namespace)
		require.Equal(t, []rbacv1.PolicyRule{leases}, r.Roles[0].Rules)
	})

	t.Run("ANamespaceMakesItARole", func(t *testing.T) {
		s := rbacSettings()
		s.Namespace = "tenant"
		r := rbacOf(t, s, kube.Watches(corev1.SchemeGroupVersion.WithResource("secrets"),
			kube.References(func(m kube.Object[MemcachedSpec, MemcachedStatus]) []string { return nil })))
		require.Nil(t, r.ClusterRole)
		require.Len(t, r.Roles, 2)
		require.Equal(t, "memcached-system", r.Roles[0].Namespace)
		require.Equal(t, []rbacv1.PolicyRule{leases}, r.Roles[0].Rules)
		require.Equal(t, "tenant", r.Roles[1].Namespace)
		require.Equal(t, "memcached-controller", r.Roles[1].Name)
		require.Equal(t, []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list", "watch"}},
			rule("cache.example.com", "memcacheds", "list", "watch"),
			status,
			events,
		}, r.Roles[1].Rules)
	})

	t.Run("PruneGetsAndDeletesAndAppliesTheParent", func(t *testing.T) {
		parent := Memcached
		parent.Labels = map[string]string{kube.ApplySetParentTypeLabel: "true"}
		r := rbacOfResource(t, parent, rbacSettings(),
			kube.Owns(appsv1.SchemeGroupVersion.WithResource("deployments"), kube.Prune()),
			kube.Owns(batchv1.SchemeGroupVersion.WithResource("jobs"), kube.PruneDryRun()),
		)
		require.Equal(t, []rbacv1.PolicyRule{
			rule("apps", "deployments", "delete", "get", "list", "watch"),
			rule("batch", "jobs", "get", "list", "watch"),
			rule("cache.example.com", "memcacheds", "list", "patch", "watch"),
			rule("cache.example.com", "memcacheds/finalizers", "update"),
			status,
			events,
		}, r.ClusterRole.Rules)
	})

	t.Run("ShardingListsWatchesAndDeletesLeases", func(t *testing.T) {
		s := rbacSettings()
		s.Sharding.Enabled = true
		r := rbacOf(t, s)
		require.Equal(t, []rbacv1.PolicyRule{rule("coordination.k8s.io", "leases", "create", "delete", "get", "list", "update", "watch")}, r.Roles[0].Rules)
	})

	t.Run("CacheSharePatchesTheShardLabelOnTheResourceAndEachOwns", func(t *testing.T) {
		s := rbacSettings()
		s.Sharding.Enabled = true
		s.Sharding.CacheShare = true
		r := rbacOf(t, s,
			kube.Owns(appsv1.SchemeGroupVersion.WithResource("deployments")),
			kube.Owns(batchv1.SchemeGroupVersion.WithResource("jobs")),
			kube.Watches(corev1.SchemeGroupVersion.WithResource("configmaps"),
				kube.References(func(m kube.Object[MemcachedSpec, MemcachedStatus]) []string { return nil })))
		require.Equal(t, []rbacv1.PolicyRule{
			rule("", "configmaps", "list", "watch"), // a Watches' objects carry no label: unchanged
			rule("apps", "deployments", "list", "patch", "watch"),
			rule("batch", "jobs", "list", "patch", "watch"),
			rule("cache.example.com", "memcacheds", "list", "patch", "watch"),
			rule("cache.example.com", "memcacheds/finalizers", "update"),
			status,
			events,
		}, r.ClusterRole.Rules)
		require.Equal(t, []rbacv1.PolicyRule{rule("coordination.k8s.io", "leases", "create", "delete", "get", "list", "update", "watch")}, r.Roles[0].Rules, "the Leases' are Sharding's")

		s.Sharding.CacheShare = false
		off := rbacOf(t, s, kube.Owns(appsv1.SchemeGroupVersion.WithResource("deployments")))
		require.Equal(t, []rbacv1.PolicyRule{
			rule("apps", "deployments", "list", "watch"),
			rule("cache.example.com", "memcacheds", "list", "watch"),
			rule("cache.example.com", "memcacheds/finalizers", "update"),
			status,
			events,
		}, off.ClusterRole.Rules, "without CacheShare, no patch")
	})

	t.Run("MigrateStorageReadsAndUpdatesItsCRDsStatus", func(t *testing.T) {
		s := rbacSettings()
		s.MigrateStorage = true
		r := rbacOf(t, s)
		require.Equal(t, []rbacv1.PolicyRule{
			{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions/status"}, ResourceNames: []string{"memcacheds.cache.example.com"}, Verbs: []string{"get", "update"}},
			rule("cache.example.com", "memcacheds", "list", "patch", "watch"),
			status,
			events,
		}, r.ClusterRole.Rules)
	})

	t.Run("AClusterScopedKindsEventsGoToDefault", func(t *testing.T) {
		s := &humus.Setup{Host: humus.OSHost()}
		client, err := kube.NewClient(s, kube.Connection{Server: "127.0.0.1:6443", TLS: &tls.Config{}})
		require.NoError(t, err)
		ctrl, err := kube.NewKindController(s, client, rbacSettings(),
			kube.Kind[corev1.Namespace]{GVR: corev1.SchemeGroupVersion.WithResource("namespaces"), Kind: "Namespace", Scope: kube.Cluster},
			kube.KindReconcilerFunc[corev1.Namespace](func(context.Context, corev1.Namespace) (time.Duration, error) { return 0, nil }))
		require.NoError(t, err)
		r := ctrl.RBAC()
		// No status: a Kind's isn't the controller's to apply.
		require.Equal(t, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"list", "watch"}}}, r.ClusterRole.Rules)
		require.Len(t, r.Roles, 2)
		require.Equal(t, "default", r.Roles[0].Namespace)
		require.Equal(t, "memcached-controller", r.Roles[0].Name)
		require.Equal(t, []rbacv1.PolicyRule{events}, r.Roles[0].Rules)
		require.Equal(t, "memcached-system", r.Roles[1].Namespace)
	})
}

// TestRBACAddMergesAsControllerGen: Add merges a rule's verbs into one of
// the same groups, resources and names, puts the resources of rules alike
// but for them in one rule, and sorts as controller-gen does.
func TestRBACAddMergesAsControllerGen(t *testing.T) {
	r := kube.RBAC{Name: "x"}
	r.Add("",
		rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"watch", "list"}},
		rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list"}},
		rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"statefulsets", "daemonsets"}, Verbs: []string{"get", "list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"b", "a"}, Verbs: []string{"get"}},
		rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}},
	)
	require.Equal(t, []rbacv1.PolicyRule{
		{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"a", "b"}, Verbs: []string{"get"}},
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets", "deployments", "statefulsets"}, Verbs: []string{"get", "list", "watch"}},
	}, r.ClusterRole.Rules)
	r.Add("ns", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}})
	require.Equal(t, "x", r.Roles[0].Name)
	require.Equal(t, "ns", r.Roles[0].Namespace)
}
