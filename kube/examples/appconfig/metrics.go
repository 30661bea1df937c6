package appconfig

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path"
	"strconv"
	"strings"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/httpserver"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/delegatedauth"
)

// MetricsConfig is where and how an App serves its metrics: see
// ServeMetrics. Read fills it from METRICS_ADDR, METRICS_SECURE and
// METRICS_CERT_DIR.
type MetricsConfig struct {
	// Addr is the address the metrics are served on, host:port; "", the
	// default, serves none, as kubebuilder's --metrics-bind-address=0
	// does. The deploy files set ":8443".
	Addr string

	// Insecure serves the metrics over plain HTTP to anyone, for a local
	// run; Addr must then be a loopback address, such as 127.0.0.1:8080.
	// false, the default, serves them over TLS, only to the callers the API
	// server authenticates and authorizes (package delegatedauth).
	Insecure bool

	// CertDir is the directory, a name in the Host's FS (no leading
	// slash), holding the serving certificate tls.crt and its key tls.key,
	// as a kubernetes.io/tls Secret mounted as a volume holds them (such as
	// cert-manager's). "", the default, serves a self-signed certificate
	// generated at start, as controller-runtime does.
	CertDir string
}

// The environment variables of MetricsConfig, read by Read.
const (
	EnvMetricsAddr    = "METRICS_ADDR"     // MetricsConfig.Addr; default "", no metrics served
	EnvMetricsSecure  = "METRICS_SECURE"   // a bool; false sets MetricsConfig.Insecure; default true
	EnvMetricsCertDir = "METRICS_CERT_DIR" // an absolute path; MetricsConfig.CertDir; default "", self-signed
)

// The files of a MetricsConfig.CertDir: a kubernetes.io/tls Secret's keys,
// as httpserver.CertDir reads them.
const (
	CertFile = httpserver.CertFile
	KeyFile  = httpserver.KeyFile
)

// readMetrics returns the MetricsConfig of the variables' values, checked.
func readMetrics(addr, dir string, secure bool) (MetricsConfig, error) {
	m := MetricsConfig{Addr: addr, Insecure: !secure}
	var errs []error
	if dir != "" {
		if !path.IsAbs(dir) {
			errs = append(errs, fmt.Errorf("%s is %q: it is an absolute path, such as /tmp/k8s-metrics-server/metrics-certs", EnvMetricsCertDir, dir))
		}
		m.CertDir = strings.TrimPrefix(path.Clean(dir), "/")
	}
	return m, errors.Join(append(errs, m.check())...)
}

// check returns an error naming every mistake in m.
func (m MetricsConfig) check() error {
	var errs []error
	if m.Insecure && m.CertDir != "" {
		errs = append(errs, fmt.Errorf("%s is false, so %s is unused: unset one of them", EnvMetricsSecure, EnvMetricsCertDir))
	}
	if m.Addr == "" {
		return errors.Join(errs...)
	}
	if err := checkAddr(EnvMetricsAddr, m.Addr, ":8443"); err != nil {
		errs = append(errs, err)
	} else if host, _, _ := net.SplitHostPort(m.Addr); m.Insecure && !isLoopback(host) {
		errs = append(errs, fmt.Errorf("%s is false, so %s %q must be a loopback address, such as 127.0.0.1:8080: plain HTTP lets anyone in, which is for local runs only", EnvMetricsSecure, EnvMetricsAddr, m.Addr))
	}
	return errors.Join(errs...)
}

// checkAddr returns an error unless addr, the value of the variable env,
// is host:port with a port number from 0 to 65535, such as example, so
// that a bad address is named at start rather than when its Service
// listens.
func checkAddr(env, addr, example string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s is %q: it is host:port, such as %s: %w", env, addr, example, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%s is %q: its port %q is not a number from 0 to 65535; use host:port, such as %s", env, addr, port, example)
	}
	return nil
}

// isLoopback reports whether host is localhost or a loopback IP address;
// "" (every interface) isn't.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// ServeMetrics returns the Service that serves s.Telemetry's metrics (as
// MetricsHandler does) at MetricsPath on m.Addr, an httpserver named
// "metrics" listening through s.Host, or nil when m.Addr is "":
//
//   - by default over TLS, HTTP/1.1 only (HTTP/2 is off, as kubebuilder
//     turns it off against its rapid-reset attacks, CVE-2023-44487), TLS
//     1.2 or later, and only to the callers the API server authenticates
//     and authorizes for get on the non-resource URL /metrics, through c
//     (delegatedauth.Handler): no token is 401, a token without that
//     permission 403. c's credentials must allow creating tokenreviews and
//     subjectaccessreviews (see the deploy files' metrics-rbac.yaml). The
//     certificate is m.CertDir's, read through s.Host.FS at start and
//     again as it rotates (httpserver.CertDir); when m.CertDir is "", it is
//     one for localhost signed by a CA made at start
//     (httpserver.NewAuthority), so a scraper must skip verifying it, as
//     Prometheus does with insecure_skip_verify.
//   - with m.Insecure, over plain HTTP to anyone, for a local run: m.Addr
//     must then be on loopback.
//
// What the server logs, such as a scraper's failed TLS handshake, goes to
// s.Telemetry's LoggerProvider. It returns an error naming every mistake
// in m, an error reading or parsing m.CertDir's files, and
// delegatedauth.Handler's errors. Every other path is 404.
func ServeMetrics(s *humus.Setup, c *kube.Client, m MetricsConfig) (humus.Service, error) {
	if m.Addr == "" {
		return nil, nil
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	if s == nil {
		return nil, errors.New("appconfig: ServeMetrics was given a nil Setup")
	}
	h := MetricsHandler(s.Telemetry)
	cfg := httpserver.Config{Name: "metrics", Addr: m.Addr, HTTP1Only: true}
	if !m.Insecure {
		var err error
		if h, err = delegatedauth.Handler(s, c, h); err != nil {
			return nil, err
		}
		if cfg.Certificate, err = metricsCertificate(s, m.CertDir); err != nil {
			return nil, err
		}
	}
	mux := http.NewServeMux()
	mux.Handle(MetricsPath, h)
	cfg.Handler = mux
	return httpserver.New(s, cfg)
}

// metricsCertificate returns dir's certificate, read as it rotates, or,
// when dir is "", one for localhost made now.
func metricsCertificate(s *humus.Setup, dir string) (httpserver.Certificate, error) {
	if dir == "" {
		a, err := httpserver.NewAuthority(0, "localhost")
		if err != nil {
			return nil, fmt.Errorf("the metrics' self-made certificate: %w", err)
		}
		return a, nil
	}
	f, err := httpserver.CertDir(s, dir)
	if err != nil {
		// The directory as METRICS_CERT_DIR names it, with its leading
		// slash.
		return nil, fmt.Errorf("the metrics' certificate, in %s /%s: %w", EnvMetricsCertDir, dir, err)
	}
	return f, nil
}

// MetricsHandler returns the handler of t's metrics in Prometheus' text
// format when t is what BuildTelemetry built; for any other Telemetry, such
// as a test's, it answers 404 with a line saying why. It lets anyone in:
// ServeMetrics puts it behind the API server's authentication and
// authorization.
func MetricsHandler(t humus.Telemetry) http.Handler {
	if mp, ok := t.MeterProvider.(meterProvider); ok {
		return mp.metrics
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no Prometheus exporter: the App's telemetry isn't appconfig.BuildTelemetry's", http.StatusNotFound)
	})
}
