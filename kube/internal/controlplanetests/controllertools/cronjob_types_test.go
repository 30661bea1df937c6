// This file ports controller-tools' CronJob test types
// (kubernetes-sigs/controller-tools, pkg/crd/testdata/cronjob_types.go, at
// commit 434758187dddcaf646276fbe2c2ba40ff4e859d5) to kube: the types as they
// are there, without their markers, which cronjob_rules_test.go writes as
// kube rules instead.
//
// Copyright The Kubernetes Authors.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//	http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

package controllertools_test

import (
	"encoding"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"time"

	batchv1beta1 "k8s.io/api/batch/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// CronJobSpec defines the desired state of CronJob.
type CronJobSpec struct {
	Schedule                                  string                                  `json:"schedule"`
	StartingDeadlineSeconds                   *int64                                  `json:"startingDeadlineSeconds,omitempty"`
	ConcurrencyPolicy                         ConcurrencyPolicy                       `json:"concurrencyPolicy,omitempty"`
	K8sConcurrencyPolicy                      K8sConcurrencyPolicy                    `json:"k8sConcurrencyPolicy,omitempty"`
	Suspend                                   *bool                                   `json:"suspend,omitempty"`
	InternalData                              string                                  `json:"-"`
	NoReallySuspend                           *TotallyABool                           `json:"noReallySuspend,omitempty"`
	BinaryName                                []byte                                  `json:"binaryName"`
	CanBeNull                                 string                                  `json:"canBeNull"`
	JobTemplate                               batchv1beta1.JobTemplateSpec            `json:"jobTemplate"`
	SuccessfulJobsHistoryLimit                *int32                                  `json:"successfulJobsHistoryLimit,omitempty"`
	FailedJobsHistoryLimit                    *int32                                  `json:"failedJobsHistoryLimit,omitempty"`
	ByteSliceData                             map[string][]byte                       `json:"byteSliceData,omitempty"`
	StringSliceData                           map[string][]string                     `json:"stringSliceData,omitempty"`
	PtrData                                   map[string]*string                      `json:"ptrData,omitempty"`
	TwoOfAKindPart0                           string                                  `json:"twoOfAKindPart0"`
	TwoOfAKindPart1                           LongerString                            `json:"twoOfAKindPart1"`
	DefaultedString                           string                                  `json:"defaultedString"`
	DefaultedSlice                            []string                                `json:"defaultedSlice"`
	DefaultedObject                           []RootObject                            `json:"defaultedObject"`
	DefaultedEmptySlice                       []string                                `json:"defaultedEmptySlice"`
	DefaultedEmptyMap                         map[string]string                       `json:"defaultedEmptyMap"`
	DefaultedEmptyObject                      EmpiableObject                          `json:"defaultedEmptyObject"`
	DoubleDefaultedString                     string                                  `json:"doubleDefaultedString"`
	KubernetesDefaultedString                 string                                  `json:"kubernetesDefaultedString"`
	KubernetesDefaultedSlice                  []string                                `json:"kubernetesDefaultedSlice"`
	KubernetesDefaultedObject                 []RootObject                            `json:"kubernetesDefaultedObject"`
	KubernetesDefaultedEmptySlice             []string                                `json:"kubernetesDefaultedEmptySlice"`
	KubernetesDefaultedEmptyMap               map[string]string                       `json:"kubernetesDefaultedEmptyMap"`
	KubernetesDefaultedEmptyObject            EmpiableObject                          `json:"kubernetesDefaultedEmptyObject"`
	KubernetesDefaultedRef                    string                                  `json:"kubernetesDefaultedRef,omitempty"`
	PatternObject                             string                                  `json:"patternObject"`
	EmbeddedResource                          runtime.RawExtension                    `json:"embeddedResource"`
	UnprunedJSON                              NestedObject                            `json:"unprunedJSON"`
	UnprunedEmbeddedResource                  runtime.RawExtension                    `json:"unprunedEmbeddedResource"`
	UnprunedFromType                          Preserved                               `json:"unprunedFomType"`
	UnprunedFromTypeAndField                  Preserved                               `json:"unprunedFomTypeAndField"`
	AssociativeList                           []AssociativeType                       `json:"associativeList"`
	K8sAssociativeList                        []AssociativeType                       `json:"k8sAssociativeList"`
	K8sSetList                                []string                                `json:"k8sSetList,omitempty"`
	K8sAtomicList                             []string                                `json:"k8sAtomicList,omitempty"`
	NestedAssociativeList                     NestedAssociativeList                   `json:"nestedassociativeList"`
	K8sNestedAssociativeList                  K8sNestedAssociativeList                `json:"k8sNestedAssociativeList"`
	MapOfInfo                                 map[string][]byte                       `json:"mapOfInfo"`
	NestedMapOfInfo                           NestedMapOfInfo                         `json:"nestedMapOfInfo"`
	StructWithSeveralFields                   NestedObject                            `json:"structWithSeveralFields"`
	NestedStructWithSeveralFields             NestedStructWithSeveralFields           `json:"nestedStructWithSeveralFields"`
	NestedStructWithSeveralFieldsDoubleMarked NestedStructWithSeveralFields           `json:"nestedStructWithSeveralFieldsDoubleMarked"`
	JustNestedObject                          *JustNestedObject                       `json:"justNestedObject,omitempty"`
	ExplicitlyOptionalKubebuilder             string                                  `json:"explicitlyOptionalKubebuilder"`
	ExplicitlyOptionalKubernetes              string                                  `json:"explicitlyOptionalKubernetes"`
	ExplicitlyOptionalK8s                     string                                  `json:"explicitlyOptionalK8s"`
	ExplicitlyRequiredKubebuilder             string                                  `json:"explicitlyRequiredKubebuilder,omitempty"`
	ExplicitlyRequiredKubernetes              string                                  `json:"explicitlyRequiredKubernetes,omitempty"`
	ExplicitlyRequiredK8s                     string                                  `json:"explicitlyRequiredK8s,omitempty"`
	MinMaxProperties                          MinMaxObject                            `json:"minMaxProperties,omitempty"`
	Schemaless                                []byte                                  `json:"schemaless,omitempty"`
	IntOrStringWithAPattern                   *intstr.IntOrString                     `json:"intOrStringWithAPattern,omitempty"`
	IntOrStringWithEnum                       *intstr.IntOrString                     `json:"intOrStringWithEnum,omitempty"`
	NestedMap                                 map[string]map[string]string            `json:"nestedMap,omitempty"`
	NestedNestedMap                           map[string]map[string]map[string]string `json:"nestedNestedMap,omitempty"`
	ContainsNestedMapMap                      map[string]ContainsNestedMap            `json:"nestedMapInStruct,omitempty"`
	MapOfArraysOfFloats                       map[string][]bool                       `json:"mapOfArraysOfFloats,omitempty"`
	// The fixture has map[URL3]string, which encoding/json can't encode, as
	// URL3's MarshalText has a pointer receiver ("json: unsupported type"), and
	// kube refuses it; the port keys by *URL3, which encoding/json can.
	MapOfTextMarshalerKeys map[*URL3]string `json:"mapOfTextMarshalerKeys,omitempty"`
	FloatWithValidations   float64          `json:"floatWithValidations"`
	Float64WithValidations float64          `json:"float64WithValidations"`
	IntWithValidations     int              `json:"intWithValidations"`
	Int32WithValidations   int32            `json:"int32WithValidations"`

	unexportedField string //nolint:unused // the fixture's: an unexported field has no schema

	unexportedStruct `json:",inline"`
	ExportedStruct   `json:",inline"`

	StringWithEvenLength                     string                              `json:"stringWithEvenLength,omitempty"`
	StringWithEvenLengthAndMessageExpression string                              `json:"stringWithEvenLengthAndMessageExpression,omitempty"`
	StringWithEvenLengthAndGoodPrefix        StringEvenType                      `json:"stringWithEvenLengthAndGoodPrefix,omitempty"`
	ForbiddenInt                             int                                 `json:"forbiddenInt,omitempty"`
	Array                                    [3]int                              `json:"array,omitempty"`
	ArrayUsingCompositeLiteral               [len(struct{ X [3]int }{}.X)]string `json:"arrayUsingCompositeLiteral,omitempty"`
	Hosts                                    []string                            `json:"hosts,omitempty"`
	EnumSlice                                []int                               `json:"enumSlice,omitempty"`
	HostsAlias                               Hosts                               `json:"hostsAlias,omitempty"`
	AliasFromPackage                         corev1.IPFamilyPolicyType           `json:"aliasFromPackage,omitempty"`
	StringAlias                              StringAlias                         `json:"stringAlias,omitempty"`
	StringAliasPtr                           *StringAlias                        `json:"stringAliasPtr,omitempty"`
	StringAliasAddedValidation               StringAlias                         `json:"stringAliasAddedValidation,omitempty"`
	StringAliasAlreadyValidated              StringAliasWithValidation           `json:"stringAliasAlreadyValidated,omitempty"`
	StringAliasWithAddedTitle                StringAliasWithTitle                `json:"stringAliasWithAddedTitle,omitempty"`
	StringAliasWithTitle                     StringAliasWithTitle                `json:"stringAliasWithTitle,omitempty"`
	StringPair                               []string                            `json:"stringPair"`
	LongerStringArray                        []LongerString                      `json:"longerStringArray,omitempty"`
	IntOrStringArrayWithAPattern             []*intstr.IntOrString               `json:"intOrStringArrayWithAPattern,omitempty"`
	IntOrStringWithEnumSlice                 []intstr.IntOrString                `json:"intOrStringWithEnumSlice,omitempty"`
	Protocol                                 corev1.Protocol                     `json:"protocol,omitempty" protobuf:"bytes,4,opt,name=protocol,casttype=Protocol"`
	SelectableFieldString                    string                              `json:"selectableFieldString,omitempty"`

	InlineAlias          `json:",inline"`
	*InlinePointerStruct `json:",inline"`

	OnlyAllowSettingOnUpdate           int32                     `json:"onlyAllowSettingOnUpdate,omitempty"`
	LocallyBoundedInteger              UnmarkeredInteger         `json:"locallyBoundedInteger,omitempty"`
	LocallyBoundedString               UnmarkeredString          `json:"locallyBoundedString,omitempty"`
	FieldLevelAliasOverride            StringAliasWithValidation `json:"fieldLevelAliasOverride,omitempty"`
	FieldLevelLocalDeclarationOverride LongerString              `json:"fieldLevelLocalDeclarationOverride,omitempty"`
}

type InlineAlias = EmbeddedStruct

type EmbeddedStruct struct {
	FromEmbedded string `json:"fromEmbedded,omitempty"`
}

type InlinePointerStruct struct {
	FromPointer string `json:"fromPointer,omitempty"`
}

type StringAlias = string

type StringAliasWithTitle = string

type StringAliasWithValidation = string

type ContainsNestedMap struct {
	InnerMap map[string]string `json:"innerMap,omitempty"`
}

// Preserved encodes itself: its known field and everything else.
type Preserved struct {
	ConcreteField string         `json:"concreteField"`
	Rest          map[string]any `json:"-"`
}

func (p *Preserved) UnmarshalJSON(data []byte) error {
	if err := json.Unmarshal(data, &p.Rest); err != nil {
		return err
	}
	conc, found := p.Rest["concreteField"]
	if !found {
		return nil
	}
	concStr, isStr := conc.(string)
	if !isStr {
		return fmt.Errorf("concreteField was not string")
	}
	delete(p.Rest, "concreteField")
	p.ConcreteField = concStr
	return nil
}

func (p *Preserved) MarshalJSON() ([]byte, error) {
	full := make(map[string]any, len(p.Rest)+1)
	for k, v := range p.Rest {
		full[k] = v
	}
	full["concreteField"] = p.ConcreteField
	return json.Marshal(full)
}

type NestedObject struct {
	Foo string `json:"foo"`
	Bar bool   `json:"bar"`
}

type NestedStructWithSeveralFields NestedObject

type JustNestedObject NestedObject

type MinMaxObject struct {
	Foo string `json:"foo,omitempty"`
	Bar string `json:"bar,omitempty"`
	Baz string `json:"baz,omitempty"`
}

type EmpiableObject struct {
	Foo string `json:"foo,omitempty"`
	Bar string `json:"bar,omitempty"`
}

type unexportedStruct struct {
	Foo string `json:"foo"`

	bar string //nolint:unused // the fixture's: an unexported field has no schema
}

type ExportedStruct struct {
	Baz string `json:"baz"`

	qux string //nolint:unused // the fixture's: an unexported field has no schema
}

type RootObject struct {
	Nested NestedObject `json:"nested"`
}

type AssociativeType struct {
	Name      string `json:"name"`
	Secondary int    `json:"secondary"`
	Foo       string `json:"foo"`
}

type NestedAssociativeList []AssociativeType

type K8sNestedAssociativeList []AssociativeType

type NestedMapOfInfo map[string][]byte

type LongerString string

type TotallyABool bool

type Hosts []string

type UnmarkeredInteger int32

type UnmarkeredString string

func (t TotallyABool) MarshalJSON() ([]byte, error) {
	if t {
		return []byte(`"true"`), nil
	}
	return []byte(`"false"`), nil
}

func (t *TotallyABool) UnmarshalJSON(in []byte) error {
	switch string(in) {
	case `"true"`:
		*t = true
		return nil
	case `"false"`:
		*t = false
	default:
		return fmt.Errorf("bad TotallyABool value %q", string(in))
	}
	return nil
}

type URL struct {
	url.URL
}

func (u *URL) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf("%q", u.String())), nil
}

func (u *URL) UnmarshalJSON(b []byte) error {
	var ref string
	if err := json.Unmarshal(b, &ref); err != nil {
		return err
	}
	if ref == "" {
		*u = URL{}
		return nil
	}
	r, err := url.Parse(ref)
	if err != nil {
		return err
	}
	*u = URL{*r}
	return nil
}

func (u *URL) String() string {
	if u == nil {
		return ""
	}
	return u.URL.String()
}

type URL2 url.URL

func (u *URL2) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf("%q", u.String())), nil
}

func (u *URL2) UnmarshalJSON(b []byte) error {
	var ref string
	if err := json.Unmarshal(b, &ref); err != nil {
		return err
	}
	if ref == "" {
		*u = URL2{}
		return nil
	}
	r, err := url.Parse(ref)
	if err != nil {
		return err
	}
	*u = *(*URL2)(r)
	return nil
}

func (u *URL2) String() string {
	if u == nil {
		return ""
	}
	return (*url.URL)(u).String()
}

type URL3 struct{ url.URL }

var _ encoding.TextMarshaler = (*URL3)(nil)

func (u *URL3) MarshalText() (text []byte, err error) {
	return u.MarshalBinary()
}

type URL4 url.URL

var _ encoding.TextMarshaler = (*URL4)(nil)

func (u *URL4) MarshalText() (text []byte, err error) {
	return (*url.URL)(u).MarshalBinary()
}

type Time2 time.Time

var _ interface {
	encoding.TextMarshaler
	json.Marshaler
} = (*Time2)(nil)

func (t *Time2) MarshalText() (text []byte, err error) {
	return []byte((*time.Time)(t).String()), nil
}

func (t *Time2) MarshalJSON() ([]byte, error) {
	return strconv.AppendInt(nil, (*time.Time)(t).UnixMilli(), 10), nil
}

type Duration struct {
	Value time.Duration `json:"value"`
}

func (d Duration) MarshalJSON() ([]byte, error) {
	type durationWithoutUnmarshaler Duration
	return json.Marshal(durationWithoutUnmarshaler(d))
}

var _ json.Marshaler = Duration{}

type ConcurrencyPolicy string

type K8sConcurrencyPolicy string

type StringEvenType string

// CronJobStatus defines the observed state of CronJob.
type CronJobStatus struct {
	Active                []corev1.ObjectReference `json:"active,omitempty"`
	LastScheduleTime      *metav1.Time             `json:"lastScheduleTime,omitempty"`
	LastScheduleTime2     Time2                    `json:"lastScheduleTime2,omitempty"`
	LastScheduleMicroTime *metav1.MicroTime        `json:"lastScheduleMicroTime,omitempty"`
	LastActiveLogURL      *URL                     `json:"lastActiveLogURL,omitempty"`
	LastActiveLogURL2     *URL2                    `json:"lastActiveLogURL2,omitempty"`
	LastActiveLogURL3     *URL3                    `json:"lastActiveLogURL3,omitempty"`
	LastActiveLogURL4     *URL4                    `json:"lastActiveLogURL4,omitempty"`
	Runtime               *Duration                `json:"duration,omitempty"`
}
