package conversion_test

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/kube/conversion"
)

// Two versions of a Thing: v2 (the hub) has a paused flag and limits v1
// lacks, and an int64 count where v1's is an int32.
type (
	ThingV1 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              struct {
			Count int32  `json:"count"`
			Name  string `json:"name,omitempty"`
		} `json:"spec"`
	}
	ThingV2 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              struct {
			Count  int64             `json:"count"`
			Name   string            `json:"name,omitempty"`
			Paused bool              `json:"paused,omitempty"`
			Limits map[string]string `json:"limits,omitempty"`
		} `json:"spec"`
	}
)

func thingV1ToV2(src *ThingV1, dst *ThingV2) error {
	dst.ObjectMeta = src.ObjectMeta
	dst.Spec.Count, dst.Spec.Name = int64(src.Spec.Count), src.Spec.Name
	return nil
}

// thingV2ToV1 clamps the count to v1's int32.
func thingV2ToV1(src *ThingV2, dst *ThingV1) error {
	dst.ObjectMeta = src.ObjectMeta
	dst.Spec.Count = int32(max(math.MinInt32, min(math.MaxInt32, src.Spec.Count)))
	dst.Spec.Name = src.Spec.Name
	return nil
}

func hubThing() *ThingV2 {
	h := &ThingV2{ObjectMeta: metav1.ObjectMeta{Name: "t", Annotations: map[string]string{"note": "x"}}}
	h.Spec.Count, h.Spec.Name, h.Spec.Paused = 5_000_000_000, "a", true
	h.Spec.Limits = map[string]string{"cpu": "1"}
	return h
}

// readAtV1 converts hub to v1 through sp, as the API server does for a
// client that reads at v1.
func readAtV1(t *testing.T, sp conversion.Spoke[ThingV2], hub *ThingV2) *ThingV1 {
	t.Helper()
	var v1 ThingV1
	require.NoError(t, conversion.FromHub(sp, hub, &v1))
	return &v1
}

// writeAtV1 converts v1 to the hub through sp, as the API server does for
// a client that writes at v1.
func writeAtV1(t *testing.T, sp conversion.Spoke[ThingV2], v1 *ThingV1) *ThingV2 {
	t.Helper()
	var hub ThingV2
	require.NoError(t, conversion.ToHub(sp, v1, &hub))
	return &hub
}

func TestPreservingKeepsHubOnlyFieldsThroughAWriteAtTheSpoke(t *testing.T) {
	sp := conversion.NewSpoke("v1", thingV1ToV2, thingV2ToV1).Preserving()
	v1 := readAtV1(t, sp, hubThing())
	require.Contains(t, v1.Annotations, conversion.PreservedAnnotation)
	require.Equal(t, "x", v1.Annotations["note"])

	v1.Spec.Name = "b" // the client changes a field both versions have
	got := writeAtV1(t, sp, v1)

	want := hubThing()
	want.Spec.Name = "b"
	require.Equal(t, want, got, "paused, limits and the count v1 cannot hold come back; the annotation does not reach the hub")

	// Without Preserving, the same write loses them.
	plain := conversion.NewSpoke("v1", thingV1ToV2, thingV2ToV1)
	lost := writeAtV1(t, plain, readAtV1(t, plain, hubThing()))
	require.False(t, lost.Spec.Paused)
	require.Nil(t, lost.Spec.Limits)
	require.EqualValues(t, math.MaxInt32, lost.Spec.Count)
}

func TestPreservingLetsAWriteAtTheSpokeWinOverStaleData(t *testing.T) {
	sp := conversion.NewSpoke("v1", thingV1ToV2, thingV2ToV1).Preserving()
	v1 := readAtV1(t, sp, hubThing())
	require.EqualValues(t, math.MaxInt32, v1.Spec.Count, "v1 shows the count clamped")

	v1.Spec.Count = 7 // the client changes the count v1 could not hold
	got := writeAtV1(t, sp, v1)

	require.EqualValues(t, 7, got.Spec.Count, "the preserved 5000000000 is stale: the write's 7 wins")
	require.True(t, got.Spec.Paused, "what the write did not touch is still restored")
	require.Equal(t, map[string]string{"cpu": "1"}, got.Spec.Limits)
}

func TestPreservingAddsNoAnnotationWhenNothingIsLost(t *testing.T) {
	sp := conversion.NewSpoke("v1", thingV1ToV2, thingV2ToV1).Preserving()
	h := &ThingV2{ObjectMeta: metav1.ObjectMeta{Name: "t"}}
	h.Spec.Count, h.Spec.Name = 3, "a"
	v1 := readAtV1(t, sp, h)
	require.Nil(t, v1.Annotations)
	require.Equal(t, h, writeAtV1(t, sp, v1))
}

func TestPreservingNamesABrokenAnnotation(t *testing.T) {
	sp := conversion.NewSpoke("v1", thingV1ToV2, thingV2ToV1).Preserving()
	v1 := &ThingV1{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{conversion.PreservedAnnotation: "{"}}}
	var hub ThingV2
	err := conversion.ToHub(sp, v1, &hub)
	require.ErrorContains(t, err, "preserving: the annotation conversion.humus.z5labs.dev/preserved is not what Preserving wrote")
}

func TestRoundTripPassesAPreservingSpokeAndFailsWithoutIt(t *testing.T) {
	things := func(sp conversion.Spoke[ThingV2]) conversion.Kind[ThingV2] {
		return conversion.Kind[ThingV2]{Group: "example.com", Kind: "Thing", Hub: "v2", Spokes: []conversion.Spoke[ThingV2]{sp}}
	}
	require.NoError(t, conversion.RoundTrip(things(conversion.NewSpoke("v1", thingV1ToV2, thingV2ToV1).Preserving()), conversion.RoundTripOptions{}))

	err := conversion.RoundTrip(things(conversion.NewSpoke("v1", thingV1ToV2, thingV2ToV1)), conversion.RoundTripOptions{})
	require.Error(t, err)
	require.Regexp(t, `Thing\.example\.com hub v2 → v1 → hub v2 \(seed 1, iteration \d+\): came back different at spec\.(count|limits|paused)`, err.Error())
	require.NotContains(t, err.Error(), "v1 → hub v2 → v1", "v1 loses nothing through the hub")
}

func TestAPreservingSpokeKeepsAHubOnlyFieldThroughTheHandler(t *testing.T) {
	h, err := conversion.Handler(&humus.Setup{}, conversion.Kind[ThingV2]{
		Group: "example.com", Kind: "Thing", Hub: "v2",
		Spokes: []conversion.Spoke[ThingV2]{conversion.NewSpoke("v1", thingV1ToV2, thingV2ToV1).Preserving()},
	})
	require.NoError(t, err)
	thing := func(version, metadata, spec string) string {
		return `{"apiVersion":"example.com/` + version + `","kind":"Thing","metadata":` + metadata + `,"spec":` + spec + `}`
	}
	// Read at v1: the stored v2 object comes with the annotation.
	resp := answer(t, h, review("example.com/v1", thing("v2", `{"name":"t","uid":"u","resourceVersion":"1"}`, `{"count":3,"paused":true}`)))
	require.Equal(t, metav1.StatusSuccess, resp.Result.Status, resp.Result.Message)
	require.Len(t, resp.ConvertedObjects, 1)
	var v1 ThingV1
	require.NoError(t, json.Unmarshal(resp.ConvertedObjects[0].Raw, &v1))
	require.Contains(t, v1.Annotations, conversion.PreservedAnnotation)

	// Written back at v1 with a new count: stored at v2, paused kept, the
	// annotation gone.
	v1.Spec.Count = 4
	v1.APIVersion, v1.Kind = "example.com/v1", "Thing"
	raw, err := json.Marshal(&v1)
	require.NoError(t, err)
	resp = answer(t, h, review("example.com/v2", string(raw)))
	require.Equal(t, metav1.StatusSuccess, resp.Result.Status, resp.Result.Message)
	var v2 ThingV2
	require.NoError(t, json.Unmarshal(resp.ConvertedObjects[0].Raw, &v2))
	require.EqualValues(t, 4, v2.Spec.Count)
	require.True(t, v2.Spec.Paused)
	require.NotContains(t, v2.Annotations, conversion.PreservedAnnotation)
}

// Two versions of a Tuned object: v2 (the hub) has a zone in the optional
// spec.advanced, which v1's lacks.
type (
	TunedV1 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              struct {
			Advanced *AdvancedV1 `json:"advanced,omitempty"`
		} `json:"spec"`
	}
	AdvancedV1 struct {
		Mode string `json:"mode"`
	}
	TunedV2 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              struct {
			Advanced *AdvancedV2 `json:"advanced,omitempty"`
		} `json:"spec"`
	}
	AdvancedV2 struct {
		Mode string `json:"mode"`
		Zone string `json:"zone,omitempty"`
	}
)

func tunedV1ToV2(src *TunedV1, dst *TunedV2) error {
	dst.ObjectMeta = src.ObjectMeta
	if a := src.Spec.Advanced; a != nil {
		dst.Spec.Advanced = &AdvancedV2{Mode: a.Mode}
	}
	return nil
}

func tunedV2ToV1(src *TunedV2, dst *TunedV1) error {
	dst.ObjectMeta = src.ObjectMeta
	if a := src.Spec.Advanced; a != nil {
		dst.Spec.Advanced = &AdvancedV1{Mode: a.Mode}
	}
	return nil
}

func TestPreservingLetsAWriteAtTheSpokeRemoveAnObjectHoldingHubOnlyFields(t *testing.T) {
	sp := conversion.NewSpoke("v1", tunedV1ToV2, tunedV2ToV1).Preserving()
	hub := &TunedV2{ObjectMeta: metav1.ObjectMeta{Name: "t"}}
	hub.Spec.Advanced = &AdvancedV2{Mode: "fast", Zone: "z1"}
	var v1 TunedV1
	require.NoError(t, conversion.FromHub(sp, hub, &v1))
	require.Contains(t, v1.Annotations, conversion.PreservedAnnotation, "the zone is kept")

	v1.Spec.Advanced = nil // the client removes the section
	var got TunedV2
	require.NoError(t, conversion.ToHub(sp, &v1, &got))
	require.Nil(t, got.Spec.Advanced, "the write removed spec.advanced: its zone must not bring it back")

	// A write that keeps the section keeps its zone.
	require.NoError(t, conversion.FromHub(sp, hub, &v1))
	v1.Spec.Advanced.Mode = "slow"
	got = TunedV2{}
	require.NoError(t, conversion.ToHub(sp, &v1, &got))
	require.Equal(t, &AdvancedV2{Mode: "slow", Zone: "z1"}, got.Spec.Advanced)
}
