package apitransport

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/http2"
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

// Base is the net/http Transport underneath a Connection's, and the HTTP/2
// transport whose pings it sets: it dials with dial (the Host's), runs TLS
// with a clone of tlsConfig whose ServerName defaults to server's host, has
// no proxy, asks for gzip only with compression, and speaks HTTP/2 with
// health-check pings.
func Base(server string, tlsConfig *tls.Config, compression bool, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*http.Transport, *http2.Transport, error) {
	tlsConfig = tlsConfig.Clone()
	if tlsConfig.ServerName == "" {
		host, _, err := net.SplitHostPort(server)
		if err != nil {
			return nil, nil, fmt.Errorf("kube: Connection.Server %q: %w", server, err)
		}
		// A certificate can't name an IPv6 zone, so it isn't verified.
		host, _, _ = strings.Cut(host, "%")
		tlsConfig.ServerName = host
	}

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
		DisableCompression:  !compression,
		MaxIdleConnsPerHost: maxIdleConnsPerHost,
		IdleConnTimeout:     idleConnTimeout,
	}
	// ConfigureTransports, as client-go's own transports do
	// (apimachinery's pkg/util/net/http.go, configureHTTP2Transport), adds
	// "h2" to the TLS config's NextProtos and returns the HTTP/2 transport
	// whose pings it sets.
	h2, err := http2.ConfigureTransports(base)
	if err != nil {
		return nil, nil, fmt.Errorf("kube: configuring HTTP/2: %w", err)
	}
	h2.ReadIdleTimeout = http2ReadIdleTimeout
	h2.PingTimeout = http2PingTimeout
	return base, h2, nil
}
