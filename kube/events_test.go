package kube

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// events returns the Events the fake cluster holds in ns.
func (f *fakeCluster) events(t testing.TB, ns string) []eventsv1.Event {
	t.Helper()
	l, err := f.kube.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	return l.Items
}

func TestAFailedReconcileIsAWarningEventOnTheObject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 3))
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				return Result[widgetStatus]{}, errors.New("the size 3 is too large")
			}))
		s := serve(t, c)
		// Failures retried with backoff for a minute are one Event, which
		// client-go turns into a series.
		time.Sleep(time.Minute)
		synctest.Wait()
		require.NoError(t, s.stop(t))
		synctest.Wait()

		evs := f.events(t, testNamespace)
		require.Len(t, evs, 1, "repeats are aggregated: %v", evs)
		ev := evs[0]
		require.Equal(t, corev1.EventTypeWarning, ev.Type)
		require.Equal(t, ReasonReconcileFailed, ev.Reason)
		require.Equal(t, ActionReconcile, ev.Action)
		require.Equal(t, "the size 3 is too large", ev.Note)
		require.Equal(t, controllerName, ev.ReportingController)
		require.Equal(t, corev1.ObjectReference{
			APIVersion: "test.example.com/v1", Kind: "Widget", Namespace: testNamespace, Name: "w1", UID: "uid-w1",
		}, withoutResourceVersion(ev.Regarding))
	})
}

func TestAPanickedReconcileIsAWarningEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 3))
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				panic("boom")
			}))
		s := serve(t, c)
		synctest.Wait()
		require.NoError(t, s.stop(t))
		synctest.Wait()

		evs := f.events(t, testNamespace)
		require.Len(t, evs, 1)
		require.Equal(t, corev1.EventTypeWarning, evs[0].Type)
		require.Equal(t, ReasonReconcilePanicked, evs[0].Reason)
		require.Equal(t, "panic: boom", evs[0].Note)
	})
}

func TestAReconcilerRecordsItsOwnEventsOnTheObjectItIsHanded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 3))
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				// The object as a unit test would hand it: no apiVersion,
				// no kind.
				w.TypeMeta = metav1.TypeMeta{}
				RecorderFrom(ctx).Normal(w, "Resized", "Resize", "resized to 3, 100% done")
				// client-go names an Event after its object and the time in
				// nanoseconds, which the bubble's clock doesn't move alone.
				time.Sleep(time.Millisecond)
				RecorderFrom(ctx).Warning(&w, "Slow", "Resize", strings.Repeat("é", 1000))
				return Result[widgetStatus]{}, nil
			}))
		s := serve(t, c)
		synctest.Wait()
		require.NoError(t, s.stop(t))
		synctest.Wait()

		byReason := map[string]eventsv1.Event{}
		for _, ev := range f.events(t, testNamespace) {
			byReason[ev.Reason] = ev
		}
		require.Len(t, byReason, 2)
		normal := byReason["Resized"]
		require.Equal(t, corev1.EventTypeNormal, normal.Type)
		require.Equal(t, "Resize", normal.Action)
		require.Equal(t, "resized to 3, 100% done", normal.Note, "the note is not a format")
		require.Equal(t, "test.example.com/v1", normal.Regarding.APIVersion, "the controller's, as the object has none")
		require.Equal(t, "Widget", normal.Regarding.Kind)
		require.Equal(t, types.UID("uid-w1"), normal.Regarding.UID)
		warning := byReason["Slow"]
		require.Equal(t, corev1.EventTypeWarning, warning.Type)
		require.LessOrEqual(t, len(warning.Note), 1024, "cut to the API server's limit")
		require.True(t, utf8.ValidString(warning.Note))
		require.True(t, strings.HasSuffix(warning.Note, "…"))
	})
}

func TestRecorderFromAContextWithoutOneRecordsNothing(t *testing.T) {
	r := RecorderFrom(context.Background())
	require.NotPanics(t, func() {
		r.Normal(widget{}, "Reason", "Action", "note")
		r.Warning(nil, "Reason", "Action", "note")
	})
}

func withoutResourceVersion(ref corev1.ObjectReference) corev1.ObjectReference {
	ref.ResourceVersion = ""
	return ref
}
