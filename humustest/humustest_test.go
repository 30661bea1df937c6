package humustest_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func TestHostServesHTTPOverItsInMemoryNetwork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := humustest.NewHost(t)
		addr := h.Handle("api.test:443", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "hello "+r.URL.Path)
		}))
		require.Equal(t, "api.test:443", addr)

		resp, err := h.Client().Get("http://api.test:443/x")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, "hello /x", string(body))
	})
}

// TestHostCarriesTLS13 runs a TLS handshake, in which both ends write at
// once, over the Host's connections; net.Pipe would deadlock here.
func TestHostCarriesTLS13(t *testing.T) {
	srv := httptest.NewUnstartedServer(nil) // only for its certificate
	srv.StartTLS()
	defer srv.Close()
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs

	synctest.Test(t, func(t *testing.T) {
		h := humustest.NewHost(t)
		ln, err := h.Listen(t.Context(), "tcp", "127.0.0.1:0")
		require.NoError(t, err)
		tl := tls.NewListener(ln, srv.TLS)
		s := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, r.TLS.ServerName)
		})}
		served := make(chan error, 1)
		go func() { served <- s.Serve(tl) }()

		client := &http.Client{Transport: &http.Transport{
			DialContext:       h.Dial,
			TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: "example.com", MinVersion: tls.VersionTLS13},
			DisableKeepAlives: true,
		}}
		resp, err := client.Get("https://" + ln.Addr().String())
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, "example.com", string(body))

		s.Close()
		require.ErrorIs(t, <-served, http.ErrServerClosed)
	})
}

func TestHostDialWithoutAListenerIsRefused(t *testing.T) {
	h := humustest.NewHost(t)
	_, err := h.Dial(t.Context(), "tcp", "nowhere.test:80")
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
}

func TestHostListenOnATakenAddressFails(t *testing.T) {
	h := humustest.NewHost(t)
	ln, err := h.Listen(t.Context(), "tcp", ":8080")
	require.NoError(t, err)
	defer ln.Close()
	_, err = h.Listen(t.Context(), "tcp", ":8080")
	require.ErrorIs(t, err, syscall.EADDRINUSE)

	c, err := h.Dial(t.Context(), "tcp", "localhost:8080")
	require.NoError(t, err, "a listener on :8080 takes every host")
	c.Close()
}

func TestHostConnReadDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := humustest.NewHost(t)
		ln, err := h.Listen(t.Context(), "tcp", ":1")
		require.NoError(t, err)
		defer ln.Close()
		c, err := h.Dial(t.Context(), "tcp", ":1")
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Second)))
		_, err = c.Read(make([]byte, 1))
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	})
}

func TestHostEnvFilesAndStderr(t *testing.T) {
	h := humustest.NewHost(t)
	h.SetEnv("POD_NAME", "ctrl-0")
	h.WriteFile("var/run/secrets/token", []byte("t0k3n"))
	fmt.Fprint(h.Stderr, "oops")

	v, ok := h.LookupEnv("POD_NAME")
	require.True(t, ok)
	require.Equal(t, "ctrl-0", v)
	_, ok = h.LookupEnv("POD_NAMESPACE")
	require.False(t, ok)
	b, err := fs.ReadFile(h.FS, "var/run/secrets/token")
	require.NoError(t, err)
	require.Equal(t, "t0k3n", string(b))
	_, err = fs.ReadFile(h.FS, "var/run/secrets/ca.crt")
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.Equal(t, "oops", h.StderrString())
}

func TestTelemetryMetricFindsAnInstrumentByScopeAndName(t *testing.T) {
	tel := humustest.NewTelemetry(t)
	for scope, n := range map[string]int64{"a": 1, "b": 2} {
		counter, err := tel.MeterProvider.Meter(scope).Int64Counter("humus.test.count")
		require.NoError(t, err)
		counter.Add(t.Context(), n)
	}
	m, ok := tel.Metric("b", "humus.test.count")
	require.True(t, ok)
	require.Equal(t, int64(2), m.Data.(metricdata.Sum[int64]).DataPoints[0].Value, "b's, not a's")
	_, ok = tel.Metric("b", "humus.test.other")
	require.False(t, ok)
	_, ok = tel.Metric("c", "humus.test.count")
	require.False(t, ok)
}

func TestTelemetryKeepsSpansMetricsAndRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tel := humustest.NewTelemetry(t)
		_, span := tel.TracerProvider.Tracer("test").Start(t.Context(), "reconcile")
		span.End()
		counter, err := tel.MeterProvider.Meter("test").Int64Counter("humus.test.count")
		require.NoError(t, err)
		counter.Add(t.Context(), 2)
		var r log.Record
		r.SetBody(attribute.StringValue("hello"))
		tel.LoggerProvider.Logger("test").Emit(t.Context(), r)

		spans := tel.Spans()
		require.Len(t, spans, 1)
		require.Equal(t, "reconcile", spans[0].Name())
		m := tel.Metrics().ScopeMetrics[0].Metrics[0]
		require.Equal(t, "humus.test.count", m.Name)
		require.Equal(t, int64(2), m.Data.(metricdata.Sum[int64]).DataPoints[0].Value)
		records := tel.Records()
		require.Len(t, records, 1)
		require.Equal(t, "hello", records[0].Body().AsString())

		require.NoError(t, tel.Shutdown(t.Context()))
		require.Equal(t, 1, tel.Shutdowns())
		require.Len(t, tel.Metrics().ScopeMetrics, 1, "still readable after the App's Shutdown")
	})
}

// recorder is a testing.TB that keeps the errors reported to it.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) Helper() {}

type leaky struct{ stop chan struct{} }

func (l leaky) Serve(ctx context.Context) error {
	go func() { <-l.stop }() // outlives Serve
	<-ctx.Done()
	return nil
}
func (leaky) Shutdown(context.Context) error { return nil }

func TestTestServiceFailsWhenAGoroutineOutlivesTheService(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	r := &recorder{TB: t}
	humustest.TestService(r, leaky{stop}).Stop()
	require.Len(t, r.errs, 1)
	require.Contains(t, r.errs[0], "a goroutine outlived")
}

type failing struct{}

func (failing) Serve(context.Context) error    { return errors.New("broken") }
func (failing) Shutdown(context.Context) error { return nil }

func TestTestServiceFailsWhenServeFails(t *testing.T) {
	r := &recorder{TB: t}
	s := humustest.TestService(r, failing{})
	<-s.Done()
	s.Stop()
	require.Len(t, r.errs, 1)
	require.Contains(t, r.errs[0], "broken")
}

type clean struct{ done chan struct{} }

func (c clean) Serve(ctx context.Context) error { defer close(c.done); <-ctx.Done(); return nil }
func (c clean) Shutdown(ctx context.Context) error {
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestTestServicePassesACleanService(t *testing.T) {
	r := &recorder{TB: t}
	humustest.TestService(r, clean{make(chan struct{})}).Stop()
	require.Empty(t, r.errs)
}

func TestRunAppReturnsTheExitCodeAfterAnInjectedSignal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := clean{make(chan struct{})}
		app := humustest.RunApp(t, humustest.NewHost(t).Host, func(context.Context, *humus.Setup) ([]humus.Service, error) {
			return []humus.Service{svc}, nil
		})
		synctest.Wait()
		select {
		case <-app.Done():
			t.Fatal("the App exited before a signal")
		default:
		}
		app.Signal(syscall.SIGTERM)
		require.Equal(t, 0, app.Wait())
	})
}

type panicky struct{}

func (panicky) Serve(context.Context) error    { panic("serve boom") }
func (panicky) Shutdown(context.Context) error { return nil }

func TestTestServiceFailsTheTestWhenServePanics(t *testing.T) {
	r := &recorder{TB: t}
	s := humustest.TestService(r, panicky{})
	<-s.Done()
	s.Stop()
	require.Len(t, r.errs, 1)
	require.Contains(t, r.errs[0], "humustest: humustest_test.panicky.Serve: panic: serve boom")
}
