//go:build controlplane

package kube_test

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// clusterClient is a Client of the cluster on a Host that dials the real
// network, with in-memory telemetry.
type clusterClient struct {
	client *kube.Client
	kube   kubernetes.Interface
	tel    *humustest.Telemetry
}

func newClusterClient(t *testing.T, c *controlplane.Cluster, token func(context.Context) (string, error)) *clusterClient {
	t.Helper()
	cc := &clusterClient{tel: humustest.NewTelemetry(t)}
	var d net.Dialer
	s := &humus.Setup{Host: humus.Host{Dial: d.DialContext}, Telemetry: cc.tel.Telemetry}
	client, err := kube.NewClient(s, kube.Connection{Server: c.Server, TLS: c.TLS, Token: token})
	require.NoError(t, err)
	t.Cleanup(client.CloseIdleConnections)
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

	t.Run("WatchOutlivesTheTokenItWasOpenedWith", func(t *testing.T) {
		testWatchOutlivesItsToken(t, c, admin)
	})
}

// testWatchOutlivesItsToken opens a watch through a Client with a
// ServiceAccount token bound to a Secret, then makes the token invalid by
// deleting the Secret, as a pod's deletion invalidates its projected token.
// The watch still delivers an event created after that: the API server
// authenticates a request when it arrives, so a watch outlives the token it
// was opened with, and the Client, which calls Connection.Token again a
// minute on and sends the new token on later requests (package kube's
// TestTokenIsCalledAtMostOnceAMinute, on a fake clock), need not reopen its
// watches when the kubelet rotates the token.
func testWatchOutlivesItsToken(t *testing.T, c *controlplane.Cluster, admin kubernetes.Interface) {
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

	// The token is bound to a Secret: deleting it invalidates the token.
	binding, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "token-binding"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "watcher", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{
			Kind: "Secret", APIVersion: "v1", Name: binding.Name, UID: binding.UID,
		}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	token := tr.Status.Token

	cc := newClusterClient(t, c, staticToken(token))
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
	create("before-invalidation")
	await("before-invalidation")

	// Invalidate the token, and await the server refusing it: kube-apiserver
	// caches a token's success for 10s, so the refusal comes up to 10s after
	// the deletion (10.1s in a run against v1.37.2).
	require.NoError(t, admin.CoreV1().Secrets(ns).Delete(ctx, binding.Name, metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		_, err := cms.List(ctx, metav1.ListOptions{})
		return apierrors.IsUnauthorized(err)
	}, 30*time.Second, 100*time.Millisecond, "the token stayed valid after its Secret was deleted")

	// The watch opened with it still delivers.
	create("after-invalidation")
	await("after-invalidation")
}
