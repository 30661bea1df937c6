package kube

// upstreamgen starts the local control plane, so it lives in the module of
// kube's tests against it (internal/controlplanetests), which kube's own
// go.mod needn't require.
//go:generate go -C internal/controlplanetests run ./cmd/upstreamgen -o ../upstream/types.json.gz

import (
	"errors"
	"reflect"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/z5labs/humus/kube/internal/crdschema"
)

// CRD returns the resource's CustomResourceDefinition: one version, served
// and stored, with the status subresource, and a schema reflected from Spec
// and Status and constrained by Rules. With Versions, it has every version,
// and spec.conversion, as Versions describes.
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
// LabelSelector is atomic), formats and +default values, and are required
// as the API server requires them, whatever their json tags say; a field
// it requires, or gives a +default, isn't nullable. Their enums (a pod's
// restartPolicy, a container's imagePullPolicy) are left out, as
// controller-gen leaves them out: a CRD made against one release's list
// would refuse a value a newer cluster's Pods accept, and the Pod's own
// validation checks it when the Pod is made. Rules on these types and
// their fields apply on top.
//
// A metav1.Condition, and the few other of Kubernetes' types whose Go
// source carries +kubebuilder:validation markers (PortStatus's and
// IngressPortStatus's error, ImageVolumeStatus's imageRef), has those
// validations too, as controller-gen emits them: a condition's status is
// True, False or Unknown, its reason 1 to 1024 characters of
// ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$, its type a qualified name of
// at most 316, its message at most 32768, and its observedGeneration 0 or
// more.
//
// Rules of the Resource's Object[Spec, Status] itself, such as
// kube.Rules(&obj).Validation("self.metadata.name.size() <= 52", "…"),
// are CEL rules of the whole object, on the schema's root, in which self
// is the object and self.metadata.name its name. The object takes only
// Validation and XValidation: the spec and the status are constrained by
// their own types' Rules.
//
// A metav1.ObjectMeta below the root, as in a pod template, keeps every
// field it is given: with a bare type: object, the API server would prune
// its labels and annotations, and refuse them under fieldValidation=Strict. With
// Resource.EmbeddedObjectMeta it has instead the properties name,
// namespace, labels, annotations and finalizers, and no other.
//
// It returns one error that names every mistake it finds, joined with
// errors.Join: a missing or malformed Group, Version, Kind or Plural (as the
// API server checks them, with the list kind KindList, the name
// <Plural>.<Group>, and no group under k8s.io or kubernetes.io without an
// api-approved.kubernetes.io annotation), an annotation or label the API
// server would refuse, a
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
// type that appears nowhere, two Rules for one type, and Rules of the
// Object with anything but CEL rules. With an error, the
// CRD is nil.
//
// CRD doesn't compile CEL rules: the API server does when the CRD is
// applied.
func (r Resource[Spec, Status]) CRD() (*apiextensionsv1.CustomResourceDefinition, error) {
	var crd *apiextensionsv1.CustomResourceDefinition
	var err error
	if r.versioned() {
		crd, err = r.versionedCRD()
	} else {
		crd, err = crdschema.CRD(r.schemaResource())
	}
	if !r.StatusConventions {
		return crd, err
	}
	// StatusConventions (conditions.go): the Status must hold its fields,
	// and the CRD defaults the status of its own Version to
	// observedGeneration 0.
	_, _, convErr := crdschema.StatusFields(reflect.TypeFor[Status]())
	if err != nil || convErr != nil {
		return nil, errors.Join(err, convErr)
	}
	if err := crdschema.DefaultStatus(crd, r.Version, reflect.TypeFor[Status]()); err != nil {
		return nil, err
	}
	return crd, nil
}

// schemaResource is r as crdschema reflects it, its own version alone.
func (r Resource[Spec, Status]) schemaResource() crdschema.Resource {
	return crdschema.Resource{
		Group: r.Group, Version: r.Version, Kind: r.Kind, Plural: r.Plural, Scope: string(r.Scope),
		Singular: r.Singular, ShortNames: r.ShortNames, Categories: r.Categories,
		Annotations: r.Annotations, Labels: r.Labels,
		Rules: schemaRules(r.Rules), Columns: schemaColumns(r.Columns), SelectableFields: schemaSelectable(r.SelectableFields),
		Description: r.Description, OmitUpstreamDescriptions: r.OmitUpstreamDescriptions,
		EmbeddedObjectMeta: r.EmbeddedObjectMeta,
		Spec:               reflect.TypeFor[Spec](), Status: reflect.TypeFor[Status](), Object: reflect.TypeFor[Object[Spec, Status]](),
	}
}

// schemaRules, schemaColumns and schemaSelectable are a Resource's or a
// VersionOptions' Rules, Columns and SelectableFields as crdschema has
// them.
func schemaRules(rs []TypeRules) []crdschema.Rules {
	out := make([]crdschema.Rules, len(rs))
	for i, tr := range rs {
		out[i] = tr.r
	}
	return out
}

func schemaColumns(cs []Column) []crdschema.Column {
	out := make([]crdschema.Column, len(cs))
	for i, c := range cs {
		out[i] = c.c
	}
	return out
}

func schemaSelectable(fs []SelectableField) []crdschema.Selectable {
	out := make([]crdschema.Selectable, len(fs))
	for i, f := range fs {
		out[i] = f.s
	}
	return out
}
