package admission_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/kube/admission"
)

// Ported is a resource with a list of ports, whose elements the API
// server may hold fields of that Port lacks.
type (
	Port struct {
		Name string `json:"name"`
		Port int    `json:"port,omitempty"`
	}
	Ported struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              struct {
			Ports []Port `json:"ports"`
		} `json:"spec"`
	}
)

func TestADefaultingPatchKeepsTheFieldsTLacksInAListsElements(t *testing.T) {
	h, err := admission.Default(&humus.Setup{}, admission.Defaulting[Ported]{Resource: widgets,
		Default: func(ctx context.Context, p *Ported) error {
			for i := range p.Spec.Ports {
				if p.Spec.Ports[i].Port == 0 {
					p.Spec.Ports[i].Port = 80
				}
			}
			switch {
			case len(p.Spec.Ports) == 1:
				p.Spec.Ports = append(p.Spec.Ports, Port{Name: "metrics", Port: 9090})
			case len(p.Spec.Ports) > 2:
				p.Spec.Ports = p.Spec.Ports[:2]
			}
			return nil
		}})
	require.NoError(t, err)
	ported := func(ports string) string {
		return `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"ports":[` + ports + `]}}`
	}
	for _, c := range []struct{ name, in, want string }{
		{"defaulted in place", `{"name":"a","protocol":"UDP"},{"name":"b","port":81,"appProtocol":"h2"}`,
			`{"name":"a","protocol":"UDP","port":80},{"name":"b","port":81,"appProtocol":"h2"}`},
		{"appended", `{"name":"a","port":81,"protocol":"UDP"}`,
			`{"name":"a","port":81,"protocol":"UDP"},{"name":"metrics","port":9090}`},
		{"shortened, so replaced whole", `{"name":"a","port":1,"protocol":"UDP"},{"name":"b","port":2},{"name":"c","port":3}`,
			`{"name":"a","port":1},{"name":"b","port":2}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := answer(t, h, review("CREATE", ported(c.in), ""))
			require.True(t, resp.Allowed, "%v", resp.Result)
			p, err := jsonpatch.DecodePatch(resp.Patch)
			require.NoError(t, err)
			patched, err := p.Apply([]byte(ported(c.in)))
			require.NoError(t, err, "the patch %s", resp.Patch)
			require.JSONEq(t, ported(c.want), string(patched), "the patch %s", resp.Patch)
		})
	}
}

// TestADefaultingPatchNeverMovesAFieldTLacksOntoAnotherElement: a Default
// that prepends an element (a sidecar injected first) or sorts the list
// leaves no index that provably holds the same element before and after,
// so the list is replaced whole, as Default left it: a field T lacks
// (protocol) is lost rather than landing on another element, as it did
// when the list was paired by index on its length alone.
func TestADefaultingPatchNeverMovesAFieldTLacksOntoAnotherElement(t *testing.T) {
	in := `{"name":"b","port":81,"protocol":"UDP"},{"name":"a","port":80}`
	for _, c := range []struct {
		name string
		def  func(p *Ported)
		want string
	}{
		{"prepended", func(p *Ported) { p.Spec.Ports = append([]Port{{Name: "sidecar", Port: 15000}}, p.Spec.Ports...) },
			`{"name":"sidecar","port":15000},{"name":"b","port":81},{"name":"a","port":80}`},
		{"sorted", func(p *Ported) {
			slices.SortFunc(p.Spec.Ports, func(x, y Port) int { return strings.Compare(x.Name, y.Name) })
		}, `{"name":"a","port":80},{"name":"b","port":81}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, err := admission.Default(&humus.Setup{}, admission.Defaulting[Ported]{Resource: widgets,
				Default: func(ctx context.Context, p *Ported) error { c.def(p); return nil }})
			require.NoError(t, err)
			ported := func(ports string) string {
				return `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"ports":[` + ports + `]}}`
			}
			resp := answer(t, h, review("CREATE", ported(in), ""))
			require.True(t, resp.Allowed, "%v", resp.Result)
			p, err := jsonpatch.DecodePatch(resp.Patch)
			require.NoError(t, err)
			patched, err := p.Apply([]byte(ported(in)))
			require.NoError(t, err, "the patch %s", resp.Patch)
			require.JSONEq(t, ported(c.want), string(patched), "the patch %s", resp.Patch)
		})
	}
}

// Brittle's spec panics as it decodes the value "panic".
type (
	BrittleSpec struct{ X string }
	Brittle     struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              BrittleSpec `json:"spec"`
	}
)

func (b *BrittleSpec) UnmarshalJSON(p []byte) error {
	if strings.Contains(string(p), `"panic"`) {
		panic("a spec that panics")
	}
	return nil
}

func TestAPanicInAGoTypesOwnJSONMethodsIsAnInternalError(t *testing.T) {
	validate, err := admission.Validate(&humus.Setup{}, admission.Validating[Brittle]{Resource: widgets,
		Create: func(context.Context, *Brittle) error { return nil }})
	require.NoError(t, err)
	def, err := admission.Default(&humus.Setup{}, admission.Defaulting[Brittle]{Resource: widgets,
		Default: func(context.Context, *Brittle) error { return nil }})
	require.NoError(t, err)
	for name, h := range map[string]http.Handler{"validating": validate, "defaulting": def} {
		t.Run(name, func(t *testing.T) {
			resp := answer(t, h, review("CREATE", widget(`{"X":"panic"}`), ""))
			require.False(t, resp.Allowed)
			require.Equal(t, &metav1.Status{Status: metav1.StatusFailure, Message: "panic: a spec that panics",
				Reason: metav1.StatusReasonInternalError, Code: 500}, resp.Result)
		})
	}
}
