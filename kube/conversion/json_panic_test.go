package conversion_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/kube/conversion"
)

// GadgetSpec's own JSON methods panic on the values "marshal" and
// "unmarshal".
type GadgetSpec struct{ X string }

func (g GadgetSpec) MarshalJSON() ([]byte, error) {
	if g.X == "marshal" {
		panic("marshal boom")
	}
	return []byte(`{"X":"` + g.X + `"}`), nil
}

func (g *GadgetSpec) UnmarshalJSON(b []byte) error {
	if strings.Contains(string(b), `"unmarshal"`) {
		panic("unmarshal boom")
	}
	g.X = strings.TrimSuffix(strings.TrimPrefix(string(b), `{"X":"`), `"}`)
	return nil
}

type (
	GadgetV1 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              GadgetSpec `json:"spec"`
	}
	GadgetV2 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              GadgetSpec `json:"spec"`
	}
)

func TestAPanicInAGoTypesOwnJSONMethodsFailsTheObject(t *testing.T) {
	h, err := conversion.Handler(&humus.Setup{}, conversion.Kind[GadgetV2]{
		Group: "example.com", Kind: "Gadget", Hub: "v2",
		Spokes: []conversion.Spoke[GadgetV2]{conversion.NewSpoke("v1",
			func(s *GadgetV1, d *GadgetV2) error { d.ObjectMeta, d.Spec = s.ObjectMeta, s.Spec; return nil },
			func(s *GadgetV2, d *GadgetV1) error { d.ObjectMeta, d.Spec = s.ObjectMeta, s.Spec; return nil })},
	})
	require.NoError(t, err)
	gadget := func(name, x string) string {
		return `{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"` + name + `"},"spec":{"X":"` + x + `"}}`
	}
	resp := answer(t, h, review("example.com/v2", gadget("fine", "x"), gadget("m", "marshal"), gadget("u", "unmarshal")))
	require.Equal(t, metav1.StatusFailure, resp.Result.Status)
	require.Equal(t, "converting 2 of 3 objects to example.com/v2 failed: "+
		"object 1 (Gadget m): decoding or encoding it: panic: marshal boom; "+
		"object 2 (Gadget u): decoding or encoding it: panic: unmarshal boom", resp.Result.Message)
}
