package storagemigration

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus/humustest"
	"go.opentelemetry.io/contrib/bridges/otelslog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
)

const (
	testScope     = "storagemigration_test"
	testNamespace = "default"
)

var widgetGVR = schema.GroupVersionResource{Group: "test.example.com", Version: "v1", Resource: "widgets"}

// widgetsCRD is the test resource's CRD as the API server serves it: v1
// and v2, v2 stored, both in storedVersions, at generation 1.
func widgetsCRD(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.test.example.com", Generation: 1, ResourceVersion: "1"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "test.example.com",
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true},
				{Name: "v2", Served: true, Storage: true},
			},
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{StoredVersions: []string{"v1", "v2"}},
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	require.NoError(t, err)
	return &unstructured.Unstructured{Object: m}
}

// cluster is a fake API server holding the widgets CRD and the named
// widgets, each at resourceVersion 5.
type cluster struct {
	dynamic  *dynamicfake.FakeDynamicClient
	metadata *metadatafake.FakeMetadataClient
}

func newCluster(t *testing.T, widgets ...string) *cluster {
	t.Helper()
	c := &cluster{
		dynamic: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{crdGVR: "CustomResourceDefinitionList"}, widgetsCRD(t)),
		metadata: metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme()),
	}
	for _, name := range widgets {
		require.NoError(t, c.metadata.Tracker().Create(widgetGVR, &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: "test.example.com/v1", Kind: "Widget"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace, ResourceVersion: "5"},
		}, testNamespace))
	}
	return c
}

// migration is the job of the controller "test" on c's widgets, recording
// into tel.
func (c *cluster) migration(t *testing.T, tel *humustest.Telemetry) *Migration {
	t.Helper()
	m, err := New(Config{
		Name:                "test",
		ControllerAttribute: attribute.String("humus.kube.controller.name", "test"),
		Resource:            widgetGVR,
		Dynamic:             c.dynamic,
		Metadata:            c.metadata,
		Log:                 slog.New(otelslog.NewHandler(testScope, otelslog.WithLoggerProvider(tel.LoggerProvider))),
		Meter:               tel.MeterProvider.Meter(testScope),
	})
	require.NoError(t, err)
	return m
}

// storedVersions is the CRD's status.storedVersions and its
// StorageMigrating condition.
func (c *cluster) storedVersions(t *testing.T) ([]string, map[string]any) {
	t.Helper()
	crd, err := c.dynamic.Resource(crdGVR).Get(context.Background(), "widgets.test.example.com", metav1.GetOptions{})
	require.NoError(t, err)
	sv, _, _ := unstructured.NestedStringSlice(crd.Object, "status", "storedVersions")
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, cond := range conds {
		if cond := cond.(map[string]any); cond["type"] == "StorageMigrating" {
			return sv, cond
		}
	}
	return sv, nil
}

// TestStorageMigrationStartsOverWhenTheCRDChangesMidway changes the CRD's
// spec (its generation) while the objects are rewritten, as a second
// change of the storage version would: objects written between the list
// and that change may be stored at a version the run didn't write them
// at, so the run must not set storedVersions; the next run does.
func TestStorageMigrationStartsOverWhenTheCRDChangesMidway(t *testing.T) {
	f := newCluster(t, "w1", "w2")
	changed := false
	f.metadata.PrependReactor("patch", "widgets", func(clienttesting.Action) (bool, runtime.Object, error) {
		if !changed {
			changed = true
			crd, err := f.dynamic.Resource(crdGVR).Get(context.Background(), "widgets.test.example.com", metav1.GetOptions{})
			require.NoError(t, err)
			crd.SetGeneration(2)
			_, err = f.dynamic.Resource(crdGVR).Update(context.Background(), crd, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
		return false, nil, nil
	})
	tel := humustest.NewTelemetry(t)
	m := f.migration(t, tel)

	err := m.once(t.Context())
	require.ErrorContains(t, err, "kube: migrating the storage of widgets.test.example.com: the CRD's spec changed during the migration (generation 1, now 2; storage version v2, now v2): it runs again")
	sv, cond := f.storedVersions(t)
	require.Equal(t, []string{"v1", "v2"}, sv, "storedVersions is kept")
	require.Equal(t, "MigrationFailed", cond["reason"])
	require.Equal(t, "False", cond["status"])

	require.NoError(t, m.once(t.Context()))
	sv, cond = f.storedVersions(t)
	require.Equal(t, []string{"v2"}, sv)
	require.Equal(t, "MigrationSucceeded", cond["reason"])
	require.Equal(t, int64(2), cond["observedGeneration"])

	require.NoError(t, m.once(t.Context()), "a third run has nothing to do")
	var outcomes []string
	for _, r := range tel.Records() {
		outcomes = append(outcomes, r.Body().AsString())
	}
	require.Contains(t, outcomes, "storage migration not needed: every object is stored at the storage version")
}

// TestStorageMigrationTakesAConflictOrANotFoundAsDone: an object written
// since the list (a conflict on the resourceVersion the patch names) is
// stored at the storage version, and one deleted since (NotFound) needs
// nothing; neither fails the run. Any other error does, and keeps
// storedVersions.
func TestStorageMigrationTakesAConflictOrANotFoundAsDone(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		failed string // "" when the run succeeds
	}{
		{"conflict and not found", nil, ""},
		{"an internal error", apierrors.NewInternalError(errors.New("etcd is gone")), `rewriting default/w3: Internal error occurred: etcd is gone`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCluster(t, "w1", "w2", "w3")
			gr := widgetGVR.GroupResource()
			f.metadata.PrependReactor("patch", "widgets", func(a clienttesting.Action) (bool, runtime.Object, error) {
				switch a.(clienttesting.PatchActionImpl).GetName() {
				case "w1":
					return true, nil, apierrors.NewConflict(gr, "w1", errors.New("the object has been modified"))
				case "w2":
					return true, nil, apierrors.NewNotFound(gr, "w2")
				case "w3":
					if tc.err != nil {
						return true, nil, tc.err
					}
				}
				return false, nil, nil
			})
			tel := humustest.NewTelemetry(t)
			mig := f.migration(t, tel)
			writes := &recordedWrites{}
			mig.cfg.Writes = writes
			err := mig.once(t.Context())
			sv, _ := f.storedVersions(t)
			if tc.failed != "" {
				require.ErrorContains(t, err, tc.failed)
				require.Equal(t, []string{"v1", "v2"}, sv)
				require.Equal(t, []string{"writing default/w1", "wrote default/w1 <nil>", "writing default/w2", "wrote default/w2 <nil>",
					"writing default/w3", "wrote default/w3 <nil>"}, writes.calls, "a failed patch is told, with no object")
				return
			}
			require.Equal(t, []string{"writing default/w1", "wrote default/w1 <nil>", "writing default/w2", "wrote default/w2 <nil>",
				"writing default/w3", "wrote default/w3 5 skipped"}, writes.calls, "each rewrite is told before and after, a skipped one as such")
			require.NoError(t, err)
			require.Equal(t, []string{"v2"}, sv)
			m, ok := tel.Metric(testScope, "humus.kube.controller.storage_migration.objects")
			require.True(t, ok)
			got := map[string]int64{}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				v, _ := dp.Attributes.Value(attrResult)
				got[v.AsString()] += dp.Value
			}
			require.Equal(t, map[string]int64{"gone": 2, "unchanged": 1}, got, "the fake answers w3's patch with its resourceVersion unchanged")
		})
	}
}

// recordedWrites records what a Migration tells its Writes.
type recordedWrites struct{ calls []string }

func (w *recordedWrites) Writing(key string) { w.calls = append(w.calls, "writing "+key) }

func (w *recordedWrites) Wrote(key string, got *metav1.PartialObjectMetadata, skipped bool) {
	call := "wrote " + key
	if got == nil {
		call += " <nil>"
	} else {
		call += " " + got.ResourceVersion
	}
	if skipped {
		call += " skipped"
	}
	w.calls = append(w.calls, call)
}
