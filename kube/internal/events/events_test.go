package events

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// widget is an object as a Reconciler is handed one: its TypeMeta and
// ObjectMeta embedded, by value.
type widget struct {
	metav1.TypeMeta
	metav1.ObjectMeta
}

func TestObjectMeta(t *testing.T) {
	w := widget{TypeMeta: metav1.TypeMeta{APIVersion: "test.example.com/v1", Kind: "Widget"}, ObjectMeta: metav1.ObjectMeta{Name: "w1"}}
	for name, obj := range map[string]any{"a value": w, "a pointer": &w} {
		m, apiVersion, kind, err := ObjectMeta(obj)
		require.NoError(t, err, name)
		require.Equal(t, "w1", m.GetName(), name)
		require.Equal(t, "test.example.com/v1", apiVersion, name)
		require.Equal(t, "Widget", kind, name)
	}
	ns := corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}
	m, apiVersion, kind, err := ObjectMeta(ns)
	require.NoError(t, err)
	require.Equal(t, "team-a", m.GetName())
	require.Empty(t, apiVersion+kind, "a client-go type as a Kind's Reconciler is handed it")

	for obj, want := range map[any]string{
		nil:                "is nil",
		(*corev1.Pod)(nil): "*v1.Pod to record an Event on is nil",
		"a string":         "*string is not an object",
		42:                 "*int is not an object",
	} {
		_, _, _, err := ObjectMeta(obj)
		require.ErrorContains(t, err, want)
	}
}

func TestTruncateNote(t *testing.T) {
	require.Equal(t, "short", TruncateNote("short"))
	exact := strings.Repeat("a", noteLimit)
	require.Equal(t, exact, TruncateNote(exact))
	long := TruncateNote(strings.Repeat("a", noteLimit-2) + "日本")
	require.LessOrEqual(t, len(long), noteLimit)
	require.True(t, utf8.ValidString(long))
	require.True(t, strings.HasSuffix(long, "…"))
}

// sent is an EventRecorder that keeps what it is handed.
type sent struct{ refs, notes []string }

func (s *sent) Eventf(regarding, _ runtime.Object, _, _, _, note string, args ...any) {
	ref := regarding.(*corev1.ObjectReference)
	s.refs = append(s.refs, ref.APIVersion+" "+ref.Kind+" "+ref.Namespace+"/"+ref.Name)
	s.notes = append(s.notes, fmt.Sprintf(note, args...))
}

func TestRecordNamesAnObjectByItsOwnKindElseTheControllers(t *testing.T) {
	s := &sent{}
	var logged bytes.Buffer
	r := NewRecorder(s, "test.example.com/v1", "Widget", slog.New(slog.NewTextHandler(&logged, nil)))
	r.Record(widget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w1"}}, corev1.EventTypeNormal, "Resized", "Resize", "100% done")
	r.Record(&corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}, corev1.EventTypeWarning, "Slow", "Apply", "")
	r.Record("not an object", corev1.EventTypeNormal, "Bad", "Apply", "")
	require.Equal(t, []string{"test.example.com/v1 Widget ns/w1", "v1 Pod ns/p"}, s.refs)
	require.Equal(t, "100% done", s.notes[0], "the note is not a format")
	require.Contains(t, logged.String(), "not recording an Event")
	var none *Recorder
	require.NotPanics(t, func() { none.Record(nil, corev1.EventTypeNormal, "R", "A", "") })
}
