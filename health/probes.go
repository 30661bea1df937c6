package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/z5labs/humus"
)

// Probe is an HTTP path that reports on a group of Monitors: 200 OK when
// every Monitor is healthy, 503 Service Unavailable otherwise. A Probe with
// no Monitor is always healthy.
type Probe struct {
	path     string
	monitors []Monitor
	handler  http.Handler // Handler's; nil for a health report
}

// Handler returns a Probe that serves h at path in place of a health
// report, so that an endpoint such as Prometheus' /metrics shares the
// probes' listener: a pod then exposes one port for its kubelet and its
// scraper. path is a net/http ServeMux pattern, such as "/metrics". Its
// Healthy is always nil. A nil h, or a path that doesn't start with "/",
// is a zero Probe, which NewProbes reports.
func Handler(path string, h http.Handler) Probe {
	if h == nil || !strings.HasPrefix(path, "/") {
		return Probe{}
	}
	return Probe{path: path, handler: h}
}

// Readiness returns the Probe served at /readyz: whether the App should be
// sent work now, as a Kubernetes readiness probe asks. It is healthy when
// every one of ms is.
func Readiness(ms ...Monitor) Probe { return Probe{path: "/readyz", monitors: ms} }

// Liveness returns the Probe served at /livez: whether the App is still
// working, or should be restarted, as a Kubernetes liveness probe asks. It
// is healthy when every one of ms is.
func Liveness(ms ...Monitor) Probe { return Probe{path: "/livez", monitors: ms} }

// Path returns where p is served, such as "/readyz".
func (p Probe) Path() string { return p.path }

// Healthy returns nil when every one of p's Monitors is healthy, and
// otherwise every unhealthy Monitor's error, joined. A nil Monitor, and one
// whose Healthy panics, is unhealthy, with an error saying so.
func (p Probe) Healthy(ctx context.Context) error {
	var errs []error
	for i, m := range p.monitors {
		if m == nil {
			errs = append(errs, fmt.Errorf("health: monitor %d of %s is nil", i, p.path))
		} else if err := healthy(ctx, m); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// healthy is m.Healthy(ctx), with a panic turned into an error.
func healthy(ctx context.Context, m Monitor) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("health: monitor %T panicked: %v", m, r)
		}
	}()
	return m.Healthy(ctx)
}

// ServeHTTP answers 200 with "ok" when p is healthy, and 503 with the
// Monitors' errors, one a line, when it isn't. A Handler's Probe is served
// by its handler.
func (p Probe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.handler != nil {
		p.handler.ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := p.Healthy(r.Context()); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, err.Error()+"\n")
		return
	}
	io.WriteString(w, "ok\n")
}

// readHeaderTimeout bounds how long a probe's client may take to send its
// request's headers; the kubelet's probes time out after 1s by default.
const readHeaderTimeout = 5 * time.Second

// NewProbes returns a Service that serves probes over HTTP at addr
// ("host:port", as net.Listen takes; ":8081" listens on every interface),
// each at its Path, and 404 elsewhere. It listens with s.Host.Listen when
// Serve is called; a failure to listen is Serve's error, as are a nil s, a
// nil s.Host.Listen and a zero Probe (one made neither by Readiness nor by
// Liveness). When two probes share a path, the last one is served. What the
// HTTP server logs, such as a failed Accept, goes to s.Host.Stderr.
//
// Serve stops accepting requests once its context is done, lets the requests
// in flight finish, and returns nil. Shutdown waits for that; if its context
// is done first, it closes every connection, waits for Serve to return, and
// returns an error wrapping the context's error.
func NewProbes(s *humus.Setup, addr string, probes ...Probe) humus.Service {
	var errs []error
	var host humus.Host
	switch {
	case s == nil:
		errs = append(errs, errors.New("health: NewProbes was given a nil Setup"))
	case s.Host.Listen == nil:
		errs = append(errs, errors.New("health: NewProbes: s.Host.Listen is nil"))
	default:
		host = s.Host
	}
	byPath := make(map[string]Probe, len(probes))
	var paths []string
	for i, p := range probes {
		if p.path == "" {
			errs = append(errs, fmt.Errorf("health: NewProbes: probe %d is a zero Probe: make it with Readiness, Liveness or Handler (with a handler and a path starting with /)", i))
			continue
		}
		if _, ok := byPath[p.path]; !ok {
			paths = append(paths, p.path)
		}
		byPath[p.path] = p
	}
	mux := http.NewServeMux()
	for _, path := range paths {
		mux.Handle(path, byPath[path])
	}
	forceCtx, force := context.WithCancel(context.Background())
	return &probeServer{
		host:     host,
		addr:     addr,
		err:      errors.Join(errs...),
		handler:  mux,
		forceCtx: forceCtx,
		force:    force,
		done:     make(chan struct{}),
	}
}

type probeServer struct {
	host     humus.Host
	addr     string
	err      error // a mistake in NewProbes' arguments, which Serve returns
	handler  http.Handler
	forceCtx context.Context
	force    context.CancelFunc

	mu      sync.Mutex
	started bool // Serve was called, or Shutdown was called first
	done    chan struct{}
}

func (p *probeServer) Serve(ctx context.Context) error {
	p.mu.Lock()
	if p.started {
		p.mu.Unlock()
		return nil
	}
	p.started = true
	p.mu.Unlock()
	defer close(p.done)
	if p.err != nil {
		return p.err
	}

	ln, err := p.host.Listen(ctx, "tcp", p.addr)
	if err != nil {
		return fmt.Errorf("health: listening for probes: %w", err)
	}
	stderr := p.host.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	srv := &http.Server{
		Handler:           p.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		// Not the log package's default logger, which writes to the real
		// stderr rather than the Host's.
		ErrorLog: log.New(stderr, "health: probes: ", 0),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("health: serving probes on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	if err := srv.Shutdown(p.forceCtx); err != nil {
		srv.Close()
	}
	<-served
	return nil
}

func (p *probeServer) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	if !p.started {
		p.started = true
		close(p.done)
	}
	p.mu.Unlock()
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		p.force()
		<-p.done
		return fmt.Errorf("health: probes forced to stop: %w", ctx.Err())
	}
}
