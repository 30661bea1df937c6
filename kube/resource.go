package kube

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Scope is whether a resource's objects are in a namespace.
type Scope string

// The two scopes of a resource, as a CRD's spec.scope names them.
const (
	Namespaced Scope = "Namespaced"
	Cluster    Scope = "Cluster"
)

// Resource declares a custom resource of one version, whose objects have a
// spec of type Spec and a status of type Status.
type Resource[Spec, Status any] struct {
	Group   string // such as cache.example.com
	Version string // such as v1alpha1
	Kind    string // such as Memcached
	Plural  string // such as memcacheds
	Scope   Scope

	// Rules constrain the fields of Spec, of Status, and of the types they
	// hold.
	Rules []TypeRules

	// Singular is the resource's singular name, which kubectl accepts, such
	// as memcached; by default Kind in lower case.
	Singular string
	// ShortNames are short names kubectl accepts, such as mc
	// (controller-gen's +kubebuilder:resource:shortName).
	ShortNames []string
	// Categories are groups of resources the resource is in, such as all,
	// which kubectl get all lists (+kubebuilder:resource:categories).
	Categories []string
	// Columns are what kubectl get shows for each object, besides its
	// name, made with Columns from an Object[Spec, Status]. With none,
	// kubectl shows the name and the age; with some, only the name and
	// them, so give an Age column of &obj.CreationTimestamp to keep it.
	Columns []Column

	// SelectableFields are fields of the object, besides metadata.name and
	// metadata.namespace, that a field selector may name, such as
	// kubectl get --field-selector spec.color=blue
	// (controller-gen's +kubebuilder:selectablefield), made with
	// SelectableFields from an Object[Spec, Status]. Each is a string, an
	// integer or a boolean; a CRD has at most 8. The API server serves
	// them from Kubernetes 1.32.
	SelectableFields []SelectableField

	// Description describes the resource, as kubectl explain <plural>
	// shows it: the description of the CRD schema's root. "" leaves it
	// out. The spec and the status are described by their types'
	// TypeRules.Description, such as kube.Rules(&spec).Description("…").
	Description string

	// Annotations and Labels are the CRD object's own metadata
	// (controller-gen's +kubebuilder:metadata:annotations and labels), such
	// as cert-manager's cert-manager.io/inject-ca-from, which has the CA
	// injector fill in a conversion webhook's caBundle. An annotation
	// api-approved.kubernetes.io, a link to the approved API review (or
	// "unapproved, ..." and why), lets Group be one under k8s.io or
	// kubernetes.io, as the API server requires. CRD checks the keys and
	// values as the API server checks an object's. Nil, the default, sets
	// none.
	Annotations map[string]string
	Labels      map[string]string

	// EmbeddedObjectMeta gives a metav1.ObjectMeta below the root, as in a
	// pod template, a schema of its name, namespace, labels, annotations
	// and finalizers (controller-gen's crd:generateEmbeddedObjectMeta), so
	// that a CEL rule may read them, such as
	// self.metadata.namespace == 'jobs' on a template: without it the
	// metadata keeps any field (see CRD), a CEL rule can't name one, and the
	// API server refuses the CRD. With it, the API server prunes any other
	// field of the metadata, such as generateName, and refuses it under
	// fieldValidation=Strict. false, the default, keeps every field.
	EmbeddedObjectMeta bool

	// OmitUpstreamDescriptions leaves out the descriptions that Kubernetes'
	// own embedded types carry upstream (see CRD), as controller-gen's
	// crd:maxDescLen=0 does for every description, to keep a CRD small: one
	// embedding a corev1.PodTemplateSpec is about a third of the size
	// without them. kubectl explain then shows no description for those
	// fields. The descriptions given by Description and by Rules are kept,
	// and so are apiVersion's and kind's. false, the default, keeps them.
	OmitUpstreamDescriptions bool

	// Versions are the resource's other versions, besides Version, each
	// with its own Go types and conversions to and from Object[Spec,
	// Status], made with NewVersion (see Version). Version is the
	// conversion hub, and the one the Controller watches and its
	// Reconciler sees; it is also the storage version, unless one of
	// Versions is. Nil, the default, is a resource of one version.
	Versions []Version[Spec, Status]

	// ConversionWebhook is where the API server sends the ConversionReviews
	// of a resource whose Versions convert through a webhook: the App's
	// Service, or a URL for a local run. See WebhookClient.
	ConversionWebhook WebhookClient

	// StatusConventions has the controller write the status fields that
	// Flux (kstatus), Argo CD and kubectl wait read, so that the
	// Reconciler needn't: status.observedGeneration, and the conditions
	// Ready, Reconciling and Stalled, each with its own
	// observedGeneration, set by each reconcile's outcome, beside the
	// Reconciler's status in the same apply, applied only when they
	// change. Ready is True after a reconcile that succeeded with no
	// Result.Waiting, with or without a Result.After (a time-driven
	// controller's next run is no work left undone); False with
	// Reconciling True after one that returned a Waiting (ReasonWaiting)
	// or an error being retried (ReasonReconcileFailed);
	// and False with Stalled True after an error marked with Terminal
	// (ReasonTerminalError), which isn't retried. The CRD defaults the
	// status of Version to observedGeneration 0, so an object reads as
	// in progress from its creation until its first reconcile is done. Status must be a struct with a []metav1.Condition encoded
	// as conditions and an int64 encoded as observedGeneration; CRD, and
	// so NewController, return an error otherwise. A Reconciler that sets
	// Ready, Reconciling or Stalled itself, or an observedGeneration
	// other than the object's, fails its reconcile with a Terminal error
	// naming them; its other conditions are its own. A recovered panic
	// leaves the status as it was. See the docs' "Status conventions".
	// false, the default, writes only the Reconciler's status.
	StatusConventions bool
}

// GVR is the resource's group, version and plural name, such as
// cache.example.com/v1alpha1, Resource=memcacheds.
func (r Resource[Spec, Status]) GVR() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Plural}
}

// Object is one object of a Resource. It is a plain struct: it needs no
// DeepCopy, no scheme and no runtime.Object. The controller decodes each
// object from its cache into a new Object, which is the Reconciler's own
// copy.
type Object[Spec, Status any] struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   Spec   `json:"spec"`
	Status Status `json:"status,omitempty"`
}
