//go:build controlplane

package conversion_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/httpserver"
)

// BenchmarkAListOf10000Objects lists 10,000 Gizmos, stored at v2, at v2
// (nothing to convert) and at v1 (converted from v2 by the webhook, the
// App's conversion.Handler over TLS on 127.0.0.1), and prints the
// milliseconds per list, the bytes of each list, and how many
// ConversionReviews the webhook answered per list.
//
// It runs on two control planes: the API server as it runs by default,
// with its watch cache, which keeps a cache per version and so converts
// each object once, as it changes, and serves every list at v1 from it
// (no review per list); and with --watch-cache=false, where every list
// reads etcd and sends all 10,000 objects to the webhook, which is the
// cost of a conversion per list, and what a list costs while the cache is
// (re)initializing. Each list is a GET of the collection as JSON, as
// kubectl get -o json makes it, read whole.
func BenchmarkAListOf10000Objects(b *testing.B) {
	const n = 10000
	for _, cache := range []struct {
		name  string
		flags []string
	}{{"watch-cache=on", nil}, {"watch-cache=off", []string{"--watch-cache=false"}}} {
		b.Run(cache.name, func(b *testing.B) {
			cluster := controlplanetest.Start(b, controlplanetest.WithAPIServerFlags(cache.flags...))
			cfg := cluster.RESTConfig()
			cfg.QPS, cfg.Burst = -1, 0
			ext, err := apiextensionsclient.NewForConfig(cfg)
			require.NoError(b, err)
			dyn, err := dynamic.NewForConfig(cfg)
			require.NoError(b, err)
			ca, err := httpserver.NewAuthority(0, "127.0.0.1")
			require.NoError(b, err)
			server := serveWebhook(b, ca, nil)
			install(b, ext, gizmoCRD(b, webhookURL(server.addr), ca.CABundle()))

			// 10,000 Gizmos at v2, by 8 writers.
			began := time.Now()
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for w := range 8 {
				wg.Go(func() {
					for i := w; i < n; i += 8 {
						_, err := gizmos(dyn, "v2", "default").Create(context.Background(), &unstructured.Unstructured{Object: map[string]any{
							"apiVersion": "conversion.example.com/v2", "kind": "Gizmo",
							"metadata": map[string]any{"name": fmt.Sprintf("gizmo-%05d", i),
								"labels": map[string]any{"app": "gizmo", "tier": fmt.Sprint("t", i%10)}},
							"spec": map[string]any{"replicas": int64(i)},
						}}, metav1.CreateOptions{})
						if err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			require.NoError(b, <-errs)
			b.Logf("%d Gizmos created at v2 in %v", n, time.Since(began).Round(time.Millisecond))

			client, err := rest.HTTPClientFor(cfg)
			require.NoError(b, err)
			for _, v := range []string{"v2", "v1"} {
				name := v + "(storage)"
				if v == "v1" {
					name = v + "(webhook)"
				}
				b.Run(name, func(b *testing.B) {
					url := fmt.Sprintf("%s/apis/conversion.example.com/%s/namespaces/default/gizmos", cfg.Host, v)
					var l unstructured.UnstructuredList
					require.NoError(b, l.UnmarshalJSON(list(b, client, url)))
					require.Len(b, l.Items, n)
					reviews := server.reviews.Load()
					var size int64
					for b.Loop() {
						size = int64(len(list(b, client, url)))
					}
					b.SetBytes(size)
					b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/list")
					b.ReportMetric(float64(size), "bytes/list")
					b.ReportMetric(float64(server.reviews.Load()-reviews)/float64(b.N), "reviews/list")
				})
			}
		})
	}
}

// list GETs url as JSON and returns the body.
func list(b *testing.B, client *http.Client, url string) []byte {
	b.Helper()
	req, err := http.NewRequestWithContext(b.Context(), http.MethodGet, url, nil)
	require.NoError(b, err)
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	require.NoError(b, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(b, err)
	require.Equal(b, http.StatusOK, resp.StatusCode, "%.500s", body)
	return body
}
