package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// exposition is what the App's /metrics says after a few reconciles, cut
// to the families the demo reads: 6 reconciles that succeeded (4 of at
// most 5ms, 1 of 5-10ms, 1 of 25-50ms), 1 that failed in 5-10ms, and one
// that took over 10s.
const exposition = `# HELP humus_kube_controller_reconcile_duration_seconds How long each reconcile took, by its outcome.
# TYPE humus_kube_controller_reconcile_duration_seconds histogram
humus_kube_controller_reconcile_duration_seconds_bucket{humus_kube_controller_name="m",humus_kube_controller_reconcile_outcome="success",le="0.005"} 4
humus_kube_controller_reconcile_duration_seconds_bucket{humus_kube_controller_name="m",humus_kube_controller_reconcile_outcome="success",le="0.01"} 5
humus_kube_controller_reconcile_duration_seconds_bucket{humus_kube_controller_name="m",humus_kube_controller_reconcile_outcome="success",le="0.025"} 5
humus_kube_controller_reconcile_duration_seconds_bucket{humus_kube_controller_name="m",humus_kube_controller_reconcile_outcome="success",le="0.05"} 6
humus_kube_controller_reconcile_duration_seconds_bucket{humus_kube_controller_name="m",humus_kube_controller_reconcile_outcome="success",le="10"} 6
humus_kube_controller_reconcile_duration_seconds_bucket{humus_kube_controller_name="m",humus_kube_controller_reconcile_outcome="success",le="+Inf"} 7
humus_kube_controller_reconcile_duration_seconds_sum{humus_kube_controller_name="m",humus_kube_controller_reconcile_outcome="success"} 11
humus_kube_controller_reconcile_duration_seconds_count{humus_kube_controller_name="m",humus_kube_controller_reconcile_outcome="success"} 7
humus_kube_controller_reconcile_duration_seconds_bucket{humus_kube_controller_name="m",humus_kube_controller_reconcile_outcome="error",le="0.005"} 0
humus_kube_controller_reconcile_duration_seconds_bucket{humus_kube_controller_name="m",humus_kube_controller_reconcile_outcome="error",le="0.01"} 1
humus_kube_controller_reconcile_duration_seconds_bucket{humus_kube_controller_name="m",humus_kube_controller_reconcile_outcome="error",le="0.025"} 1
humus_kube_controller_reconcile_duration_seconds_bucket{humus_kube_controller_name="m",humus_kube_controller_reconcile_outcome="error",le="0.05"} 1
humus_kube_controller_reconcile_duration_seconds_bucket{humus_kube_controller_name="m",humus_kube_controller_reconcile_outcome="error",le="10"} 1
humus_kube_controller_reconcile_duration_seconds_bucket{humus_kube_controller_name="m",humus_kube_controller_reconcile_outcome="error",le="+Inf"} 1
humus_kube_controller_reconcile_duration_seconds_sum{humus_kube_controller_name="m",humus_kube_controller_reconcile_outcome="error"} 0.007
humus_kube_controller_reconcile_duration_seconds_count{humus_kube_controller_name="m",humus_kube_controller_reconcile_outcome="error"} 1
# HELP humus_kube_controller_queue_adds_total Objects added to the work queue.
# TYPE humus_kube_controller_queue_adds_total counter
humus_kube_controller_queue_adds_total{humus_kube_controller_name="m"} 9
# HELP http_client_request_duration_seconds Duration of HTTP client requests.
# TYPE http_client_request_duration_seconds histogram
http_client_request_duration_seconds_bucket{http_request_method="PATCH",le="+Inf"} 5
http_client_request_duration_seconds_sum{http_request_method="PATCH"} 0.1
http_client_request_duration_seconds_count{http_request_method="PATCH"} 5
http_client_request_duration_seconds_bucket{http_request_method="GET",le="+Inf"} 2
http_client_request_duration_seconds_sum{http_request_method="GET"} 0.1
http_client_request_duration_seconds_count{http_request_method="GET"} 2
`

func TestFiguresReadTheControllersMetrics(t *testing.T) {
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(exposition))
	require.NoError(t, err)
	var lines []string
	figures(families, func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) })
	require.Equal(t, []string{
		"reconciles: 7 success, 1 error, 0 panic",
		"work queue adds: 9 (an add of a key already waiting isn't counted)",
		"API requests: 7: PATCH 5, GET 2 (watches aren't counted)",
		"reconcile duration, 8 reconciles:",
		"  ≤ 5ms  ██████████████████████████████ 4",
		"  ≤ 10ms ███████████████ 2",
		"  ≤ 25ms  0",
		"  ≤ 50ms ████████ 1",
		"  ≤ 10s   0",
		"  > 10s  ████████ 1",
	}, lines)
}

func TestBarsWithoutObservations(t *testing.T) {
	require.Equal(t, []string{"(no reconcile yet)"}, bars([]bucket{{upper: 0.005}}, 0, 30))
	// One observation in a bucket of many draws a bar of one character at
	// least.
	require.Equal(t, []string{"≤ 5ms  ██████████████████████████████ 100", "≤ 10ms █ 1"},
		bars([]bucket{{0.005, 100}, {0.01, 101}}, 101, 30))
}
