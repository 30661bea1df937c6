package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// availability watches the Memcached objects of one namespace with a watch
// of its own, and tells when every one of them has Available True.
type availability struct {
	mu        sync.Mutex
	available map[string]bool
	want      int
	all       chan struct{} // closed once want objects are available
	closed    bool
}

// watchAvailability lists and then watches the namespace's objects until ctx
// is done. It returns once the list is in, so that what follows is seen by
// the watch.
func watchAvailability(ctx context.Context, rc dynamic.NamespaceableResourceInterface, ns string, want int) (*availability, error) {
	a := &availability{available: map[string]bool{}, want: want, all: make(chan struct{})}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return rc.Namespace(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return rc.Namespace(ns).Watch(ctx, o)
		},
	}
	rv, err := a.list(ctx, rc, ns)
	if err != nil {
		return nil, err
	}
	go func() {
		for ctx.Err() == nil {
			w, err := watchtools.NewRetryWatcherWithContext(ctx, rv, lw)
			if err != nil {
				return
			}
			for ev := range w.ResultChan() {
				if u, ok := ev.Object.(*unstructured.Unstructured); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
					a.observe(u)
				}
			}
			w.Stop()
			// The RetryWatcher gave up (such as on 410 Gone): list again.
			for ctx.Err() == nil {
				if rv, err = a.list(ctx, rc, ns); err == nil {
					break
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	}()
	return a, nil
}

func (a *availability) list(ctx context.Context, rc dynamic.NamespaceableResourceInterface, ns string) (string, error) {
	opts := metav1.ListOptions{Limit: 500}
	for {
		l, err := rc.Namespace(ns).List(ctx, opts)
		if err != nil {
			return "", fmt.Errorf("listing memcacheds: %w", err)
		}
		for i := range l.Items {
			a.observe(&l.Items[i])
		}
		if opts.Continue = l.GetContinue(); opts.Continue == "" {
			return l.GetResourceVersion(), nil
		}
	}
}

func (a *availability) observe(u *unstructured.Unstructured) {
	ok := false
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Available" && m["status"] == "True" {
			ok = true
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.available[u.GetName()] = ok
	if a.closed {
		return
	}
	n := 0
	for _, v := range a.available {
		if v {
			n++
		}
	}
	if n >= a.want {
		a.closed = true
		close(a.all)
	}
}

// count is how many objects are available now.
func (a *availability) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, v := range a.available {
		if v {
			n++
		}
	}
	return n
}

// Requests are API requests counted from the API server's
// apiserver_request_total, keyed "VERB resource[/subresource]".
type Requests map[string]float64

// watchedResources are the resources whose requests are counted: the
// controller's own. The benchmark's own requests to them are made before
// the first snapshot (its creates and its list) or are watches, which the
// API server counts only when they end, after the last snapshot.
var watchedResources = map[string]bool{"memcacheds": true, "deployments": true, "leases": true, "events": true}

// scrape reads the API server's /metrics.
func scrape(ctx context.Context, kc kubernetes.Interface) (Requests, map[string]float64, error) {
	b, err := kc.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the API server's /metrics: %w", err)
	}
	reqs := Requests{}
	longrunning := map[string]float64{}
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		var name string
		switch {
		case strings.HasPrefix(line, "apiserver_request_total{"):
			name = "apiserver_request_total"
		case strings.HasPrefix(line, "apiserver_longrunning_requests{"):
			name = "apiserver_longrunning_requests"
		default:
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			continue
		}
		labels := parseLabels(line[len(name)+1 : end])
		v, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err != nil || !watchedResources[labels["resource"]] {
			continue
		}
		key := labels["verb"] + " " + labels["resource"]
		if s := labels["subresource"]; s != "" {
			key += "/" + s
		}
		if name == "apiserver_request_total" {
			reqs[key] += v
		} else {
			longrunning[key] += v
		}
	}
	return reqs, longrunning, nil
}

// parseLabels parses Prometheus text-format labels: a="x",b="y".
func parseLabels(s string) map[string]string {
	m := map[string]string{}
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			break
		}
		k := s[:eq]
		rest := s[eq+2:]
		var val strings.Builder
		i := 0
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
			}
			val.WriteByte(rest[i])
		}
		m[k] = val.String()
		s = strings.TrimPrefix(rest[min(i+1, len(rest)):], ",")
	}
	return m
}

// sub is r - before, dropping keys that didn't change.
func (r Requests) sub(before Requests) Requests {
	d := Requests{}
	for k, v := range r {
		if dv := v - before[k]; dv != 0 {
			d[k] = dv
		}
	}
	return d
}

// total is every request counted.
func (r Requests) total() float64 {
	t := 0.0
	for _, v := range r {
		t += v
	}
	return t
}

// writes are the requests that write: create, update, patch, apply, delete.
func (r Requests) writes() float64 {
	t := 0.0
	for k, v := range r {
		switch strings.Fields(k)[0] {
		case "POST", "CREATE", "PUT", "UPDATE", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION":
			t += v
		}
	}
	return t
}

// statusWrites are the writes to memcacheds/status.
func (r Requests) statusWrites() float64 {
	t := 0.0
	for k, v := range r {
		f := strings.Fields(k)
		if f[1] != "memcacheds/status" {
			continue
		}
		switch f[0] {
		case "PUT", "UPDATE", "PATCH", "APPLY":
			t += v
		}
	}
	return t
}

// procStats is what /proc tells of a running process.
type procStats struct {
	CPUSeconds float64 // user + system
	PeakRSS    int64   // VmHWM, bytes
	RSS        int64   // VmRSS, bytes
}

// clockTicks is USER_HZ, which is 100 on every Linux the benchmark runs on.
const clockTicks = 100

func readProc(pid int) (procStats, error) {
	var st procStats
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return st, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, _ := strconv.ParseInt(f[12], 10, 64) // field 15
	st.CPUSeconds = float64(utime+stime) / clockTicks
	fh, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmHWM":
			st.PeakRSS = kb * 1024
		case "VmRSS":
			st.RSS = kb * 1024
		}
	}
	return st, sc.Err()
}

// findAPIServer returns the pid of the kube-apiserver serving on server's
// port on this machine, or 0.
func findAPIServer(server string) int {
	_, port, ok := strings.Cut(server, ":")
	if !ok {
		return 0
	}
	want := "--secure-port=" + port
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || !strings.HasSuffix(args[0], "kube-apiserver") {
			continue
		}
		for _, a := range args {
			if a == want {
				return pid
			}
		}
	}
	return 0
}
