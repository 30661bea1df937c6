package crdschema

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Resource is what CRD needs of a kube.Resource[Spec, Status]: its names
// and options as the user gave them, its Rules and Columns, and the types
// Spec, Status and Object[Spec, Status].
type Resource struct {
	Group, Version, Kind, Plural, Scope string

	Singular   string
	ShortNames []string
	Categories []string
	// Annotations and Labels are the CRD's own metadata.
	Annotations, Labels map[string]string

	Rules   []Rules
	Columns []Column
	// SelectableFields are the fields a field selector may name.
	SelectableFields []Selectable

	Description              string
	OmitUpstreamDescriptions bool
	EmbeddedObjectMeta       bool

	Spec, Status, Object reflect.Type
}

// CRD is the CustomResourceDefinition of r, as kube.Resource.CRD
// documents it, or one error naming every mistake found, with a nil CRD.
func CRD(r Resource) (*apiextensionsv1.CustomResourceDefinition, error) {
	b := newReflector(r.Rules)
	b.omitUpstreamDescriptions = r.OmitUpstreamDescriptions
	b.embeddedObjectMeta = r.EmbeddedObjectMeta
	b.errs = append(b.errs, r.checkNames()...)

	spec := b.schema(r.Spec, "spec")
	status := b.schema(r.Status, "status")
	columns := r.columns(b)
	doc := b.rootDescriptions()
	rootRules := b.root(r.Object)
	selectable := r.selectable(b, apiextensionsv1.JSONSchemaProps{Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": spec, "status": status}})
	root := &apiextensionsv1.JSONSchemaProps{
		Description: r.Description,
		Type:        "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"apiVersion": {Type: "string", Description: doc["apiVersion"]},
			"kind":       {Type: "string", Description: doc["kind"]},
			"metadata":   {Type: "object"},
			"spec":       spec,
			"status":     status,
		},
		Required:     []string{"spec"},
		XValidations: rootRules,
	}
	b.errs = append(b.errs, checkFieldPaths(root)...)
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
		ObjectMeta: metav1.ObjectMeta{Name: r.Plural + "." + r.Group, Annotations: maps.Clone(r.Annotations), Labels: maps.Clone(r.Labels)},
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
				Schema:  &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: root},
				Subresources: &apiextensionsv1.CustomResourceSubresources{
					Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
				},
				AdditionalPrinterColumns: columns,
				SelectableFields:         selectable,
			}},
		},
	}, nil
}

// root is the CEL rules of the Rules of the Resource's Object, if it has
// any, which constrain the whole object: in them self is the object, and
// self.metadata.name its name (the API server lets a root rule read
// metadata's name and generateName; a rule's FieldPath can't point below
// .metadata, checkFieldPaths). The root takes nothing else, as its
// metadata is the API server's and its spec and status have their own
// types' Rules; anything else is reported.
func (b *reflector) root(obj reflect.Type) []apiextensionsv1.ValidationRule {
	r := b.rules[obj]
	if r == nil {
		return nil
	}
	b.used[obj] = true
	var other []string
	if len(r.Fields) > 0 {
		other = append(other, "Field rules")
	}
	if r.Description != nil {
		other = append(other, "a Description (give Resource.Description)")
	}
	if len(r.Values) > 0 || r.Schema != nil {
		other = append(other, "ValueRules or a Schema")
	}
	if len(other) > 0 {
		b.errs = append(b.errs, fmt.Errorf("kube: Rules for %s: the object itself takes only Validation and XValidation, CEL rules of the whole object such as \"self.metadata.name.size() <= 52\", not %s: constrain the spec and status in Rules for their own types", obj, joinWords(other)))
	}
	return slices.Clone(r.Validations)
}

// columns are the Resource's printer columns, and their errors, added to
// b's.
func (r Resource) columns(b *reflector) []apiextensionsv1.CustomResourceColumnDefinition {
	obj := r.Object
	var out []apiextensionsv1.CustomResourceColumnDefinition
	for i, c := range r.Columns {
		switch {
		case c.Obj == nil:
			b.errs = append(b.errs, fmt.Errorf("kube: Resource.Columns[%d] is a zero Column: make the columns with kube.Columns", i))
		case c.Err != nil:
			b.errs = append(b.errs, c.Err)
		case c.Obj != obj:
			b.errs = append(b.errs, fmt.Errorf("kube: Resource.Columns[%d] %q names a field of a %s, not of the resource's %s: give Columns a *%s", i, c.Def.Name, c.Obj, obj, obj))
		case slices.ContainsFunc(out, func(o apiextensionsv1.CustomResourceColumnDefinition) bool { return o.Name == c.Def.Name }):
			b.errs = append(b.errs, fmt.Errorf("kube: Resource.Columns[%d]: two columns are named %q", i, c.Def.Name))
		default:
			out = append(out, c.Def)
		}
	}
	return out
}

// checkNames reports a missing or malformed Group, Version, Kind or
// Plural, by the API server's own rules for a CRD, and a bad Scope.
func (r Resource) checkNames() []error {
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
	if _, approved := r.Annotations[apiextensionsv1.KubeAPIApprovedAnnotation]; r.Group != "" && isProtectedGroup(r.Group) && !approved {
		errs = append(errs, fmt.Errorf("kube: Resource.Group %q: a group under k8s.io or kubernetes.io is Kubernetes' own, and the API server accepts its CRD only with an %s annotation in Resource.Annotations: a link to its API review, or \"unapproved\" and why", r.Group, apiextensionsv1.KubeAPIApprovedAnnotation))
	}
	for _, e := range apivalidation.ValidateAnnotations(r.Annotations, field.NewPath("Resource.Annotations")) {
		errs = append(errs, fmt.Errorf("kube: %s", e.Error()))
	}
	for _, e := range metav1validation.ValidateLabels(r.Labels, field.NewPath("Resource.Labels")) {
		errs = append(errs, fmt.Errorf("kube: %s", e.Error()))
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
	if r.Scope != "Namespaced" && r.Scope != "Cluster" {
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
