//go:build controlplane

package conversion_test

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/log"
	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/z5labs/humus/controlplane"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/httpserver"
)

// informer is a client-go informer of the Gizmos at v1, the version that
// is not stored, as a controller that reconciles v1 has one, and the
// errors its reflector reported.
type informer struct {
	inf  cache.SharedIndexInformer
	mu   sync.Mutex
	errs []string
}

func startInformer(t *testing.T, dyn dynamic.Interface, ns string) *informer {
	t.Helper()
	i := &informer{inf: dynamicinformer.NewFilteredDynamicInformer(dyn,
		schema.GroupVersionResource{Group: "conversion.example.com", Version: "v1", Resource: "gizmos"}, ns, 0, cache.Indexers{}, nil).Informer()}
	require.NoError(t, i.inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		i.mu.Lock()
		defer i.mu.Unlock()
		i.errs = append(i.errs, err.Error())
	}))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		i.inf.Run(stop)
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
	})
	return i
}

// errors returns the errors the reflector reported so far.
func (i *informer) errors() []string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return append([]string(nil), i.errs...)
}

// label returns the label key of the Gizmo name in the informer's cache.
func (i *informer) label(t *testing.T, ns, name, key string) string {
	t.Helper()
	o, ok, err := i.inf.GetStore().GetByKey(ns + "/" + name)
	require.NoError(t, err)
	require.True(t, ok, "%s in the informer's cache", name)
	return o.(*unstructured.Unstructured).GetLabels()[key]
}

// never fails the test if cond holds at any check in the next d: what is
// asserted is that something does not happen.
func never(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		require.False(t, cond(), what)
		time.Sleep(100 * time.Millisecond)
	}
}

// kubectl runs kubectl with the cluster's kubeconfig, and returns its
// output and whether it succeeded.
func kubectl(t *testing.T, cluster *controlplane.Cluster, args ...string) (string, bool) {
	t.Helper()
	out, err := exec.Command("kubectl", append([]string{"--kubeconfig", cluster.Kubeconfig}, args...)...).CombinedOutput()
	return string(out), err == nil
}

// label sets the label key of the Gizmo name in ns to value, at v2, the
// storage version: no conversion.
func label(t *testing.T, dyn dynamic.Interface, ns, name, key, value string) {
	t.Helper()
	_, err := gizmos(dyn, "v2", ns).Patch(context.Background(), name, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"`+key+`":"`+value+`"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
}

// TestConversionWebhookFaults runs the Gizmos' webhook, v2 the storage
// version, and breaks it three ways: unreachable, slower than the API
// server's 30-second webhook timeout, and answering Failed for one object.
// For each it checks what a client reading and writing at each version
// sees, what kubectl get sees, what an informer of v1 (as a controller
// reconciling v1 has) sees, and, unreachable, what the garbage collector
// does with a child of a deleted Gizmo; and that everything comes back
// when the webhook does. docs/writing-a-kubernetes-controller.md ("Conversion
// webhook: certificates and faults") says the same in words.
func TestConversionWebhookFaults(t *testing.T) {
	cluster := controlplanetest.Start(t)
	env := controlplanetest.NewEnv(t, cluster)
	ext, err := apiextensionsclient.NewForConfig(cluster.RESTConfig())
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cluster.RESTConfig())
	require.NoError(t, err)
	ctx := context.Background()

	ca, err := httpserver.NewAuthority(0, "127.0.0.1")
	require.NoError(t, err)
	f := &faults{}
	server := serveWebhook(t, ca, f)
	install(t, ext, gizmoCRD(t, webhookURL(server.addr), ca.CABundle()))
	// So that the garbage collector watches Gizmos at once.
	require.NoError(t, cluster.RestartControllerManager(ctx))
	ns := env.Namespace(t, "faults")
	parent := t
	createGizmos(t, dyn, ns, 4)
	watching := startInformer(t, dyn, ns)
	reconciling := startController(t, cluster, ns, "gizmo-controller")
	controlplanetest.Eventually(t, 30*time.Second, "the kube Controller of v1 to sync and reconcile", func(ctx context.Context) (bool, error) {
		_, ok := reconciling.size("gizmo-00001")
		return reconciling.ctrl.Synced().Healthy(ctx) == nil && ok, nil
	})
	controlplanetest.Eventually(t, 30*time.Second, "the informer of v1 to sync", func(context.Context) (bool, error) {
		return watching.inf.HasSynced(), nil
	})
	// recovered waits until a list at v1 succeeds and the informer has
	// the label key=value on gizmo-00001.
	recovered := func(t *testing.T, key, value string) {
		t.Helper()
		controlplanetest.Eventually(t, 90*time.Second, "the webhook's fault to be over", func(ctx context.Context) (bool, error) {
			_, err := gizmos(dyn, "v1", ns).List(ctx, metav1.ListOptions{})
			return err == nil && watching.label(t, ns, "gizmo-00001", key) == value, nil
		})
	}

	require.True(t, t.Run("unreachable", func(t *testing.T) {
		// A child whose ownerReference names the Gizmo at v1.
		owner, err := gizmos(dyn, "v2", ns).Get(ctx, "gizmo-00003", metav1.GetOptions{})
		require.NoError(t, err)
		_, err = env.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "child",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "conversion.example.com/v1", Kind: "Gizmo", Name: owner.GetName(), UID: owner.GetUID()}}}},
			metav1.CreateOptions{})
		require.NoError(t, err)
		server.stop()

		// A read or write at v1 fails at once, naming the webhook.
		_, err = gizmos(dyn, "v1", ns).Get(ctx, "gizmo-00001", metav1.GetOptions{})
		require.True(t, apierrors.IsInternalError(err), "get at v1: %v", err)
		require.ErrorContains(t, err, "conversion webhook")
		require.ErrorContains(t, err, "connection refused")
		_, err = gizmos(dyn, "v1", ns).Patch(ctx, "gizmo-00002", types.MergePatchType, []byte(`{"spec":{"size":7}}`), metav1.PatchOptions{})
		require.ErrorContains(t, err, "conversion webhook", "a write at v1")
		// At v2, the storage version, nothing is converted.
		_, err = gizmos(dyn, "v2", ns).Get(ctx, "gizmo-00001", metav1.GetOptions{})
		require.NoError(t, err)
		out, ok := kubectl(t, cluster, "get", "gizmos.v2.conversion.example.com", "-n", ns)
		require.True(t, ok, out)
		require.Contains(t, out, "gizmo-00001")
		out, ok = kubectl(t, cluster, "get", "gizmos.v1.conversion.example.com", "gizmo-00001", "-n", ns)
		require.False(t, ok, out)
		require.Contains(t, out, "conversion webhook", out)

		// A change stored at v2 reaches no watch at v1: lists at v1 fail
		// once the API server's watch cache of v1 fails to convert it,
		// and the informer, synced, reports no error and keeps the old
		// object: its cache is stale, silently.
		label(t, dyn, ns, "gizmo-00001", "phase", "unreachable")
		controlplanetest.Eventually(t, 30*time.Second, "a list at v1 to fail", func(ctx context.Context) (bool, error) {
			_, err := gizmos(dyn, "v1", ns).List(ctx, metav1.ListOptions{})
			return err != nil, nil
		})
		out, ok = kubectl(t, cluster, "get", "gizmos.v1.conversion.example.com", "-n", ns)
		require.False(t, ok, out)
		require.Contains(t, out, "conversion webhook", out)
		require.True(t, watching.inf.HasSynced())
		require.Empty(t, watching.label(t, ns, "gizmo-00001", "phase"), "the informer's cache has the old object")
		require.Empty(t, watching.errors(), "the informer's reflector reports nothing")

		// A list at the latest revision (no resourceVersion) reads etcd,
		// and fails; one at resourceVersion 0, which the watch cache
		// answers, is served stale. An informer started now (a controller
		// restarted) doesn't sync, and its reflector reports no error:
		// client-go's informers list through a watch (WatchList), which
		// waits for the watch cache to reach the latest revision.
		_, err = gizmos(dyn, "v1", ns).List(ctx, metav1.ListOptions{})
		require.ErrorContains(t, err, "conversion webhook", "a list at v1")
		stale, err := gizmos(dyn, "v1", ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		require.NoError(t, err, "a list at v1 from the watch cache")
		for _, o := range stale.Items {
			require.Empty(t, o.GetLabels()["phase"], "the watch cache's list is stale")
		}
		fresh := startInformer(t, dyn, ns)
		restarted := startController(t, cluster, ns, "gizmo-controller-restarted")
		never(t, 10*time.Second, "the new informer to sync", fresh.inf.HasSynced)
		require.Empty(t, fresh.errors())
		// A kube Controller of v1 likewise: the one synced before stays
		// Synced and doesn't see the change (a new spec.size, at v2); one
		// started now doesn't sync, and warns only of its first list.
		_, err = gizmos(dyn, "v2", ns).Patch(ctx, "gizmo-00001", types.MergePatchType, []byte(`{"spec":{"replicas":41}}`), metav1.PatchOptions{})
		require.NoError(t, err)
		never(t, 5*time.Second, "the Controller synced before to see spec.size 41", func() bool {
			size, _ := reconciling.size("gizmo-00001")
			return size == 41 || reconciling.ctrl.Synced().Healthy(ctx) != nil
		})
		require.ErrorContains(t, restarted.ctrl.Synced().Healthy(ctx), "its caches have not synced")
		for _, r := range restarted.tel.Records() {
			if r.Severity() >= log.SeverityWarn {
				require.Contains(t, r.Body().AsString(), "the first list failed", "the only warning")
			}
		}

		// The garbage collector deletes the child of a Gizmo deleted (at
		// v2): it watches Gizmos at their preferred version, v2, the
		// storage version, and its check of the owner named at v1 is
		// answered NotFound, with nothing to convert.
		require.NoError(t, gizmos(dyn, "v2", ns).Delete(ctx, "gizmo-00003", metav1.DeleteOptions{}))
		controlplanetest.Eventually(t, 60*time.Second, "the garbage collector to delete the child", func(ctx context.Context) (bool, error) {
			_, err := env.Kube.CoreV1().ConfigMaps(ns).Get(ctx, "child", metav1.GetOptions{})
			return apierrors.IsNotFound(err), controlplanetest.IgnoreNotFound(err)
		})

		// Back: the stale informer catches up, the new one syncs.
		server = serveWebhookAt(parent, server.addr, ca, f) // serving after this subtest

		recovered(t, "phase", "unreachable")
		controlplanetest.Eventually(t, 60*time.Second, "the new informer to sync", func(context.Context) (bool, error) {
			return fresh.inf.HasSynced(), nil
		})
		controlplanetest.Eventually(t, 60*time.Second, "the Controller synced before to reconcile spec.size 41", func(ctx context.Context) (bool, error) {
			size, _ := reconciling.size("gizmo-00001")
			return size == 41, nil
		})
		controlplanetest.Eventually(t, 60*time.Second, "the Controller started during the fault to sync", func(ctx context.Context) (bool, error) {
			return restarted.ctrl.Synced().Healthy(ctx) == nil, nil
		})
	}))

	require.True(t, t.Run("slower than the timeout", func(t *testing.T) {
		f.delay.Store(int64(35 * time.Second))
		defer f.delay.Store(0)
		// The API server gives up on a webhook after 30 seconds.
		start := time.Now()
		_, err := gizmos(dyn, "v1", ns).Patch(ctx, "gizmo-00002", types.MergePatchType, []byte(`{"spec":{"size":8}}`), metav1.PatchOptions{})
		took := time.Since(start)
		require.ErrorContains(t, err, "conversion webhook", "a write at v1")
		// The webhook client's 30 s bound, as the context's deadline or
		// the http.Client's Timeout, whichever fires first.
		require.True(t, strings.Contains(err.Error(), "context deadline exceeded") || strings.Contains(err.Error(), "Client.Timeout exceeded"), "%v", err)
		require.GreaterOrEqual(t, took, 29*time.Second)
		// A caller's own shorter timeout (kubectl's --request-timeout,
		// sent as ?timeout=) bounds the webhook's call too.
		start = time.Now()
		out, ok := kubectl(t, cluster, "get", "gizmos.v1.conversion.example.com", "gizmo-00001", "-n", ns, "--request-timeout=5s")
		require.False(t, ok, out)
		require.Less(t, time.Since(start), 25*time.Second, out)
		// v2 needs no webhook.
		out, ok = kubectl(t, cluster, "get", "gizmos.v2.conversion.example.com", "gizmo-00001", "-n", ns, "--request-timeout=5s")
		require.True(t, ok, out)
		label(t, dyn, ns, "gizmo-00001", "phase", "slow")
		f.delay.Store(0)
		recovered(t, "phase", "slow")
	}))

	t.Run("Failed for one object", func(t *testing.T) {
		bad := "gizmo-00001"
		f.fail.Store(&bad)
		defer f.fail.Store(nil)
		// That object, read at v1, fails with the webhook's message; the
		// others don't.
		_, err := gizmos(dyn, "v1", ns).Get(ctx, bad, metav1.GetOptions{})
		require.True(t, apierrors.IsInternalError(err), "get at v1: %v", err)
		require.ErrorContains(t, err, "the gizmo gizmo-00001 can't be converted")
		_, err = gizmos(dyn, "v1", ns).Get(ctx, "gizmo-00002", metav1.GetOptions{})
		require.NoError(t, err)
		// Once it changes, the list at v1 fails whole, kubectl's too, and
		// the informer keeps the old object, synced, with no error.
		label(t, dyn, ns, bad, "phase", "failed")
		controlplanetest.Eventually(t, 30*time.Second, "a list at v1 to fail", func(ctx context.Context) (bool, error) {
			_, err := gizmos(dyn, "v1", ns).List(ctx, metav1.ListOptions{})
			return err != nil && strings.Contains(err.Error(), "can't be converted"), nil
		})
		out, ok := kubectl(t, cluster, "get", "gizmos.v1.conversion.example.com", "-n", ns)
		require.False(t, ok, out)
		require.Contains(t, out, "gizmo-00001 can't be converted", out)
		out, ok = kubectl(t, cluster, "get", "gizmos.v2.conversion.example.com", "-n", ns)
		require.True(t, ok, out)
		require.True(t, watching.inf.HasSynced())
		require.Equal(t, "slow", watching.label(t, ns, bad, "phase"), "the informer's cache has the old object")
		f.fail.Store(nil)
		recovered(t, "phase", "failed")
	})
	require.Empty(t, watching.errors(), "the informer's reflector reported no error through any fault")
}
