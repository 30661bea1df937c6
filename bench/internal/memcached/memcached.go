// Package memcached is the spec's "In use" Memcached operator, as the
// converge benchmark runs it on kube: its types, its Resource and its
// Reconciler, copied from the spec so that what is measured doesn't change
// with the example App (which adds a finalizer the kubebuilder book's
// controller doesn't have).
package memcached

import (
	"context"
	"regexp"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus/kube"
)

// FieldManager is the field manager every peer applies the Deployment and
// the status with, and the kube peer's Settings.Name.
const FieldManager = "memcached-controller"

// Finalizer is the finalizer every peer adds to each object when the
// converge benchmark runs with -finalizer, as the operator-sdk tutorial's
// Memcached controller adds one (the kubebuilder book's has none). Its
// clean-up does nothing: what is measured is the add.
const Finalizer = "cache.example.com/finalizer"

// Image is the image every benchmark object asks for, the book's.
const Image = "memcached:1.6.26-alpine3.19"

// MemcachedSpec is what a Memcached declares.
type MemcachedSpec struct {
	Size  int32  `json:"size"`
	Image string `json:"image"`
}

// MemcachedStatus is what the controller reports.
type MemcachedStatus struct {
	ReadyReplicas int32              `json:"readyReplicas,omitempty"`
	Conditions    []metav1.Condition `json:"conditions,omitempty"`
}

var (
	spec   MemcachedSpec
	status MemcachedStatus

	// Memcached is memcacheds.cache.example.com, v1alpha1, with the spec's
	// Rules. Its CRD() is what the benchmark installs for every peer.
	Memcached = kube.Resource[MemcachedSpec, MemcachedStatus]{
		Group:   "cache.example.com",
		Version: "v1alpha1",
		Kind:    "Memcached",
		Plural:  "memcacheds",
		Scope:   kube.Namespaced,
		Rules: []kube.TypeRules{
			kube.Rules(&spec,
				kube.Field(&spec.Size).Minimum(1).Maximum(3).Description("How many memcached pods run."),
				kube.Field(&spec.Image).Pattern(regexp.MustCompile(`^memcached:`)).Default(Image),
			),
			kube.Rules(&status,
				kube.Field(&status.Conditions).ListMap("type"),
			),
		},
	}
)

// Reconciler is the spec's: it applies the Deployment a Memcached controls,
// and reports its ready replicas and Available.
type Reconciler struct{ Kube kubernetes.Interface }

// Reconcile applies m's Deployment with server-side apply, labelled with
// kube.ShardLabels(ctx) (none unless Settings.Sharding.CacheShare is on, so
// that with it the Deployment lands in its owner's member's cache without
// a write of the member's), and returns Available True, or Unknown and the
// error when the apply fails.
func (r Reconciler) Reconcile(ctx context.Context, m kube.Object[MemcachedSpec, MemcachedStatus]) (kube.Result[MemcachedStatus], error) {
	d, err := r.Kube.AppsV1().Deployments(m.Namespace).Apply(ctx,
		Deployment(m.APIVersion, m.Kind, m.Name, m.Namespace, string(m.UID), m.Spec.Size, m.Spec.Image).
			WithLabels(kube.ShardLabels(ctx)),
		metav1.ApplyOptions{FieldManager: FieldManager, Force: true},
	)
	st := m.Status
	if err != nil {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: "Available", Status: metav1.ConditionUnknown, Reason: "ApplyFailed",
			Message: err.Error(), ObservedGeneration: m.Generation,
		})
		return kube.Result[MemcachedStatus]{Status: &st}, err
	}
	st.ReadyReplicas = d.Status.ReadyReplicas
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: "Available", Status: metav1.ConditionTrue, Reason: "DeploymentApplied",
		ObservedGeneration: m.Generation,
	})
	return kube.Result[MemcachedStatus]{Status: &st}, nil
}

// Deployment is the apply configuration of the Deployment a Memcached
// controls, as the spec's Reconciler builds it: size replicas of image, with
// a controller owner reference to the Memcached.
func Deployment(apiVersion, kind, name, namespace, uid string, size int32, image string) *appsv1ac.DeploymentApplyConfiguration {
	labels := map[string]string{"app": "memcached", "memcached": name}
	return appsv1ac.Deployment(name, namespace).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(apiVersion).WithKind(kind).WithName(name).WithUID(types.UID(uid)).
			WithController(true).WithBlockOwnerDeletion(true)).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(size).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(labels).
				WithSpec(corev1ac.PodSpec().WithContainers(
					corev1ac.Container().WithName("memcached").WithImage(image)))))
}
