package kube

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube/internal/apitransport"
	"github.com/z5labs/humus/kube/internal/throttle"
	"github.com/z5labs/humus/kube/internal/token"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// fakeAPIServer is an HTTP/2 TLS server whose handler records what arrives and
// answers as the API server does for namespaces: a list, a metadata-only
// list, or a watch that sends one ADDED event and stays open.
type fakeAPIServer struct {
	*httptest.Server
	roots *x509.CertPool

	mu   sync.Mutex
	reqs []arrivedRequest
}

// arrivedRequest is what the server saw of one request.
type arrivedRequest struct {
	Method, Path, RawQuery string
	Authorization          string
	Traceparent            string
	AcceptEncoding         string
	ServerName             string
	ProtoMajor             int
}

func newFakeAPIServer(t testing.TB) *fakeAPIServer {
	t.Helper()
	s := &fakeAPIServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	s.roots = x509.NewCertPool()
	s.roots.AddCert(s.Certificate())
	return s
}

func (s *fakeAPIServer) serve(w http.ResponseWriter, r *http.Request) {
	a := arrivedRequest{
		Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
		Authorization:  r.Header.Get("Authorization"),
		Traceparent:    r.Header.Get("Traceparent"),
		AcceptEncoding: r.Header.Get("Accept-Encoding"),
		ProtoMajor:     r.ProtoMajor,
	}
	if r.TLS != nil {
		a.ServerName = r.TLS.ServerName
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, a)
	s.mu.Unlock()

	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Query().Get("watch") == "true":
		fmt.Fprintln(w, `{"type":"ADDED","object":{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"watched","resourceVersion":"2"}}}`)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	case strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadataList"):
		fmt.Fprint(w, `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"1"},"items":[]}`)
	default:
		fmt.Fprint(w, `{"kind":"NamespaceList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[{"metadata":{"name":"default"}}]}`)
	}
}

func (s *fakeAPIServer) arrived() []arrivedRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]arrivedRequest(nil), s.reqs...)
}

// recordingDialer is a Host's Dial that records every address it is asked for and
// connects to the test server whatever the address, so a Connection's
// Server can be any name the server's certificate covers.
type recordingDialer struct {
	to string

	mu    sync.Mutex
	addrs []string
}

func (d *recordingDialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.addrs = append(d.addrs, addr)
	d.mu.Unlock()
	var nd net.Dialer
	return nd.DialContext(ctx, network, d.to)
}

func (d *recordingDialer) dialled() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.addrs...)
}

// countingToken is a Connection.Token that counts its calls and returns what its
// next field says.
type countingToken struct {
	calls atomic.Int32
	next  atomic.Pointer[func() (string, error)]
}

func newCountingToken(token string) *countingToken {
	ts := &countingToken{}
	ts.set(func() (string, error) { return token, nil })
	return ts
}

func (ts *countingToken) set(f func() (string, error)) { ts.next.Store(&f) }

func (ts *countingToken) Token(context.Context) (string, error) {
	ts.calls.Add(1)
	return (*ts.next.Load())()
}

// clientFixture is a Client on a Host whose Dial reaches an fakeAPIServer, with
// in-memory telemetry.
type clientFixture struct {
	server *fakeAPIServer
	dialer *recordingDialer
	tel    *humustest.Telemetry
	client *Client
	kube   kubernetes.Interface
}

func newClientFixture(t testing.TB, c Connection) *clientFixture {
	t.Helper()
	return newClientFixtureOn(t, newFakeAPIServer(t), c)
}

func newClientFixtureOn(t testing.TB, srv *fakeAPIServer, c Connection) *clientFixture {
	t.Helper()
	f := &clientFixture{server: srv, tel: humustest.NewTelemetry(t)}
	f.dialer = &recordingDialer{to: f.server.Listener.Addr().String()}
	if c.Server == "" {
		c.Server = "example.com:443" // httptest's certificate covers example.com
	}
	if c.TLS == nil {
		c.TLS = &tls.Config{RootCAs: f.server.roots}
	}
	s := &humus.Setup{Host: humus.Host{Dial: f.dialer.Dial}, Telemetry: f.tel.Telemetry}
	client, err := NewClient(s, c)
	require.NoError(t, err)
	t.Cleanup(client.transport.CloseIdleConnections)
	f.client = client
	f.kube, err = kubernetes.NewForConfig(client.Config())
	require.NoError(t, err)
	return f
}

func (f *clientFixture) list(t testing.TB) error {
	t.Helper()
	_, err := f.kube.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
	return err
}

func TestNewClientOpensNoConnection(t *testing.T) {
	d := &recordingDialer{to: "127.0.0.1:1"}
	s := &humus.Setup{Host: humus.Host{Dial: d.Dial}}
	client, err := NewClient(s, Connection{Server: "example.com:443", TLS: &tls.Config{}, Token: newCountingToken("t").Token})
	require.NoError(t, err)

	_, err = kubernetes.NewForConfig(client.Config())
	require.NoError(t, err)
	_, err = dynamic.NewForConfig(client.Config())
	require.NoError(t, err)
	_, err = metadata.NewForConfig(client.Config())
	require.NoError(t, err)

	require.Empty(t, d.dialled())
}

func TestConfigHandsClientGoTheTransportAndNoTLSFields(t *testing.T) {
	f := newClientFixture(t, Connection{})
	cfg := f.client.Config()
	require.Equal(t, "https://example.com:443", cfg.Host)
	require.Same(t, f.client.transport, cfg.Transport)
	require.Empty(t, cfg.CAData)
	require.Empty(t, cfg.CAFile)
	require.Empty(t, cfg.CertData)
	require.False(t, cfg.Insecure)
	_, err := rest.TransportFor(cfg)
	require.NoError(t, err, "client-go refuses a custom Transport beside TLS fields")
	require.Empty(t, cfg.BearerToken)
	require.Empty(t, cfg.BearerTokenFile)

	cfg.Host = "https://changed"
	require.Equal(t, "https://example.com:443", f.client.Config().Host, "Config returns a copy")
}

func TestEveryClientGoClientGoesThroughTheTransport(t *testing.T) {
	f := newClientFixture(t, Connection{Token: newCountingToken("secret").Token})
	ctx := t.Context()

	require.NoError(t, f.list(t))
	dyn, err := dynamic.NewForConfig(f.client.Config())
	require.NoError(t, err)
	_, err = dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	meta, err := metadata.NewForConfig(f.client.Config())
	require.NoError(t, err)
	_, err = meta.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)

	got := f.server.arrived()
	require.Len(t, got, 3)
	for _, a := range got {
		require.Equal(t, "/api/v1/namespaces", a.Path)
		require.Equal(t, "Bearer secret", a.Authorization)
		require.NotEmpty(t, a.Traceparent, "otelhttp injects s.Telemetry's propagator")
	}
	for _, addr := range f.dialer.dialled() {
		require.Equal(t, "example.com:443", addr, "every dial goes through s.Host.Dial to Server")
	}
	require.Len(t, f.tel.Spans(), 3)
}

func TestClientNegotiatesHTTP2WithPings(t *testing.T) {
	f := newClientFixture(t, Connection{})
	require.NoError(t, f.list(t))
	require.NoError(t, f.list(t))

	for _, a := range f.server.arrived() {
		require.Equal(t, 2, a.ProtoMajor)
	}
	require.Len(t, f.dialer.dialled(), 1, "HTTP/2 multiplexes requests on one connection")
	require.Equal(t, 30*time.Second, f.client.transport.h2.ReadIdleTimeout)
	require.Equal(t, 15*time.Second, f.client.transport.h2.PingTimeout)
}

func TestTokenIsSentAsBearer(t *testing.T) {
	f := newClientFixture(t, Connection{Token: newCountingToken("abc").Token})
	require.NoError(t, f.list(t))
	require.Equal(t, "Bearer abc", f.server.arrived()[0].Authorization)
}

func TestNilTokenSendsNoAuthorization(t *testing.T) {
	f := newClientFixture(t, Connection{})
	require.NoError(t, f.list(t))
	require.Empty(t, f.server.arrived()[0].Authorization)
}

func TestClientUsesNoProxyFromTheEnvironment(t *testing.T) {
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"} {
		t.Setenv(k, "http://proxy.invalid:3128")
	}
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")

	f := newClientFixture(t, Connection{})
	require.Nil(t, f.client.transport.base.Proxy)
	require.NoError(t, f.list(t))
	require.Equal(t, []string{"example.com:443"}, f.dialer.dialled(), "dialled the API server, not the proxy")
}

func TestServerNameDefaultsToServersHost(t *testing.T) {
	f := newClientFixture(t, Connection{Server: "example.com:8443"})
	require.NoError(t, f.list(t))
	require.Equal(t, "example.com", f.server.arrived()[0].ServerName)
}

func TestClientUsesACloneOfTheCallersTLS(t *testing.T) {
	srv := newFakeAPIServer(t)
	caller := &tls.Config{RootCAs: srv.roots}
	f := newClientFixtureOn(t, srv, Connection{TLS: caller})
	caller.RootCAs = x509.NewCertPool() // a later change reaches no Client
	require.NoError(t, f.list(t))
	require.Empty(t, caller.ServerName, "the caller's config is not changed")
	require.Empty(t, caller.NextProtos, "the caller's config is not changed")
}

func TestServerNameIsVerifiedAgainstTheCertificate(t *testing.T) {
	f := newClientFixture(t, Connection{Server: "kube.test:6443"})
	require.ErrorContains(t, f.list(t), "kube.test", "the certificate is checked against Server's host")
}

func TestExplicitServerNameIsKept(t *testing.T) {
	srv := newFakeAPIServer(t)
	f := newClientFixtureOn(t, srv, Connection{Server: "kube.test:6443", TLS: &tls.Config{RootCAs: srv.roots, ServerName: "example.com"}})
	require.NoError(t, f.list(t))
	require.Equal(t, "example.com", f.server.arrived()[0].ServerName)
}

func TestClientTracesRequestsButNotWatches(t *testing.T) {
	f := newClientFixture(t, Connection{Token: newCountingToken("t").Token})
	require.NoError(t, f.list(t))

	w, err := f.kube.CoreV1().Namespaces().Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	ev := <-w.ResultChan()
	require.Equal(t, "watched", ev.Object.(metav1.Object).GetName())
	w.Stop()

	got := f.server.arrived()
	require.Len(t, got, 2)
	require.Equal(t, "Bearer t", got[1].Authorization, "a watch carries the token too")
	require.Empty(t, got[1].Traceparent, "a watch is not traced")

	spans := f.tel.Spans()
	require.Len(t, spans, 1, "a span for the list, none for the watch")
	require.Equal(t, trace.SpanKindClient, spans[0].SpanKind())
	require.Equal(t, "HTTP GET", spans[0].Name(), "otelhttp's client span name")

	_, ok := f.tel.Metric(otelhttp.ScopeName, "http.client.request.duration")
	require.True(t, ok, "otelhttp's request duration")
}

func TestClientHasNoRateLimit(t *testing.T) {
	f := newClientFixture(t, Connection{})
	require.Less(t, f.client.Config().QPS, float32(0))
	require.Nil(t, f.client.Config().RateLimiter)
	kc, err := kubernetes.NewForConfig(f.client.Config())
	require.NoError(t, err)
	require.Nil(t, kc.CoreV1().RESTClient().GetRateLimiter())
}

func TestClientSurfacesDialErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		dial func(ctx context.Context, network, addr string) (net.Conn, error)
		want string
	}{
		"error": {
			func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("no route to host") },
			"kube: dialling the API server at example.com:443 through the Host: no route to host",
		},
		"nil conn": {
			func(context.Context, string, string) (net.Conn, error) { return nil, nil },
			"Host.Dial returned no connection and no error",
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := &humus.Setup{Host: humus.Host{Dial: tc.dial}}
			client, err := NewClient(s, Connection{Server: "example.com:443", TLS: &tls.Config{}})
			require.NoError(t, err)
			kc, err := kubernetes.NewForConfig(client.Config())
			require.NoError(t, err)
			_, err = kc.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestClientSurfacesAServerThatClosesTheConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	d := &recordingDialer{to: ln.Addr().String()}
	client, err := NewClient(&humus.Setup{Host: humus.Host{Dial: d.Dial}}, Connection{Server: "example.com:443", TLS: &tls.Config{}})
	require.NoError(t, err)
	// Straight through the transport: client-go's REST client would retry
	// a GET that met EOF ten times, a second apart.
	hc := &http.Client{Transport: client.Config().Transport}
	_, err = hc.Get("https://example.com:443/api/v1/namespaces")
	require.Error(t, err)
	require.True(t, errors.Is(err, io.EOF) || strings.Contains(err.Error(), "connection reset"), "got %v", err)
	require.Contains(t, err.Error(), "https://example.com:443/api/v1/namespaces")
}

func TestClientLeaksNoGoroutines(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	func() {
		f := newClientFixture(t, Connection{Token: newCountingToken("t").Token})
		require.NoError(t, f.list(t))
		w, err := f.kube.CoreV1().Namespaces().Watch(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		<-w.ResultChan()
		w.Stop()
		f.client.transport.CloseIdleConnections()
		f.server.Close()
	}()
	goleak.VerifyNone(t, ignore)
}

func TestCheckServer(t *testing.T) {
	for _, ok := range []string{"10.96.0.1:443", "kubernetes.default.svc:443", "[::1]:6443", "[fd00::1%eth0]:1", "localhost:65535"} {
		require.NoError(t, CheckServer(ok), ok)
	}
	for addr, want := range map[string]string{
		"":                   "kube: Connection.Server is empty",
		"10.96.0.1":          `kube: Connection.Server "10.96.0.1" is not host:port: address 10.96.0.1: missing port in address`,
		"example.com":        "missing port in address",
		"example.com:":       `port "" is not a number from 1 to 65535`,
		"example.com:0":      `port "0" is not a number from 1 to 65535`,
		"example.com:65536":  `port "65536" is not a number from 1 to 65535`,
		"example.com:-1":     `port "-1" is not a number from 1 to 65535`,
		"example.com:https":  `port "https" is not a number from 1 to 65535`,
		":443":               `kube: Connection.Server ":443" has no host`,
		"::1:6443":           `kube: Connection.Server "::1:6443": an IPv6 host is written in brackets, as [fd00::1]:443`,
		"fd00::1":            "an IPv6 host is written in brackets",
		"[::1]":              "missing port in address",
		"[example.com]:443":  "only an IPv6 host is written in brackets",
		"https://host:443":   `kube: Connection.Server "https://host:443" has a scheme`,
		"host/path:443":      `host "host/path" is not a host name or an IP address`,
		"user@host:443":      `host "user@host" is not a host name or an IP address`,
		"[::1]:0":            `port "0" is not a number from 1 to 65535`,
		"example.com:443:1":  "an IPv6 host is written in brackets",
		"example.com:99999x": `port "99999x" is not a number from 1 to 65535`,
	} {
		require.ErrorContains(t, CheckServer(addr), want, addr)
	}
	err := CheckServer(":0")
	require.ErrorContains(t, err, "has no host")
	require.ErrorContains(t, err, `port "0"`, "both mistakes are named")
}

func TestCheckTLS(t *testing.T) {
	require.EqualError(t, CheckTLS(nil), "kube: Connection.TLS is nil: it needs at least the cluster's CA in RootCAs")
	require.NoError(t, CheckTLS(&tls.Config{}))
	require.NoError(t, CheckTLS(&tls.Config{MinVersion: tls.VersionTLS13}))
	require.NoError(t, CheckTLS(&tls.Config{MaxVersion: tls.VersionTLS12}))
	require.EqualError(t, CheckTLS(&tls.Config{MaxVersion: tls.VersionTLS11}),
		"kube: Connection.TLS.MaxVersion is TLS 1.1: the API server speaks TLS 1.2 at least (kube-apiserver --tls-min-version)")
	require.EqualError(t, CheckTLS(&tls.Config{MinVersion: tls.VersionTLS13, MaxVersion: tls.VersionTLS12}),
		"kube: Connection.TLS.MinVersion TLS 1.3 is above its MaxVersion TLS 1.2: no TLS version is allowed")
	require.EqualError(t, CheckTLS(&tls.Config{MinVersion: 0x0305}),
		"kube: Connection.TLS.MinVersion 0x0305 is above its MaxVersion TLS 1.3: no TLS version is allowed")
}

func TestNewClientNamesEveryMistake(t *testing.T) {
	_, err := NewClient(&humus.Setup{}, Connection{Server: "::1:443"})
	require.ErrorContains(t, err, "kube: NewClient: s.Host.Dial is nil")
	require.ErrorContains(t, err, "an IPv6 host is written in brackets")
	require.ErrorContains(t, err, "kube: Connection.TLS is nil")

	_, err = NewClient(nil, Connection{Server: "example.com:443", TLS: &tls.Config{}})
	require.EqualError(t, err, "kube: NewClient: the Setup is nil")

	_, err = NewClient(&humus.Setup{Host: humus.Host{Dial: (&net.Dialer{}).DialContext}}, Connection{})
	require.ErrorContains(t, err, "kube: Connection.Server is empty")
	require.ErrorContains(t, err, "kube: Connection.TLS is nil")
}

func TestNilTelemetryRecordsNothingAndNeedsNoGlobals(t *testing.T) {
	srv := newFakeAPIServer(t)
	d := &recordingDialer{to: srv.Listener.Addr().String()}
	client, err := NewClient(&humus.Setup{Host: humus.Host{Dial: d.Dial}}, Connection{
		Server: "example.com:443", TLS: &tls.Config{RootCAs: srv.roots},
		Token: func(context.Context) (string, error) { return "t", nil },
	})
	require.NoError(t, err)
	t.Cleanup(client.transport.CloseIdleConnections)
	kc, err := kubernetes.NewForConfig(client.Config())
	require.NoError(t, err)
	_, err = kc.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, srv.arrived()[0].Traceparent, "no propagator, no header")
	require.Equal(t, "Bearer t", srv.arrived()[0].Authorization)
	require.IsType(t, apitransport.WriteHooks{}, client.transport.RoundTripper, "nothing to record with: no otelhttp")
	require.IsType(t, &token.Bearer{}, client.transport.RoundTripper.(apitransport.WriteHooks).Next)

	// humus.Run hands Init the Telemetry with no-op providers in place of
	// nil ones.
	client, err = NewClient(&humus.Setup{Host: humus.Host{Dial: d.Dial}, Telemetry: humus.Telemetry{}.WithNoops()}, Connection{
		Server: "example.com:443", TLS: &tls.Config{RootCAs: srv.roots},
	})
	require.NoError(t, err)
	require.IsType(t, apitransport.WriteHooks{}, client.transport.RoundTripper, "no-op providers: no otelhttp")
	require.IsType(t, &throttle.Window{}, client.transport.RoundTripper.(apitransport.WriteHooks).Next)
}

func TestAClientAsksForGzipOnlyWithCompression(t *testing.T) {
	for _, compression := range []bool{false, true} {
		f := newClientFixture(t, Connection{Compression: compression})
		require.NoError(t, f.list(t))
		want := ""
		if compression {
			want = "gzip"
		}
		require.Equal(t, want, f.server.arrived()[0].AcceptEncoding, "Compression %v", compression)
		require.Equal(t, 2, f.server.arrived()[0].ProtoMajor)
	}
}

func TestATransportWithAnyProviderOrPropagatorHasOtelhttp(t *testing.T) {
	tel := humustest.NewTelemetry(t).Telemetry
	for name, telemetry := range map[string]humus.Telemetry{
		"tracer":     {TracerProvider: tel.TracerProvider},
		"meter":      {MeterProvider: tel.MeterProvider},
		"propagator": {Propagator: tel.Propagator},
	} {
		client, err := NewClient(&humus.Setup{Host: humus.Host{Dial: (&net.Dialer{}).DialContext}, Telemetry: telemetry},
			Connection{Server: "example.com:443", TLS: &tls.Config{}})
		require.NoError(t, err, name)
		require.IsType(t, &otelhttp.Transport{}, client.transport.RoundTripper, name)
	}
}

// BenchmarkTransportRoundTrip measures one GET through the Client's whole
// transport (otelhttp with the SDK's providers, the token, HTTP/2 over TLS)
// to an in-process server, body read and closed.
func BenchmarkTransportRoundTrip(b *testing.B) {
	f := newClientFixture(b, Connection{Token: newCountingToken("t").Token})
	req, err := http.NewRequest(http.MethodGet, "https://example.com:443/api/v1/namespaces", nil)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		resp, err := f.client.transport.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// BenchmarkTransportRoundTripWithoutTelemetry is BenchmarkTransportRoundTrip
// with a Setup that has no Telemetry: no provider and no propagator, as the
// converge benchmark's kube peer runs.
func BenchmarkTransportRoundTripWithoutTelemetry(b *testing.B) {
	srv := newFakeAPIServer(b)
	d := &recordingDialer{to: srv.Listener.Addr().String()}
	client, err := NewClient(&humus.Setup{Host: humus.Host{Dial: d.Dial}}, Connection{
		Server: "example.com:443", TLS: &tls.Config{RootCAs: srv.roots}, Token: newCountingToken("t").Token,
	})
	require.NoError(b, err)
	b.Cleanup(client.transport.CloseIdleConnections)
	req, err := http.NewRequest(http.MethodGet, "https://example.com:443/api/v1/namespaces", nil)
	require.NoError(b, err)
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		resp, err := client.transport.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "CPU-ns/op")
}

// BenchmarkClientsetList measures one typed List through a clientset made
// from Config, decoding included.
func BenchmarkClientsetList(b *testing.B) {
	f := newClientFixture(b, Connection{Token: newCountingToken("t").Token})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestEveryServerCheckServerAcceptsMakesAUsableClient(t *testing.T) {
	for _, server := range []string{
		"10.96.0.1:443", "kubernetes.default.svc:443", "kubernetes.default.svc.:443", "[::1]:6443",
		"[fd00::1%eth0]:1", "[::ffff:10.0.0.1]:443", "Example.COM:6443", "my_host:443", "héllo.example:443",
	} {
		require.NoError(t, CheckServer(server), server)
		d := &recordingDialer{to: "127.0.0.1:1"}
		client, err := NewClient(&humus.Setup{Host: humus.Host{Dial: d.Dial}}, Connection{Server: server, TLS: &tls.Config{}})
		require.NoError(t, err, server)
		kc, err := kubernetes.NewForConfig(client.Config())
		require.NoError(t, err, server)
		_, err = kc.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
		require.ErrorContains(t, err, "through the Host", server)
		require.NotEmpty(t, d.dialled(), server)
		if !strings.Contains(server, "é") { // dialled by its ASCII name
			require.Equal(t, server, d.dialled()[0], "the dialled address is Server")
		}
	}
}

func TestServerNameOfAnIPv6HostWithAZoneHasNoZone(t *testing.T) {
	client, err := NewClient(&humus.Setup{Host: humus.Host{Dial: (&net.Dialer{}).DialContext}}, Connection{Server: "[fe80::1%eth0]:6443", TLS: &tls.Config{}})
	require.NoError(t, err)
	require.Equal(t, "fe80::1", client.transport.base.TLSClientConfig.ServerName)
	require.Equal(t, "https://[fe80::1%25eth0]:6443", client.Config().Host)
}

func TestCheckServerRefusesAHostNoClientCanUse(t *testing.T) {
	for _, server := range []string{
		"host%x:443", "a|b:443", `a\b:443`, "a{b}:443", "a%20b:443", "exa\x00mple:443", "[::1%]:443",
		"[fe80::1%e/t]:443", "a..b:443", "999.1.1.1:443", "1.2.3.4.5:443", `a"b:443`, "[1.2.3.4]:443",
		strings.Repeat("a", 64) + ".com:443",
	} {
		err := CheckServer(server)
		require.Error(t, err, server)
		require.ErrorContains(t, err, "kube: Connection.Server", server)
	}
}
