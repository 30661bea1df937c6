// Package admissionpolicy builds a ValidatingAdmissionPolicy and its
// binding (admissionregistration.k8s.io/v1) for package kube's
// Resource.ValidatingAdmissionPolicy, and their YAML: the checks of the
// options, their defaults, and the two objects.
//
// It owns Policy and Validation, the options as package kube's
// AdmissionPolicy and AdmissionValidation give them; Build, which checks
// them and builds the objects; and YAML, which writes objects as one YAML
// stream.
//
// Its invariants:
//
//   - Bad options are one error naming every mistake, in the order of the
//     fields: the name, the resource, the operations, the validations, the
//     failure policy, the validation actions, the parameters.
//   - A zero option is its default, as the API server's: CREATE and
//     UPDATE, Fail, Deny.
//   - The CEL expressions are not compiled here: the API server does, and
//     refuses a policy whose expression doesn't compile.
package admissionpolicy

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

// Policy is a policy's options: package kube's AdmissionPolicy, whose
// fields' docs say what each is.
type Policy struct {
	Name              string
	Operations        []admissionregistrationv1.OperationType
	Validations       []Validation
	FailurePolicy     admissionregistrationv1.FailurePolicyType
	ValidationActions []admissionregistrationv1.ValidationAction
	ParamKind         *admissionregistrationv1.ParamKind
	ParamRef          *admissionregistrationv1.ParamRef
}

// Validation is one check of a Policy: package kube's
// AdmissionValidation.
type Validation struct {
	Expression        string
	Message           string
	MessageExpression string
	Reason            metav1.StatusReason
}

// Build returns p's ValidatingAdmissionPolicy, matching the writes of the
// resource of group, version and plural and p's operations, and its
// ValidatingAdmissionPolicyBinding, of the same name; or one error naming
// every mistake in p and the resource (package kube's
// Resource.ValidatingAdmissionPolicy lists them).
func Build(p Policy, group, version, plural string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, error) {
	errs := checkPolicyTarget(p.Name, group, version, plural)
	ops, opErrs := policyOperations(p.Operations)
	vals, valErrs := policyValidations(p.Validations)
	fp, fpErrs := policyFailure(p.FailurePolicy)
	actions, actionErrs := policyActions(p.ValidationActions)
	errs = slices.Concat(errs, opErrs, valErrs, fpErrs, actionErrs, checkPolicyParams(p.ParamKind, p.ParamRef))
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
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
							APIGroups:   []string{group},
							APIVersions: []string{version},
							Resources:   []string{plural},
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

// YAML writes objs as one YAML stream, in order, each as its JSON with
// keys sorted and without its status.
func YAML(objs ...any) ([]byte, error) {
	var out []byte
	for i, obj := range objs {
		b, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(b, &fields); err != nil {
			return nil, err
		}
		delete(fields, "status")
		if b, err = json.Marshal(fields); err != nil {
			return nil, err
		}
		y, err := yaml.JSONToYAML(b)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out = append(out, "---\n"...)
		}
		out = append(out, y...)
	}
	return out, nil
}

// checkPolicyTarget returns the mistakes in a policy's name, a DNS-1123
// subdomain, and in the group, version and plural of the resource it
// matches.
func checkPolicyTarget(name, group, version, plural string) []error {
	var errs []error
	if name == "" {
		errs = append(errs, errors.New("the policy has no name"))
	} else if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("the policy's name %q: %s", name, strings.Join(msgs, "; ")))
	}
	if version == "" || plural == "" {
		errs = append(errs, fmt.Errorf("the resource has no version or plural (Group %q, Version %q, Plural %q)", group, version, plural))
	}
	return errs
}

// policyOperations are the operations a policy checks, CREATE and UPDATE
// for none, and the mistakes in ops: an unknown operation, or one given
// twice.
func policyOperations(ops []admissionregistrationv1.OperationType) ([]admissionregistrationv1.OperationType, []error) {
	if len(ops) == 0 {
		ops = []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
	}
	var errs []error
	for i, op := range ops {
		switch op {
		case admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete,
			admissionregistrationv1.Connect, admissionregistrationv1.OperationAll:
		default:
			errs = append(errs, fmt.Errorf("operation %d, %q: not CREATE, UPDATE, DELETE, CONNECT or *", i, op))
		}
		if slices.Index(ops, op) < i {
			errs = append(errs, fmt.Errorf("operation %d, %q: given twice", i, op))
		}
	}
	return ops, errs
}

// policyValidations are vs as the API server's Validations, and their
// mistakes: none at all, an empty expression, an unknown reason.
func policyValidations(vs []Validation) ([]admissionregistrationv1.Validation, []error) {
	var errs []error
	if len(vs) == 0 {
		errs = append(errs, errors.New("the policy has no validations"))
	}
	vals := make([]admissionregistrationv1.Validation, 0, len(vs))
	for i, v := range vs {
		if strings.TrimSpace(v.Expression) == "" {
			errs = append(errs, fmt.Errorf("validation %d: empty expression", i))
		}
		switch v.Reason {
		case "", metav1.StatusReasonUnauthorized, metav1.StatusReasonForbidden,
			metav1.StatusReasonInvalid, metav1.StatusReasonRequestEntityTooLarge:
		default:
			errs = append(errs, fmt.Errorf("validation %d: reason %q: not Unauthorized, Forbidden, Invalid or RequestEntityTooLarge", i, v.Reason))
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
	return vals, errs
}

// policyFailure is a policy's failure policy, Fail for "", and its
// mistake, one neither Fail nor Ignore.
func policyFailure(fp admissionregistrationv1.FailurePolicyType) (admissionregistrationv1.FailurePolicyType, []error) {
	switch fp {
	case "":
		return admissionregistrationv1.Fail, nil
	case admissionregistrationv1.Fail, admissionregistrationv1.Ignore:
		return fp, nil
	}
	return fp, []error{fmt.Errorf("failure policy %q: not Fail or Ignore", fp)}
}

// policyActions are a binding's validation actions, Deny for none, and
// their mistakes: an unknown action, one given twice, Deny with Warn.
func policyActions(actions []admissionregistrationv1.ValidationAction) ([]admissionregistrationv1.ValidationAction, []error) {
	if len(actions) == 0 {
		actions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	}
	var errs []error
	for i, a := range actions {
		switch a {
		case admissionregistrationv1.Deny, admissionregistrationv1.Warn, admissionregistrationv1.Audit:
		default:
			errs = append(errs, fmt.Errorf("validation action %d, %q: not Deny, Warn or Audit", i, a))
		}
		if slices.Index(actions, a) < i {
			errs = append(errs, fmt.Errorf("validation action %d, %q: given twice", i, a))
		}
	}
	if slices.Contains(actions, admissionregistrationv1.Deny) && slices.Contains(actions, admissionregistrationv1.Warn) {
		errs = append(errs, errors.New("validation actions Deny and Warn together: a denied request has no warning to return"))
	}
	return actions, errs
}

// checkPolicyParams returns the mistakes in a policy's ParamKind and its
// binding's ParamRef: one without the other, a kind without an apiVersion
// or a kind, a ref with neither a name nor a selector, or both, or without
// a known ParameterNotFoundAction.
func checkPolicyParams(kind *admissionregistrationv1.ParamKind, ref *admissionregistrationv1.ParamRef) []error {
	var errs []error
	switch {
	case kind != nil && ref == nil:
		errs = append(errs, errors.New("a ParamKind without a ParamRef: the binding names no parameter object"))
	case kind == nil && ref != nil:
		errs = append(errs, errors.New("a ParamRef without a ParamKind: the policy reads no parameter kind"))
	}
	if kind != nil && (kind.APIVersion == "" || kind.Kind == "") {
		errs = append(errs, fmt.Errorf("ParamKind %+v: needs both APIVersion and Kind", *kind))
	}
	if ref != nil {
		if (ref.Name == "") == (ref.Selector == nil) {
			errs = append(errs, errors.New("ParamRef: give either a name or a selector"))
		}
		switch a := ref.ParameterNotFoundAction; {
		case a == nil:
			errs = append(errs, errors.New("ParamRef: no ParameterNotFoundAction (Allow or Deny)"))
		case *a != admissionregistrationv1.AllowAction && *a != admissionregistrationv1.DenyAction:
			errs = append(errs, fmt.Errorf("ParamRef: ParameterNotFoundAction %q: not Allow or Deny", *a))
		}
	}
	return errs
}
