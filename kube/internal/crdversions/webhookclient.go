package crdversions

import (
	"fmt"
	"net/url"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/z5labs/humus/kube/conversion"
)

// WebhookClient is how the API server reaches a conversion webhook, a
// CRD's spec.conversion.webhook.clientConfig: kube.WebhookClient, whose
// fields it has, in the same order, so that one converts to the other.
type WebhookClient struct {
	Namespace, Name string
	Port            int32
	Path            string
	URL             string
	CABundle        []byte
}

// IsZero reports whether w is the zero WebhookClient.
func (w WebhookClient) IsZero() bool {
	return w.Namespace == "" && w.Name == "" && w.Port == 0 && w.Path == "" && w.URL == "" && len(w.CABundle) == 0
}

// clientConfig is w as the CRD has it, and an error naming every mistake
// in it, as the API server checks it.
func (w WebhookClient) clientConfig() (*apiextensionsv1.WebhookClientConfig, []error) {
	const f = "kube: Resource.ConversionWebhook"
	var errs []error
	cc := &apiextensionsv1.WebhookClientConfig{}
	if len(w.CABundle) > 0 {
		cc.CABundle = append([]byte(nil), w.CABundle...)
	}
	service := w.Namespace != "" || w.Name != "" || w.Port != 0 || w.Path != ""
	switch {
	case w.URL != "" && service:
		errs = append(errs, fmt.Errorf("%s has a URL and a Service (Namespace, Name, Port, Path): give one", f))
	case w.URL != "":
		urlErrs, parsed := w.checkURL(f)
		errs = append(errs, urlErrs...)
		if parsed {
			u2 := w.URL
			cc.URL = &u2
		}
	case service:
		var serviceErrs []error
		cc.Service, serviceErrs = w.service(f)
		errs = append(errs, serviceErrs...)
	default:
		errs = append(errs, fmt.Errorf("%s is missing: Versions convert through a webhook, so name the Service in front of the App's webhook server (Namespace and Name), or a URL", f))
	}
	return cc, errs
}

// checkURL returns the mistakes in w's URL, f its name in messages: a
// scheme other than https, no host, a user, query or fragment; and
// whether it parsed.
func (w WebhookClient) checkURL(f string) ([]error, bool) {
	u, err := url.Parse(w.URL)
	if err != nil {
		return []error{fmt.Errorf("%s.URL %q: %w", f, w.URL, err)}, false
	}
	var errs []error
	if u.Scheme != "https" {
		errs = append(errs, fmt.Errorf("%s.URL %q: the scheme must be https", f, w.URL))
	}
	if u.Host == "" {
		errs = append(errs, fmt.Errorf("%s.URL %q: it has no host", f, w.URL))
	}
	if u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		errs = append(errs, fmt.Errorf("%s.URL %q: it may have no user, query or fragment", f, w.URL))
	}
	return errs, true
}

// service is w's Service reference, its Port and Path defaulted to 443 and
// conversion.Path, and the mistakes in it, f its name in messages.
func (w WebhookClient) service(f string) (*apiextensionsv1.ServiceReference, []error) {
	var errs []error
	if w.Name == "" {
		errs = append(errs, fmt.Errorf("%s.Name is missing: name the Service in front of the App's webhook server", f))
	}
	for _, p := range validation.IsDNS1035Label(w.Name) {
		if w.Name != "" {
			errs = append(errs, fmt.Errorf("%s.Name %q: %s", f, w.Name, p))
		}
	}
	if w.Namespace == "" {
		errs = append(errs, fmt.Errorf("%s.Namespace is missing: give the Service's namespace", f))
	}
	for _, p := range validation.IsDNS1123Label(w.Namespace) {
		if w.Namespace != "" {
			errs = append(errs, fmt.Errorf("%s.Namespace %q: %s", f, w.Namespace, p))
		}
	}
	port := w.Port
	if port == 0 {
		port = 443
	}
	if port < 1 || port > 65535 {
		errs = append(errs, fmt.Errorf("%s.Port %d: must be from 1 to 65535", f, w.Port))
	}
	path := w.Path
	if path == "" {
		path = conversion.Path
	}
	if !strings.HasPrefix(path, "/") {
		errs = append(errs, fmt.Errorf("%s.Path %q: must start with /", f, w.Path))
	}
	return &apiextensionsv1.ServiceReference{Namespace: w.Namespace, Name: w.Name, Port: &port, Path: &path}, errs
}
