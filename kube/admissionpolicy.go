package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
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
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if p.Name == "" {
		bad("the policy has no name")
	} else if msgs := validation.IsDNS1123Subdomain(p.Name); len(msgs) > 0 {
		bad("the policy's name %q: %s", p.Name, strings.Join(msgs, "; "))
	}
	if r.Version == "" || r.Plural == "" {
		bad("the resource has no version or plural (Group %q, Version %q, Plural %q)", r.Group, r.Version, r.Plural)
	}

	ops := p.Operations
	if len(ops) == 0 {
		ops = []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
	}
	for i, op := range ops {
		switch op {
		case admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete,
			admissionregistrationv1.Connect, admissionregistrationv1.OperationAll:
		default:
			bad("operation %d, %q: not CREATE, UPDATE, DELETE, CONNECT or *", i, op)
		}
		if slices.Index(ops, op) < i {
			bad("operation %d, %q: given twice", i, op)
		}
	}

	if len(p.Validations) == 0 {
		bad("the policy has no validations")
	}
	vals := make([]admissionregistrationv1.Validation, 0, len(p.Validations))
	for i, v := range p.Validations {
		if strings.TrimSpace(v.Expression) == "" {
			bad("validation %d: empty expression", i)
		}
		switch v.Reason {
		case "", metav1.StatusReasonUnauthorized, metav1.StatusReasonForbidden,
			metav1.StatusReasonInvalid, metav1.StatusReasonRequestEntityTooLarge:
		default:
			bad("validation %d: reason %q: not Unauthorized, Forbidden, Invalid or RequestEntityTooLarge", i, v.Reason)
		}
		val := admissionregistrationv1.Validation{
			Expression:        v.Expression,
			Message:           v.Message,
			MessageExpression: v.MessageExpression,
		}
		if v.Reason != "" {
			val.Reason = &v.Reason
		}
		vals = append(vals, val)
	}

	fp := p.FailurePolicy
	switch fp {
	case "":
		fp = admissionregistrationv1.Fail
	case admissionregistrationv1.Fail, admissionregistrationv1.Ignore:
	default:
		bad("failure policy %q: not Fail or Ignore", fp)
	}

	actions := p.ValidationActions
	if len(actions) == 0 {
		actions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	}
	for i, a := range actions {
		switch a {
		case admissionregistrationv1.Deny, admissionregistrationv1.Warn, admissionregistrationv1.Audit:
		default:
			bad("validation action %d, %q: not Deny, Warn or Audit", i, a)
		}
		if slices.Index(actions, a) < i {
			bad("validation action %d, %q: given twice", i, a)
		}
	}
	if slices.Contains(actions, admissionregistrationv1.Deny) && slices.Contains(actions, admissionregistrationv1.Warn) {
		bad("validation actions Deny and Warn together: a denied request has no warning to return")
	}

	switch {
	case p.ParamKind != nil && p.ParamRef == nil:
		bad("a ParamKind without a ParamRef: the binding names no parameter object")
	case p.ParamKind == nil && p.ParamRef != nil:
		bad("a ParamRef without a ParamKind: the policy reads no parameter kind")
	}
	if k := p.ParamKind; k != nil && (k.APIVersion == "" || k.Kind == "") {
		bad("ParamKind %+v: needs both APIVersion and Kind", *k)
	}
	if ref := p.ParamRef; ref != nil {
		if (ref.Name == "") == (ref.Selector == nil) {
			bad("ParamRef: give either a name or a selector")
		}
		switch a := ref.ParameterNotFoundAction; {
		case a == nil:
			bad("ParamRef: no ParameterNotFoundAction (Allow or Deny)")
		case *a != admissionregistrationv1.AllowAction && *a != admissionregistrationv1.DenyAction:
			bad("ParamRef: ParameterNotFoundAction %q: not Allow or Deny", *a)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, fmt.Errorf("kube: the admission policy %q of %s: %w", p.Name, r.Plural, err)
	}

	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			ParamKind: p.ParamKind,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: ops,
						Rule: admissionregistrationv1.Rule{
							APIGroups:   []string{r.Group},
							APIVersions: []string{r.Version},
							Resources:   []string{r.Plural},
						},
					},
				}},
			},
			Validations:   vals,
			FailurePolicy: &fp,
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        p.Name,
			ParamRef:          p.ParamRef,
			ValidationActions: actions,
		},
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
	var out []byte
	for i, obj := range []any{policy, binding} {
		b, err := json.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("kube: the admission policy %q of %s: %w", p.Name, r.Plural, err)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(b, &fields); err != nil {
			return nil, fmt.Errorf("kube: the admission policy %q of %s: %w", p.Name, r.Plural, err)
		}
		delete(fields, "status")
		if b, err = json.Marshal(fields); err != nil {
			return nil, fmt.Errorf("kube: the admission policy %q of %s: %w", p.Name, r.Plural, err)
		}
		y, err := yaml.JSONToYAML(b)
		if err != nil {
			return nil, fmt.Errorf("kube: the admission policy %q of %s: %w", p.Name, r.Plural, err)
		}
		if i > 0 {
			out = append(out, "---\n"...)
		}
		out = append(out, y...)
	}
	return out, nil
}
