//go:build controlplane

package kube_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
)

// A Site names the Secret it serves with; its status is the Secret's v.
type siteSpec struct {
	SecretName string `json:"secretName"`
}

type siteStatus struct {
	Seen string `json:"seen,omitempty"`
}

type site = kube.Object[siteSpec, siteStatus]

var sites = kube.Resource[siteSpec, siteStatus]{
	Group:   "watches.humus.example.com",
	Version: "v1",
	Kind:    "Site",
	Plural:  "sites",
	Scope:   kube.Namespaced,
}

// siteReconcile is one reconcile a test's Reconciler saw.
type siteReconcile struct {
	name    string
	seen    string // the Secret's v, or "none"
	barrier string // the Site's barrier annotation
	at      time.Time
}

// siteReconciles is the reconciles so far, read in order.
type siteReconciles struct {
	ch   chan siteReconcile
	seen []siteReconcile
}

// await reads reconciles until one satisfies ok, and fails the test if
// none does within d.
func (r *siteReconciles) await(t *testing.T, d time.Duration, what string, ok func(siteReconcile) bool) siteReconcile {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case rec := <-r.ch:
			r.seen = append(r.seen, rec)
			if ok(rec) {
				return rec
			}
		case <-timeout:
			t.Fatalf("no reconcile within %v: %s; saw %v", d, what, r.seen)
		}
	}
}

// last is the last reconcile of name seen so far.
func (r *siteReconciles) last(name string) siteReconcile {
	for i := len(r.seen) - 1; i >= 0; i-- {
		if r.seen[i].name == name {
			return r.seen[i]
		}
	}
	return siteReconcile{}
}

func (r *siteReconciles) count(name string) int {
	n := 0
	for _, rec := range r.seen {
		if rec.name == name {
			n++
		}
	}
	return n
}

// TestWatchesAgainstTheAPIServer shows, on a real API server, with a
// ServiceAccount token bound to exactly the rules the docs list: a Site is
// reconciled within a second of the Secret it names changing or being
// deleted, with no After; a Site that no Secret maps to isn't; a label
// selector keeps unlabelled Sites out of the cache; and the Reconciler
// reads its Secret from the cache, with no GET of it.
func TestWatchesAgainstTheAPIServer(t *testing.T) {
	cluster, dyn, kc := startWithCRD(t, sites)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	// The controller's ServiceAccount, bound to the rules of "The RBAC a
	// Controller needs": its resource, its status, the Lease, Events, and
	// get, list and watch on the watched Secrets.
	const ns = "watches"
	_, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "site-controller"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kc.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "site-controller"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{sites.Group}, Resources: []string{"sites"}, Verbs: []string{"get", "list", "watch", "patch"}},
			{APIGroups: []string{sites.Group}, Resources: []string{"sites/status"}, Verbs: []string{"patch"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
			{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kc.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "site-controller"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "site-controller"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "site-controller", Namespace: ns}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	token, err := cluster.ServiceAccountToken(ctx, ns, "site-controller")
	require.NoError(t, err)

	secrets := kc.CoreV1().Secrets(ns)
	secret := func(v string) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "s1", Labels: map[string]string{"watches.humus.example.com/watched": "yes"}},
			Data:       map[string][]byte{"v": []byte(v)},
		}
	}
	_, err = secrets.Create(ctx, secret("1"), metav1.CreateOptions{})
	require.NoError(t, err)
	siteObjects := dyn.Resource(sites.GVR()).Namespace(ns)
	for _, s := range []struct{ name, shard, secret string }{
		{"a", "a", "s1"},
		{"b", "a", "missing"}, // no Secret maps to it
		{"c", "", "s1"},       // unlabelled: out of the controller's cache
	} {
		md := map[string]any{"name": s.name}
		if s.shard != "" {
			md["labels"] = map[string]any{"watches.humus.example.com/shard": s.shard}
		}
		_, err := siteObjects.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "watches.humus.example.com/v1",
			"kind":       "Site",
			"metadata":   md,
			"spec":       map[string]any{"secretName": s.secret},
		}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	tel := humustest.NewTelemetry(t)
	s := &humus.Setup{Host: humus.OSHost(), Telemetry: tel.Telemetry}
	client, err := kube.NewClient(s, kube.Connection{
		Server: cluster.Server,
		TLS:    cluster.TLS,
		Token:  func(context.Context) (string, error) { return token, nil },
	})
	require.NoError(t, err)
	settings := kube.DefaultSettings()
	settings.Name = "site-controller"
	settings.Namespace = ns
	settings.LabelSelector = "watches.humus.example.com/shard=a"
	settings.LeaderElection.Namespace = ns
	settings.LeaderElection.Identity = "replica-1"
	secretsGVR := corev1.SchemeGroupVersion.WithResource("secrets")
	recs := &siteReconciles{ch: make(chan siteReconcile, 1000)}
	ctrl, err := kube.NewController(s, client, settings, sites,
		kube.ReconcilerFunc[siteSpec, siteStatus](func(ctx context.Context, st site) (kube.Result[siteStatus], error) {
			secrets, err := kube.ListerFrom[corev1.Secret](ctx, secretsGVR)
			if err != nil {
				return kube.Result[siteStatus]{}, err
			}
			seen := "none"
			sec, err := secrets.Get(st.Namespace, st.Spec.SecretName)
			switch {
			case err == nil:
				seen = string(sec.Data["v"])
			case !apierrors.IsNotFound(err):
				return kube.Result[siteStatus]{}, err
			}
			recs.ch <- siteReconcile{name: st.Name, seen: seen, barrier: st.Annotations["barrier"], at: time.Now()}
			return kube.Result[siteStatus]{Status: &siteStatus{Seen: seen}}, nil
		}),
		kube.Watches(secretsGVR,
			kube.References(func(st site) []string { return []string{st.Spec.SecretName} }),
			kube.CacheObjects(),
			kube.LabelSelector("watches.humus.example.com/watched=yes")),
	)
	require.NoError(t, err)
	ownLister, err := kube.NewLister[site](ctrl, sites.GVR())
	require.NoError(t, err)

	served := make(chan error, 1)
	go func() { served <- ctrl.Serve(context.Background()) }()
	t.Cleanup(func() {
		_ = ctrl.Shutdown(context.Background())
	})

	// barrier annotates a, and waits for its reconcile, twice: the queue
	// hands out keys in order and there is one worker, so the first waits
	// out the reconcile in flight, and the second the changes its status
	// apply made, which the watch delivers before the second annotation.
	barrier := func(v string) {
		t.Helper()
		for _, v := range []string{v + "-1", v + "-2"} {
			_, err := siteObjects.Patch(ctx, "a", types.MergePatchType, []byte(`{"metadata":{"annotations":{"barrier":"`+v+`"}}}`), metav1.PatchOptions{})
			require.NoError(t, err)
			recs.await(t, 30*time.Second, "a after barrier "+v, func(r siteReconcile) bool { return r.name == "a" && r.barrier == v })
		}
	}

	// a and b are first reconciled in either order: await each, counting
	// what the other await already saw.
	recs.await(t, time.Minute, "a seeing v 1", func(r siteReconcile) bool { return r.name == "a" && r.seen == "1" })
	if recs.count("b") == 0 {
		recs.await(t, time.Minute, "b seeing no Secret", func(r siteReconcile) bool { return r.name == "b" && r.seen == "none" })
	}
	require.Equal(t, "none", recs.last("b").seen, "b, whose Secret doesn't exist, sees none")
	barrier("1")
	b := recs.count("b")

	// A change of the Secret reconciles a, which reads the new data from
	// the cache.
	start := time.Now()
	_, err = secrets.Update(ctx, secret("2"), metav1.UpdateOptions{})
	require.NoError(t, err)
	r := recs.await(t, time.Second, "a seeing v 2 within a second", func(r siteReconcile) bool { return r.name == "a" && r.seen == "2" })
	t.Logf("a reconciled %v after its Secret changed", r.at.Sub(start))

	// A deletion of the Secret too.
	start = time.Now()
	require.NoError(t, secrets.Delete(ctx, "s1", metav1.DeleteOptions{}))
	r = recs.await(t, time.Second, "a seeing its Secret deleted within a second", func(r siteReconcile) bool { return r.name == "a" && r.seen == "none" })
	t.Logf("a reconciled %v after its Secret was deleted", r.at.Sub(start))
	barrier("2")

	require.Equal(t, b, recs.count("b"), "b, which no Secret maps to, isn't reconciled")
	require.Zero(t, recs.count("c"), "c, which the label selector leaves out, is never reconciled")
	_, err = ownLister.Get(ns, "c")
	require.True(t, apierrors.IsNotFound(err), "c is not in the cache: %v", err)
	got, err := ownLister.Get(ns, "a")
	require.NoError(t, err)
	require.Equal(t, "s1", got.Spec.SecretName)

	// The Client's requests but its watches are spans (the informers list
	// through a watch, with client-go's watch-list): none read a Secret.
	secretGets := func() int {
		n := 0
		for _, sp := range tel.Spans() {
			for _, a := range sp.Attributes() {
				if strings.Contains(a.Value.Emit(), "/namespaces/"+ns+"/secrets/") {
					n++
				}
			}
		}
		return n
	}
	require.Zero(t, secretGets(), "the Reconciler read its Secret from the cache, never with a GET")
	// The count sees a GET through the Client, as it would the
	// Reconciler's.
	kcOfClient, err := kubernetes.NewForConfig(client.Config())
	require.NoError(t, err)
	_, err = kcOfClient.CoreV1().Secrets(ns).Get(ctx, "s1", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "%v", err)
	require.Equal(t, 1, secretGets())

	require.NoError(t, ctrl.Shutdown(ctx))
	require.NoError(t, <-served)
}
