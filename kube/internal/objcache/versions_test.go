package objcache

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

var memcachedGVR = schema.GroupVersionResource{Group: "cache.example.com", Version: "v1alpha1", Resource: "memcacheds"}

// memcachedMetadata is the metadata of the converge benchmark's Memcached
// i, converged, as the API server serves it.
func memcachedMetadata(i int) string {
	return fmt.Sprintf(`{"name":"mc-%05d","namespace":"bench","uid":"0b6e3f39-6c3a-4a5e-9a0e-6f1f3d3%05d","resourceVersion":"%d","generation":1,"creationTimestamp":"2027-01-15T08:00:00Z",`+
		`"managedFields":[{"manager":"converge","operation":"Update","apiVersion":"cache.example.com/v1alpha1","time":"2027-01-15T08:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{".":{},"f:image":{},"f:size":{}}}},`+
		`{"manager":"memcached","operation":"Apply","apiVersion":"cache.example.com/v1alpha1","time":"2027-01-15T08:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:conditions":{"k:{\"type\":\"Available\"}":{".":{},"f:lastTransitionTime":{},"f:message":{},"f:observedGeneration":{},"f:reason":{},"f:status":{},"f:type":{}}}}},"subresource":"status"}]}`,
		i, i, 100_000+2*i)
}

// memcachedList is a list of n Memcacheds: whole, or their metadata alone,
// as the API server answers a PartialObjectMetadataList.
func memcachedList(n int, metadataOnly bool) []byte {
	var b strings.Builder
	if metadataOnly {
		b.WriteString(`{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"200000"},"items":[`)
	} else {
		b.WriteString(`{"apiVersion":"cache.example.com/v1alpha1","kind":"MemcachedList","metadata":{"resourceVersion":"200000"},"items":[`)
	}
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		if metadataOnly {
			fmt.Fprintf(&b, `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":%s}`, memcachedMetadata(i))
			continue
		}
		fmt.Fprintf(&b, `{"apiVersion":"cache.example.com/v1alpha1","kind":"Memcached","metadata":%s,"spec":{"image":"memcached:1.6.26-alpine3.19","size":3},`+
			`"status":{"conditions":[{"lastTransitionTime":"2027-01-15T08:00:00Z","message":"3 of 3 memcached pods are ready","observedGeneration":1,"reason":"DeploymentAvailable","status":"True","type":"Available"}],"readyReplicas":3}}`,
			memcachedMetadata(i))
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// listServer answers every list with the metadata list if the request
// asks for one and metadata is set, else with the whole list, and
// records the Accept headers.
func listServer(t testing.TB, n int, metadata bool) (*Client, *[]string) {
	t.Helper()
	whole, meta := memcachedList(n, false), memcachedList(n, true)
	var accepts []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accepts = append(accepts, r.Header.Get("Accept"))
		w.Header().Set("Content-Type", "application/json")
		if metadata && strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadataList") {
			_, _ = w.Write(meta)
			return
		}
		_, _ = w.Write(whole)
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(&rest.Config{Host: srv.URL, QPS: -1})
	require.NoError(t, err)
	return c, &accepts
}

func TestVersionsAsksForMetadataAloneAndReadsEitherList(t *testing.T) {
	for _, metadata := range []bool{true, false} {
		c, accepts := listServer(t, 3, metadata)
		versions := map[string]string{}
		listRV, next, err := c.Versions(context.Background(), memcachedGVR, "bench", metav1.ListOptions{Limit: 500}, versions)
		require.NoError(t, err)
		require.Equal(t, "200000", listRV)
		require.Empty(t, next)
		require.Equal(t, map[string]string{"bench/mc-00000": "100000", "bench/mc-00001": "100002", "bench/mc-00002": "100004"}, versions)
		require.Equal(t, []string{metadataOnly}, *accepts)
	}
}

// BenchmarkVersions is the client's side of the catch-up's quorum list of
// 5,000 converged Memcacheds (in pages of 500, as waitCurrent lists):
// whole objects, as before issue 30, and their metadata alone.
func BenchmarkVersions(b *testing.B) {
	for _, metadata := range []bool{false, true} {
		name := "whole"
		if metadata {
			name = "metadata"
		}
		b.Run(name, func(b *testing.B) {
			const n, page = 5000, 500
			c, _ := listServer(b, page, metadata)
			b.SetBytes(int64(len(memcachedList(page, metadata))) * n / page)
			b.ReportAllocs()
			for b.Loop() {
				versions := make(map[string]string, n)
				for range n / page {
					if _, _, err := c.Versions(context.Background(), memcachedGVR, "bench", metav1.ListOptions{Limit: page}, versions); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
