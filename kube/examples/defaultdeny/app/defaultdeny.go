// Package app is the default-deny controller, a controller of a built-in
// kind: it gives every Namespace a NetworkPolicy,
// "default-deny", that denies all ingress to the Namespace's pods, and
// puts it back when it is changed or deleted. The Namespace owns the
// policy, so it goes with its Namespace.
//
// cmd/defaultdeny runs it with humus.Main; ../deploy holds its
// ServiceAccount, RBAC and Deployment.
package app

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus/kube"
)

// FieldManager is the controller's field manager, the Settings.Name Init
// gives the Controller, and so its Lease's name.
const FieldManager = "default-deny"

// PolicyName is the name of the NetworkPolicy each Namespace gets.
const PolicyName = "default-deny"

// Namespaces is the built-in kind the controller reconciles: core/v1
// namespaces, which are cluster-scoped.
var Namespaces = kube.Kind[corev1.Namespace]{
	GVR:   corev1.SchemeGroupVersion.WithResource("namespaces"),
	Kind:  "Namespace",
	Scope: kube.Cluster,
}

// DefaultDeny applies each Namespace's default-deny NetworkPolicy.
type DefaultDeny struct{ Kube kubernetes.Interface }

// Reconcile applies ns's NetworkPolicy PolicyName with server-side apply,
// forcing, under FieldManager: it selects every pod of ns, lists Ingress as
// its policy type and allows no ingress. Its controller owner reference is
// ns, so a change to the policy reconciles ns again, and the garbage
// collector deletes it with ns. The apply's error is returned, which
// retries ns with backoff. (A Namespace being deleted is never handed to
// Reconcile: a controller without Finalize leaves such objects alone.)
func (r DefaultDeny) Reconcile(ctx context.Context, ns corev1.Namespace) (time.Duration, error) {
	_, err := r.Kube.NetworkingV1().NetworkPolicies(ns.Name).Apply(ctx,
		networkingv1ac.NetworkPolicy(PolicyName, ns.Name).
			WithOwnerReferences(metav1ac.OwnerReference().
				WithAPIVersion("v1").WithKind("Namespace").WithName(ns.Name).WithUID(ns.UID).
				WithController(true)).
			WithSpec(networkingv1ac.NetworkPolicySpec().
				WithPodSelector(metav1ac.LabelSelector()).
				WithPolicyTypes(networkingv1.PolicyTypeIngress)),
		metav1.ApplyOptions{FieldManager: FieldManager, Force: true},
	)
	return 0, err
}
