package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/z5labs/humus/bench/internal/memcached"
	"github.com/z5labs/humus/controlplane"
)

// The four peers.
const (
	peerKube     = "kube"
	peerCR       = "controller-runtime"
	peerFloor    = "floor"
	peerClientGo = "client-go"
)

// namespace holds the benchmark's objects.
const namespace = "bench"

// Run is one peer's figures at one N and W.
type Run struct {
	Peer    string `json:"peer"`
	Objects int    `json:"objects"`
	Workers int    `json:"workers"`

	// ConvergeSeconds is from starting the peer's process until the
	// benchmark's own watch saw Available True on every object.
	ConvergeSeconds float64 `json:"converge_seconds"`
	// CPUSeconds is the peer's user and system CPU time until then.
	CPUSeconds float64 `json:"cpu_seconds"`
	// APIServerCPUSeconds is the API server's CPU time over the same span,
	// when its process was found (a started control plane); 0 otherwise.
	APIServerCPUSeconds float64 `json:"apiserver_cpu_seconds,omitempty"`
	// PeakRSSBytes is the peer's VmHWM then.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// SyncedSeconds is from starting the peer's process until it said its
	// caches had synced (kube: Controller.Synced healthy; client-go: its
	// informers' HasSynced); 0 for a peer that doesn't say.
	SyncedSeconds float64 `json:"synced_seconds,omitempty"`
	// HeapInuseBytes is the peer's runtime.MemStats.HeapInuse after a
	// garbage collection, right after convergence.
	HeapInuseBytes int64 `json:"heap_inuse_bytes"`
	// Requests are the API requests made to memcacheds, deployments, leases
	// and events while converging, by "VERB resource[/subresource]", from
	// the API server's apiserver_request_total.
	Requests     Requests `json:"requests"`
	RequestTotal float64  `json:"request_total"`
	Writes       float64  `json:"writes"`
	StatusWrites float64  `json:"status_writes"`

	// SettleRequests are the requests from convergence until they stopped
	// changing for the settle time: the reconciles that convergence caused,
	// such as each object's own status change; counted only when the steady
	// window is measured.
	SettleRequests Requests `json:"settle_requests,omitempty"`
	SettleTotal    float64  `json:"settle_request_total,omitempty"`
	SettleWrites   float64  `json:"settle_writes,omitempty"`

	// Steady is the quiet window after convergence, which spans one resync
	// of every object; nil for the floor, which has no resync.
	Steady *Steady `json:"steady,omitempty"`

	// Restart is the peer started again after the tail, with every object
	// converged (-restart), or at -converge-limit; nil when not asked for.
	Restart *Restart `json:"restart,omitempty"`
	// Available is, for a run that reached -converge-limit, how many
	// objects were available then; its CPU seconds, peak RSS, heap and
	// synced time are taken then too.
	Available int `json:"available_at_limit,omitempty"`
	// AlsoStarted are the -restart-also peers, each started on the cluster
	// after this run's restart, for its sync alone.
	AlsoStarted []Restart `json:"also_started,omitempty"`

	// Error is why the run didn't finish, if it didn't.
	Error string `json:"error,omitempty"`
}

// Restart is a peer's second start, on the converged objects and their
// Deployments: its initial lists, and whatever it writes then.
type Restart struct {
	// Peer is the peer started: this run's, or a -restart-also peer.
	Peer string `json:"peer"`
	// SyncedSeconds is from starting the process again until it said its
	// caches had synced.
	SyncedSeconds float64 `json:"synced_seconds"`
	// CPUSeconds and PeakRSSBytes are the process's then.
	CPUSeconds   float64 `json:"cpu_seconds"`
	PeakRSSBytes int64   `json:"peak_rss_bytes"`
	// HeapInuseBytes is its heap in use after a garbage collection once
	// the requests had settled again.
	HeapInuseBytes int64 `json:"heap_inuse_bytes"`
	// Requests are those from the restart until they settled.
	Requests Requests `json:"requests"`
	Writes   float64  `json:"writes"`
}

// Steady is what a peer did in a window with nothing changing.
type Steady struct {
	ResyncSeconds float64  `json:"resync_seconds"`
	WindowSeconds float64  `json:"window_seconds"`
	Requests      Requests `json:"requests"`
	RequestTotal  float64  `json:"request_total"`
	Writes        float64  `json:"writes"`
	StatusWrites  float64  `json:"status_writes"`
	// ResyncSeen is true when the window saw a whole resync pass (an apply
	// of every object's Deployment) and its end; false when it ended at its
	// deadline first.
	ResyncSeen bool `json:"resync_seen"`
}

// config is what every run shares.
type config struct {
	bins       map[string]string // peer -> binary
	kubeconfig string            // an existing cluster, or "" for a fresh one per run
	cp         controlplane.Options
	timeout    time.Duration
	resync     time.Duration // 0: automatic
	settle     time.Duration
	logDir     string
	progress   io.Writer
	skipSteady bool
	gcWait     time.Duration // how long to wait for the garbage collector's watch
	finalizer  bool          // every peer adds memcached.Finalizer
	restart    bool          // start the peer again after the tail, and time its sync
	also       []string      // peers started, each in turn, after the restart, for their sync alone
	// convergeLimit is 0, or how long a peer may take to converge before
	// its figures are taken as they are.
	convergeLimit time.Duration
	profileDir    string // where the kube and floor peers write CPU profiles; "" for none
}

// resyncFor is the resync the peers run with at n objects: long enough that
// convergence is usually over before it comes.
func (c config) resyncFor(n int) time.Duration {
	if c.resync > 0 {
		return c.resync
	}
	return 20*time.Second + time.Duration(n)*20*time.Millisecond
}

func (c config) logf(format string, args ...any) {
	fmt.Fprintf(c.progress, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// runOne runs one peer at n objects and w workers on a cluster of its own
// (or the existing one, cleaned up afterwards), and returns its figures.
func runOne(ctx context.Context, c config, peer string, n, w int) (r Run) {
	r = Run{Peer: peer, Objects: n, Workers: w}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := runOneErr(ctx, c, &r); err != nil {
		r.Error = err.Error()
		c.logf("%s N=%d W=%d: %v", peer, n, w, err)
	}
	return r
}

func runOneErr(ctx context.Context, c config, r *Run) (err error) {
	cluster, kc, dc, stop, err := c.cluster(ctx, fmt.Sprintf("%s N=%d W=%d", r.Peer, r.Objects, r.Workers))
	if err != nil {
		return err
	}
	defer stop()
	if err := createObjects(ctx, kc, dc, r.Objects); err != nil {
		return err
	}
	rc := dc.Resource(memcached.Memcached.GVR())
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	avail, err := watchAvailability(watchCtx, rc, namespace, r.Objects)
	if err != nil {
		return err
	}
	if got := avail.count(); got != 0 {
		return fmt.Errorf("%d objects are already available before the peer starts", got)
	}
	// Wait until the garbage collector watches memcacheds (its watch and
	// ours), so it never looks up an owner it hasn't seen yet, which would
	// count as the peer's GETs.
	if err := waitForWatchers(ctx, kc, "WATCH memcacheds", 2, c.gcWait); err != nil {
		c.logf("%s N=%d W=%d: %v (going on: the garbage collector may look up owners it hasn't seen, a few GETs more; -smoke waits 1s only)", r.Peer, r.Objects, r.Workers, err)
	}

	before, _, err := scrape(ctx, kc)
	if err != nil {
		return err
	}
	apiserver := findAPIServer(cluster.Server)
	var apiBefore procStats
	if apiserver != 0 {
		apiBefore, _ = readProc(apiserver)
	}
	resync := c.resyncFor(r.Objects)
	p, err := startPeer(ctx, c, cluster.Kubeconfig, r.Peer, r.Workers, resync, r)
	if err != nil {
		return err
	}
	defer p.stop()
	c.logf("%s N=%d W=%d: started (pid %d)", r.Peer, r.Objects, r.Workers, p.cmd.Process.Pid)
	var limit <-chan time.Time // nil: no limit but the run's timeout
	if c.convergeLimit > 0 {
		t := time.NewTimer(c.convergeLimit)
		defer t.Stop()
		limit = t.C
	}

	select {
	case <-avail.all:
	case <-p.exited:
		return fmt.Errorf("the peer exited before converging (%d of %d available): %v; its log: %s", avail.count(), r.Objects, p.waitErr, p.logPath)
	case <-ctx.Done():
		return fmt.Errorf("not converged within the run's timeout (%d of %d available): %w", avail.count(), r.Objects, ctx.Err())
	case <-limit:
		// How far it got: its figures now, and with -restart its
		// restarts.
		r.Available = avail.count()
		if err := stoppedShort(ctx, c, cluster.Kubeconfig, kc, p, resync, r); err != nil {
			c.logf("%s N=%d W=%d: after -converge-limit: %v", r.Peer, r.Objects, r.Workers, err)
		}
		return fmt.Errorf("not converged within -converge-limit %v (%d of %d available)", c.convergeLimit, r.Available, r.Objects)
	}
	converged := time.Now()
	r.ConvergeSeconds = converged.Sub(p.started).Seconds()
	ps, err := readProc(p.cmd.Process.Pid)
	if err != nil {
		return fmt.Errorf("reading the peer's /proc: %w", err)
	}
	r.CPUSeconds, r.PeakRSSBytes = ps.CPUSeconds, ps.PeakRSS
	if apiserver != 0 {
		if as, err := readProc(apiserver); err == nil {
			r.APIServerCPUSeconds = as.CPUSeconds - apiBefore.CPUSeconds
		}
	}
	after, _, err := scrape(ctx, kc)
	if err != nil {
		return err
	}
	r.Requests = after.sub(before)
	r.RequestTotal, r.Writes, r.StatusWrites = r.Requests.total(), r.Requests.writes(), r.Requests.statusWrites()
	if r.HeapInuseBytes, err = p.heapInuse(ctx); err != nil {
		return err
	}
	c.logf("%s N=%d W=%d: converged in %.2fs, %.0f requests", r.Peer, r.Objects, r.Workers, r.ConvergeSeconds, r.RequestTotal)

	if r.Peer == peerFloor {
		return nil
	}
	r.SyncedSeconds = p.syncedSeconds()

	// Let the reconciles that convergence caused settle (the tail), then,
	// unless skipped, count what the peer does in a steady window that
	// spans its first resync.
	settled, err := settle(ctx, kc, c.settle, 2*time.Minute)
	if err != nil {
		return err
	}
	r.SettleRequests = settled.sub(after)
	r.SettleTotal, r.SettleWrites = r.SettleRequests.total(), r.SettleRequests.writes()
	if c.restart {
		if err := restartPeer(ctx, c, cluster.Kubeconfig, kc, p, resync, r); err != nil {
			return fmt.Errorf("restart: %w", err)
		}
	}
	if c.skipSteady || c.restart {
		return nil
	}
	st := &Steady{ResyncSeconds: resync.Seconds()}
	start := time.Now()
	// The window ends once a whole pass has been seen (an apply of every
	// object's Deployment, which both peers make on every reconcile) and
	// the requests have settled again, or at the deadline. An informer's
	// first resync can come as late as twice the period: controller-runtime
	// adds its handler after the informer starts, so the first resync check
	// finds it not yet due; and it jitters the period by up to 10%.
	deadline := p.started.Add(2*resync + resync/5 + converged.Sub(p.started) + 10*time.Second)
	c.logf("%s N=%d W=%d: steady window, until a resync pass is seen or %.0fs", r.Peer, r.Objects, r.Workers, time.Until(deadline).Seconds())
	last := settled
	quietSince := time.Now()
	for time.Now().Before(deadline) {
		select {
		case <-time.After(time.Second):
		case <-p.exited:
			return fmt.Errorf("the peer exited in the steady window: %v; its log: %s", p.waitErr, p.logPath)
		case <-ctx.Done():
			return fmt.Errorf("steady window: %w", ctx.Err())
		}
		cur, _, err := scrape(ctx, kc)
		if err != nil {
			return err
		}
		if changed(cur.sub(last)) {
			quietSince = time.Now()
		}
		last = cur
		if cur.sub(settled)["APPLY deployments"] >= float64(r.Objects) && time.Since(quietSince) >= c.settle {
			st.ResyncSeen = true
			break
		}
	}
	st.WindowSeconds = time.Since(start).Seconds()
	st.Requests = last.sub(settled)
	st.RequestTotal, st.Writes, st.StatusWrites = st.Requests.total(), st.Requests.writes(), st.Requests.statusWrites()
	r.Steady = st
	return nil
}

// cluster starts a control plane of its own (or attaches to c.kubeconfig's),
// makes the typed and dynamic clients and installs the Memcached CRD. label
// names the run in the progress log. stop cleans up the objects of an
// existing cluster, then stops the cluster; on an error, cluster returns
// having stopped it already.
func (c config) cluster(ctx context.Context, label string) (cluster *controlplane.Cluster, kc kubernetes.Interface, dc dynamic.Interface, stop func(), err error) {
	if c.kubeconfig != "" {
		if cluster, err = controlplane.FromKubeconfig(c.kubeconfig); err != nil {
			return nil, nil, nil, nil, err
		}
	} else {
		c.logf("%s: starting a control plane", label)
		if cluster, err = controlplane.Start(ctx, c.cp); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	fail := func(err error) (*controlplane.Cluster, kubernetes.Interface, dynamic.Interface, func(), error) {
		cluster.Stop()
		return nil, nil, nil, nil, err
	}
	cfg := cluster.RESTConfig()
	cfg.QPS = -1
	cfg.UserAgent = "converge"
	if kc, err = kubernetes.NewForConfig(cfg); err != nil {
		return fail(err)
	}
	if dc, err = dynamic.NewForConfig(cfg); err != nil {
		return fail(err)
	}
	if err := installCRD(ctx, cfg); err != nil {
		return fail(err)
	}
	stop = func() {
		if c.kubeconfig != "" {
			cleanup(kc, dc)
		}
		cluster.Stop()
	}
	return cluster, kc, dc, stop, nil
}

// installCRD creates the Memcached CRD from kube's Resource and waits until
// it is established.
func installCRD(ctx context.Context, cfg *rest.Config) error {
	crd, err := memcached.Memcached.CRD()
	if err != nil {
		return fmt.Errorf("the Memcached CRD: %w", err)
	}
	ac, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	crds := ac.ApiextensionsV1().CustomResourceDefinitions()
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the Memcached CRD: %w", err)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// createObjects makes the namespace and n Memcached objects in it, 16 at
// a time.
func createObjects(ctx context.Context, kc kubernetes.Interface, dc dynamic.Interface, n int) error {
	_, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	gvr := memcached.Memcached.GVR()
	rc := dc.Resource(gvr).Namespace(namespace)
	names := make(chan string)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				u := &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": gvr.GroupVersion().String(),
					"kind":       memcached.Memcached.Kind,
					"metadata":   map[string]any{"name": name, "namespace": namespace},
					"spec":       map[string]any{"size": int64(1), "image": memcached.Image},
				}}
				if _, err := rc.Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					select {
					case errs <- fmt.Errorf("creating memcached %s: %w", name, err):
					default:
					}
				}
			}
		}()
	}
	for i := range n {
		select {
		case names <- fmt.Sprintf("mc-%05d", i):
		case err := <-errs:
			close(names)
			wg.Wait()
			return err
		}
	}
	close(names)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// cleanup deletes the namespace of an existing cluster, and waits up to
// five minutes for it to go. It first takes the finalizers off the
// Memcacheds, whose controller has stopped (a -finalizer run).
func cleanup(kc kubernetes.Interface, dc dynamic.Interface) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	mcs := dc.Resource(memcached.Memcached.GVR()).Namespace(namespace)
	if l, err := mcs.List(ctx, metav1.ListOptions{}); err == nil {
		for _, u := range l.Items {
			if len(u.GetFinalizers()) > 0 {
				_, _ = mcs.Patch(ctx, u.GetName(), types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			}
		}
	}
	if err := kc.CoreV1().Namespaces().Delete(ctx, namespace, metav1.DeleteOptions{}); err != nil {
		return
	}
	_ = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := kc.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// waitForWatchers waits until at least n watches of key are open.
func waitForWatchers(ctx context.Context, kc kubernetes.Interface, key string, n float64, timeout time.Duration) error {
	var last float64
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, lr, err := scrape(ctx, kc)
		if err != nil {
			return false, err
		}
		last = lr[key]
		return last >= n, nil
	})
	if err != nil {
		return fmt.Errorf("%v of the %v watches of memcacheds wanted (the garbage collector's and the benchmark's) were open after %v: %w", last, n, timeout, err)
	}
	return nil
}

// settle waits until the counted requests haven't changed for quiet, or
// until limit, and returns the counts then.
func settle(ctx context.Context, kc kubernetes.Interface, quiet, limit time.Duration) (Requests, error) {
	deadline := time.Now().Add(limit)
	prev, _, err := scrape(ctx, kc)
	if err != nil {
		return nil, err
	}
	since := time.Now()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		cur, _, err := scrape(ctx, kc)
		if err != nil {
			return nil, err
		}
		if changed(cur.sub(prev)) {
			prev, since = cur, time.Now()
			continue
		}
		if time.Since(since) >= quiet {
			return cur, nil
		}
	}
	return prev, nil
}

// changed is whether d counts a request other than to leases, which a
// leader renews every few seconds, and the API server its own every 10s.
func changed(d Requests) bool {
	for k := range d {
		if !strings.HasSuffix(k, " leases") {
			return true
		}
	}
	return false
}

// peerProc is a running peer.
type peerProc struct {
	identity string // a kube member's LeaderElection.Identity, or a name for the logs
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	started  time.Time
	logPath  string
	lines    chan string
	exited   chan struct{}
	waitErr  error

	syncedMu sync.Mutex
	synced   float64 // seconds from started until the peer printed "synced"
}

// syncedSeconds is the seconds from the peer's start until it printed
// "synced", or 0 if it hasn't.
func (p *peerProc) syncedSeconds() float64 {
	p.syncedMu.Lock()
	defer p.syncedMu.Unlock()
	return p.synced
}

// restartPeer stops the converged peer p, starts it again, and records in
// r.Restart the time until it says it has synced, its CPU and peak RSS
// then, and the requests until they settle again. (The old process's
// requests settled before; the counts begin at settled.)
func restartPeer(ctx context.Context, c config, kubeconfig string, kc kubernetes.Interface, p *peerProc, resync time.Duration, r *Run) error {
	p.stop()
	rs := &Restart{Peer: r.Peer}
	r.Restart = rs
	if err := startAgain(ctx, c, kubeconfig, kc, resync, r, rs); err != nil {
		return err
	}
	for _, other := range c.also {
		r.AlsoStarted = append(r.AlsoStarted, Restart{Peer: other})
		if err := startAgain(ctx, c, kubeconfig, kc, resync, r, &r.AlsoStarted[len(r.AlsoStarted)-1]); err != nil {
			return fmt.Errorf("%s: %w", other, err)
		}
	}
	return nil
}

// stoppedShort records, for a run that reached -converge-limit, the
// peer's CPU, peak RSS, heap and synced time, and then, with -restart,
// its restart and the -restart-also peers' starts.
func stoppedShort(ctx context.Context, c config, kubeconfig string, kc kubernetes.Interface, p *peerProc, resync time.Duration, r *Run) error {
	r.SyncedSeconds = p.syncedSeconds()
	ps, err := readProc(p.cmd.Process.Pid)
	if err != nil {
		return err
	}
	r.CPUSeconds, r.PeakRSSBytes = ps.CPUSeconds, ps.PeakRSS
	if r.HeapInuseBytes, err = p.heapInuse(ctx); err != nil {
		return err
	}
	c.logf("%s N=%d W=%d: at -converge-limit, %d available, CPU %.1fs, peak RSS %.1f MiB, heap %.1f MiB, synced after %.1fs", r.Peer, r.Objects, r.Workers, r.Available, r.CPUSeconds, mib(r.PeakRSSBytes), mib(r.HeapInuseBytes), r.SyncedSeconds)
	if !c.restart {
		return nil
	}
	return restartPeer(ctx, c, kubeconfig, kc, p, resync, r)
}

// startAgain starts peer rs.Peer on the cluster and records in rs the time
// until it says it has synced, its CPU and peak RSS then, the requests
// until they settle again, and its heap then; it stops the peer.
func startAgain(ctx context.Context, c config, kubeconfig string, kc kubernetes.Interface, resync time.Duration, r *Run, rs *Restart) error {
	c.logf("%s N=%d W=%d: starting %s again", r.Peer, r.Objects, r.Workers, rs.Peer)
	before, _, err := scrape(ctx, kc)
	if err != nil {
		return err
	}
	q, err := startPeer(ctx, c, kubeconfig, rs.Peer, r.Workers, resync, r)
	if err != nil {
		return err
	}
	defer q.stop()
	for rs.SyncedSeconds = q.syncedSeconds(); rs.SyncedSeconds == 0; rs.SyncedSeconds = q.syncedSeconds() {
		select {
		case <-time.After(10 * time.Millisecond):
		case <-q.exited:
			return fmt.Errorf("the peer exited before syncing: %v; its log: %s", q.waitErr, q.logPath)
		case <-ctx.Done():
			return fmt.Errorf("not synced within the run's timeout: %w", ctx.Err())
		}
	}
	ps, err := readProc(q.cmd.Process.Pid)
	if err != nil {
		return err
	}
	rs.CPUSeconds, rs.PeakRSSBytes = ps.CPUSeconds, ps.PeakRSS
	c.logf("%s N=%d W=%d: %s synced %.2fs after its start", r.Peer, r.Objects, r.Workers, rs.Peer, rs.SyncedSeconds)
	after, err := settle(ctx, kc, c.settle, 2*time.Minute)
	if err != nil {
		return err
	}
	rs.Requests = after.sub(before)
	rs.Writes = rs.Requests.writes()
	rs.HeapInuseBytes, err = q.heapInuse(ctx)
	return err
}

func startPeer(ctx context.Context, c config, kubeconfig, peer string, workers int, resync time.Duration, r *Run) (*peerProc, error) {
	bin := c.bins[peer]
	args := []string{"-kubeconfig=" + kubeconfig, "-workers=" + strconv.Itoa(workers), "-namespace=" + namespace}
	if peer != peerFloor {
		args = append(args, "-resync="+resync.String())
	}
	if c.finalizer {
		args = append(args, "-finalizer")
	}
	if c.profileDir != "" && peer != peerCR && r.Restart == nil {
		fin := ""
		if c.finalizer {
			fin = "-fin"
		}
		args = append(args, "-cpuprofile="+filepath.Join(c.profileDir, fmt.Sprintf("%s-n%d-w%d%s.pprof", peer, r.Objects, workers, fin)))
	}
	if peer == peerCR {
		// controller-runtime's config package registers --kubeconfig
		// itself; the flag package takes one dash or two alike.
		args[0] = "--kubeconfig=" + kubeconfig
	}
	restarted := ""
	if r.Restart != nil {
		restarted = "-restarted-" + strconv.Itoa(len(r.AlsoStarted))
	}
	logPath := filepath.Join(c.logDir, fmt.Sprintf("%s-n%d-w%d%s.log", peer, r.Objects, workers, restarted))
	return launch(ctx, bin, args, logPath)
}

// launch starts bin with args, its stderr going to a new file at logPath,
// in a process group of its own that is killed if the benchmark dies, and
// stopped when ctx ends. Its stdout's "synced" line is timed from the
// start; its other lines go to lines.
func launch(ctx context.Context, bin string, args []string, logPath string) (*peerProc, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	p := &peerProc{cmd: cmd, stdin: stdin, logPath: logPath, lines: make(chan string, 16), exited: make(chan struct{})}
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "synced" {
				// The peer's own clock differs from ours by its start-up:
				// time it here, from the start.
				p.syncedMu.Lock()
				if p.synced == 0 {
					p.synced = time.Since(p.started).Seconds()
				}
				p.syncedMu.Unlock()
				continue
			}
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
	}()
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	go func() {
		select {
		case <-ctx.Done():
			p.stop()
		case <-p.exited:
		}
	}()
	return p, nil
}

// heapInuse asks the peer for its heap in use.
func (p *peerProc) heapInuse(ctx context.Context) (int64, error) {
	if _, err := io.WriteString(p.stdin, "mem\n"); err != nil {
		return 0, fmt.Errorf("asking the peer for its heap: %w", err)
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l := <-p.lines:
			f := strings.Fields(l)
			if len(f) >= 2 && f[0] == "heapinuse" {
				return strconv.ParseInt(f[1], 10, 64)
			}
		case <-p.exited:
			return 0, errors.New("the peer exited before reporting its heap")
		case <-timeout:
			return 0, errors.New("the peer didn't report its heap within 30s")
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// stop sends SIGTERM to the peer's process group, and SIGKILL after 20s.
func (p *peerProc) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}
