package kube

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	"github.com/z5labs/humus"
)

// Connection is how a Client reaches an API server. Every field is a plain
// value: the end user's Init fills it, and humus reads no environment
// variable, no kubeconfig and no token file of its own.
type Connection struct {
	// Server is the API server's address, host:port. In a pod, it is
	// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, joined. An IPv6
	// host is written in brackets, as [fd00::1]:443. It is required, and
	// CheckServer checks it.
	Server string

	// TLS is the config the API server is dialled with: the cluster's CA in
	// RootCAs, and a client certificate when the client authenticates with
	// one. ServerName defaults to Server's host, without an IPv6 zone. The
	// Client uses a clone, so the caller's config is never changed. It is
	// required, and CheckTLS checks it.
	TLS *tls.Config

	// Token returns the bearer token every request carries, such as the
	// pod's service account token, read through the Host's FS. nil sends
	// none, for a client that authenticates with a certificate. The Client
	// calls it at most once a minute, as client-go re-reads a
	// BearerTokenFile every minute (its NewCachedFileTokenSource), and keeps
	// its last token while a call fails, so a token the kubelet rotates is
	// picked up within a minute. A 401 Unauthorized answer to a request
	// that carried the last token, as when that token is revoked (its
	// ServiceAccount, or the pod or Secret it is bound to, deleted), makes
	// the next request call Token again at once, but no sooner than 5s
	// after the last call, so a token that stays rejected costs one call
	// every 5s: a token Token already returns anew replaces a revoked one
	// within seconds, not a minute (client-go's token source resets on a
	// 401 too). The last token is still sent while such a call fails.
	// Surrounding white space, such as a token
	// file's final newline, is trimmed. A call that fails, panics, or
	// returns "" or a token with a space or a control character inside,
	// before any call has succeeded, fails the request with an error naming
	// Connection.Token.
	Token func(ctx context.Context) (string, error)

	// Compression asks the API server to gzip what it compresses: a
	// response over 128 KiB, and an informer's initial list when it comes
	// as a watch (Kubernetes 1.37's WatchListCompression). Off by default,
	// as kube-controller-manager and kube-scheduler have it
	// (kubernetes/kubernetes#80919): on a cluster's own network gzip costs
	// CPU at both ends and adds latency rather than saving any; it was
	// about 5% of the converge benchmark's controller CPU at N=5000
	// (bench/results). Turn it on for a controller that reaches its API
	// server over a slow link.
	Compression bool
}

// CheckServer checks a Connection's Server: it is host:port, the host is
// a DNS name or an IP address (an IPv6 host is in brackets, as [::1]:6443,
// and may have a zone, as [fe80::1%eth0]:6443), and the port is a number
// from 1 to 65535. It returns nil when addr is valid, or an error
// naming Connection.Server and what is wrong with it.
func CheckServer(addr string) error {
	if addr == "" {
		return errors.New("kube: Connection.Server is empty: it is the API server's host:port, such as 10.96.0.1:443")
	}
	if strings.Contains(addr, "://") {
		return fmt.Errorf("kube: Connection.Server %q has a scheme: it is host:port, such as 10.96.0.1:443", addr)
	}
	if !strings.HasPrefix(addr, "[") && strings.Count(addr, ":") > 1 {
		return fmt.Errorf("kube: Connection.Server %q: an IPv6 host is written in brackets, as [fd00::1]:443", addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("kube: Connection.Server %q is not host:port: %w", addr, err)
	}
	var errs []error
	switch {
	case host == "":
		errs = append(errs, fmt.Errorf("kube: Connection.Server %q has no host", addr))
	case strings.HasPrefix(addr, "[") && !strings.Contains(host, ":"):
		errs = append(errs, fmt.Errorf("kube: Connection.Server %q: only an IPv6 host is written in brackets", addr))
	case strings.HasPrefix(addr, "["):
		if ip, err := netip.ParseAddr(host); err != nil || !ip.Is6() {
			errs = append(errs, fmt.Errorf("kube: Connection.Server %q: host %q is not an IPv6 address", addr, host))
		}
	case !isHostName(host):
		if _, err := netip.ParseAddr(host); err != nil {
			errs = append(errs, fmt.Errorf("kube: Connection.Server %q: host %q is not a host name or an IP address", addr, host))
		}
	}
	// The Client's rest.Config names the server by URL, which client-go
	// parses: an address it can't carry, such as one with a zone of
	// characters a URL can't hold, fails every client made from it.
	if len(errs) == 0 {
		if u, err := url.Parse(serverURL(addr)); err != nil || u.Host != addr {
			errs = append(errs, fmt.Errorf("kube: Connection.Server %q: host %q is not a host name or an IP address", addr, host))
		}
	}
	if n, err := strconv.ParseUint(port, 10, 64); err != nil || n < 1 || n > 65535 {
		errs = append(errs, fmt.Errorf("kube: Connection.Server %q: port %q is not a number from 1 to 65535", addr, port))
	}
	return errors.Join(errs...)
}

// isHostName reports whether host is a DNS name: dot-separated labels of
// 1 to 63 letters, digits, hyphens and underscores, 253 characters at most
// without a final dot, not all of whose labels are numbers, which would be
// a malformed IPv4 address.
func isHostName(host string) bool {
	name := strings.TrimSuffix(host, ".")
	if name == "" || len(name) > 253 {
		return false
	}
	numeric := true
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '-' && r != '_' {
				return false
			}
			if !unicode.IsDigit(r) {
				numeric = false
			}
		}
	}
	return !numeric
}

// serverURL is the URL of the API server at addr, a checked
// Connection.Server: an IPv6 zone, as in [fe80::1%eth0]:6443, is escaped.
func serverURL(addr string) string {
	return (&url.URL{Scheme: "https", Host: addr}).String()
}

// CheckTLS checks a Connection's TLS: it is not nil, it allows TLS 1.2 or
// later, and it allows some version. An API server is only reached over
// TLS, and the config carries the cluster's CA, without which no server
// certificate can be verified (nil RootCAs is the system's roots).
// kube-apiserver's --tls-min-version is VersionTLS12 by default, and Go's
// crypto/tls speaks nothing above TLS 1.3 (a zero MaxVersion), so a
// MaxVersion below TLS 1.2, or a MinVersion above the MaxVersion, is
// refused. It returns nil when c is valid, or an error naming
// Connection.TLS and the field.
func CheckTLS(c *tls.Config) error {
	if c == nil {
		return errors.New("kube: Connection.TLS is nil: it needs at least the cluster's CA in RootCAs")
	}
	if c.MaxVersion != 0 && c.MaxVersion < tls.VersionTLS12 {
		return fmt.Errorf("kube: Connection.TLS.MaxVersion is %s: the API server speaks TLS 1.2 at least (kube-apiserver --tls-min-version)", tls.VersionName(c.MaxVersion))
	}
	maxVersion := c.MaxVersion
	if maxVersion == 0 {
		maxVersion = tls.VersionTLS13 // crypto/tls's highest, and its default
	}
	if c.MinVersion > maxVersion {
		return fmt.Errorf("kube: Connection.TLS.MinVersion %s is above its MaxVersion %s: no TLS version is allowed", tls.VersionName(c.MinVersion), tls.VersionName(maxVersion))
	}
	return nil
}

// NewClient returns a Client that dials c.Server with s.Host.Dial, and
// traces and measures every request with s.Telemetry. It opens no
// connection: the first request dials.
//
// The transport it builds, which every client-go client made from Config()
// shares, has TLS from a clone of c.TLS, no proxy, HTTP/2 health-check
// pings, the bearer token from c.Token, otelhttp with s.Telemetry's
// providers and propagator, no client-side rate limit, and gzip only with
// c.Compression.
//
// It returns one error naming every mistake: a nil s, a nil s.Host.Dial, and
// what CheckServer and CheckTLS report.
func NewClient(s *humus.Setup, c Connection) (*Client, error) {
	var errs []error
	if s == nil {
		errs = append(errs, errors.New("kube: NewClient: the Setup is nil"))
	} else if s.Host.Dial == nil {
		errs = append(errs, errors.New("kube: NewClient: s.Host.Dial is nil: the Client dials the API server only through the Host"))
	}
	errs = append(errs, CheckServer(c.Server), CheckTLS(c.TLS))
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	t, err := newTransport(s, c)
	if err != nil {
		return nil, err
	}
	return newClient(c.Server, t), nil
}
