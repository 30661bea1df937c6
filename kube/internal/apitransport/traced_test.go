package apitransport

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

func TestIsBackground(t *testing.T) {
	inSpan := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled,
	}))
	for _, tc := range []struct {
		method, url string
		ctx         context.Context
		want        bool
	}{
		{"PUT", "https://api/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/c", context.Background(), true},
		{"GET", "https://api/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/c", context.Background(), true},
		{"POST", "https://api/apis/events.k8s.io/v1/namespaces/default/events", context.Background(), true},
		{"PATCH", "https://api/apis/events.k8s.io/v1/namespaces/default/events/e.1", context.Background(), true},
		{"GET", "https://api/apis/events.k8s.io/v1/events", context.Background(), true},
		{"POST", "https://api/apis/authentication.k8s.io/v1/tokenreviews", context.Background(), true},
		{"POST", "https://api/apis/authorization.k8s.io/v1/subjectaccessreviews", context.Background(), true},
		// In a reconcile's span, they are its children.
		{"PUT", "https://api/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/c", inSpan, false},
		{"POST", "https://api/apis/events.k8s.io/v1/namespaces/default/events", inSpan, false},
		// Others are traced, with or without a span.
		{"GET", "https://api/api/v1/namespaces/default/events", context.Background(), false},
		{"PATCH", "https://api/apis/apps/v1/namespaces/default/deployments/d", context.Background(), false},
		{"GET", "https://api/apis/test.example.com/v1/namespaces/leases/widgets", context.Background(), false},
		{"GET", "https://api/apis/coordination.k8s.io/v1/namespaces/x/leasecandidates", context.Background(), false},
		{"POST", "https://api/apis/authorization.k8s.io/v1/namespaces/x/localsubjectaccessreviews", context.Background(), false},
		{"POST", "https://api/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", context.Background(), false},
	} {
		r, err := http.NewRequestWithContext(tc.ctx, tc.method, tc.url, nil)
		require.NoError(t, err)
		require.Equal(t, tc.want, isBackground(r), "%s %s", tc.method, tc.url)
	}
}

func TestIsWatch(t *testing.T) {
	for target, want := range map[string]bool{
		"/api/v1/namespaces?watch=true":                            true,
		"/api/v1/namespaces?watch=1":                               true,
		"/api/v1/namespaces?watch=True&resourceVersion=5":          true,
		"/api/v1/namespaces?allowWatchBookmarks=true&watch=true":   true,
		"/api/v1/namespaces?watch=false":                           false,
		"/api/v1/namespaces?watch=0":                               false,
		"/api/v1/namespaces?allowWatchBookmarks=true":              false,
		"/api/v1/namespaces":                                       false,
		"/api/v1/watch/namespaces":                                 true,
		"/apis/apps/v1/watch/namespaces/default/deployments":       true,
		"/apis/apps/v1/namespaces/watch/deployments":               false,
		"/api/v1/namespaces/watch":                                 false,
		"/apis/cache.example.com/v1alpha1/memcacheds?watch=true":   true,
		"/apis/cache.example.com/v1alpha1/memcacheds?limit=500":    false,
		"/apis/coordination.k8s.io/v1/namespaces/x/leases/watcher": false,
	} {
		r := httptest.NewRequest(http.MethodGet, "https://example.com"+target, nil)
		require.Equal(t, want, IsWatch(r), target)
	}
}

func TestGroupResource(t *testing.T) {
	for path, want := range map[string][2]string{
		"/apis/coordination.k8s.io/v1/namespaces/ns/leases/name": {"coordination.k8s.io", "leases"},
		"/apis/coordination.k8s.io/v1/leases":                    {"coordination.k8s.io", "leases"},
		"apis/apps/v1/namespaces/ns/deployments":                 {"apps", "deployments"},
		// A namespaced resource in a namespace named "leases".
		"/apis/test.example.com/v1/namespaces/leases/widgets/w": {"test.example.com", "widgets"},
		"/api/v1/namespaces/ns/configmaps":                      {"", ""},
		"/healthz":                                              {"", ""},
	} {
		group, resource := GroupResource(path)
		require.Equal(t, want, [2]string{group, resource}, path)
	}
}
