package health_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"github.com/z5labs/humus/health"
	"github.com/z5labs/humus/humustest"
)

func get(t *testing.T, h *humustest.Host, url string) (int, string) {
	t.Helper()
	resp, err := h.Client().Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestReadinessFlipsFrom503To200WhenItsMonitorDoes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := humustest.NewHost(t)
		var synced health.Binary
		humustest.TestService(t, health.NewProbes(&humus.Setup{Host: h.Host}, ":8081", health.Readiness(&synced)))
		synctest.Wait() // listening

		code, body := get(t, h, "http://pod.test:8081/readyz")
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, "health: unhealthy\n", body)

		synced.MarkHealthy()
		code, body = get(t, h, "http://pod.test:8081/readyz")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "ok\n", body)

		synced.MarkUnhealthy()
		code, _ = get(t, h, "http://pod.test:8081/readyz")
		require.Equal(t, http.StatusServiceUnavailable, code)
	})
}

func TestLivenessIsServedAtLivezAndNamesEveryUnhealthyMonitor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := humustest.NewHost(t)
		a := health.MonitorFunc(func(context.Context) error { return errors.New("a is stuck") })
		b := health.MonitorFunc(func(context.Context) error { return errors.New("b is stuck") })
		var ok health.Binary
		ok.MarkHealthy()
		humustest.TestService(t, health.NewProbes(&humus.Setup{Host: h.Host}, "127.0.0.1:9000",
			health.Readiness(), health.Liveness(a, &ok, b)))
		synctest.Wait()

		code, body := get(t, h, "http://127.0.0.1:9000/livez")
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, "a is stuck\nb is stuck\n", body)
		code, _ = get(t, h, "http://127.0.0.1:9000/readyz")
		require.Equal(t, http.StatusOK, code, "a probe with no monitor is healthy")
		code, _ = get(t, h, "http://127.0.0.1:9000/metrics")
		require.Equal(t, http.StatusNotFound, code)
	})
}

func TestProbesServeFailsWhenItCannotListen(t *testing.T) {
	h := humustest.NewHost(t)
	ln, err := h.Listen(t.Context(), "tcp", ":8081")
	require.NoError(t, err)
	defer ln.Close()

	err = health.NewProbes(&humus.Setup{Host: h.Host}, ":8081").Serve(t.Context())
	require.ErrorContains(t, err, "health: listening for probes")
	require.ErrorContains(t, err, "address already in use")
}

func TestProbesShutdownBeforeServeReturnsAtOnce(t *testing.T) {
	p := health.NewProbes(&humus.Setup{Host: humustest.NewHost(t).Host}, ":8081")
	require.NoError(t, p.Shutdown(t.Context()))
	require.NoError(t, p.Serve(t.Context()), "Serve after Shutdown does nothing")
}

// TestProbesShutdownForcesARequestInFlightWhenItsContextEnds holds a
// request in its Monitor past Shutdown's context.
func TestProbesShutdownForcesARequestInFlightWhenItsContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := humustest.NewHost(t)
		release := make(chan struct{})
		defer close(release)
		stuck := health.MonitorFunc(func(ctx context.Context) error { <-release; return nil })
		p := health.NewProbes(&humus.Setup{Host: h.Host}, ":8081", health.Readiness(stuck))
		ctx, cancel := context.WithCancel(t.Context())
		served := make(chan error, 1)
		go func() { served <- p.Serve(ctx) }()
		synctest.Wait()
		go h.Client().Get("http://pod.test:8081/readyz")
		synctest.Wait() // the request is in flight

		cancel()
		sctx, scancel := context.WithCancel(t.Context())
		scancel()
		err := p.Shutdown(sctx)
		require.ErrorIs(t, err, context.Canceled)
		require.NoError(t, <-served)
	})
}

func TestNewProbesServesTheLastOfTwoProbesOnOnePath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := humustest.NewHost(t)
		bad := health.MonitorFunc(func(context.Context) error { return errors.New("first") })
		var p humus.Service
		require.NotPanics(t, func() {
			p = health.NewProbes(&humus.Setup{Host: h.Host}, ":8081", health.Readiness(bad), health.Readiness())
		})
		humustest.TestService(t, p)
		synctest.Wait()
		code, _ := get(t, h, "http://pod.test:8081/readyz")
		require.Equal(t, http.StatusOK, code)
	})
}

func TestHandlerIsServedBesideTheProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := humustest.NewHost(t)
		metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "# the metrics\n")
		})
		p := health.NewProbes(&humus.Setup{Host: h.Host}, ":8081", health.Readiness(), health.Handler("/metrics", metrics))
		humustest.TestService(t, p)
		synctest.Wait()
		code, body := get(t, h, "http://pod.test:8081/metrics")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "# the metrics\n", body)
		code, _ = get(t, h, "http://pod.test:8081/readyz")
		require.Equal(t, http.StatusOK, code)
		require.NoError(t, health.Handler("/metrics", metrics).Healthy(t.Context()))
	})
}

func TestHandlerWithoutAHandlerOrAPathIsAZeroProbe(t *testing.T) {
	ok := http.NotFoundHandler()
	for _, p := range []health.Probe{health.Handler("/metrics", nil), health.Handler("metrics", ok), health.Handler("", ok)} {
		require.Empty(t, p.Path())
	}
}

func TestNewProbesMistakesAreServesErrorNotPanics(t *testing.T) {
	h := humustest.NewHost(t)
	for name, tc := range map[string]struct {
		new  func() humus.Service
		want string
	}{
		"zero Probe": {
			func() humus.Service {
				return health.NewProbes(&humus.Setup{Host: h.Host}, ":8081", health.Readiness(), health.Probe{})
			},
			"health: NewProbes: probe 1 is a zero Probe: make it with Readiness, Liveness or Handler (with a handler and a path starting with /)",
		},
		"nil Setup":  {func() humus.Service { return health.NewProbes(nil, ":8081") }, "health: NewProbes was given a nil Setup"},
		"nil Listen": {func() humus.Service { return health.NewProbes(&humus.Setup{}, ":8081") }, "health: NewProbes: s.Host.Listen is nil"},
	} {
		t.Run(name, func(t *testing.T) {
			var p humus.Service
			require.NotPanics(t, func() { p = tc.new() })
			var err error
			require.NotPanics(t, func() { err = p.Serve(t.Context()) })
			require.EqualError(t, err, tc.want)
			require.NoError(t, p.Shutdown(t.Context()))
		})
	}
}

func TestANilOrPanickingMonitorIsUnhealthy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := humustest.NewHost(t)
		boom := health.MonitorFunc(func(context.Context) error { panic("boom") })
		humustest.TestService(t, health.NewProbes(&humus.Setup{Host: h.Host}, ":8081", health.Liveness(nil, boom)))
		synctest.Wait()
		code, body := get(t, h, "http://pod.test:8081/livez")
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, "health: monitor 0 of /livez is nil\nhealth: monitor health.MonitorFunc panicked: boom\n", body)
		require.Empty(t, h.StderrString())
	})
}

// flakyListener's first Accept fails with a temporary error, which
// net/http's server logs and retries.
type flakyListener struct {
	net.Listener
	failed atomic.Bool
}

type temporary struct{}

func (temporary) Error() string   { return "flaky accept" }
func (temporary) Timeout() bool   { return false }
func (temporary) Temporary() bool { return true }

func (l *flakyListener) Accept() (net.Conn, error) {
	if !l.failed.Swap(true) {
		return nil, temporary{}
	}
	return l.Listener.Accept()
}

func TestProbesLogToTheHostsStderr(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := humustest.NewHost(t)
		host := h.Host
		host.Listen = func(ctx context.Context, network, addr string) (net.Listener, error) {
			ln, err := h.Listen(ctx, network, addr)
			return &flakyListener{Listener: ln}, err
		}
		humustest.TestService(t, health.NewProbes(&humus.Setup{Host: host}, ":8081", health.Readiness()))
		synctest.Wait()
		code, _ := get(t, h, "http://pod.test:8081/readyz")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, h.StderrString(), "health: probes: http: Accept error: flaky accept; retrying")
	})
}
