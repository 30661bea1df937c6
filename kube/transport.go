package kube

import (
	"net/http"

	"github.com/z5labs/humus"
	"golang.org/x/net/http2"

	"github.com/z5labs/humus/kube/internal/apitransport"
	"github.com/z5labs/humus/kube/internal/throttle"
	"github.com/z5labs/humus/kube/internal/token"
)

// transport is the RoundTripper behind Client.Config, from the outside in:
//
//   - otelhttp, with s.Telemetry's TracerProvider, MeterProvider and
//     Propagator, never OpenTelemetry's globals: a client span and
//     otelhttp's client instruments for every request but a watch and a
//     background Lease, Event or review request (apitransport.Traced);
//   - the reconcile's write hook, which refuses its writes once its lease
//     is no longer valid and notes its writes to owned resources
//     (apitransport.WriteHooks, scope.go, ownedcreations.go);
//   - the bearer token from Connection.Token (internal/token);
//   - a congestion window that adapts to the API server's 429 answers,
//     which the Lease's requests and watches skip (internal/throttle);
//   - a net/http Transport that dials s.Host.Dial, runs TLS with a clone of
//     Connection.TLS whose ServerName defaults to Server's host, has no
//     proxy, asks for gzip only with Connection.Compression, and speaks
//     HTTP/2 with health-check pings (apitransport.Base).
type transport struct {
	http.RoundTripper

	base   *http.Transport
	h2     *http2.Transport
	tokens *token.Source // nil when Connection.Token is nil
}

// newTransport builds the transport of a checked Connection.
func newTransport(s *humus.Setup, c Connection) (*transport, error) {
	base, h2, err := apitransport.Base(c.Server, c.TLS, c.Compression, s.Host.Dial)
	if err != nil {
		return nil, err
	}
	t := &transport{base: base, h2: h2}
	tel := s.Telemetry.WithNoops()
	var next http.RoundTripper = throttle.New(base, apitransport.IsWatch)
	if c.Token != nil {
		t.tokens = token.NewSource(c.Token, tel.LoggerProvider.Logger(instrumentationScope))
		next = token.NewBearer(t.tokens, next)
	}
	next = apitransport.WriteHooks{Next: next}
	t.RoundTripper = apitransport.Traced(next, tel)
	return t, nil
}

// CloseIdleConnections closes the transport's idle connections, HTTP/1.1
// and HTTP/2. net/http's Client calls it when the client is done with it.
func (t *transport) CloseIdleConnections() {
	t.base.CloseIdleConnections()
	t.h2.CloseIdleConnections()
}
