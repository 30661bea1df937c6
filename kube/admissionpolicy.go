package kube

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus/kube/internal/admissionpolicy"
)

// AdmissionPolicy is a ValidatingAdmissionPolicy of a Resource's objects
// and its binding (admissionregistration.k8s.io/v1, GA since Kubernetes
// 1.30): CEL checks the API server runs on every write it matches, which,
// unlike the CRD's x-kubernetes-validations, see the request (who writes,
// request.userInfo; the operation, request.operation, including DELETE),
// the namespace's object (namespaceObject) and a parameter object
// (params). Use the CRD's rules (TypeRules) for what one object's fields
// can say; a policy for what needs the request; the App's admission
// webhook (kube/admission) for what reads other objects.
//
// Plain values: the zero value of each field but Name and Validations is
// its default.
type AdmissionPolicy struct {
	// Name is the policy's and its binding's metadata.name, a DNS-1123
	// subdomain, such as memcacheds-size.cache.example.com.
	Name string

	// Operations are the operations the policy checks: CREATE, UPDATE,
	// DELETE, CONNECT or * (every one). Default CREATE and UPDATE. On a
	// DELETE, object is null and oldObject is the object deleted.
	Operations []admissionregistrationv1.OperationType

	// Validations are the checks, each of which must be true for the
	// request to be admitted. At least one.
	Validations []AdmissionValidation

	// FailurePolicy is what the API server does when a check can't be
	// evaluated (an error, a missing parameter object that the ParamRef
	// allows, a cost limit): Fail refuses the request, Ignore admits it.
	// Default Fail.
	FailurePolicy admissionregistrationv1.FailurePolicyType

	// ValidationActions are what the binding does with a failed check:
	// Deny refuses the request, Warn returns a warning to the client,
	// Audit records it in the audit log. Default Deny. Deny and Warn
	// together are refused by the API server, and so here.
	ValidationActions []admissionregistrationv1.ValidationAction

	// ParamKind is the kind of the parameter object the checks read as
	// params, such as {APIVersion: "v1", Kind: "ConfigMap"}; nil for
	// none. It and ParamRef go together.
	ParamKind *admissionregistrationv1.ParamKind

	// ParamRef names the binding's parameter object (by Name, or by
	// Selector) and what happens when it is missing
	// (ParameterNotFoundAction, Allow or Deny, which the API server
	// requires).
	ParamRef *admissionregistrationv1.ParamRef
}

// AdmissionValidation is one check of an AdmissionPolicy: a CEL expression
// over object, oldObject, request, params, namespaceObject and authorizer
// that must be true, as the API server's ValidatingAdmissionPolicy
// Validation is.
type AdmissionValidation struct {
	// Expression is the CEL expression, such as
	// "request.userInfo.username == 'system:admin' || object.spec.size <= 3".
	Expression string
	// Message is the denial's message; empty for the API server's own,
	// which names the expression. MessageExpression, a CEL expression
	// giving a string, wins where it evaluates.
	Message           string
	MessageExpression string
	// Reason is the denial's status reason: Unauthorized, Forbidden,
	// Invalid or RequestEntityTooLarge. Default Invalid (the API server's).
	Reason metav1.StatusReason
}

// ValidatingAdmissionPolicy is policy p's ValidatingAdmissionPolicy,
// matching r's writes (its group, version and plural, and p's
// operations), and its ValidatingAdmissionPolicyBinding, of the same name.
// Apply both; the binding makes the policy act. The CEL expressions are
// compiled by the API server, not here: it refuses a policy whose
// expression doesn't compile, and reports a type error against the
// resource's schema in the policy's status.typeChecking.
//
// Bad input is one error naming every mistake: an empty or invalid
// Name, a resource with no group, version or plural, no validations, an
// empty expression, an unknown reason, operation, failure policy or
// validation action, a duplicate operation or action, Deny with Warn, a
// ParamKind without a ParamRef or the other way round, a ParamRef with
// neither name nor selector or with an unknown ParameterNotFoundAction.
func (r Resource[Spec, Status]) ValidatingAdmissionPolicy(p AdmissionPolicy) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, error) {
	vals := make([]admissionpolicy.Validation, len(p.Validations))
	for i, v := range p.Validations {
		vals[i] = admissionpolicy.Validation(v)
	}
	policy, binding, err := admissionpolicy.Build(admissionpolicy.Policy{
		Name: p.Name, Operations: p.Operations, Validations: vals, FailurePolicy: p.FailurePolicy,
		ValidationActions: p.ValidationActions, ParamKind: p.ParamKind, ParamRef: p.ParamRef,
	}, r.Group, r.Version, r.Plural)
	if err != nil {
		return nil, nil, fmt.Errorf("kube: the admission policy %q of %s: %w", p.Name, r.Plural, err)
	}
	return policy, binding, nil
}

// ValidatingAdmissionPolicyYAML is ValidatingAdmissionPolicy's two objects
// as one YAML stream, the policy then its binding, as a user checks it
// into their repository and applies it (keys sorted, no status). It
// returns ValidatingAdmissionPolicy's error.
func (r Resource[Spec, Status]) ValidatingAdmissionPolicyYAML(p AdmissionPolicy) ([]byte, error) {
	policy, binding, err := r.ValidatingAdmissionPolicy(p)
	if err != nil {
		return nil, err
	}
	out, err := admissionpolicy.YAML(policy, binding)
	if err != nil {
		return nil, fmt.Errorf("kube: the admission policy %q of %s: %w", p.Name, r.Plural, err)
	}
	return out, nil
}
