package webhookcert

import (
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/z5labs/humus/kube"
)

// AddRBAC adds to r the rules Certs of c needs (see the package's RBAC):
// to r's Role in c.Namespace, get and update on the Secret c.Secret and
// create on Secrets (RBAC can't limit a create by name); to r's
// ClusterRole, get and patch on each of c.CRDs,
// c.ValidatingWebhookConfigurations and c.MutatingWebhookConfigurations,
// by name. No list, no watch, no other Secret. It adds what c names as it
// is, checked or not: New returns c's mistakes.
func (c Config) AddRBAC(r *kube.RBAC) {
	r.Add(c.Namespace,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{c.Secret}, Verbs: []string{"get", "update"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
	)
	named := func(group, resource string, names []string) {
		if len(names) > 0 {
			r.Add("", rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{resource}, ResourceNames: names, Verbs: []string{"get", "patch"}})
		}
	}
	named("apiextensions.k8s.io", "customresourcedefinitions", c.CRDs)
	named("admissionregistration.k8s.io", "validatingwebhookconfigurations", c.ValidatingWebhookConfigurations)
	named("admissionregistration.k8s.io", "mutatingwebhookconfigurations", c.MutatingWebhookConfigurations)
}
