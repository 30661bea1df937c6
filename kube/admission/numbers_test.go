package admission_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/kube/admission"
)

// Quota is a resource with a uint64, which a float64 holds exactly only up
// to 2^53.
type Quota struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Bytes uint64 `json:"bytes"`
	} `json:"spec"`
}

func TestADefaultingPatchCarriesEveryDigitOfANumber(t *testing.T) {
	h, err := admission.Default(&humus.Setup{}, admission.Defaulting[Quota]{Resource: widgets,
		Default: func(ctx context.Context, q *Quota) error {
			if q.Spec.Bytes == 0 {
				q.Spec.Bytes = math.MaxUint64
			}
			return nil
		},
	})
	require.NoError(t, err)
	resp := answer(t, h, review("CREATE", `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"bytes":0}}`, ""))
	require.True(t, resp.Allowed)
	require.JSONEq(t, `[{"op":"replace","path":"/spec/bytes","value":18446744073709551615}]`, string(resp.Patch))
	require.Contains(t, string(resp.Patch), `18446744073709551615`, "not 18446744073709552000, as a float64 has it")
}
