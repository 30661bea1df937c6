package conversion_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/kube/conversion"
)

// BrittleSpec's own JSON methods panic on the values "marshal" and
// "unmarshal".
type BrittleSpec struct{ X string }

func (g BrittleSpec) MarshalJSON() ([]byte, error) {
	if g.X == "marshal" {
		panic("marshal boom")
	}
	return []byte(`{"X":"` + g.X + `"}`), nil
}

func (g *BrittleSpec) UnmarshalJSON(b []byte) error {
	if strings.Contains(string(b), `"unmarshal"`) {
		panic("unmarshal boom")
	}
	g.X = strings.TrimSuffix(strings.TrimPrefix(string(b), `{"X":"`), `"}`)
	return nil
}

type (
	BrittleV1 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              BrittleSpec `json:"spec"`
	}
	BrittleV2 struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              BrittleSpec `json:"spec"`
	}
)

func TestAPanicInAGoTypesOwnJSONMethodsFailsTheObject(t *testing.T) {
	h, err := conversion.Handler(&humus.Setup{}, conversion.Kind[BrittleV2]{
		Group: "example.com", Kind: "Brittle", Hub: "v2",
		Spokes: []conversion.Spoke[BrittleV2]{conversion.NewSpoke("v1",
			func(s *BrittleV1, d *BrittleV2) error { d.ObjectMeta, d.Spec = s.ObjectMeta, s.Spec; return nil },
			func(s *BrittleV2, d *BrittleV1) error { d.ObjectMeta, d.Spec = s.ObjectMeta, s.Spec; return nil })},
	})
	require.NoError(t, err)
	gadget := func(name, x string) string {
		return `{"apiVersion":"example.com/v1","kind":"Brittle","metadata":{"name":"` + name + `"},"spec":{"X":"` + x + `"}}`
	}
	resp := answer(t, h, review("example.com/v2", gadget("fine", "x"), gadget("m", "marshal"), gadget("u", "unmarshal")))
	require.Equal(t, metav1.StatusFailure, resp.Result.Status)
	require.Equal(t, "converting 2 of 3 objects to example.com/v2 failed: "+
		"object 1 (Brittle m): decoding or encoding it: panic: marshal boom; "+
		"object 2 (Brittle u): decoding or encoding it: panic: unmarshal boom", resp.Result.Message)
}
