//go:build controlplane

package kube

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/humustest"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// clusterClient is a Client of the cluster on a Host that dials the real
// network, with in-memory telemetry and a fake clock for its tokens.
type clusterClient struct {
	client *Client
	kube   kubernetes.Interface
	tel    *humustest.Telemetry
	clock  *fakeClock
}

func newClusterClient(t *testing.T, c *controlplane.Cluster, token func(context.Context) (string, error)) *clusterClient {
	t.Helper()
	cc := &clusterClient{tel: humustest.NewTelemetry(t), clock: &fakeClock{now: time.Now()}}
	var d net.Dialer
	s := &humus.Setup{Host: humus.Host{Dial: d.DialContext}, Telemetry: cc.tel.Telemetry}
	client, err := NewClient(s, Connection{Server: c.Server, TLS: c.TLS, Token: token})
	require.NoError(t, err)
	if client.transport.tokens != nil {
		client.transport.tokens.now = cc.clock.Now
	}
	t.Cleanup(client.transport.CloseIdleConnections)
	cc.client = client
	cc.kube, err = kubernetes.NewForConfig(client.Config())
	require.NoError(t, err)
	return cc
}

func staticToken(token string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) { return token, nil }
}

// createTestNamespace creates a namespace for the test with the admin clientset,
// and deletes it when the test ends.
func createTestNamespace(t *testing.T, admin kubernetes.Interface) string {
	t.Helper()
	ns, err := admin.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kube-connecting-"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = admin.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

func TestClientAgainstTheAPIServer(t *testing.T) {
	c := controlplanetest.Start(t)
	admin, err := kubernetes.NewForConfig(c.RESTConfig())
	require.NoError(t, err)

	t.Run("ListsNamespacesWithTheAdminToken", func(t *testing.T) {
		if c.Token == "" {
			t.Skip("the cluster's admin authenticates without a token")
		}
		cc := newClusterClient(t, c, staticToken(c.Token))
		list, err := cc.kube.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		var names []string
		for _, ns := range list.Items {
			names = append(names, ns.Name)
		}
		require.Contains(t, names, "default")
		require.Contains(t, names, "kube-system")
		require.NotEmpty(t, cc.tel.Spans(), "the request is traced")
	})

	t.Run("NegotiatesHTTP2", func(t *testing.T) {
		cc := newClusterClient(t, c, staticToken(c.Token))
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+c.Server+"/version", nil)
		require.NoError(t, err)
		resp, err := cc.client.Config().Transport.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, 2, resp.ProtoMajor)
	})

	t.Run("GetsForbiddenWithATokenThatHasNoRBAC", func(t *testing.T) {
		ns := createTestNamespace(t, admin)
		_, err := admin.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "no-rbac"}}, metav1.CreateOptions{})
		require.NoError(t, err)
		token, err := c.ServiceAccountToken(t.Context(), ns, "no-rbac")
		require.NoError(t, err)

		cc := newClusterClient(t, c, staticToken(token))
		_, err = cc.kube.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
		require.True(t, apierrors.IsForbidden(err), "got %v", err)
		require.ErrorContains(t, err, "system:serviceaccount:"+ns+":no-rbac", "the server saw the ServiceAccount's token")
	})

	t.Run("WatchStaysOpenAcrossATokenRotation", func(t *testing.T) {
		testWatchAcrossATokenRotation(t, c, admin)
	})
}

// testWatchAcrossATokenRotation opens a watch with one ServiceAccount token,
// rotates to a second a minute later (on the Client's fakeClock), then makes
// the first token invalid by deleting the Secret it is bound to. The watch
// still delivers an event created after all that, and a later request
// succeeds, which it could only do with the second token.
func testWatchAcrossATokenRotation(t *testing.T, c *controlplane.Cluster, admin kubernetes.Interface) {
	ctx := t.Context()
	ns := createTestNamespace(t, admin)
	_, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "watcher"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "watcher"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "watcher"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "watcher"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "watcher"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	// The first token is bound to a Secret: deleting it invalidates the
	// token, as a pod's deletion invalidates its projected token.
	binding, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "first-token-binding"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "watcher", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{
			Kind: "Secret", APIVersion: "v1", Name: binding.Name, UID: binding.UID,
		}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	first := tr.Status.Token
	second, err := c.ServiceAccountToken(ctx, ns, "watcher")
	require.NoError(t, err)

	var current atomic.Pointer[string]
	current.Store(&first)
	var calls atomic.Int32
	cc := newClusterClient(t, c, func(context.Context) (string, error) {
		calls.Add(1)
		return *current.Load(), nil
	})
	cms := cc.kube.CoreV1().ConfigMaps(ns)

	// RBAC reaches the authorizer through its informers: await it.
	var rv string
	require.Eventually(t, func() bool {
		list, err := cms.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		rv = list.ResourceVersion
		return true
	}, 30*time.Second, 50*time.Millisecond, "the RoleBinding never took effect")

	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	require.NoError(t, err)
	defer w.Stop()
	create := func(name string) {
		t.Helper()
		_, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	await := func(name string) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case ev, ok := <-w.ResultChan():
				require.True(t, ok, "the watch closed")
				require.NotEqual(t, watch.Error, ev.Type, "watch error: %v", ev.Object)
				if ev.Type == watch.Added && ev.Object.(*corev1.ConfigMap).Name == name {
					return
				}
			case <-timeout:
				t.Fatalf("no ADDED event for %s", name)
			}
		}
	}
	create("before-rotation")
	await("before-rotation")
	require.EqualValues(t, 1, calls.Load())

	// Rotate: a minute on, the Client calls Token again and gets the second.
	current.Store(&second)
	cc.clock.Advance(time.Minute)
	_, err = cms.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 2, calls.Load())

	// Invalidate the first token, and await the server refusing it:
	// kube-apiserver caches a token's success for 10s, so the refusal comes
	// up to 10s after the deletion (10.1s in a run against v1.37.2).
	require.NoError(t, admin.CoreV1().Secrets(ns).Delete(ctx, binding.Name, metav1.DeleteOptions{}))
	onlyFirst := newClusterClient(t, c, staticToken(first))
	require.Eventually(t, func() bool {
		_, err := onlyFirst.kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		return apierrors.IsUnauthorized(err)
	}, 30*time.Second, 100*time.Millisecond, "the first token stayed valid after its Secret was deleted")

	// The watch opened with the first token still delivers.
	create("after-rotation")
	await("after-rotation")

	// A later request carries the second token: with the first, it would
	// be refused as Unauthorized.
	_, err = cms.Get(ctx, "after-rotation", metav1.GetOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 2, calls.Load())
}
