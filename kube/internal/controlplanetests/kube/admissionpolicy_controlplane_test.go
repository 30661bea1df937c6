//go:build controlplane

package kube_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/z5labs/humus/kube"
)

type limitedSpec struct {
	Size int32 `json:"size"`
}

var limited = kube.Resource[limitedSpec, struct{}]{
	Group: "test.humus.z5labs.dev", Version: "v1", Kind: "Limited", Plural: "limiteds", Scope: kube.Namespaced,
}

// testAdmissionPolicyOnServer: the API server takes the policy and binding
// Resource.ValidatingAdmissionPolicy makes (fieldValidation=Strict), and
// then refuses, with the policy's messages, an object above the parameter
// ConfigMap's limit and the deletion of a protected object: what the
// CRD's own rules can't see (a parameter object, the operation DELETE).
// It refuses a policy whose expression doesn't compile, as the docs say.
func testAdmissionPolicyOnServer(t *testing.T, a apiServer) {
	crd, err := limited.CRD()
	require.NoError(t, err)
	a.install(t, crd)
	apiVersion := limited.Group + "/" + limited.Version
	ctx := t.Context()
	strict := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}

	cms := a.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("default")
	_, err = cms.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "limited-limits"},
		"data":     map[string]any{"maxSize": "2"},
	}}, strict)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cms.Delete(context.Background(), "limited-limits", metav1.DeleteOptions{}) })

	notFound := admissionregistrationv1.DenyAction
	p := kube.AdmissionPolicy{
		Name: "limiteds.test.humus.z5labs.dev",
		Operations: []admissionregistrationv1.OperationType{
			admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete,
		},
		Validations: []kube.AdmissionValidation{{
			Expression: "request.operation == 'DELETE' || object.spec.size <= int(params.data.maxSize)",
			Message:    "size above the limits ConfigMap's maxSize",
			Reason:     metav1.StatusReasonForbidden,
		}, {
			Expression:        "request.operation != 'DELETE' || !has(oldObject.metadata.labels) || !('protected' in oldObject.metadata.labels)",
			MessageExpression: "oldObject.metadata.name + ' is protected: remove its label first'",
		}},
		ParamKind: &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
		ParamRef:  &admissionregistrationv1.ParamRef{Name: "limited-limits", ParameterNotFoundAction: &notFound},
	}

	policies := a.dyn.Resource(admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicies"))
	bindings := a.dyn.Resource(admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicybindings"))

	broken := p
	broken.Name = "broken.test.humus.z5labs.dev"
	broken.Validations = []kube.AdmissionValidation{{Expression: "object.spec.size <="}}
	badPolicy, _, err := limited.ValidatingAdmissionPolicy(broken)
	require.NoError(t, err)
	_, err = policies.Create(ctx, &unstructured.Unstructured{Object: toMap(t, badPolicy)},
		metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict, DryRun: []string{metav1.DryRunAll}})
	require.ErrorContains(t, err, "spec.validations[0].expression", "the API server compiles a policy's expressions")
	t.Log(err)

	policy, binding, err := limited.ValidatingAdmissionPolicy(p)
	require.NoError(t, err)
	_, err = policies.Create(ctx, &unstructured.Unstructured{Object: toMap(t, policy)}, strict)
	require.NoError(t, err, "the API server refused the policy")
	t.Cleanup(func() { _ = policies.Delete(context.Background(), policy.Name, metav1.DeleteOptions{}) })
	_, err = bindings.Create(ctx, &unstructured.Unstructured{Object: toMap(t, binding)}, strict)
	require.NoError(t, err, "the API server refused the binding")
	t.Cleanup(func() { _ = bindings.Delete(context.Background(), binding.Name, metav1.DeleteOptions{}) })

	objects := a.dyn.Resource(limited.GVR()).Namespace("default")
	// The admission plugin learns of the policy and binding through its
	// informers: nothing reports when, so a dry-run create of a bad
	// object is retried until refused.
	tooBig := &unstructured.Unstructured{Object: object("Limited", apiVersion, "too-big", map[string]any{"size": 3})}
	require.Eventually(t, func() bool {
		_, err := objects.Create(ctx, tooBig, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil
	}, 60*time.Second, 100*time.Millisecond, "the policy never took effect")
	_, err = objects.Create(ctx, tooBig, strict)
	require.ErrorContains(t, err, "size above the limits ConfigMap's maxSize")
	t.Log(err)

	protected := object("Limited", apiVersion, "protected", map[string]any{"size": 2})
	protected["metadata"] = map[string]any{"name": "protected", "labels": map[string]any{"protected": "true"}}
	_, err = objects.Create(ctx, &unstructured.Unstructured{Object: protected}, strict)
	require.NoError(t, err, "an object within the limit")
	// Cleanups run last first: the binding goes before the CRD, whose
	// deletion deletes the protected object too.
	t.Cleanup(func() {
		_ = bindings.Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	err = objects.Delete(ctx, "protected", metav1.DeleteOptions{})
	require.ErrorContains(t, err, "protected is protected: remove its label first")
	t.Log(err)
}
