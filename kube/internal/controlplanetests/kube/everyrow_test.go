package kube_test

import (
	"encoding/json"
	"fmt"
	"regexp"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/z5labs/humus/kube"
)

// EveryRowSpec has a field for every row of the spec's Go-to-schema table,
// and the fields every kind of constraint is tried on.
type EveryRowSpec struct {
	Base // embedded: Owner and Labels are promoted

	Bool    bool    `json:"bool"`
	Int8    int8    `json:"int8"`
	Int16   int16   `json:"int16"`
	Int32   int32   `json:"int32"`
	Uint8   uint8   `json:"uint8"`
	Uint16  uint16  `json:"uint16"`
	Int     int     `json:"int"`
	Int64   int64   `json:"int64"`
	Uint    uint    `json:"uint"`
	Uint32  uint32  `json:"uint32"`
	Uint64  uint64  `json:"uint64"`
	Float32 float32 `json:"float32"`
	Float64 float64 `json:"float64"`
	String  string  `json:"string"`

	Bytes []byte           `json:"bytes,omitempty"`
	Slice []string         `json:"slice,omitempty"`
	Array [2]int32         `json:"array"`
	Map   map[string]int64 `json:"map,omitempty"`

	Window      Window  `json:"window"`
	Pointer     *string `json:"pointer"`
	OmitPointer *Window `json:"omitPointer,omitempty"`

	Time        metav1.Time          `json:"time,omitzero"`
	MicroTime   metav1.MicroTime     `json:"microTime,omitzero"`
	Duration    metav1.Duration      `json:"duration,omitzero"`
	Quantity    resource.Quantity    `json:"quantity,omitzero"`
	IntOrString intstr.IntOrString   `json:"intOrString,omitzero"`
	Raw         runtime.RawExtension `json:"raw,omitzero"`
	Template    Template             `json:"template,omitzero"`

	Color     Color      `json:"color,omitempty"`
	Endpoints []Endpoint `json:"endpoints,omitempty"`
	Tags      []string   `json:"tags,omitempty"`
	Mode      string     `json:"mode,omitempty"`
	Note      string     `json:"note,omitempty"`

	Skipped    string `json:"-"`
	unexported string //nolint:unused // never encoded, so never in the schema
}

// Base is embedded in EveryRowSpec.
type Base struct {
	Owner  string            `json:"owner"`
	Labels map[string]string `json:"labels,omitempty"`
}

// Window is constrained by a CEL rule of its own type.
type Window struct {
	Min int32 `json:"min"`
	Max int32 `json:"max"`
}

// Template holds metav1.ObjectMeta, as a pod template does.
type Template struct {
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Image string `json:"image,omitempty"`
}

// Endpoint is an item of a ListMap keyed by name and protocol.
type Endpoint struct {
	Name     string `json:"name"`
	Protocol string `json:"protocol,omitempty"`
	Port     int32  `json:"port"`
}

// Color encodes itself as a string, so it needs a Schema.
type Color int

// The colours, and their names.
const (
	Red Color = iota + 1
	Green
)

func (c Color) MarshalJSON() ([]byte, error) {
	switch c {
	case Red:
		return []byte(`"red"`), nil
	case Green:
		return []byte(`"green"`), nil
	}
	return nil, fmt.Errorf("no colour %d", int(c))
}

func (c *Color) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	switch s {
	case "red":
		*c = Red
	case "green":
		*c = Green
	default:
		return fmt.Errorf("no colour %q", s)
	}
	return nil
}

// EveryRowStatus is the status of EveryRow.
type EveryRowStatus struct {
	Observed   *int64             `json:"observed,omitempty"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

var (
	every         EveryRowSpec
	window        Window
	endpoint      Endpoint
	everyStatus   EveryRowStatus
	lowercase     = regexp.MustCompile(`^[a-z]+$`)
	colourSchema  = apiextensionsv1.JSONSchemaProps{Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"red"`)}, {Raw: []byte(`"green"`)}}}
	everyRowRules = []kube.TypeRules{
		kube.Rules(&every,
			kube.Field(&every.Owner).MinLength(1).MaxLength(63).Description("Who owns it, promoted from Base."),
			kube.Field(&every.Int32).Minimum(-5).Maximum(5),
			kube.Field(&every.Float64).Minimum(0.5),
			kube.Field(&every.String).Pattern(lowercase).Default("abc"),
			kube.Field(&every.Slice).MinItems(1).MaxItems(4),
			kube.Field(&every.Endpoints).ListMap("name", "protocol").MaxItems(3),
			kube.Field(&every.Tags).ListSet().MaxItems(5),
			kube.Field(&every.Mode).Enum("fast", "slow").Default("fast"),
			kube.Field(&every.Note).MaxLength(20).Validation("!self.contains('secret')", "note must not mention secrets"),
		).Description("Every row of the table.").Validation("self.int32 != 3 || self.bool", "int32 3 needs bool"),
		kube.Rules(&window).Validation("self.min <= self.max", "min must not exceed max"),
		kube.Rules(&endpoint,
			kube.Field(&endpoint.Protocol).Enum("TCP", "UDP").Default("TCP"),
			kube.Field(&endpoint.Port).Minimum(1).Maximum(65535),
		),
		kube.Rules(&everyStatus, kube.Field(&everyStatus.Conditions).ListMap("type")),
		kube.Schema[Color](colourSchema),
	}

	EveryRow = kube.Resource[EveryRowSpec, EveryRowStatus]{
		Group:   "test.humus.z5labs.dev",
		Version: "v1",
		Kind:    "EveryRow",
		Plural:  "everyrows",
		Scope:   kube.Namespaced,
		Rules:   everyRowRules,
	}
)
