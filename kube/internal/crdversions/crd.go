package crdversions

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/z5labs/humus/kube/internal/crdschema"
)

// Resource is a resource with Versions, as CRD reads it.
type Resource struct {
	// Hub is the resource's own version, as crdschema reflects it: its
	// names, its Spec, Status and Object types (the hub's), its rules.
	Hub crdschema.Resource
	// Versions are kube's Resource.Versions, in their order.
	Versions []Version
	// Webhook is kube's Resource.ConversionWebhook.
	Webhook WebhookClient
}

// Version is one of kube's Resource.Versions, as NewVersion made it: its
// name, its Go types, whether it has conversion functions, and its
// VersionOptions.
type Version struct {
	// Made is false for a zero kube.Version, which has nothing else.
	Made bool
	Name string
	// GoType is the version's *kube.Object[S, St], as %T prints it.
	GoType string
	// ToNil and FromNil are whether NewVersion's toHub and fromHub were
	// nil; Identity, whether both were, so that it encodes as the hub does.
	ToNil, FromNil, Identity bool
	// Spec, Status and Object are the version's S, St and Object[S, St].
	Spec, Status, Object reflect.Type

	// The VersionOptions, with the Rules, Columns and SelectableFields
	// as crdschema has them.
	NotServed, Storage, Deprecated bool
	DeprecationWarning             string
	Rules                          []crdschema.Rules
	Columns                        []crdschema.Column
	SelectableFields               []crdschema.Selectable
	Description                    string
}

// ZeroVersion is the mistake of Resource.Versions[i], a zero Version.
func ZeroVersion(i int) error {
	return fmt.Errorf("kube: Resource.Versions[%d] is a zero Version: make it with kube.NewVersion", i)
}

// CRD is the CRD of a resource with Versions: its own version's, with
// every other version added, and spec.conversion; or an error naming every
// mistake, with a nil CRD.
func CRD(r Resource) (*apiextensionsv1.CustomResourceDefinition, error) {
	crd, hubErr := crdschema.CRD(r.Hub)
	var errs []error
	if hubErr != nil {
		errs = append(errs, hubErr)
	}
	if len(r.Versions) == 0 {
		errs = append(errs, errors.New("kube: Resource.ConversionWebhook is set, but the Resource has no Versions to convert"))
	}
	var hubShape *apiextensionsv1.CustomResourceDefinition // reflected once a version needs it
	var hubShapeErr error
	hub := r.Hub.Version

	seen := map[string]string{hub: "the Resource's own Version"}
	var versions []apiextensionsv1.CustomResourceDefinitionVersion
	var storage []string
	webhook := false
	for i, v := range r.Versions {
		at := fmt.Sprintf("kube: Resource.Versions[%d]", i)
		if !v.Made {
			errs = append(errs, ZeroVersion(i))
			continue
		}
		at = fmt.Sprintf("%s (%s, %s)", at, v.Name, v.GoType)
		errs = append(errs, v.check(at, seen, hub)...)
		if v.Name != "" && seen[v.Name] == "" {
			seen[v.Name] = fmt.Sprintf("Resource.Versions[%d]", i)
		}
		if v.Storage {
			storage = append(storage, v.Name)
		}

		vc, err := crdschema.CRD(v.schemaResource(r.Hub))
		if err != nil {
			errs = append(errs, versionErrors(at, err)...)
			continue
		}
		if v.Identity {
			if hubShape == nil && hubShapeErr == nil {
				hubShape, hubShapeErr = crdschema.CRD(shapeOf(r.Hub, r.Hub.Spec, r.Hub.Status, r.Hub.Object, r.Hub.Rules))
			}
			shape, err := crdschema.CRD(shapeOf(r.Hub, v.Spec, v.Status, v.Object, v.Rules))
			switch {
			case hubShapeErr != nil && hubErr != nil:
				// The hub's own reflection failed, which is named above.
			case hubShapeErr != nil || err != nil:
				// Never a CRD whose versions can't be shown to encode
				// alike: the API server would drop what one lacks.
				errs = append(errs, fmt.Errorf("%s has no conversion functions, so it must encode as the hub %s does, but its schema can't be compared with %s's (%v): give NewVersion its toHub and fromHub", at, hub, hub, errors.Join(hubShapeErr, err)))
			case !sameShape(hubShape, shape):
				errs = append(errs, fmt.Errorf("%s has no conversion functions, so it must encode as the hub %s does, but its Spec %s or Status %s has other fields or types than %s's: give NewVersion its toHub and fromHub", at, hub, v.Spec, v.Status, hub))
			}
		} else {
			webhook = true
		}
		versions = append(versions, v.crdVersion(vc.Spec.Versions[0]))
	}
	if len(storage) > 1 {
		errs = append(errs, fmt.Errorf("kube: Resource.Versions: %s are each Storage: one version is stored, at most one of Versions (the Resource's own Version when none is)", strings.Join(storage, " and ")))
	}

	conv, convErrs := r.conversion(webhook)
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
func (v Version) check(at string, seen map[string]string, hub string) []error {
	var errs []error
	switch {
	case v.Name == "":
		errs = append(errs, fmt.Errorf("%s has no name: give one, such as v1beta1", at))
	case seen[v.Name] != "":
		errs = append(errs, fmt.Errorf("%s: version %s is declared twice, here and as %s", at, v.Name, seen[v.Name]))
	default:
		for _, p := range validation.IsDNS1035Label(v.Name) {
			errs = append(errs, fmt.Errorf("%s: the name %q is not a version name, such as v1beta1: %s", at, v.Name, p))
		}
	}
	if v.ToNil != v.FromNil {
		missing := "toHub, to"
		if v.FromNil {
			missing = "fromHub, from"
		}
		errs = append(errs, fmt.Errorf("%s has no conversion %s the hub %s: give both functions, or neither for a version that encodes as the hub does", at, missing, hub))
	}
	if !v.Deprecated && v.DeprecationWarning != "" {
		errs = append(errs, fmt.Errorf("%s has a DeprecationWarning but isn't Deprecated: the API server warns only of a deprecated version", at))
	}
	if n := len(v.DeprecationWarning); n > 256 {
		errs = append(errs, fmt.Errorf("%s: its DeprecationWarning is %d bytes, more than 256", at, n))
	}
	if strings.ContainsFunc(v.DeprecationWarning, func(c rune) bool { return !unicode.IsPrint(c) }) {
		errs = append(errs, fmt.Errorf("%s: its DeprecationWarning %q has characters that are not printable", at, v.DeprecationWarning))
	}
	return errs
}

// crdVersion is cv, the version its own CRD gives v, named and served,
// stored and deprecated as v's options say.
func (v Version) crdVersion(cv apiextensionsv1.CustomResourceDefinitionVersion) apiextensionsv1.CustomResourceDefinitionVersion {
	cv.Name = v.Name
	cv.Served = !v.NotServed
	cv.Storage = v.Storage
	cv.Deprecated = v.Deprecated
	if v.DeprecationWarning != "" {
		w := v.DeprecationWarning
		cv.DeprecationWarning = &w
	}
	return cv
}

// conversion is the CRD's conversion: by the Webhook when a version
// converts through functions (webhook), else None; and the mistakes in
// the webhook's client config, or a Webhook given where none is needed.
func (r Resource) conversion(webhook bool) (*apiextensionsv1.CustomResourceConversion, []error) {
	switch {
	case webhook:
		cc, errs := r.Webhook.clientConfig()
		return &apiextensionsv1.CustomResourceConversion{
			Strategy: apiextensionsv1.WebhookConverter,
			Webhook:  &apiextensionsv1.WebhookConversion{ClientConfig: cc, ConversionReviewVersions: []string{"v1"}},
		}, errs
	case !r.Webhook.IsZero() && len(r.Versions) > 0:
		return nil, []error{errors.New("kube: Resource.ConversionWebhook is set, but every version encodes as the hub does, so the API server converts them without a webhook (strategy None): leave it out")}
	}
	return &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}, nil
}

// schemaResource is v as crdschema reflects it, with the hub's
// reflection options. The Resource's names are checked once, with its own
// version, so v's are placeholders, replaced.
func (v Version) schemaResource(hub crdschema.Resource) crdschema.Resource {
	r := shapeOf(hub, v.Spec, v.Status, v.Object, nil)
	r.Rules = v.Rules
	r.Columns = v.Columns
	r.SelectableFields = v.SelectableFields
	r.Description = v.Description
	return r
}

// shapeOf is the crdschema.Resource of the types alone, with placeholder
// names, reflected with hub's OmitUpstreamDescriptions and
// EmbeddedObjectMeta, and of rules only the whole schemas of the types that
// encode themselves (kube.Schema), which can't be reflected without them:
// its schema is their fields and types, which two versions that encode
// alike share.
func shapeOf(hub crdschema.Resource, spec, status, object reflect.Type, rules []crdschema.Rules) crdschema.Resource {
	var schemas []crdschema.Rules
	for _, r := range rules {
		if r.Schema != nil {
			schemas = append(schemas, crdschema.Rules{Type: r.Type, Schema: r.Schema})
		}
	}
	return crdschema.Resource{
		Group: "versions.kube.invalid", Version: "v1", Kind: "Version", Plural: "versions", Scope: "Namespaced",
		OmitUpstreamDescriptions: hub.OmitUpstreamDescriptions, EmbeddedObjectMeta: hub.EmbeddedObjectMeta,
		Spec: spec, Status: status, Object: object, Rules: schemas,
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
