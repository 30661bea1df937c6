package kube

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// isBackground reports whether r is a controller's background request,
// which like a watch is kept out of traces and metrics: a request on
// Leases (coordination.k8s.io), as the leader elector renews the Lease
// every RetryPeriod, on Events (events.k8s.io), as the Event
// broadcaster sends them, or a TokenReview (authentication.k8s.io) or
// SubjectAccessReview (authorization.k8s.io), as package delegatedauth
// sends them for a scrape of /metrics, made in a context with no span. A
// reconcile's own requests on those resources are in its span, and are
// traced as every other.
func isBackground(r *http.Request) bool {
	if trace.SpanContextFromContext(r.Context()).IsValid() || r.URL == nil {
		return false
	}
	p := strings.TrimPrefix(r.URL.Path, "/")
	if !strings.HasPrefix(p, "apis/") {
		return false
	}
	group, resource := segment(p, 1), segment(p, 5)
	if segment(p, 3) != "namespaces" {
		resource = segment(p, 3)
	}
	return (group == "coordination.k8s.io" && resource == "leases") ||
		(group == "events.k8s.io" && resource == "events") ||
		(group == "authentication.k8s.io" && resource == "tokenreviews") ||
		(group == "authorization.k8s.io" && resource == "subjectaccessreviews")
}
