//go:build controlplane

package conversion_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/log"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/httpserver"
)

// TestAControllerStartedWhileTheWebhookIsDownSyncsOnceItIsBack starts a
// kube Controller of the Gizmos at v1, the version not stored, while their
// conversion webhook is unreachable and v1's watch cache can't convert a
// change, as a controller restarted during the fault is. Its first list
// fails with a 500 naming the webhook: Serve ended with that error at
// once, so that the Controller never synced once the webhook was back,
// while a client-go informer started beside it did. Now the failure is
// logged, and the Controller syncs with the informer.
func TestAControllerStartedWhileTheWebhookIsDownSyncsOnceItIsBack(t *testing.T) {
	cluster := controlplanetest.Start(t)
	env := controlplanetest.NewEnv(t, cluster)
	ext, err := apiextensionsclient.NewForConfig(cluster.RESTConfig())
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cluster.RESTConfig())
	require.NoError(t, err)
	ctx := context.Background()
	ca, err := httpserver.NewAuthority(0, "127.0.0.1")
	require.NoError(t, err)
	server := serveWebhook(t, ca, nil)
	install(t, ext, gizmoCRD(t, webhookURL(server.addr), ca.CABundle()))
	ns := env.Namespace(t, "restart")
	createGizmos(t, dyn, ns, 4)
	_, err = gizmos(dyn, "v1", ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err, "v1's watch cache holds the Gizmos, converted")

	server.stop()
	label(t, dyn, ns, "gizmo-00001", "phase", "unreachable")
	controlplanetest.Eventually(t, 30*time.Second, "a list at v1 to fail", func(ctx context.Context) (bool, error) {
		_, err := gizmos(dyn, "v1", ns).List(ctx, metav1.ListOptions{})
		return err != nil, nil
	})
	fresh := startInformer(t, dyn, ns)
	restarted := startController(t, cluster, ns, "gizmo-controller-restarted")
	never(t, 5*time.Second, "the informer to sync while the webhook is down", fresh.inf.HasSynced)
	select {
	case err := <-restarted.served:
		restarted.served <- err // for the cleanup
		t.Fatalf("Serve returned while the webhook was down: %v", err)
	default:
	}
	require.ErrorContains(t, restarted.ctrl.Synced().Healthy(ctx), "its caches have not synced")
	var warned bool
	for _, r := range restarted.tel.Records() {
		if r.Severity() >= log.SeverityWarn {
			body := r.Body().AsString()
			require.Contains(t, body, "the first list failed", "the only warning")
			warned = true
		}
	}
	require.True(t, warned, "the Controller warns of its failed first list")

	server = serveWebhookAt(t, server.addr, ca, nil)
	controlplanetest.Eventually(t, 60*time.Second, "the informer started during the fault to sync", func(context.Context) (bool, error) {
		return fresh.inf.HasSynced(), nil
	})
	controlplanetest.Eventually(t, 60*time.Second, "the Controller started during the fault to sync and reconcile", func(ctx context.Context) (bool, error) {
		_, ok := restarted.size("gizmo-00001")
		return restarted.ctrl.Synced().Healthy(ctx) == nil && ok, nil
	})
	select {
	case err := <-restarted.served:
		restarted.served <- err // for the cleanup
		t.Fatalf("Serve returned: %v", err)
	default:
	}
}
