package webhookcert

import (
	"testing"

	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/z5labs/humus/kube"
)

// TestAddRBACNamesTheSecretAndTheObjects: the rules the package's doc
// gives, the Secret's in the Role of its namespace and the caBundles'
// objects' in the ClusterRole, each by name.
func TestAddRBACNamesTheSecretAndTheObjects(t *testing.T) {
	r := kube.RBAC{Name: "memcached-controller"}
	Config{
		Namespace: "memcached-system", Secret: "memcached-webhook-cert",
		CRDs:                            []string{"memcacheds.cache.example.com"},
		ValidatingWebhookConfigurations: []string{"memcached-validating"},
	}.AddRBAC(&r)
	require.Len(t, r.Roles, 1)
	require.Equal(t, "memcached-system", r.Roles[0].Namespace)
	require.Equal(t, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"memcached-webhook-cert"}, Verbs: []string{"get", "update"}},
	}, r.Roles[0].Rules)
	require.Equal(t, []rbacv1.PolicyRule{
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, ResourceNames: []string{"memcached-validating"}, Verbs: []string{"get", "patch"}},
		{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, ResourceNames: []string{"memcacheds.cache.example.com"}, Verbs: []string{"get", "patch"}},
	}, r.ClusterRole.Rules)
}
