// Package apitransport holds the generic layers of the Client's transport
// to the API server, which package kube puts together with its bearer
// token and its congestion window (internal/throttle).
//
// It owns the net/http and HTTP/2 transport underneath, its settings and
// its dial (Base); the client span and otelhttp's instruments, and which
// requests they leave out (Traced, IsWatch); the layer that hands a
// request's writes to the write hook of its context (WriteHooks, WriteHook,
// WithWriteHook); and the reading of an API path's segments (Segment).
//
// Its invariants: it reads no environment variable and uses no
// OpenTelemetry global, only the Telemetry it is given; there is no proxy;
// a watch, and a background request (a Lease, an Event, a TokenReview or
// SubjectAccessReview made outside any span), is never traced nor
// measured; a Telemetry that records nothing adds no layer at all; a
// request whose context carries no write hook, or that isn't a PATCH, PUT
// or POST, passes the write-hook layer untouched.
package apitransport
