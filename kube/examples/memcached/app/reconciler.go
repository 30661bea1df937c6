package app

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus/kube"
)

// FieldManager is the controller's field manager: the Settings.Name Init
// gives the Controller, so it applies the Memcached's status and finalizer,
// and the Reconciler applies the Deployment, under one name. It also names
// the Lease.
const FieldManager = "memcached-controller"

// Reconciler applies the Deployment a Memcached controls, and reports its
// ready replicas and an Available condition.
type Reconciler struct{ Kube kubernetes.Interface }

// Reconcile applies m's Deployment with server-side apply: m.Spec.Size
// replicas of m.Spec.Image, with a controller owner reference to m, so the
// Deployment is garbage collected with m and a change to it reconciles m
// again. The returned status has the Deployment's ready replicas and
// Available True. The first apply of each generation of m's spec is a
// Normal Event on m, DeploymentApplied, which kubectl describe shows; a
// failed reconcile is a Warning Event the controller records itself. When the apply fails, it returns the error and a status
// whose Available is Unknown with the error as its message, so the failure
// shows in kubectl get while the controller retries.
func (r Reconciler) Reconcile(ctx context.Context, m Object) (kube.Result[MemcachedStatus], error) {
	labels := map[string]string{"app": "memcached", "memcached": m.Name}
	d, err := r.Kube.AppsV1().Deployments(m.Namespace).Apply(ctx,
		appsv1ac.Deployment(m.Name, m.Namespace).
			WithOwnerReferences(Memcached.ControllerReference(m)).
			WithSpec(appsv1ac.DeploymentSpec().
				WithReplicas(m.Spec.Size).
				WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
				WithTemplate(corev1ac.PodTemplateSpec().
					WithLabels(labels).
					WithSpec(corev1ac.PodSpec().WithContainers(
						corev1ac.Container().WithName("memcached").WithImage(m.Spec.Image))))),
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
	if c := meta.FindStatusCondition(st.Conditions, "Available"); c == nil || c.ObservedGeneration != m.Generation {
		kube.RecorderFrom(ctx).Normal(m, "DeploymentApplied", "Apply",
			fmt.Sprintf("applied Deployment %s: %d replicas of %s", d.Name, m.Spec.Size, m.Spec.Image))
	}
	st.ReadyReplicas = d.Status.ReadyReplicas
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: "Available", Status: metav1.ConditionTrue, Reason: "DeploymentApplied",
		ObservedGeneration: m.Generation,
	})
	return kube.Result[MemcachedStatus]{Status: &st}, nil
}
