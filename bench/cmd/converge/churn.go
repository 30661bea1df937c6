package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus/bench/internal/memcached"
)

// The churn phase of a -members run, after convergence: from its start a
// spec change every -churn-every, going through the objects in order
// (size 1 to 2, and on a second pass 2 to 3; no more after two passes);
// after churnPhase a member more is started, and churnPhase after it said
// it had synced the first member is SIGKILLed; the changes go on for the
// killed member's LeaseDuration + RetryPeriod and churnPhase more, and the
// members run until the requests settle (at most 3 minutes more). Each
// change is timed from its start until the benchmark's watch sees its
// Deployment with the new replicas. The members log each reconcile
// (kubepeer -log-reconciles), and once they are stopped their logs tell
// whether a key was reconciled by two at once and when the killed member's
// keys were reconciled again by others (Churn.check).

// churnChange is one spec change.
type churnChange struct {
	key   string // namespace/name
	start time.Time
	done  <-chan time.Time
	took  float64 // seconds; -1 when unanswered
}

// churnState is what check needs besides the spans.
type churnState struct {
	joinedAt, killedAt time.Time
	bound              time.Duration // LeaseDuration + RetryPeriod
	changes            []churnChange
}

// phase names the part of the churn a change made at t falls in: "steady"
// before the join, "join" from the join to the kill, "kill" from the kill
// until the bound after it (the killed member's keys wait for its Lease),
// "after" from then on.
func (st *churnState) phase(t time.Time) string {
	switch {
	case t.Before(st.joinedAt):
		return "steady"
	case t.Before(st.killedAt):
		return "join"
	case t.Before(st.killedAt.Add(st.bound)):
		return "kill"
	}
	return "after"
}

// runChurn runs the churn phase on the converged members ps (ps[0] is the
// one killed) and returns its figures without the logs' (check adds them),
// and the member it started, to be stopped with the others.
func runChurn(ctx context.Context, c config, o membersOptions, kubeconfig string, kc kubernetes.Interface, dc dynamic.Interface, ans *answers, ps []*peerProc, r *MembersRun) (*Churn, *peerProc, error) {
	ch := &Churn{EverySeconds: o.churnEvery.Seconds(), BoundSeconds: (o.leaseDuration + retryPeriod).Seconds(), Killed: ps[0].identity, Joined: memberID(len(ps))}
	label := fmt.Sprintf("%d members N=%d W=%d: churn", len(ps), r.Objects, r.Workers)
	var joined *peerProc
	before, _, err := scrape(ctx, kc)
	if err != nil {
		return ch, nil, err
	}
	start := time.Now()
	stopWriting := make(chan struct{})
	written := make(chan writerResult, 1)
	go func() { written <- writeChanges(ctx, dc, ans, r.Objects, o.churnEvery, stopWriting) }()
	finish := func() writerResult {
		select {
		case <-stopWriting:
		default:
			close(stopWriting)
		}
		return <-written
	}
	pause := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	fail := func(err error) (*Churn, *peerProc, error) {
		finish()
		return ch, nil, err
	}

	c.logf("%s: changing a Memcached every %v", label, o.churnEvery)
	if err := pause(churnPhase); err != nil {
		return fail(err)
	}
	joined, err = startMember(ctx, c, o, kubeconfig, ch.Joined, r.Objects, r.Workers, true)
	if err != nil {
		return fail(err)
	}
	joinedAt := time.Now()
	ch.JoinedAtSeconds = joinedAt.Sub(start).Seconds()
	c.logf("%s: started %s", label, ch.Joined)
	for ch.JoinedSyncedSeconds = joined.syncedSeconds(); ch.JoinedSyncedSeconds == 0; ch.JoinedSyncedSeconds = joined.syncedSeconds() {
		select {
		case <-time.After(10 * time.Millisecond):
		case <-joined.exited:
			finish()
			return ch, joined, fmt.Errorf("%s exited before syncing: %v; its log: %s", ch.Joined, joined.waitErr, joined.logPath)
		case <-ctx.Done():
			finish()
			return ch, joined, ctx.Err()
		}
	}
	if err := pause(churnPhase); err != nil {
		finish()
		return ch, joined, err
	}
	st := &churnState{joinedAt: joinedAt, killedAt: time.Now(), bound: o.leaseDuration + retryPeriod}
	ch.state = st
	_ = syscall.Kill(-ps[0].cmd.Process.Pid, syscall.SIGKILL)
	ch.KilledAtSeconds = st.killedAt.Sub(start).Seconds()
	c.logf("%s: SIGKILLed %s", label, ch.Killed)
	select {
	case <-ps[0].exited:
	case <-ctx.Done():
		finish()
		return ch, joined, ctx.Err()
	}
	if err := pause(o.leaseDuration + retryPeriod + churnPhase); err != nil {
		finish()
		return ch, joined, err
	}
	res := finish()
	st.changes = res.changes
	ch.Changes = len(res.changes)
	c.logf("%s: %d changes made; waiting for their Deployments", label, ch.Changes)
	if len(res.changes) > 0 {
		grace := time.NewTimer(time.Until(res.changes[len(res.changes)-1].start.Add(60 * time.Second)))
		defer grace.Stop()
		expired := false
		for i := range st.changes {
			cc := &st.changes[i]
			cc.took = -1
			if expired {
				select {
				case at := <-cc.done:
					cc.took = at.Sub(cc.start).Seconds()
				default:
				}
				continue
			}
			select {
			case at := <-cc.done:
				cc.took = at.Sub(cc.start).Seconds()
			case <-grace.C:
				expired = true
			case <-ctx.Done():
				return ch, joined, ctx.Err()
			}
		}
	}
	// The killed member's keys may still be queued (at low priority,
	// behind the others gained): let the requests settle, so that the
	// logs hold their reconciles.
	settled, err := settle(ctx, kc, c.settle, 3*time.Minute)
	if err != nil {
		return ch, joined, err
	}
	ch.Requests = settled.sub(before)
	ch.MemberWrites = ch.Requests.objectWrites() - float64(ch.Changes)
	var errs []error
	if res.err != nil {
		errs = append(errs, res.err)
	}
	for _, p := range append(slices.Clone(ps[1:]), joined) {
		select {
		case <-p.exited:
			errs = append(errs, fmt.Errorf("%s exited during the churn: %v; its log: %s", p.identity, p.waitErr, p.logPath))
		default:
		}
	}
	return ch, joined, errors.Join(errs...)
}

type writerResult struct {
	changes []churnChange
	err     error
}

// writeChanges patches a Memcached's spec.size every every, in the
// order mc-00000, mc-00001, ..., n of them a pass, size 2 on the first
// pass and 3 on the second (the CRD's maximum), until stop is closed or
// two passes are done; each change awaits its Deployment's replicas on a.
func writeChanges(ctx context.Context, dc dynamic.Interface, a *answers, n int, every time.Duration, stop <-chan struct{}) writerResult {
	rc := dc.Resource(memcached.Memcached.GVR()).Namespace(namespace)
	tick := time.NewTicker(every)
	defer tick.Stop()
	var res writerResult
	for j := 0; j < 2*n; j++ {
		name := fmt.Sprintf("mc-%05d", j%n)
		size := int64(2 + j/n)
		cc := churnChange{key: namespace + "/" + name, start: time.Now(), done: a.await(name, size)}
		patch := fmt.Sprintf(`{"spec":{"size":%d}}`, size)
		if _, err := rc.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			res.err = fmt.Errorf("changing %s: %w", name, err)
			return res
		}
		res.changes = append(res.changes, cc)
		select {
		case <-tick.C:
		case <-stop:
			return res
		case <-ctx.Done():
			res.err = ctx.Err()
			return res
		}
	}
	<-stop
	return res
}

// span is one reconcile of key by identity, in Unix nanoseconds; end is 0
// for one whose end its log doesn't have (a killed member's, or one in
// flight at the end).
type span struct {
	key, identity string
	start, end    int64
}

// parseSpans reads a kubepeer -log-reconciles log: the lines
// "reconcile start|end <key> <identity> <unix ns>", ignoring all others.
// An end pairs with the open start of its key and identity; an end with
// none is an error, as is a malformed reconcile line.
func parseSpans(r io.Reader) ([]span, error) {
	var spans []span
	open := map[string]int{} // identity + " " + key -> index in spans
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	var errs []error
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "reconcile" {
			continue
		}
		if len(f) != 5 || (f[1] != "start" && f[1] != "end") {
			errs = append(errs, fmt.Errorf("line %d: %q is not \"reconcile start|end <key> <identity> <unix ns>\"", line, sc.Text()))
			continue
		}
		at, err := strconv.ParseInt(f[4], 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("line %d: the time %q: %w", line, f[4], err))
			continue
		}
		k := f[3] + " " + f[2]
		if f[1] == "start" {
			open[k] = len(spans)
			spans = append(spans, span{key: f[2], identity: f[3], start: at})
			continue
		}
		i, ok := open[k]
		if !ok {
			errs = append(errs, fmt.Errorf("line %d: the end of a reconcile of %s by %s that didn't start", line, f[2], f[3]))
			continue
		}
		spans[i].end = at
		delete(open, k)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	return spans, errors.Join(errs...)
}

// readSpans reads the reconcile logs of ps.
func readSpans(ps []*peerProc) ([]span, error) {
	var all []span
	for _, p := range ps {
		f, err := os.Open(p.logPath)
		if err != nil {
			return nil, err
		}
		spans, err := parseSpans(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.logPath, err)
		}
		all = append(all, spans...)
	}
	return all, nil
}

func spansOf(spans []span, identity string) int {
	n := 0
	for _, s := range spans {
		if s.identity == identity {
			n++
		}
	}
	return n
}

// overlaps returns each pair of spans of one key by two identities that
// overlap in time, as text. A span without an end lasts until killedAt
// when it is killed's (the process died then), and forever otherwise.
func overlaps(spans []span, killed string, killedAt int64) []string {
	byKey := map[string][]span{}
	for _, s := range spans {
		if s.end == 0 {
			s.end = math.MaxInt64
			if s.identity == killed {
				s.end = killedAt
			}
		}
		byKey[s.key] = append(byKey[s.key], s)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		ss := byKey[k]
		slices.SortFunc(ss, func(a, b span) int { return cmpInt64(a.start, b.start) })
		for i := range ss {
			for j := i + 1; j < len(ss) && ss[j].start < ss[i].end; j++ {
				if ss[j].identity != ss[i].identity {
					out = append(out, fmt.Sprintf("%s: %s [%d, %d] and %s [%d, %d]", k, ss[i].identity, ss[i].start, ss[i].end, ss[j].identity, ss[j].start, ss[j].end))
				}
			}
		}
	}
	return out
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// takeover returns the keys whose last reconcile started before killedAt
// was killed's, and how they came to others: the time from killedAt until
// the last of them was started by another identity, and how many none
// started.
func takeover(spans []span, killed string, killedAt int64) (Takeover, map[string]bool) {
	last := map[string]span{}   // the last start before killedAt, by key
	again := map[string]int64{} // the first start by another after killedAt
	for _, s := range spans {
		if s.start < killedAt {
			if l, ok := last[s.key]; !ok || s.start > l.start {
				last[s.key] = s
			}
		}
	}
	for _, s := range spans {
		if s.start >= killedAt && s.identity != killed {
			if a, ok := again[s.key]; !ok || s.start < a {
				again[s.key] = s.start
			}
		}
	}
	var t Takeover
	keys := map[string]bool{}
	var latest int64
	for k, s := range last {
		if s.identity != killed {
			continue
		}
		keys[k] = true
		t.KilledKeys++
		a, ok := again[k]
		if !ok {
			t.NotTakenOver++
			continue
		}
		latest = max(latest, a-killedAt)
	}
	t.TakeoverSeconds = float64(latest) / 1e9
	return t, keys
}

// check adds what the members' reconcile spans tell to ch: the overlaps,
// the takeover of the killed member's keys, and the changes' quantiles
// with and without those keys.
func (ch *Churn) check(spans []span) {
	ch.Spans = len(spans)
	st := ch.state
	if st == nil {
		return
	}
	killedAt := st.killedAt.UnixNano()
	ov := overlaps(spans, ch.Killed, killedAt)
	ch.Overlaps = len(ov)
	ch.OverlapExamples = ov[:min(len(ov), 5)]
	var keys map[string]bool
	ch.Takeover, keys = takeover(spans, ch.Killed, killedAt)
	var all, notKilled []float64
	for _, cc := range st.changes {
		if cc.took < 0 {
			ch.Unanswered++
			continue
		}
		all = append(all, cc.took)
		if !keys[cc.key] {
			notKilled = append(notKilled, cc.took)
		}
	}
	byPhase := map[string][]float64{}
	for _, cc := range st.changes {
		if cc.took >= 0 {
			p := st.phase(cc.start)
			byPhase[p] = append(byPhase[p], cc.took)
		}
	}
	ch.Phases = nil
	for _, p := range []string{"steady", "join", "kill", "after"} {
		t := byPhase[p]
		slices.Sort(t)
		f := PhaseFigures{Phase: p, Changes: len(t), P99Seconds: quantile(t, 0.99)}
		if len(t) > 0 {
			f.MaxSeconds = t[len(t)-1]
		}
		ch.Phases = append(ch.Phases, f)
	}
	slices.Sort(all)
	slices.Sort(notKilled)
	ch.P50Seconds, ch.P99Seconds = quantile(all, 0.5), quantile(all, 0.99)
	ch.P99NotKilledSeconds = quantile(notKilled, 0.99)
	if len(all) > 0 {
		ch.MaxSeconds = all[len(all)-1]
	}
	if len(notKilled) > 0 {
		ch.MaxNotKilledSeconds = notKilled[len(notKilled)-1]
	}
}

// objectWrites are the writes to memcacheds and deployments (and their
// subresources): r's writes less those to leases and events.
func (r Requests) objectWrites() float64 {
	w := Requests{}
	for k, v := range r {
		if res := strings.Fields(k)[1]; !strings.HasPrefix(res, "leases") && !strings.HasPrefix(res, "events") {
			w[k] = v
		}
	}
	return w.writes()
}
