package kube

import (
	"encoding/json"
	"fmt"
	"reflect"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/z5labs/humus/kube/conversion"
	"github.com/z5labs/humus/kube/internal/crdschema"
	"github.com/z5labs/humus/kube/internal/crdversions"
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
	v     crdversions.Version // what CRD checks and builds; v.Made is false for a zero Version
	opts  VersionOptions      // its Rules, Columns and SelectableFields, which CRD resolves
	spoke conversion.Spoke[Object[Spec, Status]]
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
	// conversion.Spoke.Preserving). In a list that the hub's schema makes
	// a map by keys (a field's ListMap, or an upstream type's
	// x-kubernetes-list-map-keys, such as containers by name), each
	// element's lost fields are restored onto the element with the same
	// keys (conversion.Spoke.PreservingWith); any other list's are
	// restored only when the write left the whole list as it read it, and
	// are otherwise lost, never moved onto another element.
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
// panic fails the API server's request, naming the object: a create or
// update at this version that toHub can't convert (a value the hub can't
// represent) fails with a 500 Internal Error from the conversion webhook,
// after the client sent it. Refuse such an object at admission instead,
// with a CEL rule on this version's types (VersionOptions.Rules, such as
// TypeRules.Validation), which the API server checks before it converts
// and answers with a 422 naming the field; conversion.RoundTrip, with
// fill functions that make only objects the rule admits, then shows that
// every admitted object converts.
//
// A version that encodes as the hub does (the same fields of the same
// types: only its Rules, columns, descriptions or Go type names differ)
// takes no functions: give nil for both, with the type arguments, such as
// kube.NewVersion[OldSpec, OldStatus, Spec, Status]("v1beta1", nil, nil,
// opts). Resource.CRD checks that its schema, without Rules, is the hub's
// (a type that encodes itself, such as a Duration, taken as its
// kube.Schema, which both versions' Rules give), and returns an error when
// it differs or can't be compared.
// When every version is such, the API server converts by setting the
// apiVersion (the CRD's conversion strategy None) and no webhook is
// needed; otherwise the webhook converts it through JSON.
//
// One function without the other is a mistake CRD reports, as it does a
// name that is not a DNS-1035 label such as v1beta1.
func NewVersion[S, St, Spec, Status any](name string, toHub func(src *Object[S, St], dst *Object[Spec, Status]) error, fromHub func(src *Object[Spec, Status], dst *Object[S, St]) error, o VersionOptions) Version[Spec, Status] {
	v := Version[Spec, Status]{v: crdversions.Version{
		Made: true, Name: name, GoType: fmt.Sprintf("%T", new(Object[S, St])),
		ToNil: toHub == nil, FromNil: fromHub == nil, Identity: toHub == nil && fromHub == nil,
		Spec: reflect.TypeFor[S](), Status: reflect.TypeFor[St](), Object: reflect.TypeFor[Object[S, St]](),
		NotServed: o.NotServed, Storage: o.Storage, Deprecated: o.Deprecated, DeprecationWarning: o.DeprecationWarning,
		Description: o.Description,
	}, opts: o}
	if v.v.Identity {
		toHub = func(src *Object[S, St], dst *Object[Spec, Status]) error { return reencode(src, dst) }
		fromHub = func(src *Object[Spec, Status], dst *Object[S, St]) error { return reencode(src, dst) }
	}
	v.spoke = conversion.NewSpoke(name, toHub, fromHub) // made Preserving by Resource.Conversion, with the hub's list-map keys
	return v
}

// Name is the version's name, such as v1beta1.
func (v Version[Spec, Status]) Name() string { return v.v.Name }

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

// versioned reports whether r has more than its own version, or settings
// of them.
func (r Resource[Spec, Status]) versioned() bool {
	return len(r.Versions) > 0 || !crdversions.WebhookClient(r.ConversionWebhook).IsZero()
}

// StorageVersion is the version the API server stores r's objects at:
// the Version of Versions whose Storage is set, or else r's own Version.
func (r Resource[Spec, Status]) StorageVersion() string {
	for _, v := range r.Versions {
		if v.v.Made && v.v.Storage {
			return v.v.Name
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
	var keys map[string][]string // the hub's list-map keys, reflected once a Preserving version needs them
	for i, v := range r.Versions {
		if !v.v.Made {
			// Named as CRD names it, not as a zero conversion.Spoke.
			k.Spokes = append(k.Spokes, conversion.InvalidSpoke[Object[Spec, Status]](crdversions.ZeroVersion(i)))
			continue
		}
		sp := v.spoke
		if v.opts.Preserving {
			if keys == nil {
				keys = r.listMapKeys()
			}
			sp = sp.PreservingWith(conversion.PreserveOptions{ListMapKeys: keys})
		}
		k.Spokes = append(k.Spokes, sp)
	}
	return k
}

// listMapKeys is the list-map keys of r's own version's schema, as
// conversion.PreserveOptions takes them; empty (every list kept whole)
// when r's schema can't be reflected, a mistake CRD names.
func (r Resource[Spec, Status]) listMapKeys() map[string][]string {
	crd, err := crdschema.CRD(r.schemaResource())
	if err != nil {
		return map[string][]string{}
	}
	keys := crdschema.ListMapKeys(crd.Spec.Versions[0].Schema.OpenAPIV3Schema)
	if keys == nil {
		keys = map[string][]string{}
	}
	return keys
}

// versionedCRD is CRD for a resource with Versions: its own version's,
// with every other version added, and spec.conversion, as
// crdversions.CRD builds and checks them.
func (r Resource[Spec, Status]) versionedCRD() (*apiextensionsv1.CustomResourceDefinition, error) {
	versions := make([]crdversions.Version, len(r.Versions))
	for i, v := range r.Versions {
		versions[i] = v.v
		if v.v.Made {
			versions[i].Rules = schemaRules(v.opts.Rules)
			versions[i].Columns = schemaColumns(v.opts.Columns)
			versions[i].SelectableFields = schemaSelectable(v.opts.SelectableFields)
		}
	}
	return crdversions.CRD(crdversions.Resource{
		Hub:      r.schemaResource(),
		Versions: versions,
		Webhook:  crdversions.WebhookClient(r.ConversionWebhook),
	})
}
