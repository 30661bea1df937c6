package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"text/tabwriter"
	"time"

	"k8s.io/client-go/kubernetes"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/z5labs/humus/bench/internal/memcached"
	"github.com/z5labs/humus/kube"
)

// Issue 38's member runs (-members M): M kube peers run as shard members
// (Settings.Sharding, each with its own identity, -cache-share for
// Sharding.CacheShare) converge N objects on a fresh control plane, beside
// a single leader on another fresh one (-compare-leader), at the same N and
// W. Each member's CPU seconds and peak RSS are read from /proc when the
// benchmark's watch sees every object Available, as a single peer's are.
//
// -churn goes on after convergence (members.go's runChurn): a user's spec
// change every -churn-every, a member more started, one of the first
// SIGKILLed, each change timed to its Deployment's new replicas; the
// members log each reconcile, and the logs tell whether a key was
// reconciled by two members at once, and when the killed member's keys
// were reconciled again by another.
//
// -sync (runSync) times the start of M members on N converged objects
// (with their Deployments) beside a single leader's start on the same
// objects: from the start until every member's Controller.Synced is
// healthy, and each one's peak RSS.

// MemberFigures are one kube process's figures in a member or sync run.
type MemberFigures struct {
	Identity string `json:"identity"`
	// SyncedSeconds is from the process's start until it said its caches
	// had synced.
	SyncedSeconds float64 `json:"synced_seconds"`
	// CPUSeconds and PeakRSSBytes are from /proc at the run's measuring
	// point: every object available (converge), or every process synced
	// (sync).
	CPUSeconds   float64 `json:"cpu_seconds"`
	PeakRSSBytes int64   `json:"peak_rss_bytes"`
	// SettledPeakRSSBytes (sync) is the peak RSS once the requests
	// settled after the sync: the reconciles the start caused included.
	SettledPeakRSSBytes int64 `json:"settled_peak_rss_bytes,omitempty"`
	// HeapInuseBytes is runtime.MemStats.HeapInuse after a GC, asked
	// right after the measuring point (converge) or once settled (sync).
	HeapInuseBytes int64 `json:"heap_inuse_bytes"`
	// Reconciles is how many reconciles its log shows, with -churn.
	Reconciles int `json:"reconciles,omitempty"`
	// RSSOverLeader and CPUOverLeader are its peak RSS and CPU over the
	// single leader's, when it ran (-compare-leader, -sync).
	RSSOverLeader float64 `json:"rss_over_leader,omitempty"`
	CPUOverLeader float64 `json:"cpu_over_leader,omitempty"`
}

// MembersRun is one -members run.
type MembersRun struct {
	Objects    int  `json:"objects"`
	Workers    int  `json:"workers"`
	Members    int  `json:"members"`
	CacheShare bool `json:"cache_share"`
	// LeaseDurationSeconds is the members' LeaseDuration; RenewDeadline
	// is two thirds of it, RetryPeriod kube's 2s.
	LeaseDurationSeconds float64 `json:"lease_duration_seconds"`
	// ConvergeSeconds is from the first member's start until the
	// benchmark's watch saw Available True on every object.
	ConvergeSeconds float64         `json:"converge_seconds"`
	Member          []MemberFigures `json:"member"`
	// Requests are all members' requests while converging; SettleRequests
	// those from convergence until they settled (the tail).
	Requests       Requests `json:"requests"`
	RequestTotal   float64  `json:"request_total"`
	Writes         float64  `json:"writes"`
	SettleRequests Requests `json:"settle_requests"`
	SettleWrites   float64  `json:"settle_writes"`
	// Leader is the single leader's run at the same N and W, with
	// -compare-leader; MaxRSSOverLeader and MaxCPUOverLeader are the
	// greatest member's ratios (issue 38 asks at most 0.45 each).
	Leader           *Run    `json:"leader,omitempty"`
	MaxRSSOverLeader float64 `json:"max_rss_over_leader,omitempty"`
	MaxCPUOverLeader float64 `json:"max_cpu_over_leader,omitempty"`
	// Churn is the -churn phase after convergence.
	Churn *Churn `json:"churn,omitempty"`
	Error string `json:"error,omitempty"`
}

// Churn is what the churn phase measured.
type Churn struct {
	EverySeconds float64 `json:"every_seconds"`
	// Changes are the spec changes made (size 1 to 2, then 2 to 3 on a
	// second pass); Unanswered, those whose Deployment didn't show the
	// new size within 60s of the last change.
	Changes    int     `json:"changes"`
	Unanswered int     `json:"unanswered"`
	P50Seconds float64 `json:"p50_seconds"`
	P99Seconds float64 `json:"p99_seconds"`
	MaxSeconds float64 `json:"max_seconds"`
	// P99NotKilledSeconds and MaxNotKilledSeconds leave out the changes
	// of the keys the killed member owned when it was killed, which wait
	// out its Lease.
	P99NotKilledSeconds float64 `json:"p99_not_killed_seconds"`
	MaxNotKilledSeconds float64 `json:"max_not_killed_seconds"`
	// Joined is the member started during the churn, JoinedAtSeconds when
	// (from the churn's start), JoinedSyncedSeconds from its start until it
	// said it had synced.
	Joined              string  `json:"joined"`
	JoinedAtSeconds     float64 `json:"joined_at_seconds"`
	JoinedSyncedSeconds float64 `json:"joined_synced_seconds"`
	// JoinedReconciles is how many reconciles the joined member's log
	// shows.
	JoinedReconciles int `json:"joined_reconciles"`
	// Killed is the member SIGKILLed, KilledAtSeconds when.
	Killed          string  `json:"killed"`
	KilledAtSeconds float64 `json:"killed_at_seconds"`
	Takeover
	// BoundSeconds is LeaseDuration + RetryPeriod, which no object should
	// stay without an owner for longer than.
	BoundSeconds float64 `json:"bound_seconds"`
	// Overlaps counts the times a key was reconciled by two members at
	// once, from the members' logs (each reconcile's span is from the
	// Reconciler's start to its return: kube's status write after it is
	// not in the span); OverlapExamples shows the first few.
	Overlaps        int      `json:"overlaps"`
	OverlapExamples []string `json:"overlap_examples,omitempty"`
	// Spans is how many reconciles the logs hold, all members together.
	Spans int `json:"spans"`
	// Phases are the answered changes' p99 and max by when they were
	// made: "steady" before the join, "join" from the join to the kill,
	// "kill" within LeaseDuration + RetryPeriod of the kill, "after".
	Phases []PhaseFigures `json:"phases"`
	// Requests are those from the churn's start until the requests
	// settled after it, the benchmark's changes (PATCH memcacheds) among
	// them; MemberWrites are the writes to memcacheds and deployments less
	// the changes: the members' (Leases not counted).
	Requests     Requests `json:"requests"`
	MemberWrites float64  `json:"member_writes"`

	state *churnState // the kill's time and the changes, for check
}

// PhaseFigures are the changes made in one phase of the churn.
type PhaseFigures struct {
	Phase      string  `json:"phase"`
	Changes    int     `json:"changes"`
	P99Seconds float64 `json:"p99_seconds"`
	MaxSeconds float64 `json:"max_seconds"`
}

// Takeover is how the killed member's keys came to another member.
type Takeover struct {
	// KilledKeys are the keys whose last reconcile before the kill was
	// the killed member's.
	KilledKeys int `json:"killed_keys"`
	// TakeoverSeconds is from the kill until the last of them was started
	// reconciling by another member; NotTakenOver counts those no other
	// member reconciled before the run ended.
	TakeoverSeconds float64 `json:"takeover_seconds"`
	NotTakenOver    int     `json:"not_taken_over"`
}

// SyncRun is one -sync run: a single leader's start on N converged
// objects, then M members' start on the same objects.
type SyncRun struct {
	Objects    int  `json:"objects"`
	Workers    int  `json:"workers"`
	Members    int  `json:"members"`
	CacheShare bool `json:"cache_share"`
	// LeaderConvergeSeconds is the first leader's convergence, which made
	// the Deployments.
	LeaderConvergeSeconds float64 `json:"leader_converge_seconds"`
	// Leader is the single leader started again on the converged objects.
	Leader MemberFigures `json:"leader"`
	// AllSyncedSeconds is from the first member's start until every
	// member said it had synced.
	AllSyncedSeconds float64         `json:"all_synced_seconds"`
	Member           []MemberFigures `json:"member"`
	// RestartAllSyncedSeconds and Restarted are the same members started
	// again once the first start settled: on objects each already
	// labelled for its member with CacheShare (the first start, on the
	// leader's unlabelled objects, syncs on empty shares and labels the
	// objects after).
	// LabelledSeconds (CacheShare) is from the first start of the first
	// member until no Memcached or Deployment was without the shard label
	// (looked at every 2s, after the requests settled or 2 minutes).
	LabelledSeconds         float64         `json:"labelled_seconds,omitempty"`
	RestartAllSyncedSeconds float64         `json:"restart_all_synced_seconds"`
	Restarted               []MemberFigures `json:"restarted"`
	Error                   string          `json:"error,omitempty"`
}

// MembersReport is what -members writes as JSON.
type MembersReport struct {
	When       time.Time    `json:"when"`
	GoVersion  string       `json:"go_version"`
	CPUs       int          `json:"cpus"`
	LoadBefore string       `json:"load_average_before"`
	LoadAfter  string       `json:"load_average_after"`
	Runs       []MembersRun `json:"runs,omitempty"`
	Syncs      []SyncRun    `json:"syncs,omitempty"`
}

// membersOptions are the member runs' flags.
type membersOptions struct {
	members       int
	cacheShare    bool
	compareLeader bool
	churn         bool
	churnEvery    time.Duration
	sync          bool
	leaseDuration time.Duration
}

// check returns an error for each mistake in the member runs' flags;
// set tells whether a flag was given.
func (o membersOptions) check(set func(string) bool) []error {
	var errs []error
	if o.members < 0 {
		errs = append(errs, fmt.Errorf("-members: %d is negative (0 runs the peers instead)", o.members))
	}
	if o.members <= 0 {
		for _, f := range []string{"cache-share", "compare-leader", "churn", "churn-every", "sync", "lease-duration"} {
			if set(f) {
				errs = append(errs, fmt.Errorf("-%s: only with -members", f))
			}
		}
		return errs
	}
	for _, f := range []string{"peers", "backlog", "restart", "restart-also", "smoke", "converge-limit", "cpuprofile"} {
		if set(f) {
			errs = append(errs, fmt.Errorf("-%s: not with -members, which runs kube members (and with -compare-leader or -sync a kube leader) only", f))
		}
	}
	if o.sync && (o.churn || o.compareLeader) {
		errs = append(errs, errors.New("-sync: not with -churn or -compare-leader (-sync starts a leader of its own)"))
	}
	if o.churnEvery <= 0 {
		errs = append(errs, fmt.Errorf("-churn-every: %v is not a positive duration (such as 100ms)", o.churnEvery))
	}
	if o.leaseDuration < 4*time.Second || o.leaseDuration%time.Second != 0 {
		errs = append(errs, fmt.Errorf("-lease-duration: %v is not whole seconds of at least 4s (RenewDeadline, two thirds of it, must exceed 1.2 RetryPeriods of 2s)", o.leaseDuration))
	}
	return errs
}

// retryPeriod is kube's default LeaderElection.RetryPeriod, which kubepeer
// keeps.
const retryPeriod = 2 * time.Second

// churnPhase is how long the churn goes on before the join, between the
// join's sync and the kill, and after the kill's bound.
const churnPhase = 15 * time.Second

// runMembersScenario runs -members (or -sync) at each N and W, prints its
// table and writes its JSON to jsonPath.
func runMembersScenario(ctx context.Context, c config, o membersOptions, objects, workers []int, jsonPath string, out io.Writer) error {
	rep := MembersReport{When: time.Now().UTC(), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), LoadBefore: loadAverage()}
	for _, n := range objects {
		for _, w := range workers {
			if ctx.Err() != nil {
				break
			}
			if o.sync {
				rep.Syncs = append(rep.Syncs, runSync(ctx, c, o, n, w))
				continue
			}
			var leader *Run
			if o.compareLeader {
				lc := c
				lc.skipSteady, lc.restart = true, false
				l := runOne(ctx, lc, peerKube, n, w)
				leader = &l
			}
			rep.Runs = append(rep.Runs, runMembers(ctx, c, o, n, w, leader))
		}
	}
	rep.LoadAfter = loadAverage()
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
	var errs []error
	for _, r := range rep.Runs {
		if r.Leader != nil && r.Leader.Error != "" {
			errs = append(errs, fmt.Errorf("leader N=%d W=%d failed: %s", r.Objects, r.Workers, r.Leader.Error))
		}
		if r.Error != "" {
			errs = append(errs, fmt.Errorf("%d members N=%d W=%d failed: %s", r.Members, r.Objects, r.Workers, r.Error))
		}
	}
	for _, r := range rep.Syncs {
		if r.Error != "" {
			errs = append(errs, fmt.Errorf("sync of %d members N=%d W=%d failed: %s", r.Members, r.Objects, r.Workers, r.Error))
		}
	}
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}
	return errors.Join(errs...)
}

func (rep MembersReport) print(out io.Writer) {
	fmt.Fprintf(out, "issue 38 member runs, %s, %d CPUs, load average %s before and %s after\n", rep.GoVersion, rep.CPUs, rep.LoadBefore, rep.LoadAfter)
	for _, r := range rep.Runs {
		fmt.Fprintf(out, "\nN=%d W=%d, %d members, cache-share %v, LeaseDuration %.0fs\n", r.Objects, r.Workers, r.Members, r.CacheShare, r.LeaseDurationSeconds)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "process\tconverge s\tCPU s\tpeak RSS MiB\theap MiB\tsynced s\tCPU/leader\tRSS/leader\treconciles\t")
		if l := r.Leader; l != nil {
			if l.Error != "" {
				fmt.Fprintf(tw, "leader\terror: %s\t\n", l.Error)
			} else {
				fmt.Fprintf(tw, "leader\t%.2f\t%.2f\t%.1f\t%.1f\t%.2f\t1\t1\t-\t\n", l.ConvergeSeconds, l.CPUSeconds, mib(l.PeakRSSBytes), mib(l.HeapInuseBytes), l.SyncedSeconds)
			}
		}
		for _, m := range r.Member {
			fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.1f\t%.1f\t%.2f\t%s\t%s\t%s\t\n", m.Identity, r.ConvergeSeconds, m.CPUSeconds, mib(m.PeakRSSBytes), mib(m.HeapInuseBytes), m.SyncedSeconds,
				orDash(m.CPUOverLeader), orDash(m.RSSOverLeader), count(m.Reconciles))
		}
		tw.Flush()
		if r.Error != "" {
			fmt.Fprintf(out, "members: error: %s\n", r.Error)
		}
		if r.Leader != nil && r.Leader.Error == "" {
			fmt.Fprintf(out, "leader requests: %.0f (%s); tail: %s\n", r.Leader.RequestTotal, breakdown(r.Leader.Requests), breakdown(r.Leader.SettleRequests))
		}
		fmt.Fprintf(out, "members' requests: %.0f (%s); tail: %s\n", r.RequestTotal, breakdown(r.Requests), breakdown(r.SettleRequests))
		if r.MaxRSSOverLeader > 0 {
			fmt.Fprintf(out, "greatest member over the leader: peak RSS %.2f, CPU %.2f (issue 38 asks at most 0.45 each)\n", r.MaxRSSOverLeader, r.MaxCPUOverLeader)
		}
		if ch := r.Churn; ch != nil {
			fmt.Fprintf(out, "churn: a change every %.3fs, %d changes, %d unanswered; change to Deployment p50 %.3fs p99 %.3fs max %.3fs; without the killed member's keys p99 %.3fs max %.3fs\n",
				ch.EverySeconds, ch.Changes, ch.Unanswered, ch.P50Seconds, ch.P99Seconds, ch.MaxSeconds, ch.P99NotKilledSeconds, ch.MaxNotKilledSeconds)
			fmt.Fprintf(out, "churn: %s joined at %.1fs (synced after %.2fs, %d reconciles), %s SIGKILLed at %.1fs; its %d keys reconciled again by others %.2fs after the kill (bound LeaseDuration+RetryPeriod %.0fs), %d not\n",
				ch.Joined, ch.JoinedAtSeconds, ch.JoinedSyncedSeconds, ch.JoinedReconciles, ch.Killed, ch.KilledAtSeconds, ch.KilledKeys, ch.TakeoverSeconds, ch.BoundSeconds, ch.NotTakenOver)
			fmt.Fprintf(out, "churn: %d reconciles logged, %d times a key was reconciled by two members at once\n", ch.Spans, ch.Overlaps)
			for _, p := range ch.Phases {
				fmt.Fprintf(out, "churn: changes made in phase %s: %d, p99 %.3fs, max %.3fs\n", p.Phase, p.Changes, p.P99Seconds, p.MaxSeconds)
			}
			fmt.Fprintf(out, "churn: requests %s; the members' writes to memcacheds and deployments %.0f\n", breakdown(ch.Requests), ch.MemberWrites)
			for _, e := range ch.OverlapExamples {
				fmt.Fprintf(out, "  overlap: %s\n", e)
			}
		}
	}
	for _, r := range rep.Syncs {
		fmt.Fprintf(out, "\nsync: N=%d W=%d, %d members, cache-share %v (the leader converged them in %.1fs first)\n", r.Objects, r.Workers, r.Members, r.CacheShare, r.LeaderConvergeSeconds)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "process\tsynced s\tCPU s at synced\tpeak RSS MiB at synced\tpeak RSS MiB settled\theap MiB settled\tRSS/leader\t")
		rows := append([]MemberFigures{r.Leader}, r.Member...)
		for _, m := range r.Restarted {
			m.Identity += " again"
			rows = append(rows, m)
		}
		for _, m := range rows {
			fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.1f\t%.1f\t%.1f\t%s\t\n", m.Identity, m.SyncedSeconds, m.CPUSeconds, mib(m.PeakRSSBytes), mib(m.SettledPeakRSSBytes), mib(m.HeapInuseBytes), orDash(m.RSSOverLeader))
		}
		tw.Flush()
		fmt.Fprintf(out, "every member synced %.2fs after the first one's start; every object labelled after %.1fs; started again, every member synced after %.2fs\n", r.AllSyncedSeconds, r.LabelledSeconds, r.RestartAllSyncedSeconds)
		if r.Error != "" {
			fmt.Fprintf(out, "error: %s\n", r.Error)
		}
	}
}

func orDash(v float64) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func count(v int) string {
	if v == 0 {
		return "-"
	}
	return strconv.Itoa(v)
}

// memberID is the identity of member i.
func memberID(i int) string { return "member-" + strconv.Itoa(i) }

// startMember starts the kube peer as member identity, with Sharding on
// (CacheShare with o.cacheShare) and o's LeaseDuration; logReconciles
// has it log each reconcile.
func startMember(ctx context.Context, c config, o membersOptions, kubeconfig, identity string, n, w int, logReconciles bool) (*peerProc, error) {
	args := []string{"-kubeconfig=" + kubeconfig, "-workers=" + strconv.Itoa(w), "-namespace=" + namespace,
		"-resync=" + c.resyncFor(n).String(), "-sharding", "-identity=" + identity,
		"-lease-duration=" + o.leaseDuration.String(), "-renew-deadline=" + (o.leaseDuration * 2 / 3).String()}
	if o.cacheShare {
		args = append(args, "-cache-share")
	}
	if logReconciles {
		args = append(args, "-log-reconciles")
	}
	if c.finalizer {
		args = append(args, "-finalizer")
	}
	p, err := launch(ctx, c.bins[peerKube], args, filepath.Join(c.logDir, fmt.Sprintf("kube-%s-n%d-w%d.log", identity, n, w)))
	if err != nil {
		return nil, err
	}
	p.identity = identity
	return p, nil
}

// exitedAny returns a channel that receives the index of the first of ps
// to exit, until ctx ends.
func exitedAny(ctx context.Context, ps []*peerProc) <-chan int {
	ch := make(chan int, len(ps))
	for i, p := range ps {
		go func() {
			select {
			case <-p.exited:
				ch <- i
			case <-ctx.Done():
			}
		}()
	}
	return ch
}

func runMembers(ctx context.Context, c config, o membersOptions, n, w int, leader *Run) (r MembersRun) {
	r = MembersRun{Objects: n, Workers: w, Members: o.members, CacheShare: o.cacheShare, LeaseDurationSeconds: o.leaseDuration.Seconds(), Leader: leader}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := runMembersErr(ctx, c, o, &r); err != nil {
		r.Error = err.Error()
		c.logf("%d members N=%d W=%d: %v", o.members, n, w, err)
	}
	if l := r.Leader; l != nil && l.Error == "" && l.PeakRSSBytes > 0 && l.CPUSeconds > 0 {
		for i := range r.Member {
			m := &r.Member[i]
			if m.PeakRSSBytes == 0 {
				continue
			}
			m.RSSOverLeader = float64(m.PeakRSSBytes) / float64(l.PeakRSSBytes)
			m.CPUOverLeader = m.CPUSeconds / l.CPUSeconds
			r.MaxRSSOverLeader = max(r.MaxRSSOverLeader, m.RSSOverLeader)
			r.MaxCPUOverLeader = max(r.MaxCPUOverLeader, m.CPUOverLeader)
		}
	}
	return r
}

func runMembersErr(ctx context.Context, c config, o membersOptions, r *MembersRun) error {
	label := fmt.Sprintf("%d members N=%d W=%d", o.members, r.Objects, r.Workers)
	cluster, kc, dc, stop, err := c.cluster(ctx, label)
	if err != nil {
		return err
	}
	defer stop()
	c.logf("%s: creating %d objects", label, r.Objects)
	if err := createObjects(ctx, kc, dc, r.Objects); err != nil {
		return err
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	avail, err := watchAvailability(watchCtx, dc.Resource(memcached.Memcached.GVR()), namespace, r.Objects)
	if err != nil {
		return err
	}
	var ans *answers
	if o.churn {
		if ans, err = watchAnswers(watchCtx, dc.Resource(deploymentsGVR), namespace); err != nil {
			return err
		}
	}
	if err := waitForWatchers(ctx, kc, "WATCH memcacheds", 2, c.gcWait); err != nil {
		c.logf("%s: %v (going on)", label, err)
	}
	before, _, err := scrape(ctx, kc)
	if err != nil {
		return err
	}
	var ps []*peerProc
	defer func() {
		for _, p := range ps {
			p.stop()
		}
	}()
	for i := range o.members {
		p, err := startMember(ctx, c, o, cluster.Kubeconfig, memberID(i), r.Objects, r.Workers, o.churn)
		if err != nil {
			return err
		}
		ps = append(ps, p)
	}
	first := ps[0].started
	c.logf("%s: started", label)
	exited := exitedAny(watchCtx, ps)
	select {
	case <-avail.all:
	case i := <-exited:
		return fmt.Errorf("%s exited before converging (%d of %d available): %v; its log: %s", memberID(i), avail.count(), r.Objects, ps[i].waitErr, ps[i].logPath)
	case <-ctx.Done():
		return fmt.Errorf("not converged within the run's timeout (%d of %d available): %w", avail.count(), r.Objects, ctx.Err())
	}
	r.ConvergeSeconds = time.Since(first).Seconds()
	for i, p := range ps {
		st, err := readProc(p.cmd.Process.Pid)
		if err != nil {
			return fmt.Errorf("reading %s's /proc: %w", memberID(i), err)
		}
		r.Member = append(r.Member, MemberFigures{Identity: memberID(i), CPUSeconds: st.CPUSeconds, PeakRSSBytes: st.PeakRSS})
	}
	after, _, err := scrape(ctx, kc)
	if err != nil {
		return err
	}
	r.Requests = after.sub(before)
	r.RequestTotal, r.Writes = r.Requests.total(), r.Requests.writes()
	for i, p := range ps {
		r.Member[i].SyncedSeconds = p.syncedSeconds()
		if r.Member[i].HeapInuseBytes, err = p.heapInuse(ctx); err != nil {
			return fmt.Errorf("%s: %w", memberID(i), err)
		}
	}
	c.logf("%s: converged in %.2fs, %.0f requests", label, r.ConvergeSeconds, r.RequestTotal)
	settled, err := settle(ctx, kc, c.settle, 2*time.Minute)
	if err != nil {
		return err
	}
	r.SettleRequests = settled.sub(after)
	r.SettleWrites = r.SettleRequests.writes()
	if !o.churn {
		return nil
	}
	// The churn: the members already running stay in ps, so the deferred
	// stop ends them (the killed one has exited already).
	ch, joined, err := runChurn(ctx, c, o, cluster.Kubeconfig, kc, dc, ans, ps, r)
	if joined != nil {
		ps = append(ps, joined)
	}
	r.Churn = ch
	if err != nil {
		return fmt.Errorf("churn: %w", err)
	}
	// Stop the members, so that every reconcile's end is in its log.
	for _, p := range ps {
		p.stop()
	}
	spans, err := readSpans(ps)
	if err != nil {
		return err
	}
	for i := range r.Member {
		r.Member[i].Reconciles = spansOf(spans, r.Member[i].Identity)
	}
	ch.JoinedReconciles = spansOf(spans, ch.Joined)
	ch.check(spans)
	c.logf("%s: churn p99 %.3fs, takeover %.2fs, %d overlaps", label, ch.P99Seconds, ch.TakeoverSeconds, ch.Overlaps)
	return nil
}

func runSync(ctx context.Context, c config, o membersOptions, n, w int) (r SyncRun) {
	r = SyncRun{Objects: n, Workers: w, Members: o.members, CacheShare: o.cacheShare}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := runSyncErr(ctx, c, o, &r); err != nil {
		r.Error = err.Error()
		c.logf("sync of %d members N=%d W=%d: %v", o.members, n, w, err)
	}
	if l := r.Leader; l.PeakRSSBytes > 0 && l.CPUSeconds > 0 {
		ms := make([]*MemberFigures, 0, len(r.Member)+len(r.Restarted))
		for i := range r.Member {
			ms = append(ms, &r.Member[i])
		}
		for i := range r.Restarted {
			ms = append(ms, &r.Restarted[i])
		}
		for _, m := range ms {
			if m.PeakRSSBytes > 0 {
				m.RSSOverLeader = float64(m.PeakRSSBytes) / float64(l.PeakRSSBytes)
				m.CPUOverLeader = m.CPUSeconds / l.CPUSeconds
			}
		}
	}
	return r
}

// runSyncErr converges N objects with a single leader and stops it, then
// starts the leader again and times its sync, then the members together.
func runSyncErr(ctx context.Context, c config, o membersOptions, r *SyncRun) error {
	label := fmt.Sprintf("sync of %d members N=%d W=%d", o.members, r.Objects, r.Workers)
	cluster, kc, dc, stop, err := c.cluster(ctx, label)
	if err != nil {
		return err
	}
	defer stop()
	c.logf("%s: creating %d objects", label, r.Objects)
	if err := createObjects(ctx, kc, dc, r.Objects); err != nil {
		return err
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	avail, err := watchAvailability(watchCtx, dc.Resource(memcached.Memcached.GVR()), namespace, r.Objects)
	if err != nil {
		return err
	}
	run := &Run{Peer: peerKube, Objects: r.Objects, Workers: r.Workers}
	p, err := startPeer(ctx, c, cluster.Kubeconfig, peerKube, r.Workers, c.resyncFor(r.Objects), run)
	if err != nil {
		return err
	}
	c.logf("%s: the leader converges them first", label)
	select {
	case <-avail.all:
	case <-p.exited:
		return fmt.Errorf("the leader exited before converging (%d of %d available): %v; its log: %s", avail.count(), r.Objects, p.waitErr, p.logPath)
	case <-ctx.Done():
		p.stop()
		return fmt.Errorf("the leader didn't converge within the run's timeout (%d of %d available): %w", avail.count(), r.Objects, ctx.Err())
	}
	r.LeaderConvergeSeconds = time.Since(p.started).Seconds()
	if _, err := settle(ctx, kc, c.settle, 2*time.Minute); err != nil {
		p.stop()
		return err
	}
	p.stop()
	c.logf("%s: converged in %.1fs; starting the leader again", label, r.LeaderConvergeSeconds)

	run.Restart = &Restart{Peer: peerKube}
	if p, err = startPeer(ctx, c, cluster.Kubeconfig, peerKube, r.Workers, c.resyncFor(r.Objects), run); err != nil {
		return err
	}
	p.identity = "leader"
	figs, _, err := measureSync(ctx, c, kc, []*peerProc{p}, nil)
	if len(figs) == 1 {
		r.Leader = figs[0]
	}
	if err != nil {
		return fmt.Errorf("the leader: %w", err)
	}
	c.logf("%s: the leader synced in %.2fs; starting %d members", label, r.Leader.SyncedSeconds, o.members)

	var ps []*peerProc
	for i := range o.members {
		p, err := startMember(ctx, c, o, cluster.Kubeconfig, memberID(i), r.Objects, r.Workers, false)
		if err != nil {
			for _, q := range ps {
				q.stop()
			}
			return err
		}
		ps = append(ps, p)
	}
	// With CacheShare the first start finds the leader's objects without
	// the shard label: wait until the members have labelled every one, so
	// that the second start finds each labelled for its member.
	var labelled func() error
	if o.cacheShare {
		first := ps[0].started
		labelled = func() error {
			err := waitLabelled(ctx, dc, 15*time.Minute)
			r.LabelledSeconds = time.Since(first).Seconds()
			c.logf("%s: every object labelled %.1fs after the first member's start", label, r.LabelledSeconds)
			return err
		}
	}
	r.Member, r.AllSyncedSeconds, err = measureSync(ctx, c, kc, ps, labelled)
	if err != nil {
		return fmt.Errorf("members: %w", err)
	}
	c.logf("%s: every member synced %.2fs after the first one's start; starting them again", label, r.AllSyncedSeconds)
	ps = nil
	for i := range o.members {
		p, err := startMember(ctx, c, o, cluster.Kubeconfig, memberID(i), r.Objects, r.Workers, false)
		if err != nil {
			for _, q := range ps {
				q.stop()
			}
			return err
		}
		ps = append(ps, p)
	}
	r.Restarted, r.RestartAllSyncedSeconds, err = measureSync(ctx, c, kc, ps, nil)
	if err != nil {
		return fmt.Errorf("members started again: %w", err)
	}
	c.logf("%s: started again, every member synced %.2fs after the first one's start", label, r.RestartAllSyncedSeconds)
	return nil
}

// measureSync waits until every one of ps says it has synced, and returns
// each one's figures: its synced time, its CPU and peak RSS then, its
// peak RSS and heap once the requests have settled after (up to two
// minutes), and the time from the first one's start until the last one
// synced. It stops ps.
func measureSync(ctx context.Context, c config, kc kubernetes.Interface, ps []*peerProc, before func() error) ([]MemberFigures, float64, error) {
	defer func() {
		for _, p := range ps {
			p.stop()
		}
	}()
	figs := make([]MemberFigures, len(ps))
	var all time.Time
	for i, p := range ps {
		figs[i].Identity = p.identity
		for figs[i].SyncedSeconds = p.syncedSeconds(); figs[i].SyncedSeconds == 0; figs[i].SyncedSeconds = p.syncedSeconds() {
			select {
			case <-time.After(10 * time.Millisecond):
			case <-p.exited:
				return figs, 0, fmt.Errorf("%s exited before syncing: %v; its log: %s", p.identity, p.waitErr, p.logPath)
			case <-ctx.Done():
				return figs, 0, fmt.Errorf("%s not synced within the run's timeout: %w", p.identity, ctx.Err())
			}
		}
		if at := p.started.Add(time.Duration(figs[i].SyncedSeconds * float64(time.Second))); at.After(all) {
			all = at
		}
	}
	for i, p := range ps {
		st, err := readProc(p.cmd.Process.Pid)
		if err != nil {
			return figs, 0, fmt.Errorf("reading %s's /proc: %w", p.identity, err)
		}
		figs[i].CPUSeconds, figs[i].PeakRSSBytes = st.CPUSeconds, st.PeakRSS
	}
	if _, err := settle(ctx, kc, c.settle, 2*time.Minute); err != nil {
		return figs, 0, err
	}
	if before != nil {
		if err := before(); err != nil {
			return figs, 0, err
		}
	}
	for i, p := range ps {
		st, err := readProc(p.cmd.Process.Pid)
		if err != nil {
			return figs, 0, fmt.Errorf("reading %s's /proc: %w", p.identity, err)
		}
		figs[i].SettledPeakRSSBytes = st.PeakRSS
		if figs[i].HeapInuseBytes, err = p.heapInuse(ctx); err != nil {
			return figs, 0, fmt.Errorf("%s: %w", p.identity, err)
		}
	}
	return figs, all.Sub(ps[0].started).Seconds(), nil
}

// waitLabelled waits until no Memcached and no Deployment of the
// benchmark's namespace is without the shard label, looking every 2s
// with a list of one, for at most limit.
func waitLabelled(ctx context.Context, dc dynamic.Interface, limit time.Duration) error {
	sel := "!" + kube.ShardLabel(memcached.FieldManager)
	return wait.PollUntilContextTimeout(ctx, 2*time.Second, limit, true, func(ctx context.Context) (bool, error) {
		for _, gvr := range []schema.GroupVersionResource{memcached.Memcached.GVR(), deploymentsGVR} {
			l, err := dc.Resource(gvr).Namespace(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel, Limit: 1})
			if err != nil || len(l.Items) > 0 {
				return false, nil
			}
		}
		return true, nil
	})
}
