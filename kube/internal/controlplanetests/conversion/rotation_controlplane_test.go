//go:build controlplane

package conversion_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/log"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/httpserver"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/webhookcert"
)

// flow makes requests one after another until stop is called, which
// returns how many were made and every failure: a merge patch of the
// Gizmo gizmo-00000 in ns at v1, its spec.size set to a new number, for
// which the API server calls the webhook to convert the stored v2 object
// to v1 and the patched one back to v2. (A list at v1 would not: the API
// server serves it from its watch cache of v1 objects, converted once as
// each object changed.)
func flow(dyn dynamic.Interface, ns string, after func()) (stop func() (int, []error)) {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		n    int
		errs []error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			patch := fmt.Appendf(nil, `{"spec":{"size":%d}}`, n+1)
			got, err := gizmos(dyn, "v1", ns).Patch(ctx, "gizmo-00000", types.MergePatchType, patch, metav1.PatchOptions{})
			if ctx.Err() != nil {
				return
			}
			n++
			if err == nil {
				if size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size"); size != int64(n) {
					err = fmt.Errorf("patched spec.size to %d, and read %d", n, size)
				}
			}
			if err != nil {
				errs = append(errs, err)
			}
			if after != nil {
				after()
			}
		}
	}()
	return func() (int, []error) {
		cancel()
		<-done
		return n, errs
	}
}

// createGizmos creates n Gizmos in ns at v2, which needs no conversion.
func createGizmos(t testing.TB, dyn dynamic.Interface, ns string, n int) {
	t.Helper()
	for i := range n {
		_, err := gizmos(dyn, "v2", ns).Create(context.Background(), &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "conversion.example.com/v2", "kind": "Gizmo",
			"metadata": map[string]any{"name": fmt.Sprintf("gizmo-%05d", i)},
			"spec":     map[string]any{"replicas": int64(i)},
		}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
}

// review is a ConversionReview of one Gizmo at v2 to v1.
var review = func() []byte {
	b, _ := json.Marshal(apiextensionsv1.ConversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"},
		Request: &apiextensionsv1.ConversionRequest{UID: "1", DesiredAPIVersion: "conversion.example.com/v1",
			Objects: []runtime.RawExtension{{Raw: []byte(`{"apiVersion":"conversion.example.com/v2","kind":"Gizmo","metadata":{"name":"a","namespace":"default","uid":"u"},"spec":{"replicas":1}}`)}}},
	})
	return b
}()

// handshakes posts a ConversionReview to the webhook at addr over a new
// connection each time, trusting roots, one after another until stop is
// called, which returns how many were made and every failure.
func handshakes(addr string, roots *x509.CertPool) (stop func() (int, []error)) {
	ctx, cancel := context.WithCancel(context.Background())
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}}}
	var (
		n    int
		errs []error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, webhookURL(addr), bytes.NewReader(review))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if ctx.Err() != nil {
				return
			}
			n++
			if err == nil {
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %s", resp.Status)
				}
				resp.Body.Close()
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
	}()
	return func() (int, []error) {
		cancel()
		<-done
		return n, errs
	}
}

// served returns the leaf certificate the TLS server at addr serves.
func served(t testing.TB, addr string) []byte {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reads the certificate, trusts nothing
	require.NoError(t, err)
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Raw
}

// TestCertificateFilesRotatedWhileRequestsFlow serves the webhook from
// certificate files (httpserver.CertDir, as a cert-manager Secret is
// mounted) and rewrites them with a certificate of another CA, the cert
// first and its key a moment later, as a rotation is seen half-written,
// while the API server lists through the webhook and a client makes a new
// TLS connection to it for every review, trusting both CAs, as the
// caBundle cert-manager's cainjector keeps does across a CA's renewal:
// not one request fails, and the new certificate is served within
// httpserver.ReloadInterval.
func TestCertificateFilesRotatedWhileRequestsFlow(t *testing.T) {
	cluster := controlplanetest.Start(t)
	ext, err := apiextensionsclient.NewForConfig(cluster.RESTConfig())
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cluster.RESTConfig())
	require.NoError(t, err)

	before, err := httpserver.NewAuthority(0, "127.0.0.1")
	require.NoError(t, err)
	after, err := httpserver.NewAuthority(0, "127.0.0.1")
	require.NoError(t, err)
	dir := t.TempDir()
	write := func(a *httpserver.Authority, file string) {
		certPEM, keyPEM := a.ServingPEM()
		data := map[string][]byte{httpserver.CertFile: certPEM, httpserver.KeyFile: keyPEM}[file]
		require.NoError(t, os.WriteFile(filepath.Join(dir, file), data, 0o600))
	}
	write(before, httpserver.CertFile)
	write(before, httpserver.KeyFile)
	tel := humustest.NewTelemetry(t)
	s := &humus.Setup{Host: humus.OSHost(), Telemetry: tel.Telemetry}
	files, err := httpserver.CertDir(s, strings.TrimPrefix(dir, "/"))
	require.NoError(t, err)
	server := serveWebhook(t, files, nil)
	bundle := append(before.CABundle(), after.CABundle()...)
	install(t, ext, gizmoCRD(t, webhookURL(server.addr), bundle))
	createGizmos(t, dyn, "default", 3)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(bundle))

	stopFlow := flow(dyn, "default", nil)
	stopHandshakes := handshakes(server.addr, roots)
	write(after, httpserver.CertFile)
	// The key a moment later: the files read in between don't load, and
	// the last pair is still served.
	controlplanetest.Eventually(t, httpserver.ReloadInterval+20*time.Second, "the half-written pair to be read", func(context.Context) (bool, error) {
		for _, r := range tel.Records() {
			if r.Severity() == log.SeverityError && strings.Contains(r.Body().AsString(), "don't load") {
				return true, nil
			}
		}
		return false, nil
	})
	write(after, httpserver.KeyFile)
	afterCert, _ := after.ServingPEM()
	block, _ := pem.Decode(afterCert)
	controlplanetest.Eventually(t, httpserver.ReloadInterval+20*time.Second, "the rotated certificate to be served", func(context.Context) (bool, error) {
		return bytes.Equal(served(t, server.addr), block.Bytes), nil
	})
	// And a few more requests with it.
	answered := server.reviews.Load()
	controlplanetest.Eventually(t, 30*time.Second, "more reviews with the rotated certificate", func(context.Context) (bool, error) {
		return server.reviews.Load() > answered+10, nil
	})
	lists, listErrs := stopFlow()
	reviews, reviewErrs := stopHandshakes()
	t.Logf("%d patches at v1 through the API server, %d reviews on new connections, during the rotation", lists, reviews)
	require.Empty(t, listErrs, "lists through the API server")
	require.Empty(t, reviewErrs, "reviews on new connections")
	require.Positive(t, lists)
	require.Positive(t, reviews)
}

// TestAppManagedCertificateRenewedWhileRequestsFlowOnEveryReplica runs two
// replicas, each serving the webhook with its own webhookcert.Certs, behind
// a proxy that spreads the API server's connections over them as a
// Service does, each new one to the replica that has answered fewer
// reviews, with a certificate valid 3 minutes and renewed 5 seconds after
// it is made: while the API server lists through the webhook, the
// certificate is renewed several times, and not one request fails; both
// replicas answered, and serve the same certificate at the end.
func TestAppManagedCertificateRenewedWhileRequestsFlowOnEveryReplica(t *testing.T) {
	cluster := controlplanetest.Start(t)
	ext, err := apiextensionsclient.NewForConfig(cluster.RESTConfig())
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cluster.RESTConfig())
	require.NoError(t, err)
	s := &humus.Setup{Host: humus.OSHost(), Telemetry: humustest.NewTelemetry(t).Telemetry}
	client, err := kube.NewClient(s, kube.Connection{Server: cluster.Server, TLS: cluster.TLS,
		Token: func(context.Context) (string, error) { return cluster.Token, nil }})
	require.NoError(t, err)
	t.Cleanup(client.CloseIdleConnections)
	cfg := webhookcert.Config{Namespace: "default", Secret: "gizmo-webhook-cert", Hosts: []string{"127.0.0.1"},
		CRDs:     []string{"gizmos.conversion.example.com"},
		Validity: 3 * time.Minute, RenewBefore: 3*time.Minute - 5*time.Second, CheckInterval: time.Second}

	var replicas []*replica
	var certs []*webhookcert.Certs
	for range 2 {
		c, err := webhookcert.New(s, client, cfg)
		require.NoError(t, err)
		certs = append(certs, c)
		replicas = append(replicas, serveWebhook(t, c, nil))
	}
	p := newProxy(t, replicas...)
	install(t, ext, gizmoCRD(t, webhookURL(p.addr()), nil))
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	for _, c := range certs {
		wg.Go(func() { require.NoError(t, c.Serve(ctx)) })
	}
	t.Cleanup(func() {
		cancel()
		for _, c := range certs {
			require.NoError(t, c.Shutdown(context.Background()))
		}
		wg.Wait()
	})
	controlplanetest.Eventually(t, 30*time.Second, "both replicas to serve a certificate the CRD trusts", func(ctx context.Context) (bool, error) {
		return certs[0].Healthy(ctx) == nil && certs[1].Healthy(ctx) == nil, nil
	})
	createGizmos(t, dyn, "default", 3)

	// The API server dials the webhook anew, through the proxy to the
	// replica that has answered fewer reviews, each time the caBundle
	// changes (its webhook client is kept per clientConfig).
	stopFlow := flow(dyn, "default", nil)
	seen := map[string]bool{}
	controlplanetest.Eventually(t, 90*time.Second, "three certificates served in turn", func(context.Context) (bool, error) {
		seen[string(servedCert(t, certs[0]))] = true
		return len(seen) >= 3, nil
	})
	lists, errs := stopFlow()
	t.Logf("%d patches at v1 through the API server while %d certificates were served in turn; reviews answered by replica 1: %d, replica 2: %d",
		lists, len(seen), replicas[0].reviews.Load(), replicas[1].reviews.Load())
	require.Empty(t, errs)
	require.Positive(t, lists)
	for i, r := range replicas {
		require.Positive(t, r.reviews.Load(), "replica %d answered", i+1)
	}
	controlplanetest.Eventually(t, 30*time.Second, "both replicas to serve the same certificate", func(context.Context) (bool, error) {
		return bytes.Equal(servedCert(t, certs[0]), servedCert(t, certs[1])), nil
	})
}
