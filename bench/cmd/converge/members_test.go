package main

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseSpansPairsEachEndWithItsKeysStartAndSkipsOtherLines(t *testing.T) {
	log := `{"level":"info","msg":"joined its members"}
reconcile start bench/mc-00001 member-0 100
reconcile start bench/mc-00002 member-0 110
reconcile end bench/mc-00001 member-0 150
reconcile start bench/mc-00001 member-0 200
reconcile end bench/mc-00002 member-0 210
`
	got, err := parseSpans(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	want := []span{
		{key: "bench/mc-00001", identity: "member-0", start: 100, end: 150},
		{key: "bench/mc-00002", identity: "member-0", start: 110, end: 210},
		{key: "bench/mc-00001", identity: "member-0", start: 200},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseSpans = %+v, want %+v", got, want)
	}
}

func TestParseSpansNamesEveryMalformedLine(t *testing.T) {
	log := `reconcile start bench/a member-0
reconcile start bench/a member-0 x
reconcile end bench/b member-0 5
reconcile begin bench/a member-0 5
`
	_, err := parseSpans(strings.NewReader(log))
	if err == nil {
		t.Fatal("parseSpans of malformed lines: no error")
	}
	for _, want := range []string{"line 1:", "line 2: the time \"x\"", "line 3: the end of a reconcile of bench/b by member-0 that didn't start", "line 4:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q doesn't name %q", err, want)
		}
	}
}

func TestOverlapsFindsAKeyReconciledByTwoMembersAtOnce(t *testing.T) {
	spans := []span{
		{key: "k1", identity: "a", start: 10, end: 20},
		{key: "k1", identity: "b", start: 20, end: 30}, // touches, doesn't overlap
		{key: "k2", identity: "a", start: 10, end: 20},
		{key: "k2", identity: "a", start: 15, end: 25}, // one member's own: not counted
		{key: "k3", identity: "a", start: 10, end: 40},
		{key: "k3", identity: "b", start: 30, end: 35}, // overlaps
		{key: "k4", identity: "dead", start: 10},       // open: ends at the kill, 50
		{key: "k4", identity: "b", start: 50, end: 60},
		{key: "k5", identity: "dead", start: 10},
		{key: "k5", identity: "b", start: 49, end: 60}, // before the kill: overlaps
	}
	got := overlaps(spans, "dead", 50)
	if len(got) != 2 || !strings.HasPrefix(got[0], "k3: a [10, 40] and b [30, 35]") || !strings.HasPrefix(got[1], "k5: dead [10, 50] and b [49, 60]") {
		t.Fatalf("overlaps = %q; want k3's and k5's", got)
	}
}

func TestTakeoverTimesTheKilledMembersKeysUntilAnotherReconcilesThem(t *testing.T) {
	const killed = int64(100 * time.Second)
	s := func(key, id string, at int64) span { return span{key: key, identity: id, start: at, end: at + 1} }
	spans := []span{
		s("k1", "dead", 10), s("k1", "b", 100*1e9+2e9), // taken over 2s after
		s("k2", "b", 10), s("k2", "dead", 20), s("k2", "c", 100*1e9+5e9), // dead's last: 5s
		s("k3", "dead", 10), s("k3", "b", 20), // moved to b before the kill: not dead's
		s("k4", "dead", 10),                         // never again
		s("k5", "c", 10), s("k5", "c", 100*1e9+9e9), // never dead's
	}
	got, keys := takeover(spans, "dead", killed)
	want := Takeover{KilledKeys: 3, TakeoverSeconds: 5, NotTakenOver: 1}
	if got != want {
		t.Errorf("takeover = %+v, want %+v", got, want)
	}
	if !reflect.DeepEqual(keys, map[string]bool{"k1": true, "k2": true, "k4": true}) {
		t.Errorf("killed keys = %v, want k1, k2, k4", keys)
	}
}

func TestChurnCheckLeavesTheKilledMembersKeysOutOfTheSecondQuantile(t *testing.T) {
	killedAt := time.Unix(100, 0)
	st := &churnState{joinedAt: killedAt.Add(-10 * time.Second), killedAt: killedAt, bound: 17 * time.Second}
	for i := range 99 {
		st.changes = append(st.changes, churnChange{key: "k-other", start: killedAt.Add(-20 * time.Second), took: 0.01 * float64(i+1)})
	}
	st.changes = append(st.changes, churnChange{key: "k-dead", start: killedAt.Add(time.Second), took: 15}, churnChange{key: "k-lost", start: killedAt.Add(20 * time.Second), took: -1})
	ch := &Churn{Killed: "dead", state: st}
	ch.check([]span{{key: "k-dead", identity: "dead", start: 1e9, end: 2e9}, {key: "k-dead", identity: "b", start: 112e9, end: 113e9}})
	if ch.Unanswered != 1 || ch.MaxSeconds != 15 || ch.P99Seconds != 0.99 || ch.MaxNotKilledSeconds != 0.99 || ch.P99NotKilledSeconds != 0.99 {
		t.Errorf("check: unanswered %d, max %v, p99 %v, max without %v, p99 without %v; want 1, 15, 0.99, 0.99, 0.99", ch.Unanswered, ch.MaxSeconds, ch.P99Seconds, ch.MaxNotKilledSeconds, ch.P99NotKilledSeconds)
	}
	wantPhases := []PhaseFigures{{"steady", 99, 0.99, 0.99}, {"join", 0, 0, 0}, {"kill", 1, 15, 15}, {"after", 0, 0, 0}}
	if !reflect.DeepEqual(ch.Phases, wantPhases) {
		t.Errorf("phases = %+v, want %+v", ch.Phases, wantPhases)
	}
	if ch.KilledKeys != 1 || ch.TakeoverSeconds != 12 || ch.Spans != 2 || ch.Overlaps != 0 {
		t.Errorf("check: %+v; want 1 killed key taken over in 12s, 2 spans, no overlap", ch.Takeover)
	}
}

func TestMembersFlagsNameEveryMistake(t *testing.T) {
	set := func(names ...string) func(string) bool {
		return func(f string) bool {
			for _, n := range names {
				if n == f {
					return true
				}
			}
			return false
		}
	}
	ok := membersOptions{members: 3, churnEvery: 100 * time.Millisecond, leaseDuration: 15 * time.Second}
	if errs := ok.check(set("members", "churn")); len(errs) != 0 {
		t.Fatalf("check of good flags: %v", errs)
	}
	off := membersOptions{churnEvery: time.Second, leaseDuration: 15 * time.Second}
	got := errors.Join(off.check(set("cache-share", "sync"))...)
	if got == nil || got.Error() != "-cache-share: only with -members\n-sync: only with -members" {
		t.Errorf("check without -members = %v", got)
	}
	bad := membersOptions{members: 3, sync: true, churn: true, churnEvery: 0, leaseDuration: 2500 * time.Millisecond}
	got = errors.Join(bad.check(set("members", "peers", "backlog"))...)
	want := []string{"-peers: not with -members", "-backlog: not with -members", "-sync: not with -churn", "-churn-every: 0s is not a positive duration", "-lease-duration: 2.5s is not whole seconds of at least 4s"}
	for _, w := range want {
		if got == nil || !strings.Contains(got.Error(), w) {
			t.Errorf("check = %v; doesn't name %q", got, w)
		}
	}
	if n := len(bad.check(set("members", "peers", "backlog"))); n != len(want) {
		t.Errorf("check gave %d errors, want %d", n, len(want))
	}
}

func TestObjectWritesLeaveOutLeasesAndEvents(t *testing.T) {
	r := Requests{"APPLY deployments": 10, "PATCH memcacheds": 5, "APPLY memcacheds/status": 3, "PUT leases": 7, "DELETE leases": 1, "POST events": 2, "GET memcacheds": 4}
	if got := r.objectWrites(); got != 18 {
		t.Fatalf("objectWrites = %v, want 18", got)
	}
}
