//go:build controlplane

package controllertools_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/z5labs/humus/controlplane/controlplanetest"
)

// TestCronJobCRDOnTheAPIServer applies the ported CronJob CRD to a real API
// server with fieldValidation=Strict, waits until it is established, and
// shows the fixture's rules at work: a valid CronJob is stored with its
// defaults, and one that breaks a rule of each kind is refused with the
// server's message for each.
func TestCronJobCRDOnTheAPIServer(t *testing.T) {
	c := controlplanetest.Start(t)
	cfg := c.RESTConfig()
	ext, err := apiextensionsclient.NewForConfig(cfg)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)

	crd, err := CronJob.CRD()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	_, err = crds.Create(ctx, crd, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
	require.NoError(t, err, "the API server refused the ported CRD")
	w, err := crds.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + crd.Name})
	require.NoError(t, err)
	defer w.Stop()
	awaitEstablished(ctx, t, w.ResultChan())

	objects := dyn.Resource(CronJob.GVR()).Namespace("default")
	create := func(name string, spec map[string]any) (*unstructured.Unstructured, error) {
		return objects.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": CronJob.Group + "/" + CronJob.Version, "kind": CronJob.Kind,
			"metadata": map[string]any{"name": name}, "spec": spec,
		}}, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
	}

	got, err := create("valid", validSpec())
	require.NoError(t, err, "a valid CronJob")
	spec := got.Object["spec"].(map[string]any)
	require.Equal(t, "forty-two", spec["defaultedString"], "a Default")
	require.Equal(t, "kubebuilder-default", spec["doubleDefaultedString"])
	require.Equal(t, map[string]any{"foo": "forty-two"}, spec["defaultedEmptyObject"], "the default of a field of a defaulted object")

	bad := validSpec()
	bad["twoOfAKindPart0"] = "abc"
	bad["floatWithValidations"] = 2.5
	bad["int32WithValidations"] = 1
	bad["stringPair"] = []any{"a"}
	bad["hosts"] = []any{"Not_A_Host"}
	bad["intOrStringWithEnum"] = "baz"
	bad["minMaxProperties"] = map[string]any{"foo": "a", "bar": "b", "baz": "c"}
	bad["associativeList"] = []any{
		map[string]any{"name": "a", "secondary": 1, "foo": "x"},
		map[string]any{"name": "a", "secondary": 1, "foo": "y"},
	}
	_, err = create("invalid", bad)
	require.Error(t, err)
	for _, want := range []string{
		"spec.twoOfAKindPart0: Invalid value",
		"spec.floatWithValidations: Invalid value: 2.5",
		"spec.int32WithValidations: Invalid value: 1",
		"spec.stringPair: Invalid value",
		"spec.hosts[0]: Invalid value",
		"spec.intOrStringWithEnum: Unsupported value",
		"spec.minMaxProperties: Too many",
		"spec.associativeList[1]: Duplicate value",
	} {
		require.ErrorContains(t, err, want)
	}
	t.Log(err)

	// The API server runs CEL rules only on an object its schema accepts.
	bad = validSpec()
	bad["stringWithEvenLength"] = "odd"
	bad["stringWithEvenLengthAndGoodPrefix"] = "bad-"
	bad["stringWithEvenLengthAndMessageExpression"] = "abc"
	bad["onlyAllowSettingOnUpdate"] = 5
	_, err = create("invalid-cel", bad)
	require.Error(t, err)
	for _, want := range []string{
		"spec.stringWithEvenLength: Invalid value: \"odd\": must have even length",
		"spec.stringWithEvenLengthAndGoodPrefix: Invalid value: \"bad-\": must have good prefix",
		"spec.stringWithEvenLengthAndMessageExpression: Invalid value: \"abc\": abc has odd length, must be even",
		"spec.onlyAllowSettingOnUpdate: Invalid value: 5: must be set to 0 on creation",
	} {
		require.ErrorContains(t, err, want)
	}
	t.Log(err)
}

func awaitEstablished(ctx context.Context, t *testing.T, events <-chan watch.Event) {
	t.Helper()
	for {
		select {
		case <-ctx.Done():
			t.Fatalf("the CRD wasn't established: %v", ctx.Err())
		case ev, ok := <-events:
			require.True(t, ok, "the watch of the CRD ended")
			got, ok := ev.Object.(*apiextensionsv1.CustomResourceDefinition)
			if !ok {
				continue
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return
				}
			}
		}
	}
}

// validSpec is a CronJob spec that every rule of the port accepts, with
// each required field.
func validSpec() map[string]any {
	return map[string]any{
		"schedule":                                  "*/1 * * * *",
		"binaryName":                                "YWJj",
		"canBeNull":                                 nil,
		"jobTemplate":                               map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "busybox"}}}}}},
		"twoOfAKindPart0":                           "abcd",
		"twoOfAKindPart1":                           "abcd",
		"patternObject":                             "https://example.com",
		"embeddedResource":                          map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c"}},
		"unprunedJSON":                              map[string]any{"foo": "a", "bar": true, "extra": 1},
		"unprunedEmbeddedResource":                  map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c"}},
		"unprunedFomType":                           map[string]any{"concreteField": "a"},
		"unprunedFomTypeAndField":                   map[string]any{"concreteField": "a"},
		"associativeList":                           []any{map[string]any{"name": "a", "secondary": 1, "foo": "x"}},
		"k8sAssociativeList":                        []any{},
		"nestedassociativeList":                     []any{},
		"k8sNestedAssociativeList":                  []any{},
		"mapOfInfo":                                 map[string]any{},
		"nestedMapOfInfo":                           map[string]any{},
		"structWithSeveralFields":                   map[string]any{"foo": "a", "bar": true},
		"nestedStructWithSeveralFields":             map[string]any{"foo": "a", "bar": true},
		"nestedStructWithSeveralFieldsDoubleMarked": map[string]any{"foo": "a", "bar": true},
		"explicitlyRequiredKubebuilder":             "a",
		"explicitlyRequiredKubernetes":              "a",
		"explicitlyRequiredK8s":                     "a",
		"floatWithValidations":                      0.5,
		"float64WithValidations":                    1.5,
		"intWithValidations":                        2,
		"int32WithValidations":                      -2,
		"foo":                                       "a",
		"baz":                                       "b",
		"stringPair":                                []any{"a", "b"},
	}
}
