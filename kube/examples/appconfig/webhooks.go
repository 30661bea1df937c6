package appconfig

import (
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/httpserver"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/webhookcert"
)

// WebhookConfig is where an App serves its webhooks, such as the
// conversion webhook of a resource of several versions (see ServeWebhooks).
// Read fills it from WEBHOOK_ADDR, and WEBHOOK_CERT_DIR or
// WEBHOOK_CERT_SECRET with POD_NAMESPACE; the App fills Service and CRDs.
type WebhookConfig struct {
	// Addr is the address the webhooks are served on, host:port; "", the
	// default, serves none. The deploy files set ":9443", controller-runtime's
	// webhook port, behind the Service the CRD's conversion names.
	Addr string

	// CertDir is the directory, a name in the Host's FS (no leading
	// slash), holding the serving certificate tls.crt and its key tls.key,
	// as a kubernetes.io/tls Secret mounted as a volume holds them (such as
	// cert-manager's, whose CA the CRD's caBundle then holds), re-read as
	// they rotate. Addr requires it or CertSecret, not both: the API
	// server calls a webhook over TLS only, trusting the CRD's caBundle.
	CertDir string

	// CertSecret is the name of the Secret, in Namespace, in which the
	// App makes and keeps its webhooks' certificate itself (package
	// kube/webhookcert), and whose CA it injects into the caBundle of
	// CRDs, in place of CertDir's mounted certificate.
	CertSecret string

	// Namespace is CertSecret's namespace, the App's own: Read sets it
	// from POD_NAMESPACE.
	Namespace string

	// Service is the name of the Service in Namespace the API server
	// calls the webhooks by, such as "memcached-webhooks": the serving
	// certificate CertSecret holds is for <Service>.<Namespace>.svc. The
	// App sets it (Read doesn't); required with CertSecret.
	Service string

	// CRDs are the names of the CRDs whose conversion webhook's caBundle
	// is set to CertSecret's CA, such as memcacheds.cache.example.com.
	// The App sets them (Read doesn't); at least one is required with
	// CertSecret.
	CRDs []string
}

// The environment variables of WebhookConfig, read by Read.
const (
	EnvWebhookAddr    = "WEBHOOK_ADDR"     // WebhookConfig.Addr; default "", no webhooks served
	EnvWebhookCertDir = "WEBHOOK_CERT_DIR" // an absolute path; WebhookConfig.CertDir
	// WebhookConfig.CertSecret, a Secret's name in POD_NAMESPACE; not
	// with WEBHOOK_CERT_DIR.
	EnvWebhookCertSecret = "WEBHOOK_CERT_SECRET"
)

// DefaultWebhookCertDir is where controller-runtime's webhook server reads
// its certificate, and where the deploy files mount it.
const DefaultWebhookCertDir = "/tmp/k8s-webhook-server/serving-certs"

// readWebhooks returns the WebhookConfig of the variables' values,
// checked.
func readWebhooks(addr, dir, secret, namespace string) (WebhookConfig, error) {
	w := WebhookConfig{Addr: addr, CertSecret: secret}
	if secret != "" {
		w.Namespace = namespace
	}
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
	if w.CertDir != "" && w.CertSecret != "" {
		errs = append(errs, fmt.Errorf("%s and %s are both set: the certificate is either mounted (%s) or made and kept by the App in a Secret (%s), so set one", EnvWebhookCertDir, EnvWebhookCertSecret, EnvWebhookCertDir, EnvWebhookCertSecret))
	}
	if w.Addr == "" {
		for _, v := range []struct{ name, value string }{{EnvWebhookCertDir, w.CertDir}, {EnvWebhookCertSecret, w.CertSecret}} {
			if v.value != "" {
				errs = append(errs, fmt.Errorf("%s is set but %s isn't: set both to serve the webhooks, or neither", v.name, EnvWebhookAddr))
			}
		}
		return errors.Join(errs...)
	}
	if err := checkAddr(EnvWebhookAddr, w.Addr, ":9443"); err != nil {
		errs = append(errs, err)
	}
	if w.CertDir == "" && w.CertSecret == "" {
		errs = append(errs, fmt.Errorf("%s is set but neither %s nor %s is: the API server calls a webhook over TLS, so mount its serving certificate (a kubernetes.io/tls Secret) and name the directory, such as %s, or name the Secret the App keeps one in", EnvWebhookAddr, EnvWebhookCertDir, EnvWebhookCertSecret, DefaultWebhookCertDir))
	}
	if w.CertSecret != "" && w.Namespace == "" {
		errs = append(errs, fmt.Errorf("%s is set but WebhookConfig.Namespace, the Secret's (%s), is empty", EnvWebhookCertSecret, EnvPodNamespace))
	}
	return errors.Join(errs...)
}

// ServeWebhooks returns the Services that serve mux, the App's webhooks
// (such as a conversion.Handler at conversion.Path), on w.Addr over TLS
// (HTTP/1.1 and HTTP/2, as the API server's webhook client speaks): an
// httpserver named "webhooks" listening through s.Host, with the
// certificate in w.CertDir, re-read as it rotates; or, with w.CertSecret,
// with the certificate a webhookcert.Certs makes and keeps in that Secret
// through client (for <w.Service>.<w.Namespace>.svc, its CA injected into
// the caBundle of w.CRDs), the Certs being the first Service returned and
// the server the second. It returns nil when w.Addr is "".
//
// Run them on every replica, leader or not, and from the App's start, not
// after the caches sync: the API server calls any replica behind the
// Service, and the App's own informers list through the conversion
// webhook. It returns an error naming every mistake in w, and httpserver's
// and webhookcert's errors, such as a certificate that can't be read.
func ServeWebhooks(s *humus.Setup, client *kube.Client, w WebhookConfig, mux http.Handler) ([]humus.Service, error) {
	if w.Addr == "" {
		return nil, nil
	}
	errs := []error{w.check()}
	if s == nil {
		errs = append(errs, errors.New("appconfig: ServeWebhooks was given a nil Setup"))
	}
	if w.CertSecret != "" {
		if w.Service == "" {
			errs = append(errs, fmt.Errorf("%s is set but WebhookConfig.Service, the webhooks' Service name, is empty", EnvWebhookCertSecret))
		}
		if len(w.CRDs) == 0 {
			errs = append(errs, fmt.Errorf("%s is set but WebhookConfig.CRDs, whose caBundle the App sets, is empty", EnvWebhookCertSecret))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if w.CertSecret != "" {
		certs, err := webhookcert.New(s, client, webhookcert.Config{
			Namespace: w.Namespace, Secret: w.CertSecret,
			Hosts: []string{w.Service + "." + w.Namespace + ".svc"},
			CRDs:  w.CRDs,
		})
		if err != nil {
			return nil, fmt.Errorf("the webhooks' certificate, kept in the Secret %s/%s (%s): %w", w.Namespace, w.CertSecret, EnvWebhookCertSecret, err)
		}
		svc, err := httpserver.New(s, httpserver.Config{Name: "webhooks", Addr: w.Addr, Handler: mux, Certificate: certs})
		if err != nil {
			return nil, err
		}
		return []humus.Service{certs, svc}, nil
	}
	certs, err := httpserver.CertDir(s, w.CertDir)
	if err != nil {
		return nil, fmt.Errorf("the webhooks' certificate, from %s /%s: %w", EnvWebhookCertDir, w.CertDir, err)
	}
	svc, err := httpserver.New(s, httpserver.Config{Name: "webhooks", Addr: w.Addr, Handler: mux, Certificate: certs})
	if err != nil {
		return nil, err
	}
	return []humus.Service{svc}, nil
}
