package apitransport

import (
	"net/http"
	"strings"

	"github.com/z5labs/humus"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Traced is next under otelhttp, with tel's TracerProvider, MeterProvider
// and Propagator, never OpenTelemetry's globals: a client span and
// otelhttp's client instruments for every request but a watch and a
// background Lease, Event or review request. tel has WithNoops applied.
//
// With no-op providers and a propagator of no fields, otelhttp would
// record nothing and inject nothing, and yet cost CPU on every request
// (its attributes, its request clone and body wrapper). So it is left
// out, and Traced is next.
func Traced(next http.RoundTripper, tel humus.Telemetry) http.RoundTripper {
	if recordsNothing(tel) {
		return next
	}
	return otelhttp.NewTransport(next,
		otelhttp.WithTracerProvider(tel.TracerProvider),
		otelhttp.WithMeterProvider(tel.MeterProvider),
		otelhttp.WithPropagators(tel.Propagator),
		otelhttp.WithFilter(func(r *http.Request) bool { return !IsWatch(r) && !isBackground(r) }),
	)
}

// recordsNothing reports whether t, with WithNoops applied, records and
// propagates nothing: its TracerProvider and MeterProvider are
// OpenTelemetry's no-op ones, which WithNoops puts in place of nil ones (as
// humus.Run does), and its Propagator injects no field, as the empty
// composite WithNoops puts in place of a nil one.
func recordsNothing(t humus.Telemetry) bool {
	_, noTraces := t.TracerProvider.(tracenoop.TracerProvider)
	_, noMetrics := t.MeterProvider.(metricnoop.MeterProvider)
	return noTraces && noMetrics && len(t.Propagator.Fields()) == 0
}

// IsWatch reports whether r is a watch, which lasts as long as an informer
// runs and so is kept out of traces and metrics. It decides as the API
// server does: a watch query parameter whose first value is neither "0"
// nor "false", in any case (apimachinery's runtime.Convert_Slice_string_To_bool),
// or the deprecated /watch/ path of /api/v1/watch/... or
// /apis/<group>/<version>/watch/....
func IsWatch(r *http.Request) bool {
	if r.URL == nil {
		return false
	}
	if strings.Contains(r.URL.RawQuery, "watch") {
		if v, ok := r.URL.Query()["watch"]; ok && len(v) > 0 && v[0] != "0" && !strings.EqualFold(v[0], "false") {
			return true
		}
	}
	p := strings.TrimPrefix(r.URL.Path, "/")
	switch {
	case strings.HasPrefix(p, "api/"):
		return Segment(p, 2) == "watch"
	case strings.HasPrefix(p, "apis/"):
		return Segment(p, 3) == "watch"
	}
	return false
}

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
	group, resource := GroupResource(r.URL.Path)
	return (group == "coordination.k8s.io" && resource == "leases") ||
		(group == "events.k8s.io" && resource == "events") ||
		(group == "authentication.k8s.io" && resource == "tokenreviews") ||
		(group == "authorization.k8s.io" && resource == "subjectaccessreviews")
}

// GroupResource returns the API group and the resource a request's
// path names under /apis, namespaced or not (such as
// "coordination.k8s.io" and "leases" of
// /apis/coordination.k8s.io/v1/namespaces/ns/leases/name); two "" for a
// path elsewhere, such as the core group's /api.
func GroupResource(path string) (group, resource string) {
	p := strings.TrimPrefix(path, "/")
	if !strings.HasPrefix(p, "apis/") {
		return "", ""
	}
	group, resource = Segment(p, 1), Segment(p, 3)
	if resource == "namespaces" {
		resource = Segment(p, 5)
	}
	return group, resource
}

// Segment returns the i-th slash-separated segment of p, from 0, or "".
func Segment(p string, i int) string {
	for ; i > 0; i-- {
		j := strings.IndexByte(p, '/')
		if j < 0 {
			return ""
		}
		p = p[j+1:]
	}
	if j := strings.IndexByte(p, '/'); j >= 0 {
		return p[:j]
	}
	return p
}
