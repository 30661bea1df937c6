// Package httpserver serves an App's HTTP handler as a humus Service, over
// TLS (HTTP/1.1 and HTTP/2) or, for a local run, plain HTTP: the one way an
// App serves HTTPS, such as its metrics endpoint or the conversion and
// admission webhooks the API server calls.
//
// The serving certificate comes from one of two places, as Kubernetes
// operators deploy them:
//
//   - CertFiles: a certificate and key read through the Host's FS, such as
//     a cert-manager Certificate's kubernetes.io/tls Secret mounted as a
//     volume, and read again as they rotate, without a restart;
//   - NewAuthority: a CA and a serving certificate the App makes itself,
//     whose CA goes in a webhook's caBundle.
//
// What the server logs (a failed TLS handshake, a panic in a handler, a
// failed Accept) goes to the App's LoggerProvider, never to the process's
// standard error, and every error and record names the server (Config.Name),
// so that an App serving probes, metrics and webhooks tells them apart.
//
// It lives in the humus core, beside health, rather than in the kube
// module: serving HTTPS needs nothing of Kubernetes, and the kube module's
// webhooks (package kube/conversion) and the examples' metrics use it alike.
package httpserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"reflect"
	"sync"
	"time"

	"github.com/z5labs/humus"
)

// The server's timeouts, as net/http's Server fields of the same names.
const (
	// DefaultReadHeaderTimeout bounds how long a client may take to send a
	// request's headers, against slow-header (slowloris) clients, unless
	// Config.ReadHeaderTimeout sets another.
	DefaultReadHeaderTimeout = 10 * time.Second
	// IdleTimeout is how long a kept-alive connection may wait for its
	// next request before the server closes it.
	IdleTimeout = 2 * time.Minute
)

// Certificate is where a TLS server's certificate comes from: its
// GetCertificate is called for each TLS handshake, as tls.Config's is.
// CertFiles and NewAuthority return one.
type Certificate interface {
	GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error)
}

// Config is an HTTP server's plain values.
type Config struct {
	// Name names the server in its errors and log records, such as
	// "metrics" or "webhooks". Required.
	Name string

	// Addr is the address it listens on, "host:port", as net.Listen takes
	// (":9443" listens on every interface). Required.
	Addr string

	// Handler answers every request. Required.
	Handler http.Handler

	// Certificate is the TLS serving certificate's source. nil serves plain
	// HTTP/1.1, which lets anyone read and write the traffic: for a local
	// run only.
	Certificate Certificate

	// HTTP1Only serves HTTP/1.1 alone over TLS. false, the default, serves
	// HTTP/1.1 and HTTP/2, negotiated with ALPN, as the API server's
	// webhook client uses. kubebuilder turns HTTP/2 off by default against
	// the rapid-reset attack (CVE-2023-44487); net/http's HTTP/2 server
	// bounds a connection's concurrent handlers since Go 1.21.3, which is
	// the fix.
	HTTP1Only bool

	// ReadHeaderTimeout bounds how long a client may take to send a
	// request's headers. 0, the default, is DefaultReadHeaderTimeout (10s).
	ReadHeaderTimeout time.Duration
}

// check returns an error naming every mistake in c.
func (c Config) check() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("Config.Name is empty: name the server, such as \"webhooks\""))
	}
	if c.Addr == "" {
		errs = append(errs, errors.New("Config.Addr is empty: it is host:port, such as :9443"))
	} else if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("Config.Addr %q is not host:port, such as :9443: %w", c.Addr, err))
	}
	if c.Handler == nil {
		errs = append(errs, errors.New("Config.Handler is nil"))
	}
	if v := reflect.ValueOf(c.Certificate); c.Certificate != nil && v.Kind() == reflect.Pointer && v.IsNil() {
		// Such as the *Files of a CertDir whose error went unchecked:
		// every TLS handshake would panic on it.
		errs = append(errs, fmt.Errorf("Config.Certificate is a nil %T: give the one CertFiles, CertDir or NewAuthority returned with no error, or nil for plain HTTP", c.Certificate))
	}
	if c.ReadHeaderTimeout < 0 {
		errs = append(errs, fmt.Errorf("Config.ReadHeaderTimeout is %v: it is 0 (the default) or more", c.ReadHeaderTimeout))
	}
	return errors.Join(errs...)
}

// New returns the Service that serves c.Handler at c.Addr, listening with
// s.Host.Listen when Serve is called: over TLS 1.2 or later with
// c.Certificate, or over plain HTTP when it is nil.
//
// What net/http's server logs goes to s.Telemetry's LoggerProvider (see
// the package doc), each record with the attribute humus.server.name, c.Name:
// a TLS handshake the client abandoned before it began (EOF, as a TCP
// probe's) at DEBUG, any other failed handshake (such as a client that
// doesn't trust the certificate) at WARN, a handler's panic and anything
// else at ERROR.
//
// Serve stops accepting connections once its context is done, lets the
// requests in flight finish, and returns nil; it returns an error naming
// the server when it can't listen or stops serving on its own. Shutdown
// waits for Serve to return; if its context is done first, it closes every
// connection, waits for Serve, and returns an error wrapping the context's
// error.
//
// New returns one error naming every mistake in c (a nil *Files or
// *Authority as its Certificate among them), and a nil s or
// s.Host.Listen, each prefixed with the server's name.
func New(s *humus.Setup, c Config) (humus.Service, error) {
	errs := []error{c.check()}
	if s == nil {
		errs = append(errs, errors.New("New was given a nil Setup"))
	} else if s.Host.Listen == nil {
		errs = append(errs, errors.New("s.Host.Listen is nil"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("httpserver %q: %w", c.Name, err)
	}
	timeout := c.ReadHeaderTimeout
	if timeout == 0 {
		timeout = DefaultReadHeaderTimeout
	}
	srv := &http.Server{
		Handler:           c.Handler,
		ReadHeaderTimeout: timeout,
		IdleTimeout:       IdleTimeout,
		ErrorLog:          log.New(newLogWriter(s.Telemetry.WithNoops().LoggerProvider, c.Name, c.Addr), "", 0),
		Protocols:         new(http.Protocols),
	}
	srv.Protocols.SetHTTP1(true)
	if c.Certificate != nil {
		srv.Protocols.SetHTTP2(!c.HTTP1Only)
		srv.TLSConfig = &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: c.Certificate.GetCertificate,
		}
	}
	forceCtx, force := context.WithCancel(context.Background())
	return &server{
		name:     c.Name,
		addr:     c.Addr,
		listen:   s.Host.Listen,
		srv:      srv,
		tls:      c.Certificate != nil,
		forceCtx: forceCtx,
		force:    force,
		done:     make(chan struct{}),
	}, nil
}

type server struct {
	name     string
	addr     string
	listen   func(ctx context.Context, network, address string) (net.Listener, error)
	srv      *http.Server
	tls      bool
	forceCtx context.Context
	force    context.CancelFunc

	mu      sync.Mutex
	started bool // Serve was called, or Shutdown was called first
	done    chan struct{}
}

func (s *server) Serve(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return nil
	}
	s.started = true
	s.mu.Unlock()
	defer close(s.done)
	if ctx.Err() != nil {
		return nil // stopped before it began
	}

	ln, err := s.listen(ctx, "tcp", s.addr)
	if err != nil {
		return fmt.Errorf("httpserver %q: listening on %s: %w", s.name, s.addr, err)
	}
	served := make(chan error, 1)
	go func() {
		if s.tls {
			// The certificate comes from TLSConfig.GetCertificate, so no
			// file is named here; ServeTLS sets up HTTP/2 as Protocols say.
			served <- s.srv.ServeTLS(ln, "", "")
			return
		}
		served <- s.srv.Serve(ln)
	}()
	select {
	case err := <-served:
		return fmt.Errorf("httpserver %q: serving on %s: %w", s.name, ln.Addr(), err)
	case <-ctx.Done():
	}
	if err := s.srv.Shutdown(s.forceCtx); err != nil {
		s.srv.Close()
	}
	<-served
	return nil
}

func (s *server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.started {
		s.started = true
		close(s.done)
	}
	s.mu.Unlock()
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		s.force()
		<-s.done
		return fmt.Errorf("httpserver %q: forced to stop: %w", s.name, ctx.Err())
	}
}
