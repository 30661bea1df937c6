package kube_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus/kube"
)

// memcachedSizePolicy is the doc's example: only the cluster's admins may
// run more than one memcached pod, and nobody deletes a Memcached whose
// namespace's limits ConfigMap says so.
var memcachedSizePolicy = func() kube.AdmissionPolicy {
	notFound := admissionregistrationv1.DenyAction
	return kube.AdmissionPolicy{
		Name:       "memcacheds-size.cache.example.com",
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Validations: []kube.AdmissionValidation{{
			Expression: "object.spec.size <= int(params.data.maxSize) || 'system:masters' in request.userInfo.groups",
			Message:    "only system:masters may run more memcached pods than the limits ConfigMap's maxSize",
			Reason:     metav1.StatusReasonForbidden,
		}, {
			Expression:        "request.operation != 'UPDATE' || object.spec.image == oldObject.spec.image || object.spec.size == oldObject.spec.size",
			MessageExpression: "'change the image or the size of ' + object.metadata.name + ', not both at once'",
		}},
		ParamKind: &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
		ParamRef: &admissionregistrationv1.ParamRef{
			Name:                    "memcached-limits",
			ParameterNotFoundAction: &notFound,
		},
	}
}()

// TestMemcachedAdmissionPolicyYAML is the policy's golden test, as the
// CRD's: a change to the policy that isn't in the YAML fails go test.
// Rewrite it with -update.
func TestMemcachedAdmissionPolicyYAML(t *testing.T) {
	got, err := Memcached.ValidatingAdmissionPolicyYAML(memcachedSizePolicy)
	require.NoError(t, err)
	const golden = "testdata/memcacheds-size.admissionpolicy.yaml"
	if *update {
		require.NoError(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
}

// TestAdmissionPolicyDefaults: the zero values are CREATE and UPDATE,
// failure policy Fail and action Deny, and the policy matches the
// resource's group, version and plural.
func TestAdmissionPolicyDefaults(t *testing.T) {
	policy, binding, err := Memcached.ValidatingAdmissionPolicy(kube.AdmissionPolicy{
		Name:        "memcacheds-image",
		Validations: []kube.AdmissionValidation{{Expression: "object.spec.image != ''"}},
	})
	require.NoError(t, err)
	require.Equal(t, admissionregistrationv1.Fail, *policy.Spec.FailurePolicy)
	require.Nil(t, policy.Spec.ParamKind)
	require.Equal(t, []admissionregistrationv1.NamedRuleWithOperations{{
		RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule: admissionregistrationv1.Rule{
				APIGroups:   []string{"cache.example.com"},
				APIVersions: []string{"v1alpha1"},
				Resources:   []string{"memcacheds"},
			},
		},
	}}, policy.Spec.MatchConstraints.ResourceRules)
	require.Nil(t, policy.Spec.Validations[0].Reason)
	require.Equal(t, "memcacheds-image", binding.Name)
	require.Equal(t, "memcacheds-image", binding.Spec.PolicyName)
	require.Equal(t, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}, binding.Spec.ValidationActions)
	require.Nil(t, binding.Spec.ParamRef)
}

// TestAdmissionPolicyMistakes: one error names every mistake.
func TestAdmissionPolicyMistakes(t *testing.T) {
	missing := admissionregistrationv1.ParameterNotFoundActionType("Maybe")
	_, _, err := Memcached.ValidatingAdmissionPolicy(kube.AdmissionPolicy{
		Name:       "Not_A_Name",
		Operations: []admissionregistrationv1.OperationType{"PATCH", admissionregistrationv1.Create, admissionregistrationv1.Create},
		Validations: []kube.AdmissionValidation{
			{Expression: "  "},
			{Expression: "true", Reason: metav1.StatusReasonNotFound},
		},
		FailurePolicy:     "Retry",
		ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny, admissionregistrationv1.Warn, "Log"},
		ParamRef:          &admissionregistrationv1.ParamRef{ParameterNotFoundAction: &missing},
	})
	require.Error(t, err)
	for _, want := range []string{
		`the policy's name "Not_A_Name"`,
		`operation 0, "PATCH": not CREATE, UPDATE, DELETE, CONNECT or *`,
		`operation 2, "CREATE": given twice`,
		`validation 0: empty expression`,
		`validation 1: reason "NotFound"`,
		`failure policy "Retry": not Fail or Ignore`,
		`validation action 2, "Log": not Deny, Warn or Audit`,
		`validation actions Deny and Warn together`,
		`a ParamRef without a ParamKind`,
		`ParamRef: give either a name or a selector`,
		`ParamRef: ParameterNotFoundAction "Maybe": not Allow or Deny`,
	} {
		require.ErrorContains(t, err, want)
	}

	_, _, err = Memcached.ValidatingAdmissionPolicy(kube.AdmissionPolicy{
		ParamKind: &admissionregistrationv1.ParamKind{Kind: "ConfigMap"},
	})
	require.Error(t, err)
	for _, want := range []string{
		`the policy has no name`,
		`the policy has no validations`,
		`a ParamKind without a ParamRef`,
		`needs both APIVersion and Kind`,
	} {
		require.ErrorContains(t, err, want)
	}
}
