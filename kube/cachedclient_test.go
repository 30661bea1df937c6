package kube

import (
	"context"
	"fmt"
	"github.com/z5labs/humus/kube/internal/objcache"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// widgetJSON is a Widget as the API server sends it, with managed fields.
func widgetJSON(name, rv string) string {
	return fmt.Sprintf(`{"apiVersion":"test.example.com/v1","kind":"Widget","metadata":{"creationTimestamp":"2026-12-01T14:58:18Z","generation":1,"managedFields":[{"apiVersion":"test.example.com/v1","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{".":{},"f:size":{}}},"manager":"kubectl","operation":"Update","time":"2026-12-01T14:58:18Z"}],"name":%q,"namespace":"default","resourceVersion":%q,"uid":"uid-%s"},"spec":{"size":3}}`, name, rv, name)
}

func TestTheCachedClientsInformerSyncsOnAWatchListAndCachesEachObject(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/apis/test.example.com/v1/namespaces/default/widgets", r.URL.Path)
		q := r.URL.Query()
		if q.Get("watch") != "true" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"apiVersion":"test.example.com/v1","kind":"WidgetList","metadata":{"resourceVersion":"10"},"items":[%s]}`, widgetJSON("w1", "5"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		if q.Get("sendInitialEvents") == "true" {
			fmt.Fprintf(w, `{"type":"ADDED","object":%s}`+"\n", widgetJSON("w1", "5"))
			fmt.Fprint(w, `{"type":"BOOKMARK","object":{"apiVersion":"test.example.com/v1","kind":"Widget","metadata":{"annotations":{"k8s.io/initial-events-end":"true"},"resourceVersion":"10"}}}`+"\n")
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	cc, err := objcache.NewClient(&rest.Config{Host: srv.URL})
	require.NoError(t, err)
	inf, err := newResourceInformer(clients{cached: cc}, nil, schema.GroupVersionResource{Group: "test.example.com", Version: "v1", Resource: "widgets"}, "default", selectors{}, 0)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	require.True(t, cache.WaitForCacheSync(ctx.Done(), inf.HasSynced))
	item, ok, err := inf.GetIndexer().GetByKey("default/w1")
	require.NoError(t, err)
	require.True(t, ok)
	c := item.(*cachedObject)
	require.Equal(t, "5", c.GetResourceVersion())
	require.NotContains(t, c.Raw(), "managedFields")
	cancel()
	<-done
}
