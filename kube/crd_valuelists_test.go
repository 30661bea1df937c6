package kube_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/z5labs/humus/kube"
)

// Hosts is a named slice type whose list type and items' rules are the
// type's own.
type Hosts []string

type hostsSpec struct {
	Primary Hosts `json:"primary"`
	Backup  Hosts `json:"backup,omitempty"`
}

// TestAListTypeAndItemRulesOnANamedSliceType: ValueRules of a named slice
// type with ListSet and ItemsOf apply wherever the type appears.
func TestAListTypeAndItemRulesOnANamedSliceType(t *testing.T) {
	crd, err := kube.Resource[hostsSpec, struct{}]{
		Group: "hosts.example.com", Version: "v1", Kind: "Hosted", Plural: "hosteds", Scope: kube.Namespaced,
		Rules: []kube.TypeRules{
			kube.ValueRules(kube.ItemsOf(kube.Values[Hosts]().ListSet().MaxItems(4), kube.Values[string]().Format(kube.FormatHostname))),
		},
	}.CRD()
	require.NoError(t, err)
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	for _, name := range []string{"primary", "backup"} {
		p := spec.Properties[name]
		require.Equal(t, "set", *p.XListType, name)
		require.Equal(t, int64(4), *p.MaxItems, name)
		require.Equal(t, "hostname", p.Items.Schema.Format, name)
		require.False(t, p.Nullable, "%s: a constrained list isn't nullable", name)
	}

	_, err = kube.Resource[hostsSpec, struct{}]{
		Group: "hosts.example.com", Version: "v1", Kind: "Hosted", Plural: "hosteds", Scope: kube.Namespaced,
		Rules: []kube.TypeRules{kube.ValueRules(kube.Values[Hosts]().ListMap("name"))},
	}.CRD()
	require.ErrorContains(t, err, "ValueRules for kube_test.Hosts: ListMap fits a list of structs")
}
