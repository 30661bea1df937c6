package kube

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
)

// ControllerReference returns the controller owner reference of obj, an
// object of r, for a server-side apply of a resource obj controls: its
// apiVersion (r's Group/Version) and kind (r's Kind), whatever obj's own
// TypeMeta holds, its name and uid, Controller true, so that Owns
// reconciles obj when the resource changes, and BlockOwnerDeletion true,
// so that a foreground deletion of obj waits for the resource to go, as
// client-go's metav1.NewControllerRef sets them. Use it as
// appsv1ac.Deployment(name, ns).WithOwnerReferences(r.ControllerReference(obj)).
func (r Resource[Spec, Status]) ControllerReference(obj Object[Spec, Status]) *metav1ac.OwnerReferenceApplyConfiguration {
	return controllerReference(metav1.GroupVersion{Group: r.Group, Version: r.Version}.String(), r.Kind, &obj.ObjectMeta)
}

// ControllerReference returns the controller owner reference of obj, an
// object of k, as Resource.ControllerReference does: apiVersion and kind
// from k's GVR and Kind, name and uid from obj, Controller and
// BlockOwnerDeletion true. A T whose pointer isn't a metav1.Object, which
// NewKindController refuses, gives a reference with no name and no uid,
// which the API server refuses.
func (k Kind[T]) ControllerReference(obj T) *metav1ac.OwnerReferenceApplyConfiguration {
	m, _ := any(&obj).(metav1.Object)
	if m == nil {
		m = &metav1.ObjectMeta{}
	}
	return controllerReference(k.GVR.GroupVersion().String(), k.Kind, m)
}

// ControllerRef is ControllerReference as a metav1.OwnerReference, for a
// resource obj controls that is created with Create or updated with
// Update rather than applied, such as a Job:
// job.OwnerReferences = append(job.OwnerReferences, r.ControllerRef(obj)).
// It is metav1.NewControllerRef's reference: the same apiVersion, kind,
// name, uid, Controller and BlockOwnerDeletion.
func (r Resource[Spec, Status]) ControllerRef(obj Object[Spec, Status]) metav1.OwnerReference {
	return *metav1.NewControllerRef(&obj.ObjectMeta, schema.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind})
}

// ControllerRef is Kind.ControllerReference as a metav1.OwnerReference,
// as Resource.ControllerRef is, for a resource created with Create.
func (k Kind[T]) ControllerRef(obj T) metav1.OwnerReference {
	m, _ := any(&obj).(metav1.Object)
	if m == nil {
		m = &metav1.ObjectMeta{}
	}
	return *metav1.NewControllerRef(m, k.GVR.GroupVersion().WithKind(k.Kind))
}

func controllerReference(apiVersion, kind string, m metav1.Object) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(apiVersion).
		WithKind(kind).
		WithName(m.GetName()).
		WithUID(m.GetUID()).
		WithController(true).
		WithBlockOwnerDeletion(true)
}
