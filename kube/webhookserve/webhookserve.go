// Package webhookserve serves an App's webhooks (a CRD's conversion
// webhook, validating and defaulting admission webhooks: any http.Handler)
// over TLS, as humus Services, with either of the two certificates a
// webhook is served with in Kubernetes: one mounted from a
// kubernetes.io/tls Secret (such as cert-manager's), read from a directory
// of the Host's file system and re-read as it rotates; or one the App
// makes and keeps itself in a Secret with package kube/webhookcert, whose
// CA it injects into the caBundle of the CRDs and webhook configurations
// that call it.
//
// It reads no environment variable, as the kube library reads none: an
// App's Init fills Config from its own configuration (the examples'
// appconfig reads WEBHOOK_ADDR, WEBHOOK_CERT_DIR and WEBHOOK_CERT_SECRET).
package webhookserve

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/httpserver"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/webhookcert"
)

// DefaultCertDir is where controller-runtime's webhook server reads its
// certificate, and where the examples' deploy files mount it.
const DefaultCertDir = "/tmp/k8s-webhook-server/serving-certs"

// DefaultAddr is controller-runtime's webhook port, on every interface.
const DefaultAddr = ":9443"

// Config is where and with which certificate an App serves its webhooks.
type Config struct {
	// Addr is the address the webhooks are served on, host:port, such as
	// DefaultAddr behind the Service a CRD's conversion or a webhook
	// configuration names; "", the default, serves none.
	Addr string

	// CertDir is the absolute path of the directory holding the serving
	// certificate tls.crt and its key tls.key, as a kubernetes.io/tls
	// Secret mounted as a volume at that mountPath holds them (such as
	// DefaultCertDir), re-read as they rotate. It is read through the
	// Host's FS at the path without its leading slash (humus.OSHost's FS
	// is rooted at /). Addr requires it or CertSecret, not both: the API
	// server calls a webhook over TLS only, trusting the caBundle of the
	// CRD or webhook configuration that names it.
	CertDir string

	// CertSecret is the name of the Secret, in Namespace, in which the
	// App makes and keeps its webhooks' certificate itself (package
	// kube/webhookcert), and whose CA it injects into the caBundle of
	// CRDs, ValidatingWebhookConfigurations and
	// MutatingWebhookConfigurations, in place of CertDir's mounted
	// certificate.
	CertSecret string

	// Namespace is CertSecret's namespace, the App's own (its pod's, from
	// the downward API); required with CertSecret.
	Namespace string

	// Service is the name of the Service in Namespace the API server
	// calls the webhooks by, such as "memcached-webhooks": the serving
	// certificate CertSecret holds is for <Service>.<Namespace>.svc.
	// Required with CertSecret.
	Service string

	// CRDs are the names of the CRDs whose conversion webhook's caBundle
	// is set to CertSecret's CA, such as memcacheds.cache.example.com.
	CRDs []string

	// ValidatingWebhookConfigurations and MutatingWebhookConfigurations
	// are the names of the admission webhook configurations each of whose
	// webhooks' clientConfig.caBundle is set to CertSecret's CA. With
	// CertSecret, CRDs and these together name at least one object.
	ValidatingWebhookConfigurations []string
	MutatingWebhookConfigurations   []string
}

// Check returns one error naming every mistake in c, or nil: an Addr
// that isn't host:port with a port number, a CertDir that isn't an
// absolute path, CertDir and CertSecret both set or, with Addr, neither,
// either without Addr, and CertSecret without Namespace, Service, or an
// object whose caBundle to set.
func (c Config) Check() error {
	var errs []error
	if c.CertDir != "" && !path.IsAbs(c.CertDir) {
		errs = append(errs, fmt.Errorf("webhookserve: Config.CertDir is %q, a relative path: give the directory's absolute path, the mountPath of the volume of its kubernetes.io/tls Secret, such as %s", c.CertDir, DefaultCertDir))
	}
	if c.CertDir != "" && c.CertSecret != "" {
		errs = append(errs, errors.New("webhookserve: Config.CertDir and Config.CertSecret are both set: the certificate is either mounted (CertDir) or made and kept by the App in a Secret (CertSecret), so set one"))
	}
	if c.Addr == "" {
		if c.CertDir != "" || c.CertSecret != "" {
			errs = append(errs, errors.New("webhookserve: Config.CertDir or Config.CertSecret is set but Config.Addr isn't: set Addr to serve the webhooks, or neither"))
		}
		return errors.Join(errs...)
	}
	if err := checkAddr(c.Addr); err != nil {
		errs = append(errs, err)
	}
	if c.CertDir == "" && c.CertSecret == "" {
		errs = append(errs, fmt.Errorf("webhookserve: Config.Addr is set but neither Config.CertDir nor Config.CertSecret is: the API server calls a webhook over TLS, so mount its serving certificate (a kubernetes.io/tls Secret) and name the directory, such as %s, or name the Secret the App keeps one in", DefaultCertDir))
	}
	if c.CertSecret != "" {
		if c.Namespace == "" {
			errs = append(errs, errors.New("webhookserve: Config.CertSecret is set but Config.Namespace, the Secret's (the App's own), is empty"))
		}
		if c.Service == "" {
			errs = append(errs, errors.New("webhookserve: Config.CertSecret is set but Config.Service, the webhooks' Service name, is empty"))
		}
		if len(c.CRDs)+len(c.ValidatingWebhookConfigurations)+len(c.MutatingWebhookConfigurations) == 0 {
			errs = append(errs, errors.New("webhookserve: Config.CertSecret is set but Config.CRDs, Config.ValidatingWebhookConfigurations and Config.MutatingWebhookConfigurations, whose caBundle the App sets, are all empty"))
		}
	}
	return errors.Join(errs...)
}

// checkAddr returns an error unless addr is host:port with a port number.
func checkAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		return fmt.Errorf("webhookserve: Config.Addr is %q: it must be host:port with a port number, such as %s", addr, DefaultAddr)
	}
	return nil
}

// CertConfig is the webhookcert.Config of c's CertSecret, as Serve makes
// its Certs: the Secret CertSecret in Namespace, for the host
// <Service>.<Namespace>.svc, its CA injected into c's CRDs and webhook
// configurations, webhookcert's defaults for the rest.
func (c Config) CertConfig() webhookcert.Config {
	return webhookcert.Config{
		Namespace: c.Namespace, Secret: c.CertSecret,
		Hosts:                           []string{c.Service + "." + c.Namespace + ".svc"},
		CRDs:                            c.CRDs,
		ValidatingWebhookConfigurations: c.ValidatingWebhookConfigurations,
		MutatingWebhookConfigurations:   c.MutatingWebhookConfigurations,
	}
}

// Serve returns the Services that serve mux, the App's webhooks (such as
// a conversion.Handler at conversion.Path and admission handlers at
// admission.ValidatePath and admission.DefaultPath), on c.Addr over TLS
// (HTTP/1.1 and HTTP/2, as the API server's webhook client speaks): an
// httpserver named "webhooks" listening through s.Host, with the
// certificate in c.CertDir, re-read as it rotates; or, with c.CertSecret,
// with the certificate a webhookcert.Certs of c.CertConfig() makes and
// keeps in that Secret through client, the Certs (a health.Monitor,
// healthy once its certificate is served and trusted: put it in the
// App's readiness) being the first Service returned and the server the
// second. It returns nil when c.Addr is "".
//
// Run them on every replica, leader or not, and from the App's start, not
// after the caches sync: the API server calls any replica behind the
// Service, and the App's own informers list through a conversion webhook.
// It returns c.Check's error, naming every mistake in c, and httpserver's
// and webhookcert's errors, such as a certificate that can't be read.
func Serve(s *humus.Setup, client *kube.Client, c Config, mux http.Handler) ([]humus.Service, error) {
	if c.Addr == "" && c.CertDir == "" && c.CertSecret == "" {
		return nil, nil
	}
	errs := []error{c.Check()}
	if s == nil {
		errs = append(errs, errors.New("webhookserve: Serve was given a nil Setup"))
	}
	if mux == nil {
		errs = append(errs, errors.New("webhookserve: Serve was given a nil handler"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if c.CertSecret != "" {
		certs, err := webhookcert.New(s, client, c.CertConfig())
		if err != nil {
			return nil, fmt.Errorf("webhookserve: the webhooks' certificate, kept in the Secret %s/%s: %w", c.Namespace, c.CertSecret, err)
		}
		svc, err := httpserver.New(s, httpserver.Config{Name: "webhooks", Addr: c.Addr, Handler: mux, Certificate: certs})
		if err != nil {
			return nil, err
		}
		return []humus.Service{certs, svc}, nil
	}
	certs, err := httpserver.CertDir(s, strings.TrimPrefix(path.Clean(c.CertDir), "/"))
	if err != nil {
		return nil, fmt.Errorf("webhookserve: the webhooks' certificate, from %s: %w", c.CertDir, err)
	}
	svc, err := httpserver.New(s, httpserver.Config{Name: "webhooks", Addr: c.Addr, Handler: mux, Certificate: certs})
	if err != nil {
		return nil, err
	}
	return []humus.Service{svc}, nil
}
