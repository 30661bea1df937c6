package kube

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// CRD returns the resource's CustomResourceDefinition: one version, served
// and stored, with the status subresource, and a schema reflected from Spec
// and Status and constrained by Rules.
//
// The CRD is named <Plural>.<Group>. Its singular name is Singular, or
// Kind in lower case, its list kind is Kind with List after it, and it has
// the ShortNames, Categories and printer Columns given. The schema's root has
// apiVersion and kind (strings, described as the API server describes
// every object's), metadata (an object, which the API server fills in), a
// required spec, and status; Description describes the root.
//
// Each Go type has the schema of its encoding by encoding/json:
//
//	bool                              type: boolean
//	int8 to int32, uint8, uint16      type: integer, format: int32
//	int, int64, uint, uint32, uint64  type: integer, format: int64
//	float32, float64                  type: number
//	string                            type: string
//	[]byte                            type: string, format: byte
//	a slice or an array               type: array, with items
//	map[K]V, K a string, an integer or an encoding.TextMarshaler
//	                                  type: object, with additionalProperties
//	a struct                          type: object, a property for each field encoding/json writes
//	*T                                T's schema
//	metav1.Time, metav1.MicroTime     type: string, format: date-time
//	metav1.Duration                   type: string
//	intstr.IntOrString                x-kubernetes-int-or-string, anyOf integer and string
//	resource.Quantity                 the same, with the pattern of a quantity the API server's own types carry
//	runtime.RawExtension              type: object, x-kubernetes-preserve-unknown-fields
//	metav1.ObjectMeta, in a template  type: object, x-kubernetes-preserve-unknown-fields
//	an encoding.TextMarshaler         type: string
//	a type with a Schema              that schema
//
// A struct's properties are named by their json tags, and follow
// encoding/json's rules: a field tagged "-" or unexported is left out, an
// embedded struct's fields are inlined, the shallowest field of a name wins,
// and a field tagged ",string" is a string, whose Default and Enum values
// are encoded as strings too. A field is required unless its
// tag has omitempty or omitzero, it has a Default, or it is promoted
// through an embedded pointer. A field that encoding/json may write as
// null is nullable, unless it has a Default: a nil pointer, slice or map
// (a pointer tagged ",string" too) unless it is omitempty or omitzero, and
// a zero metav1.Time, metav1.MicroTime or runtime.RawExtension, or a pointer
// to one, unless it is omitzero (omitempty never leaves out a struct). The
// API server refuses a null where the field isn't nullable: a create drops
// it and then finds a required field missing, and an apply refuses it as
// the wrong type. An item of a slice or map of these is nullable too.
//
// A field whose value is constrained isn't nullable, whatever its type: one
// with a constraint of its own other than Description, Default, ListSet,
// ListMap, Atomic, PreserveUnknownFields, EmbeddedResource, Items and
// MapValues, one whose type has ValueRules, and one made Required. The API
// server skips every constraint on a null, so a nullable field with
// MinItems(2) would take null; a null there is dropped instead, and a
// required field is then missing ("Required value"), as the Go value that
// wrote it breaks the constraint too. Tag the field omitempty, or give it
// Nullable, to keep the null. An item or map value with constraints on its
// value is likewise not nullable. A condition's lastTransitionTime, a
// metav1.Time that is required in metav1.Condition (also embedded) or in a
// type of the user's with the fields type, status and lastTransitionTime,
// stays not nullable, as Kubernetes' ValidateConditions requires it. A
// nullable field's CEL Validation isn't run on a null, as the API server
// skips null values.
//
// A struct of Kubernetes' own API (k8s.io/api's core, apps, batch,
// networking, policy, rbac, autoscaling/v2 and storage, and apimachinery's
// meta/v1), such as a corev1.PodTemplateSpec, Container or
// metav1.LabelSelector, has more: what the API server's own OpenAPI schema
// of the release of k8s.io/api in go.mod says of it, from a table in kube.
// Its fields have their descriptions, list types and list-map keys (a pod's
// containers merge by name under server-side apply), map types (a
// LabelSelector is atomic), formats, enums and +default values, and are
// required as the API server requires them, whatever their json tags say;
// a field it requires isn't nullable. Rules on these types and their fields
// apply on top.
//
// A metav1.ObjectMeta below the root, as in a pod template, keeps every
// field it is given: with a bare type: object, the API server would prune
// its labels and annotations, and refuse them under fieldValidation=Strict.
//
// It returns one error that names every mistake it finds, joined with
// errors.Join: a missing or malformed Group, Version, Kind or Plural (as the
// API server checks them, with the list kind KindList, the name
// <Plural>.<Group>, and no group under k8s.io or kubernetes.io), a
// malformed Singular, short name or category, a Scope that is neither
// Namespaced nor Cluster; a Column that names no field of the Object, and
// two Columns of one name;
// a type that implements json.Marshaler and has no Schema, or an interface,
// unless its field has PreserveUnknownFields; a map whose keys
// encoding/json can't encode, a channel or a function; a type that
// contains itself; a constraint that doesn't fit its field's type or its
// ValueRules' type; constraints no value can pass (a Minimum above the
// Maximum, a MinLength, MinItems or MinProperties above its Max); a Default
// its field's own bounds, MultipleOf, lengths, Pattern, Enum or counts
// refuse, which the API server would refuse the CRD for; a Format the API
// server doesn't know; two Field rules for one field that set one keyword
// differently, or Required and Optional; a CEL rule without a Rule or with
// an unknown Reason; a rule
// that names no field, a rule on a field that isn't encoded, Rules for a
// type that appears nowhere, and two Rules for one type. With an error, the
// CRD is nil.
//
// CRD doesn't compile CEL rules: the API server does when the CRD is
// applied.
func (r Resource[Spec, Status]) CRD() (*apiextensionsv1.CustomResourceDefinition, error) {
	b := newReflector(r.Rules)
	b.omitUpstreamDescriptions = r.OmitUpstreamDescriptions
	b.errs = append(b.errs, r.checkNames()...)

	spec := b.schema(reflect.TypeFor[Spec](), "spec")
	status := b.schema(reflect.TypeFor[Status](), "status")
	columns := r.columns(b)
	doc := b.rootDescriptions()
	if err := b.finish(); err != nil {
		return nil, err
	}
	singular := r.Singular
	if singular == "" {
		singular = strings.ToLower(r.Kind)
	}

	return &apiextensionsv1.CustomResourceDefinition{
		TypeMeta: metav1.TypeMeta{
			APIVersion: apiextensionsv1.SchemeGroupVersion.String(),
			Kind:       "CustomResourceDefinition",
		},
		ObjectMeta: metav1.ObjectMeta{Name: r.Plural + "." + r.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: r.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural:     r.Plural,
				Singular:   singular,
				ShortNames: slices.Clone(r.ShortNames),
				Kind:       r.Kind,
				ListKind:   r.Kind + "List",
				Categories: slices.Clone(r.Categories),
			},
			Scope: apiextensionsv1.ResourceScope(r.Scope),
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name:    r.Version,
				Served:  true,
				Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{
					OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Description: r.Description,
						Type:        "object",
						Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"apiVersion": {Type: "string", Description: doc["apiVersion"]},
							"kind":       {Type: "string", Description: doc["kind"]},
							"metadata":   {Type: "object"},
							"spec":       spec,
							"status":     status,
						},
						Required: []string{"spec"},
					},
				},
				Subresources: &apiextensionsv1.CustomResourceSubresources{
					Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
				},
				AdditionalPrinterColumns: columns,
			}},
		},
	}, nil
}

// columns are the Resource's printer columns, and their errors, added to
// b's.
func (r Resource[Spec, Status]) columns(b *reflector) []apiextensionsv1.CustomResourceColumnDefinition {
	obj := reflect.TypeFor[Object[Spec, Status]]()
	var out []apiextensionsv1.CustomResourceColumnDefinition
	for i, c := range r.Columns {
		switch {
		case c.obj == nil:
			b.errs = append(b.errs, fmt.Errorf("kube: Resource.Columns[%d] is a zero Column: make the columns with kube.Columns", i))
		case c.err != nil:
			b.errs = append(b.errs, c.err)
		case c.obj != obj:
			b.errs = append(b.errs, fmt.Errorf("kube: Resource.Columns[%d] %q names a field of a %s, not of the resource's %s: give Columns a *%s", i, c.col.Name, c.obj, obj, obj))
		case slices.ContainsFunc(out, func(o apiextensionsv1.CustomResourceColumnDefinition) bool { return o.Name == c.col.Name }):
			b.errs = append(b.errs, fmt.Errorf("kube: Resource.Columns[%d]: two columns are named %q", i, c.col.Name))
		default:
			out = append(out, c.col)
		}
	}
	return out
}

// checkNames reports a missing or malformed Group, Version, Kind or
// Plural, by the API server's own rules for a CRD, and a bad Scope.
func (r Resource[Spec, Status]) checkNames() []error {
	var errs []error
	check := func(field, value, example string, problems []string) {
		if value == "" {
			errs = append(errs, fmt.Errorf("kube: Resource.%s is missing: give one, such as %s", field, example))
			return
		}
		for _, p := range problems {
			errs = append(errs, fmt.Errorf("kube: Resource.%s %q: %s", field, value, p))
		}
	}

	var groupProblems []string
	if r.Group != "" {
		groupProblems = validation.IsDNS1123Subdomain(r.Group)
		if len(strings.Split(r.Group, ".")) < 2 {
			groupProblems = append(groupProblems, "should be a domain with at least one dot")
		}
	}
	check("Group", r.Group, "cache.example.com", groupProblems)
	check("Version", r.Version, "v1alpha1", validation.IsDNS1035Label(r.Version))
	check("Kind", r.Kind, "Memcached", validation.IsDNS1035Label(strings.ToLower(r.Kind)))
	check("Plural", r.Plural, "memcacheds", validation.IsDNS1035Label(r.Plural))
	if r.Singular != "" {
		for _, p := range validation.IsDNS1035Label(r.Singular) {
			errs = append(errs, fmt.Errorf("kube: Resource.Singular %q: %s", r.Singular, p))
		}
	}
	for i, n := range r.ShortNames {
		for _, p := range validation.IsDNS1035Label(n) {
			errs = append(errs, fmt.Errorf("kube: Resource.ShortNames[%d] %q: %s", i, n, p))
		}
	}
	for i, n := range r.Categories {
		for _, p := range validation.IsDNS1035Label(n) {
			errs = append(errs, fmt.Errorf("kube: Resource.Categories[%d] %q: %s", i, n, p))
		}
	}
	if r.Group != "" && isProtectedGroup(r.Group) {
		errs = append(errs, fmt.Errorf("kube: Resource.Group %q: a group under k8s.io or kubernetes.io is Kubernetes' own, and the API server accepts its CRD only with an api-approved.kubernetes.io annotation, which CRD doesn't set", r.Group))
	}
	if r.Kind != "" && len(validation.IsDNS1035Label(strings.ToLower(r.Kind))) == 0 {
		if problems := validation.IsDNS1035Label(strings.ToLower(r.Kind + "List")); len(problems) > 0 {
			errs = append(errs, fmt.Errorf("kube: Resource.Kind %q: its list kind %sList %s", r.Kind, r.Kind, strings.Join(problems, ", ")))
		}
	}
	if r.Plural != "" && r.Group != "" {
		if name := r.Plural + "." + r.Group; len(name) > validation.DNS1123SubdomainMaxLength {
			errs = append(errs, fmt.Errorf("kube: the CRD's name %q, Resource.Plural and Resource.Group, is %d characters: it must be no more than %d", name, len(name), validation.DNS1123SubdomainMaxLength))
		}
	}
	if r.Scope != Namespaced && r.Scope != Cluster {
		errs = append(errs, fmt.Errorf("kube: Resource.Scope %q: must be kube.Namespaced or kube.Cluster", r.Scope))
	}
	return errs
}

// isProtectedGroup reports whether group is under k8s.io or kubernetes.io,
// as the API server decides (apihelpers.IsProtectedCommunityGroup).
func isProtectedGroup(group string) bool {
	for _, d := range []string{"k8s.io", "kubernetes.io"} {
		if group == d || strings.HasSuffix(group, "."+d) {
			return true
		}
	}
	return false
}
