// Command converge is the converge benchmark of issue #9: how fast kube's
// Memcached controller converges N objects with W workers, and what it
// costs, next to the kubebuilder book's controller on controller-runtime
// v0.25.2, next to the controller an expert writes on client-go alone
// (sample-controller's pattern, bench/cmd/clientgopeer), and next to the
// floor, a plain client-go program that makes the two writes an object
// needs and nothing else.
//
// For each N, W and peer it starts a fresh local control plane (etcd,
// kube-apiserver, kube-controller-manager without the deployment and
// replicaset controllers, from the controlplane module), installs the
// Memcached CRD from kube's Resource, creates N objects, and only then starts
// the peer as a child process. It measures:
//
//   - converge: from starting the peer until its own watch sees Available
//     True on every object;
//   - the peer's CPU seconds (utime+stime) and peak RSS (VmHWM) from /proc
//     then, and its heap in use (HeapInuse after a GC, which the peer reports
//     when asked on stdin);
//   - the API requests to memcacheds, deployments, leases and events while
//     converging, by verb, from the API server's apiserver_request_total;
//   - steady state (kube and controller-runtime): after the requests that
//     convergence caused have settled, the requests in a window spanning the
//     peer's first resync of every object, with nothing changing.
//
// It prints one table per N and W, with the ratios kube/controller-runtime,
// kube/client-go and kube/floor, and writes every figure as JSON (-json).
//
//	go run ./bench/cmd/converge -n 100,1000 -w 1,4,16
//	go run ./bench/cmd/converge -smoke      # N=10, W=1: keeps it working
//	go run ./bench/cmd/converge -n 1000 -w 4 -peers kube,floor -no-steady -cpuprofile /tmp/prof
//
// Each run has a timeout (-timeout); Ctrl-C stops the peer and the control
// plane and prints what was measured so far. With -kubeconfig it runs
// against an existing cluster instead, deleting its namespace after each
// run; that cluster must not run the deployment controller, or the figures
// include its writes.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/z5labs/humus/controlplane"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "converge:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		ns         = flag.String("n", "10,100", "object counts to run, comma separated (the issue's: 100,1000,5000; 10000 runs too, with a -timeout of 30m or more)")
		ws         = flag.String("w", "1,4", "worker counts to run, comma separated (the issue's: 1,4,16)")
		peers      = flag.String("peers", strings.Join([]string{peerKube, peerCR, peerClientGo, peerFloor}, ","), "peers to run")
		smoke      = flag.Bool("smoke", false, "a tiny run, N=10 and W=1 with a 5s resync, to keep the benchmark working")
		jsonPath   = flag.String("json", "converge.json", "where to write the figures as JSON; empty writes none")
		timeout    = flag.Duration("timeout", 15*time.Minute, "the limit of each run (one peer at one N and W)")
		resync     = flag.Duration("resync", 0, "the peers' resync; 0 is 20s + 20ms an object")
		quiet      = flag.Duration("settle", 3*time.Second, "how long the requests must stay unchanged after convergence before the steady window")
		noSteady   = flag.Bool("no-steady", false, "skip the steady-state window (the tail after convergence, until the requests settle, is still counted)")
		kubeconfig = flag.String("kubeconfig", "", "run against this existing cluster instead of a fresh control plane per run")
		binDir     = flag.String("bindir", "", "the control plane's binaries (default: controlplane.DefaultBinDir, built if missing)")
		peerDir    = flag.String("peer-bin", "", "a directory with prebuilt kubepeer, crpeer and floor binaries (default: built now)")
		logDir     = flag.String("logs", "", "where the peers' stderr goes (default: a temporary directory)")
		finalizer  = flag.Bool("finalizer", false, "every peer adds a finalizer to each object (one more write an object), as the operator-sdk tutorial's controller does")
		restart    = flag.Bool("restart", false, "after the tail, stop each peer but the floor and start it again on the converged objects: time until it has synced (kube and client-go say when), its CPU, peak RSS and writes; skips the steady window")
		convLimit  = flag.Duration("converge-limit", 0, "if set, a peer not converged by then is stopped there, with its figures (CPU, peak RSS, heap, synced, objects available) taken then, and -restart done: how far it got, for N=100000 on a busy machine")
		also       = flag.String("restart-also", "", "with -restart, peers (kube, client-go) started in turn on the cluster after the restart, for their sync alone: time until synced, CPU, peak RSS, heap")
		etcdQuota  = flag.Int64("etcd-quota", 0, "etcd's --quota-backend-bytes in MiB for each fresh control plane (0: etcd's default, 2 GiB); N=100000 wants 8192")
		profiles   = flag.String("cpuprofile", "", "a directory: the kube and floor peers write CPU profiles there, from their start until convergence (<peer>-n<N>-w<W>[-fin].pprof)")
		backlog    = flag.Bool("backlog", false, "run the backlog scenario instead (issue 30): a user's writes timed to their reconcile while the initial list drains; -n defaults to 5000 and -w to 1 (see backlog.go)")
		bWrites    = flag.Int("backlog-writes", 40, "the backlog scenario's writes, spec changes and new objects by turns")
		bEvery     = flag.Duration("backlog-every", 250*time.Millisecond, "the backlog scenario's time between writes")
		members    = flag.Int("members", 0, "issue 38: run this many kube peers as shard members (Settings.Sharding) instead of the peers (see members.go); 0 runs the peers")
		cacheShare = flag.Bool("cache-share", false, "with -members: the members run with Settings.Sharding.CacheShare")
		cmpLeader  = flag.Bool("compare-leader", false, "with -members: first run a single kube leader at the same N and W on a fresh control plane, and give each member's CPU and peak RSS over the leader's")
		churn      = flag.Bool("churn", false, "with -members: after convergence, a spec change every -churn-every while a member joins and one is SIGKILLed; times each change to its Deployment, and checks the members' reconcile logs for a key reconciled by two at once")
		churnEvery = flag.Duration("churn-every", 100*time.Millisecond, "with -churn: the time between spec changes")
		syncMode   = flag.Bool("sync", false, "with -members: a single leader converges N objects, then is started again, then the members: the time until each has synced, and its peak RSS")
		leaseDur   = flag.Duration("lease-duration", 15*time.Second, "with -members: the members' LeaderElection.LeaseDuration, whole seconds, at least 4s (RenewDeadline is two thirds of it, RetryPeriod 2s)")
	)
	flag.Parse()
	if *backlog {
		if !flagSet("n") {
			*ns = "5000"
		}
		if !flagSet("w") {
			*ws = "1"
		}
		if !flagSet("json") {
			*jsonPath = "backlog.json"
		}
	}
	var errs []error
	if *smoke {
		for _, f := range []string{"n", "w", "resync", "settle"} {
			if flagSet(f) {
				errs = append(errs, fmt.Errorf("-%s: -smoke sets it (N=10, W=1, a 5s resync, a 1s settle); leave it out, or leave out -smoke", f))
			}
		}
		*ns, *ws, *resync, *quiet = "10", "1", 5*time.Second, time.Second
		if !flagSet("timeout") {
			*timeout = 3 * time.Minute
		}
	}
	objects, errN := ints("-n", *ns)
	workers, errW := ints("-w", *ws)
	var which []string
	for _, p := range strings.Split(*peers, ",") {
		switch p = strings.TrimSpace(p); p {
		case peerKube, peerCR, peerClientGo, peerFloor:
			which = append(which, p)
		default:
			errs = append(errs, fmt.Errorf("-peers: unknown peer %q (kube, controller-runtime, client-go, floor)", p))
		}
	}
	if *timeout <= 0 {
		errs = append(errs, fmt.Errorf("-timeout: %v is not a positive duration (the limit of each run, such as 15m)", *timeout))
	}
	if *resync < 0 {
		errs = append(errs, fmt.Errorf("-resync: %v is negative (0 is 20s + 20ms an object)", *resync))
	}
	if *bWrites < 1 {
		errs = append(errs, fmt.Errorf("-backlog-writes: %d is not a positive count", *bWrites))
	}
	if *bEvery <= 0 {
		errs = append(errs, fmt.Errorf("-backlog-every: %v is not a positive duration (such as 250ms)", *bEvery))
	}
	if *quiet <= 0 {
		errs = append(errs, fmt.Errorf("-settle: %v is not a positive duration (how long the requests must stay unchanged, such as 3s)", *quiet))
	}
	mo := membersOptions{members: *members, cacheShare: *cacheShare, compareLeader: *cmpLeader, churn: *churn, churnEvery: *churnEvery, sync: *syncMode, leaseDuration: *leaseDur}
	errs = append(errs, mo.check(flagSet)...)
	if err := errors.Join(append([]error{errN, errW}, errs...)...); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	tmp, err := os.MkdirTemp("", "converge-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// The peers' logs outlive a failed run, which names them; a temporary
	// directory of their own is removed when every run succeeded.
	keepLogs := *logDir != ""
	if !keepLogs {
		if *logDir, err = os.MkdirTemp("", "converge-logs-"); err != nil {
			return err
		}
	}
	defer func() {
		if !keepLogs {
			os.RemoveAll(*logDir)
		}
	}()
	if err := os.MkdirAll(*logDir, 0o755); err != nil {
		return err
	}
	if *profiles != "" {
		if err := os.MkdirAll(*profiles, 0o755); err != nil {
			return err
		}
	}

	c := config{
		kubeconfig:    *kubeconfig,
		cp:            controlplane.Options{BinDir: *binDir},
		timeout:       *timeout,
		resync:        *resync,
		settle:        *quiet,
		gcWait:        90 * time.Second,
		logDir:        *logDir,
		progress:      os.Stderr,
		skipSteady:    *noSteady,
		finalizer:     *finalizer,
		restart:       *restart,
		convergeLimit: *convLimit,
		profileDir:    *profiles,
	}
	if *also != "" {
		for _, p := range strings.Split(*also, ",") {
			switch p = strings.TrimSpace(p); p {
			case peerKube, peerClientGo:
				c.also = append(c.also, p)
			default:
				return fmt.Errorf("-restart-also: %q is not a peer that says when it has synced (kube, client-go)", p)
			}
		}
	}
	if *etcdQuota > 0 {
		c.cp.EtcdFlags = append(c.cp.EtcdFlags, fmt.Sprintf("--quota-backend-bytes=%d", *etcdQuota<<20))
	}
	if *smoke {
		c.gcWait = time.Second // figures don't matter: don't wait out the garbage collector's discovery
	}
	bins := which
	for _, p := range c.also {
		if !slices.Contains(bins, p) {
			bins = append(bins, p)
		}
	}
	if mo.members > 0 {
		bins = []string{peerKube}
	}
	if c.bins, err = peerBinaries(ctx, *peerDir, tmp, bins); err != nil {
		return err
	}
	if *kubeconfig == "" {
		if err := ensureControlPlane(ctx, *binDir); err != nil {
			return err
		}
	}

	if mo.members > 0 {
		if !flagSet("json") {
			*jsonPath = "members.json"
		}
		if c.resync == 0 {
			// No resync pass in the measured spans: the churn's changes
			// would queue behind one (20s + 20ms an object comes during the
			// churn at N=10,000).
			c.resync = 10 * time.Hour
		}
		err := runMembersScenario(ctx, c, mo, objects, workers, *jsonPath, os.Stdout)
		if err != nil {
			keepLogs = true
			return fmt.Errorf("%w\n(the peers' logs are in %s)", err, *logDir)
		}
		if keepLogs {
			fmt.Fprintf(os.Stderr, "the peers' logs are in %s\n", *logDir)
		}
		return nil
	}
	if *backlog {
		return runBacklogScenario(ctx, c, backlogOptions{writes: *bWrites, every: *bEvery}, which, objects, workers, *jsonPath, os.Stdout)
	}
	load := loadAverage()
	var runs []Run
	for _, n := range objects {
		for _, w := range workers {
			for _, p := range which {
				if ctx.Err() != nil {
					break
				}
				runs = append(runs, runOne(ctx, c, p, n, w))
			}
		}
	}

	rep := newReport(runs, load)
	rep.Finalizer = *finalizer
	rep.print(os.Stdout)
	if *jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonPath, append(b, '\n'), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", *jsonPath)
	}
	if ctx.Err() != nil {
		keepLogs = true
		return fmt.Errorf("interrupted (the peers' logs are in %s)", *logDir)
	}
	var failed []error
	for _, r := range runs {
		if r.Error != "" {
			failed = append(failed, fmt.Errorf("%s N=%d W=%d failed: %s", r.Peer, r.Objects, r.Workers, r.Error))
		}
	}
	if len(failed) > 0 {
		keepLogs = true
		return fmt.Errorf("%w\n(the peers' logs are in %s)", errors.Join(failed...), *logDir)
	}
	return nil
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// ints reads the comma-separated positive whole numbers of flag name, or
// returns an error naming each item that isn't one.
func ints(name, s string) ([]int, error) {
	var out []int
	var errs []error
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		v, err := strconv.Atoi(f)
		switch {
		case f == "":
			errs = append(errs, fmt.Errorf("%s: an empty item in %q (a stray comma?)", name, s))
		case errors.Is(err, strconv.ErrRange):
			errs = append(errs, fmt.Errorf("%s: %s is too large", name, f))
		case err != nil || v < 1:
			errs = append(errs, fmt.Errorf("%s: %q is not a positive whole number", name, f))
		default:
			out = append(out, v)
		}
	}
	return out, errors.Join(errs...)
}

// benchDir is the bench module's directory, found from this file.
func benchDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot find the bench module's source; pass -peer-bin")
	}
	dir := filepath.Join(filepath.Dir(file), "..", "..")
	if _, err := os.Stat(filepath.Join(dir, "crpeer", "go.mod")); err != nil {
		return "", fmt.Errorf("the bench module isn't at %s (pass -peer-bin): %w", dir, err)
	}
	return dir, nil
}

// peerBinaries returns each peer's binary: from dir, or built into tmp.
// crpeer is built with GOWORK=off, in its own module.
func peerBinaries(ctx context.Context, dir, tmp string, peers []string) (map[string]string, error) {
	names := map[string]string{peerKube: "kubepeer", peerCR: "crpeer", peerClientGo: "clientgopeer", peerFloor: "floor"}
	bins := map[string]string{}
	if dir != "" {
		for _, p := range peers {
			bins[p] = filepath.Join(dir, names[p])
		}
		return bins, nil
	}
	src, err := benchDir()
	if err != nil {
		return nil, err
	}
	for _, p := range peers {
		out := filepath.Join(tmp, names[p])
		cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/"+names[p])
		cmd.Dir = src
		if p == peerCR {
			cmd = exec.CommandContext(ctx, "go", "build", "-o", out, ".")
			cmd.Dir = filepath.Join(src, "crpeer")
			cmd.Env = append(os.Environ(), "GOWORK=off")
		}
		fmt.Fprintf(os.Stderr, "building %s\n", names[p])
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building %s: %w\n%s", names[p], err, b)
		}
		bins[p] = out
	}
	return bins, nil
}

// ensureControlPlane builds the control plane's binaries if they are
// missing.
func ensureControlPlane(ctx context.Context, binDir string) error {
	dir := binDir
	if dir == "" {
		var err error
		if dir, err = controlplane.DefaultBinDir(); err != nil {
			return err
		}
	}
	if controlplane.BinariesIn(dir).Check() == nil {
		return nil
	}
	fmt.Fprintln(os.Stderr, "building the control plane's binaries (about 5 minutes, once)")
	_, err := controlplane.Build(ctx, controlplane.BuildOptions{BinDir: dir, Progress: os.Stderr})
	return err
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
