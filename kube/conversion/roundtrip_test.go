package conversion_test

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/randfill"

	"github.com/z5labs/humus/kube/conversion"
)

// Two versions of a Gadget: v2 (the hub) has a color and labels under
// spec; v1 has the same fields under other names.
type (
	GadgetV1 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              struct {
			Count  int               `json:"count"`
			Colour string            `json:"colour,omitempty"`
			Tags   map[string]string `json:"tags,omitempty"`
		} `json:"spec"`
	}
	GadgetV2 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              struct {
			Count  int               `json:"count"`
			Color  string            `json:"color,omitempty"`
			Labels map[string]string `json:"labels,omitempty"`
		} `json:"spec"`
	}
)

func gadgetV1ToV2(src *GadgetV1, dst *GadgetV2) error {
	dst.ObjectMeta = src.ObjectMeta
	dst.Spec.Count, dst.Spec.Color, dst.Spec.Labels = src.Spec.Count, src.Spec.Colour, src.Spec.Tags
	return nil
}

func gadgetV2ToV1(src *GadgetV2, dst *GadgetV1) error {
	dst.ObjectMeta = src.ObjectMeta
	dst.Spec.Count, dst.Spec.Colour, dst.Spec.Tags = src.Spec.Count, src.Spec.Color, src.Spec.Labels
	return nil
}

func gadgets(sp conversion.Spoke[GadgetV2]) conversion.Kind[GadgetV2] {
	return conversion.Kind[GadgetV2]{Group: "example.com", Kind: "Gadget", Hub: "v2", Spokes: []conversion.Spoke[GadgetV2]{sp}}
}

func TestRoundTripPassesLosslessConversions(t *testing.T) {
	require.NoError(t, conversion.RoundTrip(gadgets(conversion.NewSpoke("v1", gadgetV1ToV2, gadgetV2ToV1)), conversion.RoundTripOptions{}))
}

func TestRoundTripNamesTheDroppedFieldInBothDirections(t *testing.T) {
	// The spoke's conversion to the hub forgets colour: v1 → v2 → v1
	// loses spec.colour, and v2 → v1 → v2 spec.color.
	dropColour := func(src *GadgetV1, dst *GadgetV2) error {
		err := gadgetV1ToV2(src, dst)
		dst.Spec.Color = ""
		return err
	}
	err := conversion.RoundTrip(gadgets(conversion.NewSpoke("v1", dropColour, gadgetV2ToV1)), conversion.RoundTripOptions{Seed: 7})
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, "Gadget.example.com v1 → hub v2 → v1 (seed 7, iteration ")
	require.Contains(t, msg, "came back different at spec.colour: sent \"")
	require.Contains(t, msg, "Gadget.example.com hub v2 → v1 → hub v2 (seed 7, iteration ")
	require.Contains(t, msg, "came back different at spec.color: sent \"")
	require.NotContains(t, msg, "spec.count", "only the dropped field differs")
}

func TestRoundTripNamesAFieldDroppedInsideAMap(t *testing.T) {
	// fromHub drops the label "lost": the path names its key.
	oneTag := func(src *GadgetV2, dst *GadgetV1) error {
		err := gadgetV2ToV1(src, dst)
		dst.Spec.Tags = maps.Clone(src.Spec.Labels)
		delete(dst.Spec.Tags, "lost")
		return err
	}
	withLost := func(g *GadgetV2, c randfill.Continue) {
		c.FillNoCustom(g)
		g.Spec.Labels = map[string]string{"kept": "a", "lost": "b"}
	}
	err := conversion.RoundTrip(gadgets(conversion.NewSpoke("v1", gadgetV1ToV2, oneTag)), conversion.RoundTripOptions{Funcs: []any{withLost}})
	require.Error(t, err)
	require.Contains(t, err.Error(), `Gadget.example.com hub v2 → v1 → hub v2 (seed 1, iteration 0): came back different at spec.labels.lost: sent "b", got absent`)
}

func TestRoundTripNamesConversionErrorsAndPanics(t *testing.T) {
	failing := func(*GadgetV1, *GadgetV2) error { return errors.New("no way") }
	panicking := func(*GadgetV2, *GadgetV1) error { panic("boom") }
	err := conversion.RoundTrip(gadgets(conversion.NewSpoke("v1", failing, panicking)), conversion.RoundTripOptions{Iterations: 3})
	require.Error(t, err)
	require.Contains(t, err.Error(), "v1 → hub v2 → v1 (seed 1, iteration 0): there: no way")
	require.Contains(t, err.Error(), "hub v2 → v1 → hub v2 (seed 1, iteration 0): there: panic: boom")
}

func TestRoundTripNamesMistakesInTheKind(t *testing.T) {
	err := conversion.RoundTrip(conversion.Kind[GadgetV2]{Group: "example.com", Kind: "Gadget"}, conversion.RoundTripOptions{})
	require.Error(t, err)
	require.Contains(t, err.Error(), "conversion: RoundTrip of Gadget.example.com: Hub is empty")
	require.Contains(t, err.Error(), "conversion: RoundTrip of Gadget.example.com: no spoke")
}

func TestRoundTripUsesTheUsersFillFunctions(t *testing.T) {
	// A conversion that refuses a count over 999 passes once the fill
	// function makes every count valid, and fails without it.
	strict := func(src *GadgetV1, dst *GadgetV2) error {
		if src.Spec.Count > 999 {
			return errors.New("count over 999")
		}
		return gadgetV1ToV2(src, dst)
	}
	k := gadgets(conversion.NewSpoke("v1", strict, gadgetV2ToV1))
	err := conversion.RoundTrip(k, conversion.RoundTripOptions{})
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "count over 999"), err.Error())
	validCount := func(n *int, c randfill.Continue) { *n = int(c.Uint64() % 1000) }
	require.NoError(t, conversion.RoundTrip(k, conversion.RoundTripOptions{Funcs: []any{validCount}}))
}

// Two versions of a Counter: v2, the hub, counts in an int64; v1 in a
// float64, which holds an integer exactly only up to 2^53.
type (
	CounterV1 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Count             float64 `json:"count"`
	}
	CounterV2 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Count             int64 `json:"count"`
	}
)

func TestRoundTripComparesIntegersExactly(t *testing.T) {
	k := conversion.Kind[CounterV2]{Group: "example.com", Kind: "Counter", Hub: "v2", Spokes: []conversion.Spoke[CounterV2]{
		conversion.NewSpoke("v1",
			func(src *CounterV1, dst *CounterV2) error {
				dst.ObjectMeta, dst.Count = src.ObjectMeta, int64(src.Count)
				return nil
			},
			func(src *CounterV2, dst *CounterV1) error {
				dst.ObjectMeta, dst.Count = src.ObjectMeta, float64(src.Count)
				return nil
			}),
	}}
	err := conversion.RoundTrip(k, conversion.RoundTripOptions{Iterations: 10, Funcs: []any{
		// Counts above 2^53, which a float64 rounds to an even number, and
		// in v1 integers a float64 holds exactly.
		func(n *int64, c randfill.Continue) { *n = 1<<53 + 1 + 2*int64(c.Int31n(1<<20)) },
		func(f *float64, c randfill.Continue) { *f = float64(c.Int31()) },
	}})
	require.Error(t, err, "9007199254740993 comes back 9007199254740992: lost, though equal as float64")
	require.Regexp(t, `Counter\.example\.com hub v2 → v1 → hub v2 \(seed 1, iteration 0\): came back different at count: sent 9007\d{12}, got 9007\d{12}`, err.Error())
	require.NotContains(t, err.Error(), "v1 → hub v2 → v1")
}
