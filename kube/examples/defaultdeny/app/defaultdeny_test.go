package app_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/z5labs/humus/kube/examples/defaultdeny/app"
)

func TestReconcileAppliesADefaultDenyPolicyTheNamespaceOwns(t *testing.T) {
	kc := kubefake.NewClientset()
	ns := corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", UID: "6c1f0000-0000-4000-8000-000000000001"}}
	after, err := app.DefaultDeny{Kube: kc}.Reconcile(t.Context(), ns)
	require.NoError(t, err)
	require.Zero(t, after)

	p, err := kc.NetworkingV1().NetworkPolicies("team-a").Get(t.Context(), app.PolicyName, metav1.GetOptions{})
	require.NoError(t, err)
	require.Empty(t, p.Spec.PodSelector.MatchLabels, "every pod")
	require.Empty(t, p.Spec.Ingress, "no ingress allowed")
	require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, p.Spec.PolicyTypes)
	require.Len(t, p.OwnerReferences, 1)
	require.Equal(t, "Namespace", p.OwnerReferences[0].Kind)
	require.Equal(t, ns.UID, p.OwnerReferences[0].UID)
	require.True(t, *p.OwnerReferences[0].Controller)
}
