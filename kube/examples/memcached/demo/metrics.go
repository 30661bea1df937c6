package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The Prometheus names of the controller's figures the demo shows (the
// docs' "Telemetry" lists them all), and of the label that tells a
// reconcile's outcome.
const (
	metricReconcile = "humus_kube_controller_reconcile_duration_seconds"
	metricQueueAdds = "humus_kube_controller_queue_adds_total"
	metricRequests  = "http_client_request_duration_seconds"
	labelOutcome    = "humus_kube_controller_reconcile_outcome"
	labelMethod     = "http_request_method"
)

// scrape GETs url, a /metrics in Prometheus' text format, and parses it with
// Prometheus' own parser.
func scrape(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	return parser.TextToMetricFamilies(resp.Body)
}

// figures writes what an operator reads first in the controller's metrics:
// its reconciles by outcome, the work queue's adds, the API requests it made
// by method, and the reconcile-duration histogram drawn as text bars, one a
// bucket from the first bucket that holds a reconcile to the last. Each line
// is written with say.
func figures(families map[string]*dto.MetricFamily, say func(format string, args ...any)) {
	outcomes := map[string]uint64{"success": 0, "error": 0, "panic": 0}
	var buckets []bucket // summed over the outcomes
	var total uint64
	for _, m := range families[metricReconcile].GetMetric() {
		h := m.GetHistogram()
		outcomes[label(m, labelOutcome)] += h.GetSampleCount()
		total += h.GetSampleCount()
		for i, b := range h.GetBucket() {
			if math.IsInf(b.GetUpperBound(), +1) {
				continue // the remainder, total less the last bound's
			}
			if i == len(buckets) {
				buckets = append(buckets, bucket{upper: b.GetUpperBound()})
			}
			buckets[i].cumulative += b.GetCumulativeCount()
		}
	}
	say("reconciles: %d success, %d error, %d panic", outcomes["success"], outcomes["error"], outcomes["panic"])
	var adds float64
	for _, m := range families[metricQueueAdds].GetMetric() {
		adds += m.GetCounter().GetValue()
	}
	say("work queue adds: %.0f (an add of a key already waiting isn't counted)", adds)
	if reqs := requestsByMethod(families[metricRequests]); reqs != "" {
		say("API requests: %s (watches aren't counted)", reqs)
	}
	say("reconcile duration, %d reconciles:", total)
	for _, line := range bars(buckets, total, 30) {
		say("  %s", line)
	}
}

// bucket is one of a histogram's buckets: its upper bound, in seconds, and
// how many observations were at most that.
type bucket struct {
	upper      float64
	cumulative uint64
}

// bars draws the histogram of total observations whose buckets are b as
// lines of "≤ 5ms  ████ 3", the longest bar width characters, from the first
// bucket that holds an observation to the last; observations above the last
// bound are a last line "> 10s". A bucket holding any observation has a bar
// of at least one character. No observation is one line saying so.
func bars(b []bucket, total uint64, width int) []string {
	type row struct {
		label string
		n     uint64
	}
	var rows []row
	var prev uint64
	for _, x := range b {
		rows = append(rows, row{"≤ " + seconds(x.upper), x.cumulative - prev})
		prev = x.cumulative
	}
	if total > prev {
		last := "+Inf"
		if len(b) > 0 {
			last = seconds(b[len(b)-1].upper)
		}
		rows = append(rows, row{"> " + last, total - prev})
	}
	first := slices.IndexFunc(rows, func(r row) bool { return r.n > 0 })
	if first < 0 {
		return []string{"(no reconcile yet)"}
	}
	end := len(rows)
	for rows[end-1].n == 0 {
		end--
	}
	rows = rows[first:end]
	var most uint64
	labelWidth := 0
	for _, r := range rows {
		most = max(most, r.n)
		labelWidth = max(labelWidth, len([]rune(r.label)))
	}
	lines := make([]string, 0, len(rows))
	for _, r := range rows {
		n := int(math.Round(float64(r.n) * float64(width) / float64(most)))
		if r.n > 0 {
			n = max(n, 1)
		}
		pad := strings.Repeat(" ", labelWidth-len([]rune(r.label)))
		lines = append(lines, strings.TrimRight(fmt.Sprintf("%s%s %s %d", r.label, pad, strings.Repeat("█", n), r.n), " "))
	}
	return lines
}

// seconds writes a bucket's bound, in seconds, as a duration: 0.005 is 5ms.
func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Microsecond).String()
}

// requestsByMethod is otelhttp's client requests, counted by method, as
// "12: PATCH 6, GET 4, POST 2", the most first; "" without any.
func requestsByMethod(f *dto.MetricFamily) string {
	byMethod := map[string]uint64{}
	var total uint64
	for _, m := range f.GetMetric() {
		n := m.GetHistogram().GetSampleCount()
		byMethod[label(m, labelMethod)] += n
		total += n
	}
	if total == 0 {
		return ""
	}
	methods := make([]string, 0, len(byMethod))
	for k := range byMethod {
		methods = append(methods, k)
	}
	slices.SortFunc(methods, func(a, b string) int {
		if byMethod[a] != byMethod[b] {
			return int(byMethod[b]) - int(byMethod[a])
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(methods))
	for i, k := range methods {
		parts[i] = fmt.Sprintf("%s %d", k, byMethod[k])
	}
	return fmt.Sprintf("%d: %s", total, strings.Join(parts, ", "))
}

// label is the value of m's label name, "" without it.
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
