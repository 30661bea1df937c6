//go:build controlplane

package app_test

import (
	"context"
	"io/fs"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane/apptest"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/kube/examples/appconfig"
	"github.com/z5labs/humus/kube/examples/defaultdeny/app"
)

// TestDefaultDenyApp runs the whole default-deny App, as humus.Main would,
// on humus.OSHost() against a real local control plane (or the cluster
// HUMUS_TEST_KUBECONFIG names), and checks the claims revision 5 makes of
// a controller of a built-in kind.
func TestDefaultDenyApp(t *testing.T) {
	e := apptest.NewEnv(t, controlplanetest.Start(t))

	t.Run("AppliesThePolicyToNewAndExistingNamespacesAndPutsItBack", func(t *testing.T) {
		existing := e.Namespace(t, "existing")
		leaseNS := e.Namespace(t, "default-deny-lease")
		a := apptest.Start(t, app.New(appconfig.Config{Connection: e.Connection(), Settings: e.Settings(app.FieldManager, "", leaseNS, "replica-0"), ProbesAddr: controlplanetest.FreeAddr(t)}), humus.OSHost())

		t.Run("AnExistingNamespaceGetsThePolicy", func(t *testing.T) {
			requirePolicy(t, e, existing)
		})

		t.Run("ANewNamespaceGetsThePolicy", func(t *testing.T) {
			requirePolicy(t, e, e.Namespace(t, "new"))
		})

		t.Run("ADeletedPolicyIsPutBack", func(t *testing.T) {
			policies := e.Kube.NetworkingV1().NetworkPolicies(existing)
			old, err := policies.Get(t.Context(), app.PolicyName, metav1.GetOptions{})
			require.NoError(t, err)
			require.NoError(t, policies.Delete(t.Context(), app.PolicyName, metav1.DeleteOptions{}))
			controlplanetest.Eventually(t, 10*time.Second, "the policy to be put back", func(ctx context.Context) (bool, error) {
				p, err := policies.Get(ctx, app.PolicyName, metav1.GetOptions{})
				return err == nil && p.UID != old.UID, controlplanetest.IgnoreNotFound(err)
			})
		})

		t.Run("AChangedPolicyIsPutBack", func(t *testing.T) {
			policies := e.Kube.NetworkingV1().NetworkPolicies(existing)
			// Egress only: ingress would be allowed.
			patch := []byte(`{"spec":{"policyTypes":["Egress"]}}`)
			_, err := policies.Patch(t.Context(), app.PolicyName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kubectl-edit"})
			require.NoError(t, err)
			requirePolicy(t, e, existing)
		})

		t.Run("SIGTERMExits0AndTheLeaseHasNoHolder", func(t *testing.T) {
			require.Equal(t, 0, a.Terminate(t))
			e.RequireNoHolder(t, leaseNS, app.FieldManager)
		})
	})

	t.Run("RunsInAPodWithExactlyTheDeployRBAC", func(t *testing.T) {
		// Every deploy file is accepted, with strict field validation; the
		// Deployment's pods never run, with no kubelet.
		for _, f := range []string{"namespace.yaml", "serviceaccount.yaml", "rbac.yaml", "deployment.yaml"} {
			e.Apply(t, "../deploy/"+f)
		}
		probes := controlplanetest.FreeAddr(t)
		host := e.Pod(t, "default-deny-system", "default-deny", "default-deny-0", apptest.PodEnv(map[string]string{
			appconfig.EnvProbesAddr: probes,
		}))
		token, err := fs.ReadFile(host.FS, appconfig.ServiceAccountDir+"token")
		require.NoError(t, err)
		controlplanetest.WaitAllowed(t, e.WithToken(t, string(token)),
			func(ctx context.Context, kc kubernetes.Interface) error {
				_, err := kc.NetworkingV1().NetworkPolicies("").List(ctx, metav1.ListOptions{Limit: 1})
				return err
			},
			func(ctx context.Context, kc kubernetes.Interface) error {
				_, err := kc.CoordinationV1().Leases("default-deny-system").Get(ctx, app.FieldManager, metav1.GetOptions{})
				return err
			})
		a := apptest.Start(t, app.Init, host)
		controlplanetest.Ready(t, probes)
		requirePolicy(t, e, e.Namespace(t, "rbac"))
		require.Equal(t, 0, a.Terminate(t))
		e.RequireNoHolder(t, "default-deny-system", app.FieldManager)
	})
}

// requirePolicy waits until ns has its default-deny policy, as the App
// applies it: owned by ns, selecting every pod, denying all ingress.
func requirePolicy(t *testing.T, e apptest.Env, ns string) {
	t.Helper()
	nsObj, err := e.Kube.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{})
	require.NoError(t, err)
	controlplanetest.Eventually(t, 10*time.Second, "the default-deny policy in "+ns, func(ctx context.Context) (bool, error) {
		p, err := e.Kube.NetworkingV1().NetworkPolicies(ns).Get(ctx, app.PolicyName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		owned := len(p.OwnerReferences) == 1 && p.OwnerReferences[0].Kind == "Namespace" &&
			p.OwnerReferences[0].UID == nsObj.UID && p.OwnerReferences[0].Controller != nil && *p.OwnerReferences[0].Controller
		denies := len(p.Spec.PodSelector.MatchLabels) == 0 && len(p.Spec.PodSelector.MatchExpressions) == 0 &&
			len(p.Spec.Ingress) == 0 && len(p.Spec.PolicyTypes) == 1 && p.Spec.PolicyTypes[0] == networkingv1.PolicyTypeIngress
		return owned && denies, nil
	})
}
