package conversion_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus/kube/conversion"
)

// Two versions of a Team: v2 (the hub) gives each member a zone, which v1
// lacks.
type (
	TeamV1 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              struct {
			Members []MemberV1 `json:"members,omitempty"`
		} `json:"spec"`
	}
	MemberV1 struct {
		Name string `json:"name"`
		Role string `json:"role,omitempty"`
	}
	TeamV2 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              struct {
			Members []MemberV2 `json:"members,omitempty"`
		} `json:"spec"`
	}
	MemberV2 struct {
		Name string `json:"name"`
		Role string `json:"role,omitempty"`
		Zone string `json:"zone,omitempty"`
	}
)

func teamV1ToV2(src *TeamV1, dst *TeamV2) error {
	dst.ObjectMeta = src.ObjectMeta
	for _, m := range src.Spec.Members {
		dst.Spec.Members = append(dst.Spec.Members, MemberV2{Name: m.Name, Role: m.Role})
	}
	return nil
}

func teamV2ToV1(src *TeamV2, dst *TeamV1) error {
	dst.ObjectMeta = src.ObjectMeta
	for _, m := range src.Spec.Members {
		dst.Spec.Members = append(dst.Spec.Members, MemberV1{Name: m.Name, Role: m.Role})
	}
	return nil
}

// membersByName is the CRD's x-kubernetes-list-map-keys of spec.members.
var membersByName = conversion.PreserveOptions{ListMapKeys: map[string][]string{"spec.members": {"name"}}}

// writeTeamAtV1 reads hub at v1 through sp, lets edit change it, and
// writes it back through sp, as a client of v1 does.
func writeTeamAtV1(t *testing.T, sp conversion.Spoke[TeamV2], hub *TeamV2, edit func(*TeamV1)) *TeamV2 {
	t.Helper()
	var v1 TeamV1
	require.NoError(t, conversion.FromHub(sp, hub, &v1))
	edit(&v1)
	var got TeamV2
	require.NoError(t, conversion.ToHub(sp, &v1, &got))
	return &got
}

func teamAB() *TeamV2 {
	h := &TeamV2{ObjectMeta: metav1.ObjectMeta{Name: "t"}}
	h.Spec.Members = []MemberV2{{Name: "a", Zone: "zone-a"}, {Name: "b", Zone: "zone-b"}}
	return h
}

func TestPreservingNeverMovesAHubOnlyValueOntoAnotherListElement(t *testing.T) {
	sp := conversion.NewSpoke("v1", teamV1ToV2, teamV2ToV1).Preserving()
	for name, edit := range map[string]func(*TeamV1){
		"a removed":  func(v1 *TeamV1) { v1.Spec.Members = v1.Spec.Members[1:] },
		"c inserted": func(v1 *TeamV1) { v1.Spec.Members = append([]MemberV1{{Name: "c"}}, v1.Spec.Members...) },
		"reordered":  func(v1 *TeamV1) { v1.Spec.Members[0], v1.Spec.Members[1] = v1.Spec.Members[1], v1.Spec.Members[0] },
	} {
		t.Run(name, func(t *testing.T) {
			got := writeTeamAtV1(t, sp, teamAB(), edit)
			for _, m := range got.Spec.Members {
				require.Empty(t, m.Zone, "without list-map keys, a written list's hub-only values are dropped, never moved: %+v", got.Spec.Members)
			}
		})
	}

	// A write that leaves the list as it read it keeps every zone.
	got := writeTeamAtV1(t, sp, teamAB(), func(v1 *TeamV1) { v1.Labels = map[string]string{"l": "v"} })
	require.Equal(t, teamAB().Spec.Members, got.Spec.Members)
}

func TestPreservingWithListMapKeysRestoresEachElementsValueByItsKeys(t *testing.T) {
	sp := conversion.NewSpoke("v1", teamV1ToV2, teamV2ToV1).PreservingWith(membersByName)

	got := writeTeamAtV1(t, sp, teamAB(), func(v1 *TeamV1) { v1.Spec.Members = v1.Spec.Members[1:] })
	require.Equal(t, []MemberV2{{Name: "b", Zone: "zone-b"}}, got.Spec.Members, "b keeps its own zone, not a's")

	got = writeTeamAtV1(t, sp, teamAB(), func(v1 *TeamV1) {
		v1.Spec.Members = []MemberV1{{Name: "c"}, v1.Spec.Members[1], {Name: "a", Role: "lead"}}
	})
	require.Equal(t, []MemberV2{{Name: "c"}, {Name: "b", Zone: "zone-b"}, {Name: "a", Role: "lead", Zone: "zone-a"}}, got.Spec.Members,
		"a new member gets no zone; b and a keep theirs wherever they moved, a's role change kept")

	got = writeTeamAtV1(t, sp, teamAB(), func(v1 *TeamV1) { v1.Spec.Members[0].Name = "x" })
	require.Equal(t, []MemberV2{{Name: "x"}, {Name: "b", Zone: "zone-b"}}, got.Spec.Members, "a member renamed is another member: no zone")
}

func TestPreservingRestoresAListElementOnlyWhereOneElementHasItsKeys(t *testing.T) {
	sp := conversion.NewSpoke("v1", teamV1ToV2, teamV2ToV1).PreservingWith(membersByName)
	// An annotation a client wrote (Preserving never stores an element
	// absent from the base), naming member b, which the write holds twice.
	var v1 TeamV1
	v1.Name = "t"
	v1.Annotations = map[string]string{conversion.PreservedAnnotation: `[{"path":["spec","members",{"name":"b"}],"value":{"name":"b","zone":"x"}}]`}
	v1.Spec.Members = []MemberV1{{Name: "b"}, {Name: "b", Role: "lead"}}
	var got TeamV2
	require.NoError(t, conversion.ToHub(sp, &v1, &got))
	require.Equal(t, []MemberV2{{Name: "b"}, {Name: "b", Role: "lead"}}, got.Spec.Members,
		"two elements have b's keys: neither is provably the one the value was kept from")
}

func TestPreservingWithListMapKeysRestoresEachElementsValueWhenTheSpokeReordersTheList(t *testing.T) {
	// v1 keeps members sorted by name (as a spoke that holds them in a
	// map does); the hub keeps the order a client gave.
	toV2Sorted := func(src *TeamV1, dst *TeamV2) error {
		if err := teamV1ToV2(src, dst); err != nil {
			return err
		}
		slices.SortFunc(dst.Spec.Members, func(a, b MemberV2) int { return strings.Compare(a.Name, b.Name) })
		return nil
	}
	sp := conversion.NewSpoke("v1", toV2Sorted, teamV2ToV1).PreservingWith(membersByName)
	hubBA := func() *TeamV2 {
		h := &TeamV2{ObjectMeta: metav1.ObjectMeta{Name: "t"}}
		h.Spec.Members = []MemberV2{{Name: "b", Zone: "zone-b"}, {Name: "a", Zone: "zone-a"}}
		return h
	}

	got := writeTeamAtV1(t, sp, hubBA(), func(v1 *TeamV1) { v1.Spec.Members[0].Role = "lead" }) // b
	require.Equal(t, []MemberV2{{Name: "a", Zone: "zone-a"}, {Name: "b", Role: "lead", Zone: "zone-b"}}, got.Spec.Members,
		"each member keeps its zone in the order the write gave")

	got = writeTeamAtV1(t, sp, hubBA(), func(v1 *TeamV1) { v1.Labels = map[string]string{"l": "v"} })
	require.Equal(t, hubBA().Spec.Members, got.Spec.Members, "a write that leaves the list alone keeps the hub's order")
}
