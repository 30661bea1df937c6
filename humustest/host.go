package humustest

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/z5labs/humus"
)

// Host is a fake humus.Host for tests. Its embedded humus.Host is wired to
// Host's own state, and a test may replace any of its fields:
//
//   - Dial and Listen use an in-memory network. Listen announces any
//     "host:port" (port 0 or "" picks a free one, from 30001 up); Dial
//     reaches the listener on exactly that address, or on ":port", and
//     otherwise fails with ECONNREFUSED. Connections are buffered and
//     support deadlines.
//   - FS reads the files set with WriteFile.
//   - LookupEnv reads the variables set with SetEnv.
//   - Signals returns one channel, which receives what Signal sends.
//   - Stderr keeps what is written, for StderrString.
//
// Host's methods are safe for concurrent use.
type Host struct {
	humus.Host

	t       testing.TB
	net     *network
	signals chan os.Signal

	mu     sync.Mutex
	env    map[string]string
	files  fstest.MapFS
	stderr bytes.Buffer
}

// NewHost returns a fake Host with no environment variables, no files and
// no listeners.
func NewHost(t testing.TB) *Host {
	h := &Host{
		t:       t,
		net:     newNetwork(),
		signals: make(chan os.Signal, 8),
		env:     map[string]string{},
		files:   fstest.MapFS{},
	}
	h.Host = humus.Host{
		Dial:      h.net.dial,
		Listen:    h.net.listen,
		FS:        hostFS{h},
		LookupEnv: h.lookupEnv,
		Signals:   func(context.Context) <-chan os.Signal { return h.signals },
		Stderr:    stderr{h},
	}
	return h
}

// SetEnv sets the environment variable key to value.
func (h *Host) SetEnv(key, value string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.env[key] = value
}

func (h *Host) lookupEnv(key string) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.env[key]
	return v, ok
}

// WriteFile sets the file name, a path without a leading slash as in
// humus.Host's FS, to hold data, replacing any file there.
func (h *Host) WriteFile(name string, data []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.files[name] = &fstest.MapFile{Data: append([]byte(nil), data...), Mode: 0o644}
}

// Signal sends sig to the channel that Signals returns. It fails the test if
// 8 signals are already waiting there.
func (h *Host) Signal(sig os.Signal) {
	select {
	case h.signals <- sig:
	default:
		h.t.Errorf("humustest: Host.Signal(%v): 8 signals already waiting", sig)
	}
}

// StderrString returns everything written to Stderr so far.
func (h *Host) StderrString() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stderr.String()
}

// Handle serves HTTP with handler on the in-memory network at addr, as
// "host:port" (port 0 picks a free one), until the test ends, and returns
// the address it listens on. It fails the test now if addr can't be
// listened on.
func (h *Host) Handle(addr string, handler http.Handler) string {
	h.t.Helper()
	ln, err := h.net.listen(context.Background(), "tcp", addr)
	if err != nil {
		h.t.Fatalf("humustest: Host.Handle: %v", err)
	}
	srv := &http.Server{Handler: handler}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	h.t.Cleanup(func() {
		srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			h.t.Errorf("humustest: serving %s: %v", ln.Addr(), err)
		}
	})
	return ln.Addr().String()
}

// Client returns an HTTP client that dials through the Host's Dial. It keeps
// no idle connection, so it leaves no goroutine behind.
func (h *Host) Client() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return h.Host.Dial(ctx, network, addr)
		},
		DisableKeepAlives: true,
	}}
}

// hostFS reads the Host's files under its lock.
type hostFS struct{ h *Host }

func (f hostFS) Open(name string) (fs.File, error) {
	f.h.mu.Lock()
	defer f.h.mu.Unlock()
	return f.h.files.Open(name)
}

// stderr appends to the Host's buffer under its lock.
type stderr struct{ h *Host }

func (w stderr) Write(b []byte) (int, error) {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	return w.h.stderr.Write(b)
}
