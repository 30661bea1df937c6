package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"unicode"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/z5labs/humus/kube/conversion"
	"github.com/z5labs/humus/kube/internal/crdschema"
)

// Version is one more version of a Resource[Spec, Status], besides the
// Resource's own Version, whose objects are Object[S, St] of Go types of
// its own, converted to and from the Resource's Object[Spec, Status]:
// controller-runtime's hub and spoke, with the Resource's own version the
// hub. NewVersion makes one; put it in Resource.Versions.
//
// The Resource's own version is the one its Controller watches, and its
// Reconciler sees: an object a user writes at another version reaches it
// converted by the API server, which calls the App's conversion webhook
// (Resource.Conversion gives conversion.Handler what it serves). It is
// also the storage version, as the hub usually is, unless a Version's
// Storage says otherwise. A Version has the Resource's group, kind, scope
// and names: versions of one resource can't disagree on them.
type Version[Spec, Status any] struct {
	name     string
	made     bool // made by NewVersion, not a zero Version
	toNil    bool // toHub was nil
	fromNil  bool // fromHub was nil
	opts     VersionOptions
	spoke    conversion.Spoke[Object[Spec, Status]]
	goType   string
	spec     reflect.Type
	status   reflect.Type
	object   reflect.Type
	identity bool // no functions: it encodes as the hub does
}

// VersionOptions are what a Version has besides its Go types and
// conversions: each is the Resource's field of its name, for that version.
// The zero value is a version that is served, not stored, and not
// deprecated, with no Rules, columns or description.
type VersionOptions struct {
	// NotServed leaves the version out of the API: the API server refuses
	// a request at it. It is a step in removing a version: once no client
	// uses it, stop serving it, migrate the objects stored at it, and then
	// remove it from Versions. false, the default, serves it.
	NotServed bool
	// Storage makes this the version the API server writes objects to
	// etcd at, in place of the Resource's own Version. At most one
	// version is the storage version.
	Storage bool
	// Deprecated has the API server answer every request at this version
	// with a warning, DeprecationWarning or, if that is "", its own
	// ("cache.example.com/v1alpha1 Memcached is deprecated; use
	// cache.example.com/v1beta1 Memcached"), which kubectl shows.
	Deprecated bool
	// DeprecationWarning is the warning of a Deprecated version: at most
	// 256 printable characters.
	DeprecationWarning string

	// Rules, Columns, SelectableFields and Description are the version's
	// own, as the Resource's are its own version's: the Rules of its Spec
	// and Status types, and the Columns and SelectableFields made from its
	// Object[S, St].
	Rules            []TypeRules
	Columns          []Column
	SelectableFields []SelectableField
	Description      string

	// Preserving keeps, in an annotation of the version's objects, what
	// the version cannot hold of the hub's, so that a field only the hub's
	// version has survives a read and write through this version (see
	// conversion.Spoke.Preserving).
	Preserving bool
}

// NewVersion returns the Version name of a Resource[Spec, Status], whose
// objects are Object[S, St], converted to the Resource's own version (the
// hub) by toHub and from it by fromHub: controller-runtime's Convertible's
// ConvertTo and ConvertFrom, as functions. The compiler checks that both
// agree on the version's types and the hub's.
//
// Each function fills dst, a new zero object, from src, the whole object:
// its metadata copied unchanged (dst.ObjectMeta = src.ObjectMeta), as a
// conversion may change only labels and annotations. A returned error or a
// panic fails the API server's request, naming the object.
//
// A version that encodes as the hub does (the same fields of the same
// types: only its Rules, columns, descriptions or Go type names differ)
// takes no functions: give nil for both, with the type arguments, such as
// kube.NewVersion[OldSpec, OldStatus, Spec, Status]("v1beta1", nil, nil,
// opts). Resource.CRD checks that its schema, without Rules, is the hub's.
// When every version is such, the API server converts by setting the
// apiVersion (the CRD's conversion strategy None) and no webhook is
// needed; otherwise the webhook converts it through JSON.
//
// One function without the other is a mistake CRD reports, as it does a
// name that is not a DNS-1035 label such as v1beta1.
func NewVersion[S, St, Spec, Status any](name string, toHub func(src *Object[S, St], dst *Object[Spec, Status]) error, fromHub func(src *Object[Spec, Status], dst *Object[S, St]) error, o VersionOptions) Version[Spec, Status] {
	v := Version[Spec, Status]{
		name:    name,
		made:    true,
		toNil:   toHub == nil,
		fromNil: fromHub == nil,
		opts:    o,
		goType:  fmt.Sprintf("%T", new(Object[S, St])),
		spec:    reflect.TypeFor[S](),
		status:  reflect.TypeFor[St](),
		object:  reflect.TypeFor[Object[S, St]](),
	}
	if toHub == nil && fromHub == nil {
		v.identity = true
		toHub = func(src *Object[S, St], dst *Object[Spec, Status]) error { return reencode(src, dst) }
		fromHub = func(src *Object[Spec, Status], dst *Object[S, St]) error { return reencode(src, dst) }
	}
	v.spoke = conversion.NewSpoke(name, toHub, fromHub)
	if o.Preserving {
		v.spoke = v.spoke.Preserving()
	}
	return v
}

// Name is the version's name, such as v1beta1.
func (v Version[Spec, Status]) Name() string { return v.name }

// reencode fills dst with src's JSON: the conversion of a version that
// encodes as the hub does.
func reencode(src, dst any) error {
	b, err := json.Marshal(src)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, dst)
}

// WebhookClient is how the API server reaches a conversion webhook, a
// CRD's spec.conversion.webhook.clientConfig: the Service in front of the
// App's webhook server (Namespace and Name), or a URL, one or the other.
type WebhookClient struct {
	// Namespace and Name are the Service's, such as memcached-system and
	// memcached-webhooks.
	Namespace, Name string
	// Port is the Service's port, from 1 to 65535; 0 is 443.
	Port int32
	// Path is where the Service serves conversion; "" is conversion.Path,
	// /convert.
	Path string

	// URL is the webhook's https URL, such as
	// https://127.0.0.1:9443/convert for a local run, in place of a
	// Service: with no user, query or fragment.
	URL string

	// CABundle is the PEM of the CA that signed the webhook's serving
	// certificate, which the API server trusts. "" leaves it to be filled
	// in after: by cert-manager's CA injector (an annotation
	// cert-manager.io/inject-ca-from in Resource.Annotations), or by the
	// App when it makes its own certificate.
	CABundle []byte
}

// isZero reports whether w is the zero WebhookClient.
func (w WebhookClient) isZero() bool {
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
		u, err := url.Parse(w.URL)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.URL %q: %w", f, w.URL, err))
			break
		}
		if u.Scheme != "https" {
			errs = append(errs, fmt.Errorf("%s.URL %q: the scheme must be https", f, w.URL))
		}
		if u.Host == "" {
			errs = append(errs, fmt.Errorf("%s.URL %q: it has no host", f, w.URL))
		}
		if u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
			errs = append(errs, fmt.Errorf("%s.URL %q: it may have no user, query or fragment", f, w.URL))
		}
		u2 := w.URL
		cc.URL = &u2
	case service:
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
		cc.Service = &apiextensionsv1.ServiceReference{Namespace: w.Namespace, Name: w.Name, Port: &port, Path: &path}
	default:
		errs = append(errs, fmt.Errorf("%s is missing: Versions convert through a webhook, so name the Service in front of the App's webhook server (Namespace and Name), or a URL", f))
	}
	return cc, errs
}

// versioned reports whether r has more than its own version, or settings
// of them.
func (r Resource[Spec, Status]) versioned() bool {
	return len(r.Versions) > 0 || !r.ConversionWebhook.isZero()
}

// StorageVersion is the version the API server stores r's objects at:
// the Version of Versions whose Storage is set, or else r's own Version.
func (r Resource[Spec, Status]) StorageVersion() string {
	for _, v := range r.Versions {
		if v.made && v.opts.Storage {
			return v.name
		}
	}
	return r.Version
}

// Conversion is r's versions as conversion.Handler serves them and
// conversion.RoundTrip tests them: r's own Version the hub, with
// Object[Spec, Status], and each of Versions a spoke with its
// conversions (a version with none converts through JSON). Serve it from
// every replica of the App, from its start:
//
//	h, err := conversion.Handler(s, app.Memcached.Conversion())
//
// Handler and RoundTrip report the mistakes CRD reports in the
// conversions, such as a missing direction, and a resource without
// Versions.
func (r Resource[Spec, Status]) Conversion() conversion.Kind[Object[Spec, Status]] {
	k := conversion.Kind[Object[Spec, Status]]{Group: r.Group, Kind: r.Kind, Hub: r.Version}
	for i, v := range r.Versions {
		if !v.made {
			// Named as CRD names it, not as a zero conversion.Spoke.
			k.Spokes = append(k.Spokes, conversion.InvalidSpoke[Object[Spec, Status]](zeroVersion(i)))
			continue
		}
		k.Spokes = append(k.Spokes, v.spoke)
	}
	return k
}

// zeroVersion is the mistake of Resource.Versions[i], a zero Version.
func zeroVersion(i int) error {
	return fmt.Errorf("kube: Resource.Versions[%d] is a zero Version: make it with kube.NewVersion", i)
}

// versionedCRD is CRD for a resource with Versions: its own version's,
// with every other version added, and spec.conversion.
func (r Resource[Spec, Status]) versionedCRD() (*apiextensionsv1.CustomResourceDefinition, error) {
	crd, err := crdschema.CRD(r.schemaResource())
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	if len(r.Versions) == 0 {
		errs = append(errs, errors.New("kube: Resource.ConversionWebhook is set, but the Resource has no Versions to convert"))
	}
	var hubShape *apiextensionsv1.CustomResourceDefinition // reflected once a version needs it

	seen := map[string]string{r.Version: "the Resource's own Version"}
	var versions []apiextensionsv1.CustomResourceDefinitionVersion
	var storage []string
	webhook := false
	for i, v := range r.Versions {
		at := fmt.Sprintf("kube: Resource.Versions[%d]", i)
		if !v.made {
			errs = append(errs, zeroVersion(i))
			continue
		}
		at = fmt.Sprintf("%s (%s, %s)", at, v.name, v.goType)
		errs = append(errs, v.check(at, seen, r.Version)...)
		if v.name != "" && seen[v.name] == "" {
			seen[v.name] = fmt.Sprintf("Resource.Versions[%d]", i)
		}
		if v.opts.Storage {
			storage = append(storage, v.name)
		}

		vc, err := crdschema.CRD(v.schemaResource(r.OmitUpstreamDescriptions, r.EmbeddedObjectMeta))
		if err != nil {
			errs = append(errs, versionErrors(at, err)...)
			continue
		}
		if v.identity {
			if hubShape == nil {
				hubShape, _ = crdschema.CRD(shapeOf(r.OmitUpstreamDescriptions, r.EmbeddedObjectMeta, reflect.TypeFor[Spec](), reflect.TypeFor[Status](), reflect.TypeFor[Object[Spec, Status]]()))
			}
			if shape, err := crdschema.CRD(shapeOf(r.OmitUpstreamDescriptions, r.EmbeddedObjectMeta, v.spec, v.status, v.object)); err == nil && hubShape != nil && !sameShape(hubShape, shape) {
				errs = append(errs, fmt.Errorf("%s has no conversion functions, so it must encode as the hub %s does, but its Spec %s or Status %s has other fields or types than %s's: give NewVersion its toHub and fromHub", at, r.Version, v.spec, v.status, r.Version))
			}
		} else {
			webhook = true
		}
		versions = append(versions, v.crdVersion(vc.Spec.Versions[0]))
	}
	if len(storage) > 1 {
		errs = append(errs, fmt.Errorf("kube: Resource.Versions: %s are each Storage: one version is stored, at most one of Versions (the Resource's own Version when none is)", strings.Join(storage, " and ")))
	}

	conv, convErrs := r.crdConversion(webhook)
	errs = append(errs, convErrs...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	crd.Spec.Versions[0].Storage = len(storage) == 0
	crd.Spec.Versions = append(crd.Spec.Versions, versions...)
	crd.Spec.Conversion = conv
	return crd, nil
}

// check returns the mistakes in v, Resource.Versions' entry at (as
// messages name it), of a Resource whose own version is hub; seen names
// where each version name before it was declared: no name, or a name not
// a DNS-1035 label or declared before; one conversion function without
// the other; a DeprecationWarning without Deprecated, over 256 bytes, or
// with a character that isn't printable.
func (v Version[Spec, Status]) check(at string, seen map[string]string, hub string) []error {
	var errs []error
	switch {
	case v.name == "":
		errs = append(errs, fmt.Errorf("%s has no name: give one, such as v1beta1", at))
	case seen[v.name] != "":
		errs = append(errs, fmt.Errorf("%s: version %s is declared twice, here and as %s", at, v.name, seen[v.name]))
	default:
		for _, p := range validation.IsDNS1035Label(v.name) {
			errs = append(errs, fmt.Errorf("%s: the name %q is not a version name, such as v1beta1: %s", at, v.name, p))
		}
	}
	if v.toNil != v.fromNil {
		missing := "toHub, to"
		if v.fromNil {
			missing = "fromHub, from"
		}
		errs = append(errs, fmt.Errorf("%s has no conversion %s the hub %s: give both functions, or neither for a version that encodes as the hub does", at, missing, hub))
	}
	if !v.opts.Deprecated && v.opts.DeprecationWarning != "" {
		errs = append(errs, fmt.Errorf("%s has a DeprecationWarning but isn't Deprecated: the API server warns only of a deprecated version", at))
	}
	if n := len(v.opts.DeprecationWarning); n > 256 {
		errs = append(errs, fmt.Errorf("%s: its DeprecationWarning is %d bytes, more than 256", at, n))
	}
	if strings.ContainsFunc(v.opts.DeprecationWarning, func(c rune) bool { return !unicode.IsPrint(c) }) {
		errs = append(errs, fmt.Errorf("%s: its DeprecationWarning %q has characters that are not printable", at, v.opts.DeprecationWarning))
	}
	return errs
}

// crdVersion is cv, the version its own CRD gives v, named and served,
// stored and deprecated as v's options say.
func (v Version[Spec, Status]) crdVersion(cv apiextensionsv1.CustomResourceDefinitionVersion) apiextensionsv1.CustomResourceDefinitionVersion {
	cv.Name = v.name
	cv.Served = !v.opts.NotServed
	cv.Storage = v.opts.Storage
	cv.Deprecated = v.opts.Deprecated
	if v.opts.DeprecationWarning != "" {
		w := v.opts.DeprecationWarning
		cv.DeprecationWarning = &w
	}
	return cv
}

// crdConversion is the CRD's conversion: by the ConversionWebhook when a
// version converts through functions (webhook), else None; and the
// mistakes in the webhook's client config, or a ConversionWebhook given
// where none is needed.
func (r Resource[Spec, Status]) crdConversion(webhook bool) (*apiextensionsv1.CustomResourceConversion, []error) {
	switch {
	case webhook:
		cc, errs := r.ConversionWebhook.clientConfig()
		return &apiextensionsv1.CustomResourceConversion{
			Strategy: apiextensionsv1.WebhookConverter,
			Webhook:  &apiextensionsv1.WebhookConversion{ClientConfig: cc, ConversionReviewVersions: []string{"v1"}},
		}, errs
	case !r.ConversionWebhook.isZero() && len(r.Versions) > 0:
		return nil, []error{errors.New("kube: Resource.ConversionWebhook is set, but every version encodes as the hub does, so the API server converts them without a webhook (strategy None): leave it out")}
	}
	return &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}, nil
}

// schemaResource is v as crdschema reflects it. The Resource's names are
// checked once, with its own version, so v's are placeholders, replaced.
func (v Version[Spec, Status]) schemaResource(omitUpstream, embeddedMeta bool) crdschema.Resource {
	r := shapeOf(omitUpstream, embeddedMeta, v.spec, v.status, v.object)
	r.Rules = make([]crdschema.Rules, len(v.opts.Rules))
	for i, tr := range v.opts.Rules {
		r.Rules[i] = tr.r
	}
	r.Columns = make([]crdschema.Column, len(v.opts.Columns))
	for i, c := range v.opts.Columns {
		r.Columns[i] = c.c
	}
	r.SelectableFields = make([]crdschema.Selectable, len(v.opts.SelectableFields))
	for i, f := range v.opts.SelectableFields {
		r.SelectableFields[i] = f.s
	}
	r.Description = v.opts.Description
	return r
}

// shapeOf is the crdschema.Resource of the types alone, with placeholder
// names and no Rules: its schema is their fields and types, which two
// versions that encode alike share.
func shapeOf(omitUpstream, embeddedMeta bool, spec, status, object reflect.Type) crdschema.Resource {
	return crdschema.Resource{
		Group: "versions.kube.invalid", Version: "v1", Kind: "Version", Plural: "versions", Scope: string(Namespaced),
		OmitUpstreamDescriptions: omitUpstream, EmbeddedObjectMeta: embeddedMeta,
		Spec: spec, Status: status, Object: object,
	}
}

// sameShape reports whether two CRDs of shapeOf have the same spec and
// status schemas.
func sameShape(a, b *apiextensionsv1.CustomResourceDefinition) bool {
	pa := a.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties
	pb := b.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties
	return equality.Semantic.DeepEqual(pa["spec"], pb["spec"]) && equality.Semantic.DeepEqual(pa["status"], pb["status"])
}

// versionErrors are crdschema's errors of a version, each said of it:
// "kube: Resource.Columns[0] ..." becomes "kube: Resource.Versions[1]
// (v1beta1, ...): Columns[0] ...".
func versionErrors(at string, err error) []error {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	out := make([]error, 0, len(errs))
	for _, e := range errs {
		msg := strings.TrimPrefix(e.Error(), "kube: ")
		msg = strings.ReplaceAll(msg, "Resource.", "")
		out = append(out, fmt.Errorf("%s: %s", at, msg))
	}
	return out
}
