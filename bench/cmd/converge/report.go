package main

import (
	"fmt"
	"io"

	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what the benchmark writes as JSON.
type Report struct {
	When       time.Time `json:"when"`
	GoVersion  string    `json:"go_version"`
	CPUs       int       `json:"cpus"`
	LoadBefore string    `json:"load_average_before"`
	LoadAfter  string    `json:"load_average_after"`
	// Finalizer is whether every peer added a finalizer to each object.
	Finalizer bool     `json:"finalizer"`
	Runs      []Run    `json:"runs"`
	Ratios    []Ratios `json:"ratios"`
}

// Ratios are kube's figures over controller-runtime's (VsCR), over the
// floor's (VsFloor) and over the client-go controller's (VsClientGo), at
// one N and W; a figure is left out where either side is missing.
type Ratios struct {
	Objects    int                `json:"objects"`
	Workers    int                `json:"workers"`
	VsCR       map[string]float64 `json:"kube_over_controller_runtime"`
	VsFloor    map[string]float64 `json:"kube_over_floor"`
	VsClientGo map[string]float64 `json:"kube_over_client_go,omitempty"`
}

// figure is one row of the table.
type figure struct {
	name string
	get  func(Run) (float64, bool)
	unit string
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

var figures = []figure{
	{"converge_seconds", func(r Run) (float64, bool) { return r.ConvergeSeconds, true }, "s"},
	{"cpu_seconds", func(r Run) (float64, bool) { return r.CPUSeconds, true }, "s"},
	{"apiserver_cpu_seconds", func(r Run) (float64, bool) { return r.APIServerCPUSeconds, r.APIServerCPUSeconds != 0 }, "s"},
	{"peak_rss_mib", func(r Run) (float64, bool) { return mib(r.PeakRSSBytes), true }, "MiB"},
	{"heap_inuse_mib", func(r Run) (float64, bool) { return mib(r.HeapInuseBytes), true }, "MiB"},
	{"heap_bytes_per_object", func(r Run) (float64, bool) { return float64(r.HeapInuseBytes) / float64(r.Objects), r.Objects > 0 }, "B"},
	{"synced_seconds", func(r Run) (float64, bool) { return r.SyncedSeconds, r.SyncedSeconds != 0 }, "s"},
	{"requests", func(r Run) (float64, bool) { return r.RequestTotal, true }, ""},
	{"writes", func(r Run) (float64, bool) { return r.Writes, true }, ""},
	{"status_writes", func(r Run) (float64, bool) { return r.StatusWrites, true }, ""},
	{"settle_requests", func(r Run) (float64, bool) { return r.SettleTotal, r.SettleRequests != nil }, ""},
	{"settle_writes", func(r Run) (float64, bool) { return r.SettleWrites, r.SettleRequests != nil }, ""},
	{"restart_synced_seconds", func(r Run) (float64, bool) {
		if r.Restart == nil {
			return 0, false
		}
		return r.Restart.SyncedSeconds, true
	}, "s"},
	{"restart_cpu_seconds", func(r Run) (float64, bool) {
		if r.Restart == nil {
			return 0, false
		}
		return r.Restart.CPUSeconds, true
	}, "s"},
	{"restart_peak_rss_mib", func(r Run) (float64, bool) {
		if r.Restart == nil {
			return 0, false
		}
		return mib(r.Restart.PeakRSSBytes), true
	}, "MiB"},
	{"restart_heap_inuse_mib", func(r Run) (float64, bool) {
		if r.Restart == nil {
			return 0, false
		}
		return mib(r.Restart.HeapInuseBytes), true
	}, "MiB"},
	{"restart_writes", func(r Run) (float64, bool) {
		if r.Restart == nil {
			return 0, false
		}
		return r.Restart.Writes, true
	}, ""},
	{"steady_requests", func(r Run) (float64, bool) {
		if r.Steady == nil {
			return 0, false
		}
		return r.Steady.RequestTotal, true
	}, ""},
	{"steady_writes", func(r Run) (float64, bool) {
		if r.Steady == nil {
			return 0, false
		}
		return r.Steady.Writes, true
	}, ""},
	{"steady_status_writes", func(r Run) (float64, bool) {
		if r.Steady == nil {
			return 0, false
		}
		return r.Steady.StatusWrites, true
	}, ""},
}

func newReport(runs []Run, loadBefore string) *Report {
	rep := &Report{When: time.Now().UTC(), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(),
		LoadBefore: loadBefore, LoadAfter: loadAverage(), Runs: runs}
	for _, k := range configs(runs) {
		kube, okK := find(runs, peerKube, k)
		cr, okC := find(runs, peerCR, k)
		fl, okF := find(runs, peerFloor, k)
		cg, okG := find(runs, peerClientGo, k)
		ra := Ratios{Objects: k[0], Workers: k[1], VsCR: map[string]float64{}, VsFloor: map[string]float64{}, VsClientGo: map[string]float64{}}
		for _, f := range figures {
			kv, ok := f.get(kube)
			if !okK || !ok {
				continue
			}
			if cv, ok := f.get(cr); okC && ok && cv != 0 {
				ra.VsCR[f.name] = kv / cv
			}
			if fv, ok := f.get(fl); okF && ok && fv != 0 {
				ra.VsFloor[f.name] = kv / fv
			}
			if gv, ok := f.get(cg); okG && ok && gv != 0 {
				ra.VsClientGo[f.name] = kv / gv
			}
		}
		rep.Ratios = append(rep.Ratios, ra)
	}
	return rep
}

// configs are the N and W pairs run, in order.
func configs(runs []Run) [][2]int {
	var out [][2]int
	for _, r := range runs {
		k := [2]int{r.Objects, r.Workers}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// ran is whether peer was run at k at all.
func ran(runs []Run, peer string, k [2]int) bool {
	for _, r := range runs {
		if r.Peer == peer && r.Objects == k[0] && r.Workers == k[1] {
			return true
		}
	}
	return false
}

// find is the successful run of peer at k.
func find(runs []Run, peer string, k [2]int) (Run, bool) {
	for _, r := range runs {
		if r.Peer == peer && r.Objects == k[0] && r.Workers == k[1] && r.Error == "" {
			return r, true
		}
	}
	return Run{}, false
}

func (rep *Report) print(out io.Writer) {
	finalizer := "no finalizer"
	if rep.Finalizer {
		finalizer = "with a finalizer"
	}
	fmt.Fprintf(out, "converge benchmark, %s, %s, %d CPUs, load average %s before and %s after\n",
		finalizer, rep.GoVersion, rep.CPUs, rep.LoadBefore, rep.LoadAfter)
	for i, k := range configs(rep.Runs) {
		ra := rep.Ratios[i]
		fmt.Fprintf(out, "\nN=%d W=%d\n", k[0], k[1])
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "figure\tkube\tcontroller-runtime\tclient-go\tfloor\tkube/cr\tkube/client-go\tkube/floor\t")
		for _, f := range figures {
			row := []string{f.name}
			for _, p := range []string{peerKube, peerCR, peerClientGo, peerFloor} {
				r, ok := find(rep.Runs, p, k)
				v, has := f.get(r)
				switch {
				case !ok && ran(rep.Runs, p, k):
					row = append(row, "failed")
				case !ok:
					row = append(row, "-")
				case !has:
					row = append(row, "-")
				default:
					row = append(row, num(v))
				}
			}
			row = append(row, ratio(ra.VsCR, f.name), ratio(ra.VsClientGo, f.name), ratio(ra.VsFloor, f.name))
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		}
		tw.Flush()
		for _, p := range []string{peerKube, peerCR, peerClientGo, peerFloor} {
			r, ok := find(rep.Runs, p, k)
			if !ok {
				continue
			}
			if r.Restart != nil {
				fmt.Fprintf(out, "  %s after the restart, until settled: %s\n", p, breakdown(r.Restart.Requests))
			}
			fmt.Fprintf(out, "  %s requests: %s\n", p, breakdown(r.Requests))
			if r.Steady == nil && r.SettleRequests != nil {
				fmt.Fprintf(out, "  %s after converging, until settled: %s\n", p, breakdown(r.SettleRequests))
			}
			if r.Steady != nil {
				fmt.Fprintf(out, "  %s after converging, until settled: %s\n", p, breakdown(r.SettleRequests))
				note := ""
				if !r.Steady.ResyncSeen {
					note = " (no whole resync pass seen before the deadline)"
				}
				fmt.Fprintf(out, "  %s steady, %.0fs window, resync %.0fs: %s%s\n", p, r.Steady.WindowSeconds, r.Steady.ResyncSeconds, breakdown(r.Steady.Requests), note)
			}
		}
		fmt.Fprintln(out, "  (leases include the API server's own identity Lease, renewed every 10s; initial lists made as watches aren't counted)")
		for _, r := range rep.Runs {
			if r.Objects != k[0] || r.Workers != k[1] {
				continue
			}
			if r.Error != "" {
				fmt.Fprintf(out, "  %s failed: %s\n", r.Peer, r.Error)
			}
			if r.Available > 0 {
				fmt.Fprintf(out, "  %s at -converge-limit: %d of %d available, CPU %.2fs, peak RSS %.1f MiB, heap %.1f MiB (%.0f B an object), synced after %.2fs\n",
					r.Peer, r.Available, r.Objects, r.CPUSeconds, mib(r.PeakRSSBytes), mib(r.HeapInuseBytes), float64(r.HeapInuseBytes)/float64(r.Objects), r.SyncedSeconds)
			}
			for _, rs := range r.AlsoStarted {
				fmt.Fprintf(out, "  %s, then %s started on the cluster: synced after %.2fs, CPU %.2fs, peak RSS %.1f MiB, heap %.1f MiB (%.0f B an object), writes %.0f\n",
					r.Peer, rs.Peer, rs.SyncedSeconds, rs.CPUSeconds, mib(rs.PeakRSSBytes), mib(rs.HeapInuseBytes), float64(rs.HeapInuseBytes)/float64(r.Objects), rs.Writes)
			}
			if rs := r.Restart; rs != nil && r.Error != "" {
				fmt.Fprintf(out, "  %s restarted: synced after %.2fs, CPU %.2fs, peak RSS %.1f MiB, heap %.1f MiB (%.0f B an object), writes %.0f\n",
					r.Peer, rs.SyncedSeconds, rs.CPUSeconds, mib(rs.PeakRSSBytes), mib(rs.HeapInuseBytes), float64(rs.HeapInuseBytes)/float64(r.Objects), rs.Writes)
			}
		}
	}
}

func num(v float64) string {
	switch {
	case v == float64(int64(v)):
		return fmt.Sprintf("%d", int64(v))
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func ratio(m map[string]float64, k string) string {
	v, ok := m[k]
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

func breakdown(r Requests) string {
	if len(r) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(r))
	for k := range r {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%s", k, num(r[k]))
	}
	return strings.Join(parts, " ")
}
