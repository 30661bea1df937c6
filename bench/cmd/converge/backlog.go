package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/z5labs/humus/bench/internal/memcached"
)

// The backlog scenario (-backlog, issue 30): a user's writes while a
// controller that just started works through its initial list. N objects
// are created with no controller running, the peer is started, and once it
// has reconciled its first object, the benchmark writes every -backlog-every,
// -backlog-writes times, alternately a spec change (size 1 -> 2) of an object
// at the end of the list, which a first-in first-out queue reaches last, and
// a new object. Each write is timed from its start until the benchmark's
// own watch sees the reconcile that answers it: the object's Deployment,
// which every peer applies on each reconcile, with the new size as its
// replicas, or created. The backlog's drain is from the peer's start until
// every object has its Deployment.

// BacklogRun is one peer's figures in the backlog scenario.
type BacklogRun struct {
	Peer    string `json:"peer"`
	Objects int    `json:"objects"`
	Workers int    `json:"workers"`
	// WriteSeconds are the writes' times, from each write's start to the
	// reconcile that answered it, in the order written.
	WriteSeconds []float64 `json:"write_seconds"`
	// Kinds are the writes' kinds, "spec" or "create", in the same order.
	Kinds []string `json:"kinds"`
	// Unanswered counts the writes no reconcile answered within the run.
	Unanswered int     `json:"unanswered"`
	P50Seconds float64 `json:"p50_seconds"`
	P99Seconds float64 `json:"p99_seconds"`
	MaxSeconds float64 `json:"max_seconds"`
	// FirstSeconds is from the peer's start to its first Deployment;
	// DrainSeconds, to every object's.
	FirstSeconds float64 `json:"first_seconds"`
	DrainSeconds float64 `json:"drain_seconds"`
	// ReconciledAtLastWrite is how many of the N objects had their
	// Deployment when the last write was made: below N, the writes came
	// while the backlog drained.
	ReconciledAtLastWrite int    `json:"reconciled_at_last_write"`
	Error                 string `json:"error,omitempty"`
}

// BacklogReport is what the backlog scenario writes as JSON.
type BacklogReport struct {
	When         time.Time    `json:"when"`
	GoVersion    string       `json:"go_version"`
	CPUs         int          `json:"cpus"`
	LoadBefore   string       `json:"load_average_before"`
	LoadAfter    string       `json:"load_average_after"`
	WriteEvery   string       `json:"write_every"`
	Runs         []BacklogRun `json:"runs"`
	KubeOverCRP9 float64      `json:"kube_over_controller_runtime_p99,omitempty"`
}

// backlogOptions are the scenario's flags.
type backlogOptions struct {
	writes int
	every  time.Duration
}

// runBacklogScenario runs the backlog scenario for each peer but the
// floor (which never watches), at each N and W, prints its table, and
// writes its JSON to jsonPath.
func runBacklogScenario(ctx context.Context, c config, o backlogOptions, peers []string, objects, workers []int, jsonPath string, out io.Writer) error {
	rep := BacklogReport{When: time.Now().UTC(), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), LoadBefore: loadAverage(), WriteEvery: o.every.String()}
	for _, n := range objects {
		for _, w := range workers {
			for _, p := range peers {
				if p == peerFloor || ctx.Err() != nil {
					continue
				}
				rep.Runs = append(rep.Runs, runBacklog(ctx, c, o, p, n, w))
			}
		}
	}
	rep.LoadAfter = loadAverage()
	var kube, cr float64
	for _, r := range rep.Runs {
		switch r.Peer {
		case peerKube:
			kube = r.P99Seconds
		case peerCR:
			cr = r.P99Seconds
		}
	}
	if kube > 0 && cr > 0 && len(objects)*len(workers) == 1 {
		rep.KubeOverCRP9 = kube / cr
	}
	rep.print(out)
	if jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", jsonPath)
	}
	for _, r := range rep.Runs {
		if r.Error != "" {
			return fmt.Errorf("%s N=%d W=%d failed: %s", r.Peer, r.Objects, r.Workers, r.Error)
		}
	}
	return ctx.Err()
}

func (rep BacklogReport) print(out io.Writer) {
	fmt.Fprintf(out, "backlog scenario: a write every %s while the initial list drains; load %s before, %s after\n", rep.WriteEvery, rep.LoadBefore, rep.LoadAfter)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "peer\tN\tW\twrites\tunanswered\tp50 s\tp99 s\tmax s\tfirst s\tdrain s\treconciled at last write\t")
	for _, r := range rep.Runs {
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\t%d\t%d\terror: %s\t\n", r.Peer, r.Objects, r.Workers, r.Error)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.2f\t%.2f\t%d\t\n", r.Peer, r.Objects, r.Workers, len(r.WriteSeconds)+r.Unanswered, r.Unanswered,
			r.P50Seconds, r.P99Seconds, r.MaxSeconds, r.FirstSeconds, r.DrainSeconds, r.ReconciledAtLastWrite)
	}
	tw.Flush()
	if rep.KubeOverCRP9 > 0 {
		fmt.Fprintf(out, "kube's p99 over controller-runtime's: %.2f\n", rep.KubeOverCRP9)
	}
}

func runBacklog(ctx context.Context, c config, o backlogOptions, peer string, n, w int) (r BacklogRun) {
	r = BacklogRun{Peer: peer, Objects: n, Workers: w}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := runBacklogErr(ctx, c, o, &r); err != nil {
		r.Error = err.Error()
		c.logf("backlog %s N=%d W=%d: %v", peer, n, w, err)
	}
	return r
}

func runBacklogErr(ctx context.Context, c config, o backlogOptions, r *BacklogRun) error {
	cluster, kc, dc, stop, err := c.cluster(ctx, fmt.Sprintf("backlog %s N=%d W=%d", r.Peer, r.Objects, r.Workers))
	if err != nil {
		return err
	}
	defer stop()
	if err := createObjects(ctx, kc, dc, r.Objects); err != nil {
		return err
	}
	gvr := memcached.Memcached.GVR()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	a, err := watchAnswers(watchCtx, dc.Resource(deploymentsGVR), namespace)
	if err != nil {
		return err
	}
	p, err := startPeer(ctx, c, cluster.Kubeconfig, r.Peer, r.Workers, c.resyncFor(r.Objects), &Run{Peer: r.Peer, Objects: r.Objects, Workers: r.Workers})
	if err != nil {
		return err
	}
	defer p.stop()
	c.logf("backlog %s N=%d W=%d: started (pid %d)", r.Peer, r.Objects, r.Workers, p.cmd.Process.Pid)
	wait := func(ch <-chan struct{}, what string) error {
		select {
		case <-ch:
			return nil
		case <-p.exited:
			return fmt.Errorf("the peer exited before %s: %v; its log: %s", what, p.waitErr, p.logPath)
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (%d of %d reconciled)", what, ctx.Err(), a.count(), r.Objects)
		}
	}
	if err := wait(a.atLeast(1), "its first reconcile"); err != nil {
		return err
	}
	r.FirstSeconds = time.Since(p.started).Seconds()

	rc := dc.Resource(gvr).Namespace(namespace)
	type write struct {
		kind  string
		start time.Time
		done  <-chan time.Time
	}
	var writes []write
	tick := time.NewTicker(o.every)
	defer tick.Stop()
	for i := range o.writes {
		wr := write{kind: "create", start: time.Now()}
		if i%2 == 0 {
			wr.kind = "spec"
			name := fmt.Sprintf("mc-%05d", r.Objects-1-i/2)
			wr.done = a.await(name, 2)
			if _, err := rc.Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"size":2}}`), metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("changing %s: %w", name, err)
			}
		} else {
			name := fmt.Sprintf("user-%05d", i/2)
			wr.done = a.await(name, 1)
			if _, err := rc.Create(ctx, newMemcached(gvr, name), metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating %s: %w", name, err)
			}
		}
		writes = append(writes, wr)
		if i == o.writes-1 {
			r.ReconciledAtLastWrite = a.countOf(r.Objects)
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := wait(a.atLeast(r.Objects+(o.writes/2)), "every object reconciled"); err != nil {
		return err
	}
	r.DrainSeconds = time.Since(p.started).Seconds()
	grace := time.After(30 * time.Second)
	for _, wr := range writes {
		select {
		case at := <-wr.done:
			r.WriteSeconds = append(r.WriteSeconds, at.Sub(wr.start).Seconds())
			r.Kinds = append(r.Kinds, wr.kind)
		case <-grace:
			r.Unanswered++
		}
	}
	sorted := slices.Clone(r.WriteSeconds)
	slices.Sort(sorted)
	r.P50Seconds, r.P99Seconds = quantile(sorted, 0.5), quantile(sorted, 0.99)
	if len(sorted) > 0 {
		r.MaxSeconds = sorted[len(sorted)-1]
	}
	c.logf("backlog %s N=%d W=%d: p50 %.3fs p99 %.3fs, drained in %.1fs", r.Peer, r.Objects, r.Workers, r.P50Seconds, r.P99Seconds, r.DrainSeconds)
	return nil
}

// quantile is the q-quantile of sorted, by the nearest rank.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func newMemcached(gvr schema.GroupVersionResource, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.GroupVersion().String(),
		"kind":       memcached.Memcached.Kind,
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"spec":       map[string]any{"size": int64(1), "image": memcached.Image},
	}}
}

// deploymentsGVR are the Deployments the peers apply, one an object, named
// as it is, with its size as replicas.
var deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}

// answers watches the Deployments of a namespace and tells when a
// reconcile has answered a write of a Memcached: its Deployment applied
// with the size written, or a greater one.
type answers struct {
	mu       sync.Mutex
	replicas map[string]int64 // Deployment name -> spec.replicas
	waits    map[string]answerWait
	counts   []countWait
}

type answerWait struct {
	size int64
	ch   chan time.Time
}

type countWait struct {
	n  int
	ch chan struct{}
}

func watchAnswers(ctx context.Context, rc dynamic.NamespaceableResourceInterface, ns string) (*answers, error) {
	a := &answers{replicas: map[string]int64{}, waits: map[string]answerWait{}}
	l, err := rc.Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing deployments: %w", err)
	}
	for i := range l.Items {
		a.observe(&l.Items[i])
	}
	lw := &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return rc.Namespace(ns).Watch(ctx, o)
		},
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, l.GetResourceVersion(), lw)
	if err != nil {
		return nil, err
	}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if u, ok := ev.Object.(*unstructured.Unstructured); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				a.observe(u)
			}
		}
	}()
	return a, nil
}

func (a *answers) observe(u *unstructured.Unstructured) {
	now := time.Now()
	size, found, _ := unstructured.NestedInt64(u.Object, "spec", "replicas")
	if !found {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.replicas[u.GetName()] = size
	if w, ok := a.waits[u.GetName()]; ok && size >= w.size {
		w.ch <- now
		delete(a.waits, u.GetName())
	}
	a.counts = slices.DeleteFunc(a.counts, func(c countWait) bool {
		if len(a.replicas) >= c.n {
			close(c.ch)
			return true
		}
		return false
	})
}

// await returns a channel that receives the time a reconcile applied
// name's Deployment with size replicas or more.
func (a *answers) await(name string, size int64) <-chan time.Time {
	ch := make(chan time.Time, 1)
	a.mu.Lock()
	defer a.mu.Unlock()
	if got, ok := a.replicas[name]; ok && got >= size {
		ch <- time.Now()
		return ch
	}
	a.waits[name] = answerWait{size: size, ch: ch}
	return ch
}

// atLeast returns a channel closed once n Deployments exist.
func (a *answers) atLeast(n int) <-chan struct{} {
	ch := make(chan struct{})
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.replicas) >= n {
		close(ch)
		return ch
	}
	a.counts = append(a.counts, countWait{n: n, ch: ch})
	return ch
}

func (a *answers) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.replicas)
}

// countOf is how many of the list's first n objects, mc-00000 on, have
// their Deployment.
func (a *answers) countOf(n int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := 0
	for i := range n {
		if _, ok := a.replicas[fmt.Sprintf("mc-%05d", i)]; ok {
			c++
		}
	}
	return c
}
