package kube_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/conversion"
)

// Two versions of a Crew: v2, the hub, gives each member a zone, which v1
// lacks.
type (
	CrewSpec struct {
		Members []CrewMember `json:"members,omitempty"`
	}
	CrewMember struct {
		Name string `json:"name"`
		Zone string `json:"zone,omitempty"`
	}
	CrewV1Spec struct {
		Members []CrewV1Member `json:"members,omitempty"`
	}
	CrewV1Member struct {
		Name string `json:"name"`
	}

	Crew   = kube.Object[CrewSpec, struct{}]
	CrewV1 = kube.Object[CrewV1Spec, struct{}]
)

func crewV1ToV2(src *CrewV1, dst *Crew) error {
	dst.ObjectMeta = src.ObjectMeta
	for _, m := range src.Spec.Members {
		dst.Spec.Members = append(dst.Spec.Members, CrewMember{Name: m.Name})
	}
	return nil
}

func crewV2ToV1(src *Crew, dst *CrewV1) error {
	dst.ObjectMeta = src.ObjectMeta
	for _, m := range src.Spec.Members {
		dst.Spec.Members = append(dst.Spec.Members, CrewV1Member{Name: m.Name})
	}
	return nil
}

var crewSpec CrewSpec

// crews is a Resource whose v1 is Preserving, with spec.members a list-map
// keyed by name when byName.
func crews(byName bool) kube.Resource[CrewSpec, struct{}] {
	r := kube.Resource[CrewSpec, struct{}]{
		Group: "example.com", Version: "v2", Kind: "Crew", Plural: "crews", Scope: kube.Namespaced,
		Versions: []kube.Version[CrewSpec, struct{}]{
			kube.NewVersion("v1", crewV1ToV2, crewV2ToV1, kube.VersionOptions{Preserving: true}),
		},
		ConversionWebhook: kube.WebhookClient{Namespace: "crews-system", Name: "crews-webhooks"},
	}
	if byName {
		r.Rules = []kube.TypeRules{kube.Rules(&crewSpec, kube.Field(&crewSpec.Members).ListMap("name"))}
	}
	return r
}

// TestAPreservingVersionRestoresListElementsByTheHubsListMapKeys: members
// [a(zone-a), b(zone-b)] read at v1 and written back as [b]: b keeps
// zone-b when the hub's schema keys members by name, and has no zone
// otherwise; never a's.
func TestAPreservingVersionRestoresListElementsByTheHubsListMapKeys(t *testing.T) {
	for _, byName := range []bool{true, false} {
		r := crews(byName)
		crd, err := r.CRD()
		require.NoError(t, err)
		if byName {
			require.Equal(t, []string{"name"}, crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["members"].XListMapKeys)
		}
		tel := humustest.NewTelemetry(t)
		h, err := conversion.Handler(&humus.Setup{Telemetry: tel.Telemetry}, r.Conversion())
		require.NoError(t, err)

		hub := Crew{TypeMeta: metav1.TypeMeta{APIVersion: "example.com/v2", Kind: "Crew"}, ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "u1"},
			Spec: CrewSpec{Members: []CrewMember{{Name: "a", Zone: "zone-a"}, {Name: "b", Zone: "zone-b"}}}}
		var v1 CrewV1
		require.NoError(t, json.Unmarshal(convert(t, h, "example.com/v1", hub), &v1))
		v1.Spec.Members = v1.Spec.Members[1:] // a write through v1 removes a
		var got Crew
		require.NoError(t, json.Unmarshal(convert(t, h, "example.com/v2", v1), &got))

		want := []CrewMember{{Name: "b", Zone: "zone-b"}}
		if !byName {
			want = []CrewMember{{Name: "b"}} // lost, rather than a's
		}
		require.Equal(t, want, got.Spec.Members, "members keyed by name: %v", byName)
	}
}
