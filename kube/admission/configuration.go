package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// The webhook configurations of what Validate and Default serve: the same
// Validating and Defaulting values give the handler and its
// ValidatingWebhookConfiguration or MutatingWebhookConfiguration, so the
// configuration names no resource, version or operation the handler
// doesn't serve.

// DefaultTimeoutSeconds is how long the API server waits for a webhook's
// answer before it applies the failure policy, when
// Configuration.TimeoutSeconds is 0: 10 seconds, the API server's own
// default and controller-gen's.
const DefaultTimeoutSeconds = 10

// ClientConfig is how the API server reaches the App's webhook server, a
// webhook's clientConfig: a Service in front of every replica (Namespace,
// Name and Port) or, for a local run, the server's URL. The
// configuration's path (Configuration.Path) is the Service's path, or is
// appended to the URL. Plain values: Check names every mistake.
type ClientConfig struct {
	// Namespace and Name are the Service's, such as memcached-system and
	// memcached-webhooks.
	Namespace, Name string
	// Port is the Service's port, from 1 to 65535; 0 is 443, the API
	// server's default.
	Port int32

	// URL is the webhook server's https URL, such as
	// https://127.0.0.1:9443, in place of a Service: a host, an optional
	// port and path prefix, no user, query or fragment. The
	// configuration's path is appended to it.
	URL string

	// CABundle is the PEM of the CA that signed the server's
	// certificate, which the API server trusts. nil, the default, leaves
	// it to be filled in after: by package kube/webhookcert (its
	// Config's ValidatingWebhookConfigurations and
	// MutatingWebhookConfigurations, the configurations' names) or by
	// cert-manager's CA injector (the annotation
	// cert-manager.io/inject-ca-from).
	CABundle []byte
}

// Check returns one error naming every mistake in c, as the API server
// checks a clientConfig: both a URL and a Service, or neither; a Service
// without a name (a DNS-1035 label) or a namespace (a DNS-1123 label), a
// port out of range; a URL that doesn't parse, whose scheme isn't https,
// with no host, or with a user, query or fragment. nil when c is fine.
func (c ClientConfig) Check() error {
	return errors.Join(c.check("ClientConfig")...)
}

// check returns the mistakes in c, f its name in messages.
func (c ClientConfig) check(f string) []error {
	var errs []error
	service := c.Namespace != "" || c.Name != "" || c.Port != 0
	switch {
	case c.URL != "" && service:
		errs = append(errs, fmt.Errorf("%s has a URL and a Service (Namespace, Name, Port): give one", f))
	case c.URL != "":
		u, err := url.Parse(c.URL)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.URL %q: %w", f, c.URL, err))
			break
		}
		if u.Scheme != "https" {
			errs = append(errs, fmt.Errorf("%s.URL %q: the scheme must be https: the API server calls a webhook over TLS only", f, c.URL))
		}
		if u.Hostname() == "" {
			errs = append(errs, fmt.Errorf("%s.URL %q: it has no host", f, c.URL))
		}
		if u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
			errs = append(errs, fmt.Errorf("%s.URL %q: it may have no user, query or fragment", f, c.URL))
		}
	case service:
		if c.Name == "" {
			errs = append(errs, fmt.Errorf("%s.Name is missing: name the Service in front of the App's webhook server", f))
		} else {
			for _, p := range validation.IsDNS1035Label(c.Name) {
				errs = append(errs, fmt.Errorf("%s.Name %q: %s", f, c.Name, p))
			}
		}
		if c.Namespace == "" {
			errs = append(errs, fmt.Errorf("%s.Namespace is missing: give the Service's namespace", f))
		} else {
			for _, p := range validation.IsDNS1123Label(c.Namespace) {
				errs = append(errs, fmt.Errorf("%s.Namespace %q: %s", f, c.Namespace, p))
			}
		}
		if c.Port < 0 || c.Port > 65535 {
			errs = append(errs, fmt.Errorf("%s.Port %d: must be from 1 to 65535, or 0 for 443", f, c.Port))
		}
	default:
		errs = append(errs, fmt.Errorf("%s is missing: name the Service in front of the App's webhook server (Namespace and Name), or a URL", f))
	}
	return errs
}

// clientConfig is c as a webhook has it, at path.
func (c ClientConfig) clientConfig(path string) admissionregistrationv1.WebhookClientConfig {
	cc := admissionregistrationv1.WebhookClientConfig{}
	if len(c.CABundle) > 0 {
		cc.CABundle = slices.Clone(c.CABundle)
	}
	if c.URL != "" {
		u := strings.TrimSuffix(c.URL, "/") + path
		cc.URL = &u
		return cc
	}
	port := c.Port
	if port == 0 {
		port = 443
	}
	cc.Service = &admissionregistrationv1.ServiceReference{Namespace: c.Namespace, Name: c.Name, Port: &port, Path: &path}
	return cc
}

// Configuration is what a webhook configuration says besides what its
// webhooks match, which comes from the Validating or Defaulting values
// the handler serves. Plain values: the zero value of each field but Name
// and Client is its default.
type Configuration struct {
	// Name is the configuration's metadata.name, a DNS-1123 subdomain,
	// such as memcacheds.cache.example.com: the name to give
	// kube/webhookcert's Config (ValidatingWebhookConfigurations or
	// MutatingWebhookConfigurations) for it to inject its CA. A
	// ValidatingWebhookConfiguration and a MutatingWebhookConfiguration
	// may share it.
	Name string

	// Client is how the API server reaches the App's webhook server.
	Client ClientConfig

	// Path is where the App mounts the handler, such as /validate; ""
	// is ValidatePath for a ValidatingWebhookConfiguration and
	// DefaultPath for a MutatingWebhookConfiguration. It starts with /;
	// for a Service, each of its /-separated segments is a DNS-1123
	// subdomain, as the API server requires (/validate-widgets, not
	// /validate_widgets).
	Path string

	// FailurePolicy is what the API server does when the webhook can't
	// be called or fails (no answer, an error, a timeout): Fail refuses
	// the request, Ignore admits it. Default Fail, as controller-gen's.
	FailurePolicy admissionregistrationv1.FailurePolicyType

	// TimeoutSeconds is how long the API server waits for the webhook's
	// answer, from 1 to 30; 0 is DefaultTimeoutSeconds.
	TimeoutSeconds int32

	// NamespaceSelector and ObjectSelector limit the webhooks to the
	// objects in the namespaces whose labels match, and to the objects
	// whose labels match; nil, the default, matches every one.
	NamespaceSelector, ObjectSelector *metav1.LabelSelector
}

// servicePath returns the mistakes in path, a Service's path starting
// with /, as the API server's webhook.ValidateWebhookService
// (k8s.io/apiserver/pkg/util/webhook) finds them: "/" is fine; else,
// without its leading / and one trailing /, each /-separated segment must
// be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.'),
// never empty.
func servicePath(path string) []error {
	if path == "/" {
		return nil
	}
	var errs []error
	for i, seg := range strings.Split(strings.TrimSuffix(path[1:], "/"), "/") {
		if seg == "" {
			errs = append(errs, fmt.Errorf("Configuration.Path %q: segment %d is empty: the API server refuses a Service path with an empty segment (//)", path, i))
			continue
		}
		if msgs := validation.IsDNS1123Subdomain(seg); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("Configuration.Path %q: segment %d %q: %s (the API server's rule for a Service path, such as /validate-widgets)", path, i, seg, strings.Join(msgs, "; ")))
		}
	}
	return errs
}

// A ruled webhook is a Validating or Defaulting, whose resource and
// operations a configuration's webhook matches.
type ruled interface {
	rule() (schema.GroupVersionResource, []admissionregistrationv1.OperationType)
}

// rule is v's resource and the operations it has a function for:
// CREATE, UPDATE and DELETE, in that order.
func (v Validating[T]) rule() (schema.GroupVersionResource, []admissionregistrationv1.OperationType) {
	var ops []admissionregistrationv1.OperationType
	if v.Create != nil {
		ops = append(ops, admissionregistrationv1.Create)
	}
	if v.Update != nil {
		ops = append(ops, admissionregistrationv1.Update)
	}
	if v.Delete != nil {
		ops = append(ops, admissionregistrationv1.Delete)
	}
	return v.Resource, ops
}

// rule is d's resource, and CREATE and UPDATE, which Default's handler
// defaults.
func (d Defaulting[T]) rule() (schema.GroupVersionResource, []admissionregistrationv1.OperationType) {
	return d.Resource, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
}

// WebhookName is the name of the webhook of resource gvr in a
// configuration: <version>.<resource>.<group>, such as
// v1beta1.memcacheds.cache.example.com, with "core" for the core group
// (v1.configmaps.core), a fully qualified name of at least three
// segments, as the API server requires, unique in its configuration as
// the handler's resources are. The API server names it in a denial:
// admission webhook "<name>" denied the request.
func WebhookName(gvr schema.GroupVersionResource) string {
	group := gvr.Group
	if group == "" {
		group = "core"
	}
	return gvr.Version + "." + gvr.Resource + "." + group
}

// entry is one webhook given to a configuration: what it matches, and
// the mistakes its handler reports in it.
type entry struct {
	r   ruled
	err error
}

// entries are ws as entries, check giving each one's mistakes; a nil one
// is an entry with no ruled.
func entries[W any](ws []W, check func(W) error) []entry {
	es := make([]entry, len(ws))
	for i, w := range ws {
		if r, ok := any(w).(ruled); ok {
			es[i] = entry{r: r, err: check(w)}
		}
	}
	return es
}

// webhooks returns the webhooks of c for es, one a resource, their path
// defaultPath unless c.Path is set, as a ValidatingWebhookConfiguration
// has them (a MutatingWebhook has their fields and more), and one error
// naming every mistake in c and es, the configuration named kind.
func (c Configuration) webhooks(kind, defaultPath string, es []entry) ([]admissionregistrationv1.ValidatingWebhook, error) {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("Configuration.Name is missing: the configuration's metadata.name, such as memcacheds.cache.example.com"))
	} else if msgs := validation.IsDNS1123Subdomain(c.Name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("Configuration.Name %q: %s", c.Name, strings.Join(msgs, "; ")))
	}
	errs = append(errs, c.Client.check("Configuration.Client")...)
	path := c.Path
	if path == "" {
		path = defaultPath
	}
	if !strings.HasPrefix(path, "/") {
		errs = append(errs, fmt.Errorf("Configuration.Path %q: must start with /", c.Path))
	} else if c.Client.URL == "" {
		errs = append(errs, servicePath(path)...)
	}
	for _, s := range []struct {
		name string
		sel  *metav1.LabelSelector
	}{{"NamespaceSelector", c.NamespaceSelector}, {"ObjectSelector", c.ObjectSelector}} {
		// The API server's own check of a webhook's selectors
		// (k8s.io/kubernetes pkg/apis/admissionregistration/validation).
		for _, fe := range metav1validation.ValidateLabelSelector(s.sel, metav1validation.LabelSelectorValidationOptions{}, field.NewPath("Configuration", s.name)) {
			errs = append(errs, errors.New(fe.Error()))
		}
	}
	fp := c.FailurePolicy
	switch fp {
	case "":
		fp = admissionregistrationv1.Fail
	case admissionregistrationv1.Fail, admissionregistrationv1.Ignore:
	default:
		errs = append(errs, fmt.Errorf("Configuration.FailurePolicy %q: not Fail or Ignore", fp))
	}
	timeout := c.TimeoutSeconds
	if timeout == 0 {
		timeout = DefaultTimeoutSeconds
	}
	if timeout < 1 || timeout > 30 {
		errs = append(errs, fmt.Errorf("Configuration.TimeoutSeconds %d: must be from 1 to 30, or 0 for %d", c.TimeoutSeconds, DefaultTimeoutSeconds))
	}
	if len(es) == 0 {
		errs = append(errs, errors.New("no webhook was given: give the values given to the handler"))
	}
	client := c.Client.clientConfig(path)
	var hooks []admissionregistrationv1.ValidatingWebhook
	seen := map[schema.GroupVersionResource]int{}
	for i, e := range es {
		if e.r == nil {
			errs = append(errs, fmt.Errorf("webhook %d is nil", i))
			continue
		}
		gvr, ops := e.r.rule()
		if e.err != nil {
			for _, err := range unjoin(e.err) {
				errs = append(errs, fmt.Errorf("webhook %d (%s): %w", i, gvr, err))
			}
		}
		if j, ok := seen[gvr]; ok {
			errs = append(errs, fmt.Errorf("webhook %d (%s): the resource is given twice, as webhook %d: one function per resource and operation", i, gvr, j))
			continue
		}
		seen[gvr] = i
		if e.err == nil {
			for _, fe := range validation.IsFullyQualifiedName(field.NewPath("name"), WebhookName(gvr)) {
				errs = append(errs, fmt.Errorf("webhook %d (%s): its name %q, <version>.<plural>.<group>: %s", i, gvr, WebhookName(gvr), fe.Detail))
			}
		}
		// Each webhook its own values, none shared with another's.
		fp, timeout, none, equivalent := fp, timeout, admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.Equivalent
		hooks = append(hooks, admissionregistrationv1.ValidatingWebhook{
			Name:         WebhookName(gvr),
			ClientConfig: *client.DeepCopy(),
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: ops,
				Rule: admissionregistrationv1.Rule{
					APIGroups:   []string{gvr.Group},
					APIVersions: []string{gvr.Version},
					Resources:   []string{gvr.Resource},
				},
			}},
			FailurePolicy:           &fp,
			MatchPolicy:             &equivalent,
			NamespaceSelector:       c.NamespaceSelector.DeepCopy(),
			ObjectSelector:          c.ObjectSelector.DeepCopy(),
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("admission: the %s %q: %w", kind, c.Name, err)
	}
	return hooks, nil
}

// ValidatingWebhookConfiguration is the ValidatingWebhookConfiguration
// (admissionregistration.k8s.io/v1) of Validate's handler for vs, the
// same values given to Validate, mounted at c.Path: one webhook for each
// resource, named WebhookName, matching its group, version and plural
// (not its subresources) and the operations it has a function for
// (CREATE for Create, UPDATE for Update, DELETE for Delete), called at
// c.Client. Each webhook has c's FailurePolicy (default Fail) and
// TimeoutSeconds (default 10), sideEffects None (a webhook of this
// package writes nothing, so a dry run calls it too),
// admissionReviewVersions [v1] (the only version the handler answers)
// and matchPolicy Equivalent: a write at another version of the
// resource, such as v1alpha1, is converted to the webhook's version by
// the API server (through the CRD's conversion) before the webhook sees
// it, so it decodes into the handler's type.
//
// It returns one error naming every mistake in c and vs: a missing or
// invalid Name, Client's mistakes (see ClientConfig.Check), a Path not
// starting with / or, for a Service, with a segment that isn't a DNS-1123
// subdomain (such as /validate_widgets, /a//b or /Validate: the API
// server refuses them), a NamespaceSelector or ObjectSelector the API
// server refuses (an unknown operator, an invalid key or value), an
// unknown FailurePolicy, a TimeoutSeconds over 30, no webhook, a nil one,
// a resource without version or plural, a Validating with no function, a resource given twice, a resource whose webhook's
// name (WebhookName) isn't a lowercase DNS subdomain.
func ValidatingWebhookConfiguration(c Configuration, vs ...ValidatingWebhook) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	hooks, err := c.webhooks("ValidatingWebhookConfiguration", ValidatePath, entries(vs, func(v ValidatingWebhook) error {
		_, _, err := v.validating()
		return err
	}))
	if err != nil {
		return nil, err
	}
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: c.Name},
		Webhooks:   hooks,
	}, nil
}

// MutatingWebhookConfiguration is the MutatingWebhookConfiguration
// (admissionregistration.k8s.io/v1) of Default's handler for ds, the
// same values given to Default, mounted at c.Path (default DefaultPath):
// one webhook for each resource, matching its CREATE and UPDATE, as
// ValidatingWebhookConfiguration's are, and reinvocationPolicy Never (the
// API server's default: a Default function sees the object once, after
// the mutating webhooks before it). It returns one error naming every
// mistake in c and ds, as ValidatingWebhookConfiguration does.
func MutatingWebhookConfiguration(c Configuration, ds ...DefaultingWebhook) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	hooks, err := c.webhooks("MutatingWebhookConfiguration", DefaultPath, entries(ds, func(d DefaultingWebhook) error {
		_, _, err := d.defaulting()
		return err
	}))
	if err != nil {
		return nil, err
	}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: c.Name},
	}
	for _, h := range hooks {
		never := admissionregistrationv1.NeverReinvocationPolicy
		cfg.Webhooks = append(cfg.Webhooks, admissionregistrationv1.MutatingWebhook{
			Name: h.Name, ClientConfig: h.ClientConfig, Rules: h.Rules, FailurePolicy: h.FailurePolicy, MatchPolicy: h.MatchPolicy,
			NamespaceSelector: h.NamespaceSelector, ObjectSelector: h.ObjectSelector, SideEffects: h.SideEffects,
			TimeoutSeconds: h.TimeoutSeconds, AdmissionReviewVersions: h.AdmissionReviewVersions,
			ReinvocationPolicy: &never,
		})
	}
	return cfg, nil
}

// ValidatingWebhookConfigurationYAML is ValidatingWebhookConfiguration's
// object as YAML, as a user checks it into their repository and applies
// it (keys sorted, as sigs.k8s.io/yaml writes them). It returns
// ValidatingWebhookConfiguration's error.
func ValidatingWebhookConfigurationYAML(c Configuration, vs ...ValidatingWebhook) ([]byte, error) {
	cfg, err := ValidatingWebhookConfiguration(c, vs...)
	if err != nil {
		return nil, err
	}
	return toYAML(cfg)
}

// MutatingWebhookConfigurationYAML is MutatingWebhookConfiguration's
// object as YAML, as ValidatingWebhookConfigurationYAML writes its own.
// It returns MutatingWebhookConfiguration's error.
func MutatingWebhookConfigurationYAML(c Configuration, ds ...DefaultingWebhook) ([]byte, error) {
	cfg, err := MutatingWebhookConfiguration(c, ds...)
	if err != nil {
		return nil, err
	}
	return toYAML(cfg)
}

// toYAML is obj's JSON as YAML, keys sorted.
func toYAML(obj any) ([]byte, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("admission: encoding the webhook configuration: %w", err)
	}
	return yaml.JSONToYAML(b)
}
