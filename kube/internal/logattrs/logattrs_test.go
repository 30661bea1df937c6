package logattrs_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube/internal/logattrs"
)

type priority int

// TestEveryAttributeReachesTheBridgeEncodable records, through the real
// otelslog bridge into the SDK's in-memory log processor, the kinds of
// values kube logs, and reads each back as what it means: none
// "unhandled", none a struct's %+v.
func TestEveryAttributeReachesTheBridgeEncodable(t *testing.T) {
	tel := humustest.NewTelemetry(t)
	log := logattrs.NewLogger("test", tel.Telemetry.LoggerProvider).With("with.uid", types.UID("u0"))
	at := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	log.InfoContext(context.Background(), "r",
		"uid", types.UID("u1"),
		"object", types.NamespacedName{Namespace: "ns", Name: "n"},
		"gvk", schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"},
		"gvr", schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"},
		"priority", priority(3),
		"uids", []types.UID{"a", "b"},
		"time", metav1.NewTime(at),
		"when", at,
		"ptr", &types.NamespacedName{Namespace: "ns", Name: "p"},
		slog.Group("g", "uid", types.UID("u2")),
		"plain", "s", "n", 4, "strings", []string{"x"})
	recs := tel.Records()
	require.Len(t, recs, 1)
	got := map[string]attribute.Value{}
	recs[0].WalkAttributes(func(kv attribute.KeyValue) bool {
		got[string(kv.Key)] = kv.Value
		return true
	})
	for k, v := range got {
		require.NotContains(t, v.Emit(), "unhandled", "attribute %s", k)
	}
	str := func(k string) string {
		require.Equal(t, attribute.STRING, got[k].Type(), "attribute %s is %s", k, got[k])
		return got[k].AsString()
	}
	require.Equal(t, "u0", str("with.uid"))
	require.Equal(t, "u1", str("uid"))
	require.Equal(t, "ns/n", str("object"))
	require.Equal(t, "example.com/v1, Kind=Widget", str("gvk"))
	require.Equal(t, "example.com/v1, Resource=widgets", str("gvr"))
	require.Equal(t, "ns/p", str("ptr"))
	require.Equal(t, "2026-12-07T05:00:00Z", str("time"))
	require.Equal(t, "2026-12-07T05:00:00Z", str("when"))
	require.Equal(t, "s", str("plain"))
	require.Equal(t, int64(3), got["priority"].AsInt64())
	require.Equal(t, int64(4), got["n"].AsInt64())
	var uids []string
	for _, v := range got["uids"].AsSlice() {
		uids = append(uids, v.AsString())
	}
	require.Equal(t, []string{"a", "b"}, uids)
	var g []string
	for _, kv := range got["g"].AsMap() {
		g = append(g, string(kv.Key)+"="+kv.Value.AsString())
	}
	require.Equal(t, "uid=u2", strings.Join(g, ","))
}

// endpoint's String is url.URL's, promoted from a nil pointer: it panics.
type endpoint struct{ *url.URL }

// A value whose String panics is logged as fmt prints it
// (%!v(PANIC=String method: …)), as slog's own handlers do, and the log
// call doesn't panic: a reconcile's LoggerFrom(ctx).Info of such a value
// would otherwise be a reconcile panic, never retried.
func TestAPanickingStringIsLoggedAsFmtPrintsIt(t *testing.T) {
	var buf bytes.Buffer
	require.NotPanics(t, func() {
		slog.New(logattrs.Handler(slog.NewTextHandler(&buf, nil))).Info("converted", "ep", endpoint{})
	})
	require.Contains(t, buf.String(), "PANIC=String method")
}
