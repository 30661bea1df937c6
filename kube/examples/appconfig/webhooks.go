package appconfig

import (
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/httpserver"
)

// WebhookConfig is where an App serves its webhooks, such as the
// conversion webhook of a resource of several versions (see ServeWebhooks).
// Read fills it from WEBHOOK_ADDR and WEBHOOK_CERT_DIR.
type WebhookConfig struct {
	// Addr is the address the webhooks are served on, host:port; "", the
	// default, serves none. The deploy files set ":9443", controller-runtime's
	// webhook port, behind the Service the CRD's conversion names.
	Addr string

	// CertDir is the directory, a name in the Host's FS (no leading
	// slash), holding the serving certificate tls.crt and its key tls.key,
	// as a kubernetes.io/tls Secret mounted as a volume holds them (such as
	// cert-manager's, whose CA the CRD's caBundle then holds), re-read as
	// they rotate. Required with Addr: the API server calls a webhook over
	// TLS only, trusting the CRD's caBundle.
	CertDir string
}

// The environment variables of WebhookConfig, read by Read.
const (
	EnvWebhookAddr    = "WEBHOOK_ADDR"     // WebhookConfig.Addr; default "", no webhooks served
	EnvWebhookCertDir = "WEBHOOK_CERT_DIR" // an absolute path; WebhookConfig.CertDir
)

// DefaultWebhookCertDir is where controller-runtime's webhook server reads
// its certificate, and where the deploy files mount it.
const DefaultWebhookCertDir = "/tmp/k8s-webhook-server/serving-certs"

// readWebhooks returns the WebhookConfig of the variables' values,
// checked.
func readWebhooks(addr, dir string) (WebhookConfig, error) {
	w := WebhookConfig{Addr: addr}
	var errs []error
	if dir != "" {
		if !path.IsAbs(dir) {
			errs = append(errs, fmt.Errorf("%s is %q: it is an absolute path, such as %s", EnvWebhookCertDir, dir, DefaultWebhookCertDir))
		}
		w.CertDir = strings.TrimPrefix(path.Clean(dir), "/")
	}
	return w, errors.Join(append(errs, w.check())...)
}

// check returns an error naming every mistake in w.
func (w WebhookConfig) check() error {
	var errs []error
	if w.Addr == "" {
		if w.CertDir != "" {
			errs = append(errs, fmt.Errorf("%s is set but %s isn't: set both to serve the webhooks, or neither", EnvWebhookCertDir, EnvWebhookAddr))
		}
		return errors.Join(errs...)
	}
	if err := checkAddr(EnvWebhookAddr, w.Addr, ":9443"); err != nil {
		errs = append(errs, err)
	}
	if w.CertDir == "" {
		errs = append(errs, fmt.Errorf("%s is set but %s isn't: the API server calls a webhook over TLS, so mount its serving certificate (a kubernetes.io/tls Secret) and name the directory, such as %s", EnvWebhookAddr, EnvWebhookCertDir, DefaultWebhookCertDir))
	}
	return errors.Join(errs...)
}

// ServeWebhooks returns the Service that serves mux, the App's webhooks
// (such as a conversion.Handler at conversion.Path), on w.Addr over TLS
// (HTTP/1.1 and HTTP/2, as the API server's webhook client speaks), with
// the certificate in w.CertDir, re-read as it rotates: an httpserver named
// "webhooks" listening through s.Host. It returns nil when w.Addr is "".
//
// Run it on every replica, leader or not, and from the App's start, not
// after the caches sync: the API server calls any replica behind the
// Service, and the App's own informers list through the conversion
// webhook. It returns an error naming every mistake in w, and httpserver's
// errors, such as a certificate that can't be read.
func ServeWebhooks(s *humus.Setup, w WebhookConfig, mux http.Handler) (humus.Service, error) {
	if w.Addr == "" {
		return nil, nil
	}
	if err := w.check(); err != nil {
		return nil, err
	}
	if s == nil {
		return nil, errors.New("appconfig: ServeWebhooks was given a nil Setup")
	}
	certs, err := httpserver.CertDir(s, w.CertDir)
	if err != nil {
		return nil, fmt.Errorf("the webhooks' certificate, from %s /%s: %w", EnvWebhookCertDir, w.CertDir, err)
	}
	return httpserver.New(s, httpserver.Config{Name: "webhooks", Addr: w.Addr, Handler: mux, Certificate: certs})
}
