package kube

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/z5labs/humus"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/net/http2"

	"github.com/z5labs/humus/kube/internal/throttle"
	"github.com/z5labs/humus/kube/internal/token"
)

// The transport's settings, and where each comes from. client-go reads the
// two HTTP/2 ones from HTTP2_READ_IDLE_TIMEOUT_SECONDS and
// HTTP2_PING_TIMEOUT_SECONDS with os.Getenv (apimachinery's
// pkg/util/net/http.go); these are its defaults, fixed, since humus reads no
// environment variable.
const (
	// http2ReadIdleTimeout is how long a connection may go without a frame
	// before the transport pings it. Without it, a watch on a dead
	// connection waits for TCP to give up, 13 to 30 minutes on Linux
	// (kubernetes/client-go#374).
	http2ReadIdleTimeout = 30 * time.Second

	// http2PingTimeout is how long the transport waits for a ping's answer
	// before it closes the connection.
	http2PingTimeout = 15 * time.Second

	// tlsHandshakeTimeout and maxIdleConnsPerHost are client-go's own
	// transport's (transport/cache.go).
	tlsHandshakeTimeout = 10 * time.Second
	maxIdleConnsPerHost = 25

	// idleConnTimeout is net/http's DefaultTransport's: an idle connection
	// is closed after it, so a Client no longer used holds none for long.
	idleConnTimeout = 90 * time.Second
)

// transport is the RoundTripper behind Client.Config, from the outside in:
//
//   - otelhttp, with s.Telemetry's TracerProvider, MeterProvider and
//     Propagator, never OpenTelemetry's globals: a client span and
//     otelhttp's client instruments for every request but a watch and a
//     background Lease, Event or review request (background.go);
//   - the bearer token from Connection.Token (internal/token);
//   - a congestion window that adapts to the API server's 429 answers,
//     which the Lease's requests and watches skip (internal/throttle);
//   - a net/http Transport that dials s.Host.Dial, runs TLS with a clone of
//     Connection.TLS whose ServerName defaults to Server's host, has no
//     proxy, asks for gzip only with Connection.Compression, and speaks
//     HTTP/2 with health-check pings.
type transport struct {
	http.RoundTripper

	base   *http.Transport
	h2     *http2.Transport
	tokens *token.Source // nil when Connection.Token is nil
}

// newTransport builds the transport of a checked Connection.
func newTransport(s *humus.Setup, c Connection) (*transport, error) {
	tlsConfig := c.TLS.Clone()
	if tlsConfig.ServerName == "" {
		host, _, err := net.SplitHostPort(c.Server)
		if err != nil {
			return nil, fmt.Errorf("kube: Connection.Server %q: %w", c.Server, err)
		}
		// A certificate can't name an IPv6 zone, so it isn't verified.
		host, _, _ = strings.Cut(host, "%")
		tlsConfig.ServerName = host
	}

	dial := s.Host.Dial
	base := &http.Transport{
		// No proxy: client-go's default, http.ProxyFromEnvironment
		// (transport/cache.go), would read the real environment.
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dial(ctx, network, addr)
			if err != nil {
				return nil, fmt.Errorf("kube: dialling the API server at %s through the Host: %w", addr, err)
			}
			if conn == nil {
				return nil, fmt.Errorf("kube: dialling the API server at %s through the Host: Host.Dial returned no connection and no error", addr)
			}
			return conn, nil
		},
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: tlsHandshakeTimeout,
		// Without it, net/http and HTTP/2 ask for gzip on every request
		// that names no Accept-Encoding, as client-go's requests don't.
		DisableCompression:  !c.Compression,
		MaxIdleConnsPerHost: maxIdleConnsPerHost,
		IdleConnTimeout:     idleConnTimeout,
	}
	// ConfigureTransports, as client-go's own transports do
	// (apimachinery's pkg/util/net/http.go, configureHTTP2Transport), adds
	// "h2" to the TLS config's NextProtos and returns the HTTP/2 transport
	// whose pings it sets.
	h2, err := http2.ConfigureTransports(base)
	if err != nil {
		return nil, fmt.Errorf("kube: configuring HTTP/2: %w", err)
	}
	h2.ReadIdleTimeout = http2ReadIdleTimeout
	h2.PingTimeout = http2PingTimeout

	t := &transport{base: base, h2: h2}
	tel := s.Telemetry.WithNoops()
	var next http.RoundTripper = throttle.New(base, isWatch)
	if c.Token != nil {
		t.tokens = token.NewSource(c.Token, tel.LoggerProvider.Logger(instrumentationScope))
		next = token.NewBearer(t.tokens, next)
	}
	next = writeHookTransport{next: next}
	// With no-op providers and a propagator of no fields, otelhttp would
	// record nothing and inject nothing, and yet cost CPU on every request
	// (its attributes, its request clone and body wrapper). So it is left
	// out.
	if recordsNothing(tel) {
		t.RoundTripper = next
		return t, nil
	}
	t.RoundTripper = otelhttp.NewTransport(next,
		otelhttp.WithTracerProvider(tel.TracerProvider),
		otelhttp.WithMeterProvider(tel.MeterProvider),
		otelhttp.WithPropagators(tel.Propagator),
		otelhttp.WithFilter(func(r *http.Request) bool { return !isWatch(r) && !isBackground(r) }),
	)
	return t, nil
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

// CloseIdleConnections closes the transport's idle connections, HTTP/1.1
// and HTTP/2. net/http's Client calls it when the client is done with it.
func (t *transport) CloseIdleConnections() {
	t.base.CloseIdleConnections()
	t.h2.CloseIdleConnections()
}

// isWatch reports whether r is a watch, which lasts as long as an informer
// runs and so is kept out of traces and metrics. It decides as the API
// server does: a watch query parameter whose first value is neither "0"
// nor "false", in any case (apimachinery's runtime.Convert_Slice_string_To_bool),
// or the deprecated /watch/ path of /api/v1/watch/... or
// /apis/<group>/<version>/watch/....
func isWatch(r *http.Request) bool {
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
		return segment(p, 2) == "watch"
	case strings.HasPrefix(p, "apis/"):
		return segment(p, 3) == "watch"
	}
	return false
}

// segment returns the i-th slash-separated segment of p, or "".
func segment(p string, i int) string {
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

// writeHook is what a reconcile's context gives the transport so that it
// notes the reconcile's writes (ownedcreations.go) without knowing the
// Controller: noteWrite sends req through next and returns its answer.
type writeHook interface {
	noteWrite(req *http.Request, next http.RoundTripper) (*http.Response, error)
}

// writeHookKey is the context key of a request's writeHook.
type writeHookKey struct{}

// withWriteHook returns ctx carrying h, to which writeHookTransport
// hands the writes of a request made with ctx.
func withWriteHook(ctx context.Context, h writeHook) context.Context {
	return context.WithValue(ctx, writeHookKey{}, h)
}

// writeHookTransport is the transport's layer that hands a write (a
// PATCH, PUT or POST) to the writeHook of its request's context: a request
// whose context carries none, or isn't a write, passes through untouched.
type writeHookTransport struct{ next http.RoundTripper }

func (t writeHookTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	h, ok := req.Context().Value(writeHookKey{}).(writeHook)
	if !ok || (req.Method != http.MethodPatch && req.Method != http.MethodPut && req.Method != http.MethodPost) {
		return t.next.RoundTrip(req)
	}
	return h.noteWrite(req, t.next)
}
