package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
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
// otherwise every unhealthy Monitor's error, joined.
func (p Probe) Healthy(ctx context.Context) error {
	var errs []error
	for _, m := range p.monitors {
		if err := m.Healthy(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ServeHTTP answers 200 with "ok" when p is healthy, and 503 with the
// Monitors' errors, one a line, when it isn't.
func (p Probe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
// Serve is called; a failure to listen is Serve's error. When two probes
// share a path, the last one is served.
//
// Serve stops accepting requests once its context is done, lets the requests
// in flight finish, and returns nil. Shutdown waits for that; if its context
// is done first, it closes every connection, waits for Serve to return, and
// returns an error wrapping the context's error.
func NewProbes(s *humus.Setup, addr string, probes ...Probe) humus.Service {
	mux := http.NewServeMux()
	for _, p := range probes {
		mux.Handle(p.path, p)
	}
	forceCtx, force := context.WithCancel(context.Background())
	return &probeServer{
		host:     s.Host,
		addr:     addr,
		handler:  mux,
		forceCtx: forceCtx,
		force:    force,
		done:     make(chan struct{}),
	}
}

type probeServer struct {
	host     humus.Host
	addr     string
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

	ln, err := p.host.Listen(ctx, "tcp", p.addr)
	if err != nil {
		return fmt.Errorf("health: listening for probes: %w", err)
	}
	srv := &http.Server{Handler: p.handler, ReadHeaderTimeout: readHeaderTimeout}
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
