package appconfig

import (
	"errors"
	"fmt"
	"path"

	"github.com/z5labs/humus/kube/webhookserve"
)

// WebhookConfig is where an App serves its webhooks, such as the
// conversion webhook of a resource of several versions, with
// webhookserve.Serve. Read fills Addr from WEBHOOK_ADDR, and CertDir from
// WEBHOOK_CERT_DIR or CertSecret from WEBHOOK_CERT_SECRET with Namespace
// from POD_NAMESPACE; the App fills Service, and the CRDs and webhook
// configurations whose caBundle it sets.
type WebhookConfig = webhookserve.Config

// The environment variables of WebhookConfig, read by Read.
const (
	EnvWebhookAddr = "WEBHOOK_ADDR" // WebhookConfig.Addr; default "", no webhooks served
	// WebhookConfig.CertDir: the absolute path of the directory, the
	// mountPath of its Secret's volume.
	EnvWebhookCertDir = "WEBHOOK_CERT_DIR"
	// WebhookConfig.CertSecret, a Secret's name in POD_NAMESPACE; not
	// with WEBHOOK_CERT_DIR.
	EnvWebhookCertSecret = "WEBHOOK_CERT_SECRET"
)

// DefaultWebhookCertDir is where controller-runtime's webhook server reads
// its certificate, and where the deploy files mount it.
const DefaultWebhookCertDir = webhookserve.DefaultCertDir

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
			errs = append(errs, fmt.Errorf("%s is %q, a relative path: set it to the directory's absolute path, the mountPath of the volume of its kubernetes.io/tls Secret, such as %s", EnvWebhookCertDir, dir, DefaultWebhookCertDir))
		}
		w.CertDir = path.Clean(dir)
	}
	return w, errors.Join(append(errs, checkWebhooks(w))...)
}

// checkWebhooks returns an error naming every mistake in w, by the
// variables Read reads it from.
func checkWebhooks(w WebhookConfig) error {
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
