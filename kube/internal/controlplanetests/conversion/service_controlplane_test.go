//go:build controlplane

package conversion_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/conversion"
	"github.com/z5labs/humus/kube/webhookcert"
)

// hostIP returns a non-loopback IPv4 address of this machine, or skips
// the test when it has none.
func hostIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("this machine has no non-loopback IPv4 address for an endpoint")
	return ""
}

// TestTheAPIServerConvertsThroughAService calls the webhook as a deployed
// App's is called: the CRD's clientConfig names a Service,
// gizmo-webhooks.default.svc, the name the serving certificate
// (webhookcert's, App-managed) is for. The local control plane has no
// kube-proxy, so a Service's ClusterIP routes nowhere; started with
// --enable-aggregator-routing=true, the API server resolves a webhook's
// Service to one of its EndpointSlices' ready addresses instead (as it
// does for aggregated APIs), which this test writes by hand, as the
// endpoint-slice controller would for a pod: the webhook's listener on
// this machine's own non-loopback address, since an EndpointSlice refuses
// a loopback one, checked here too.
func TestTheAPIServerConvertsThroughAService(t *testing.T) {
	if controlplanetest.External() {
		t.Skip("an existing cluster's API server may not reach this machine's address")
	}
	ip := hostIP(t)
	cluster := controlplanetest.Start(t, controlplanetest.WithAPIServerFlags("--enable-aggregator-routing=true"))
	env := controlplanetest.NewEnv(t, cluster)
	ext, err := apiextensionsclient.NewForConfig(cluster.RESTConfig())
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cluster.RESTConfig())
	require.NoError(t, err)
	ctx := t.Context()

	s := &humus.Setup{Host: humus.OSHost(), Telemetry: humustest.NewTelemetry(t).Telemetry}
	client, err := kube.NewClient(s, kube.Connection{Server: cluster.Server, TLS: cluster.TLS,
		Token: func(context.Context) (string, error) { return cluster.Token, nil }})
	require.NoError(t, err)
	t.Cleanup(client.CloseIdleConnections)
	certs, err := webhookcert.New(s, client, webhookcert.Config{Namespace: "default", Secret: "gizmo-webhook-cert",
		Hosts: []string{"gizmo-webhooks.default.svc"}, CRDs: []string{"gizmos.conversion.example.com"}})
	require.NoError(t, err)
	server := serveWebhookAt(t, net.JoinHostPort(ip, "0"), certs, nil)
	_, portText, err := net.SplitHostPort(server.addr)
	require.NoError(t, err)
	port, err := strconv.Atoi(portText)
	require.NoError(t, err)

	_, err = env.Kube.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "gizmo-webhooks"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(int32(port))}}}},
		metav1.CreateOptions{})
	require.NoError(t, err)
	slice := func(addr string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{GenerateName: "gizmo-webhooks-", Labels: map[string]string{discoveryv1.LabelServiceName: "gizmo-webhooks"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port))}},
		}
	}
	_, err = env.Kube.DiscoveryV1().EndpointSlices("default").Create(ctx, slice("127.0.0.1"), metav1.CreateOptions{})
	require.ErrorContains(t, err, "may not be in the loopback range")
	_, err = env.Kube.DiscoveryV1().EndpointSlices("default").Create(ctx, slice(ip), metav1.CreateOptions{})
	require.NoError(t, err)

	crd := gizmoCRD(t, "https://unused", nil)
	crd.Spec.Conversion.Webhook.ClientConfig.URL = nil
	crd.Spec.Conversion.Webhook.ClientConfig.Service = &apiextensionsv1.ServiceReference{
		Namespace: "default", Name: "gizmo-webhooks", Path: ptr.To(conversion.Path), Port: ptr.To(int32(443))}
	install(t, ext, crd)
	_, err = certs.Check(ctx)
	require.NoError(t, err)

	controlplanetest.Eventually(t, 30*time.Second, "a Gizmo created at v1 through the Service", func(ctx context.Context) (bool, error) {
		_, err := gizmos(dyn, "v1", "default").Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "conversion.example.com/v1", "kind": "Gizmo",
			"metadata": map[string]any{"name": "one"}, "spec": map[string]any{"size": int64(2)},
		}}, metav1.CreateOptions{})
		return err == nil, nil
	})
	got, err := gizmos(dyn, "v2", "default").Get(ctx, "one", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, int64(2), spec(t, got, "replicas"))
	require.Positive(t, server.reviews.Load())
}
