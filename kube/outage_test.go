package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"github.com/z5labs/humus/kube/internal/outage"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestAnOutageUnderChurnLeavesNoObjectAtItsBackoffsCap is issue 24's RBAC
// outage: every reconcile is refused 403 for 40s, while two Widgets change
// every second, one changes once and one not at all. Before the fix, each
// busy Widget's backoff climbed with each failure to RetryMaxDelay, and it
// waited that long after the API server came back. Now each converges
// within seconds of the first success, with no more reconciles during the
// outage than before (measured 246 before).
func TestAnOutageUnderChurnLeavesNoObjectAtItsBackoffsCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		names := []string{"busy-1", "busy-2", "once", "quiet"}
		var objs []runtime.Object
		for _, n := range names {
			objs = append(objs, newWidget(n, 1))
		}
		f := newFakeCluster(t, objs...)
		var down atomic.Bool
		var during atomic.Int32
		var mu sync.Mutex
		seen := map[string]int64{}
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				if down.Load() {
					during.Add(1)
					return Result[widgetStatus]{}, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, w.Name, errors.New("RBAC: the ClusterRoleBinding is gone"))
				}
				mu.Lock()
				defer mu.Unlock()
				seen[w.Name] = w.Spec.Size
				return Result[widgetStatus]{}, nil
			}))
		s := serve(t, c)
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()

		down.Store(true)
		resize := func(name string, size int64) {
			u := f.get(t, widgetGVR, testNamespace, name)
			u.Object["spec"] = map[string]any{"size": size}
			f.update(t, widgetGVR, u)
		}
		want := map[string]int64{"busy-1": 1, "busy-2": 1, "once": 2, "quiet": 1}
		for i := range 40 {
			if i == 1 {
				resize("once", 2)
			}
			for _, n := range []string{"busy-1", "busy-2"} {
				want[n] = int64(i + 2)
				resize(n, want[n])
			}
			time.Sleep(time.Second)
		}
		down.Store(false)
		restored := time.Now()
		t.Logf("reconciles during the 40s outage: %d", during.Load())
		require.LessOrEqual(t, during.Load(), int32(113), "reconciles during the outage: 113 before the fix")

		converged := func() bool {
			mu.Lock()
			defer mu.Unlock()
			for n, size := range want {
				if seen[n] != size {
					return false
				}
			}
			return true
		}
		for !converged() && time.Since(restored) < 10*time.Minute {
			time.Sleep(100 * time.Millisecond)
		}
		took := time.Since(restored)
		t.Logf("every Widget converged %v after the outage ended", took)
		require.Less(t, took, 30*time.Second, "every Widget converged within 30s of the outage's end: %v", seen)
		require.NoError(t, s.stop(t))
	})
}

func TestAnObjectFailingAloneWhileOthersSucceedIsBackedOffOnItsOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("bad", 1), newWidget("good", 1))
		var bad times
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				if w.Name == "bad" {
					bad.add()
					return Result[widgetStatus]{}, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, w.Name, errors.New("RBAC: not in this namespace"))
				}
				return Result[widgetStatus]{After: 100 * time.Millisecond}, nil
			}))
		s := serve(t, c)
		time.Sleep(time.Minute)
		synctest.Wait()
		// From 5ms doubling: 2^14 * 5ms is 82s, so 14 tries in a minute.
		n := len(bad.get())
		t.Logf("the failing Widget's reconciles in a minute: %d", n)
		require.LessOrEqual(t, n, 15)
		require.NoError(t, s.stop(t))
	})
}

// A probe whose reconcile panics in an outage hands the probe on, as one
// failing on its own does: settle's panic branch forgot the key and never
// told the outage, so the other held keys waited for a success that no
// reconcile was left to make (found by this round's breaker).
func TestAProbeThatPanicsHandsTheProbeOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("a", 1), newWidget("b", 1))
		var down, panicked atomic.Bool
		down.Store(true)
		var c *Controller
		isProbe := func(key string) bool { return c.outage.Probing(key) }
		var mu sync.Mutex
		succeeded := map[string]bool{}
		c = newWidgetController(t, f, humus.Telemetry{}, testSettings(),
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				key := w.Namespace + "/" + w.Name
				if down.Load() {
					if isProbe(key) && panicked.CompareAndSwap(false, true) {
						panic("the probe's own bug")
					}
					return Result[widgetStatus]{}, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, w.Name, errors.New("RBAC"))
				}
				mu.Lock()
				defer mu.Unlock()
				succeeded[w.Name] = true
				return Result[widgetStatus]{}, nil
			}))
		s := serve(t, c)
		start := time.Now()
		for !panicked.Load() {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			require.Less(t, time.Since(start), 5*time.Minute, "no probe was ever reconciled")
		}
		down.Store(false)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		mu.Lock()
		ok, seen := succeeded["a"] || succeeded["b"], fmt.Sprint(succeeded)
		mu.Unlock()
		require.True(t, ok, "a held key was reconciled once the API server was back: %s", seen)
		require.NoError(t, s.stop(t))
	})
}

// outageRun is a fake API server outage as Widget reconcilers see it:
// while down, every reconcile is refused 403, unless ownFailure makes the
// probe's reconcile fail on its own once; once up, each reconcile
// succeeds and is noted by member and name.
type outageRun struct {
	down atomic.Bool
	// ownFailure, if set, is how the next probe's reconcile fails on its
	// own, once; failedOwn is set once it did.
	ownFailure atomic.Pointer[func() error]
	failedOwn  atomic.Bool

	mu        sync.Mutex
	succeeded map[string]string // name: the member that reconciled it once up
}

func newOutageRun() *outageRun {
	r := &outageRun{succeeded: map[string]string{}}
	r.down.Store(true)
	return r
}

func (r *outageRun) reconciler(member string, c **Controller) ReconcilerFunc[widgetSpec, widgetStatus] {
	return func(ctx context.Context, w widget) (Result[widgetStatus], error) {
		if r.down.Load() {
			if f := r.ownFailure.Load(); f != nil && (*c).outage.Probing(w.Namespace+"/"+w.Name) && r.ownFailure.CompareAndSwap(f, nil) {
				r.failedOwn.Store(true)
				return Result[widgetStatus]{}, (*f)()
			}
			return Result[widgetStatus]{}, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, w.Name, errors.New("RBAC"))
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.succeeded[w.Name] = member
		return Result[widgetStatus]{}, nil
	}
}

func (r *outageRun) reconciledBy() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.succeeded)
}

// startOutageMember serves a Widget controller on cl whose reconciles are
// run's; with id set, a shard member of that identity.
func startOutageMember(t *testing.T, run *outageRun, cl clients, id string) (*Controller, *serving) {
	t.Helper()
	s := testSettings()
	member := "leader"
	if id != "" {
		s.Sharding.Enabled = true
		s.LeaderElection.Identity = id
		member = id
	}
	c := new(*Controller)
	var err error
	*c, err = newController(&humus.Setup{}, cl, nil, s, widgets(), run.reconciler(member, c))
	require.NoError(t, err)
	return *c, serve(t, *c)
}

// TestAProbeThatFailsOnItsOwnLeavesNoKeyStranded is issue 36's: the only
// held key, as the outage's probe, fails for a reason of its own (a
// panic, a Terminal error, one 409) 30s into an outage, and a key that
// then fails alike before the next probe was due (a new object, or the
// same one back from its backoff) was held with no probe pending, and
// never reconciled again: seen with one object and one 409, not
// reconciled within 3 minutes of the API server's return. Now it probes,
// and every object is reconciled within a probe period of the return.
func TestAProbeThatFailsOnItsOwnLeavesNoKeyStranded(t *testing.T) {
	conflict := func() error {
		return apierrors.NewConflict(schema.GroupResource{Group: "test.example.com", Resource: "widgets"}, "a", errors.New("changed"))
	}
	for _, own := range []struct {
		name string
		err  func() error
		// retried: the key is retried on its own, so it must succeed too.
		retried bool
	}{
		{"panic", func() error { panic("the probe's own bug") }, false},
		{"terminal", func() error { return Terminal(conflict()) }, false},
		{"conflict", conflict, true},
	} {
		for _, sharded := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/sharded=%v", own.name, sharded), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					f := newFakeCluster(t, newWidget("a", 1))
					run := newOutageRun()
					id := ""
					if sharded {
						id = "m1"
					}
					_, s := startOutageMember(t, run, f.clients(), id)
					time.Sleep(30 * time.Second)
					run.ownFailure.Store(&own.err)
					for start := time.Now(); !run.failedOwn.Load(); {
						time.Sleep(10 * time.Millisecond)
						require.Less(t, time.Since(start), time.Minute, "no probe was reconciled")
					}
					// A new object, failing alike at once.
					f.create(t, widgetGVR, newWidget("b", 1))
					time.Sleep(5 * time.Second)
					synctest.Wait()

					run.down.Store(false)
					time.Sleep(outage.ProbeMax + 5*time.Second)
					synctest.Wait()
					got := run.reconciledBy()
					require.Contains(t, got, "b", "the new object, held, reconciled once the API server was back: %v", got)
					if own.retried {
						require.Contains(t, got, "a", "the probe's object, retried on its own: %v", got)
					}
					require.NoError(t, s.stop(t))
				})
			})
		}
	}
}

// TestAProbeKeyMovedToAnotherMemberLeavesNoKeyStranded is issue 36's:
// during an outage a member holds its failed keys and retries only the
// probe's; a member joining moves the probe's key away, and the old
// member dropped it (takeKey refuses) without telling the outage, so no
// probe ran again there, and the keys it kept waited, after the API
// server's return, for an event on each or the resync (10h). Now another
// held key probes in its place, and every key is reconciled by its owner
// within a probe period of the return.
func TestAProbeKeyMovedToAnotherMemberLeavesNoKeyStranded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, keys := outageWidgets(t, 8)
		run := newOutageRun()
		c1, s1 := startOutageMember(t, run, f.clients(), "m1")
		time.Sleep(20 * time.Second)
		synctest.Wait()
		probe := probeOf(c1, keys)
		require.NotEmpty(t, probe, "m1's outage has a probe")
		// The second member's identity moves the probe's key to it, and
		// keeps another key with m1.
		second := ""
		for i := 0; second == ""; i++ {
			id := fmt.Sprintf("m2-%d", i)
			v := newView([]string{"m1", id})
			if v.owner(probe) != id {
				continue
			}
			for _, k := range keys {
				if v.owner(k) == "m1" {
					second = id
				}
			}
		}
		_, s2 := startOutageMember(t, run, f.clients(), second)
		// The view changes within seconds; m1's probe comes due within
		// ProbeMax, and is refused there.
		time.Sleep(outage.ProbeMax + 5*time.Second)
		synctest.Wait()

		run.down.Store(false)
		time.Sleep(outage.ProbeMax + 5*time.Second)
		synctest.Wait()
		v := newView([]string{"m1", second})
		want := map[string]string{}
		for _, k := range keys {
			want[k[len(testNamespace)+1:]] = v.owner(k)
		}
		require.Equal(t, want, run.reconciledBy(), "every Widget reconciled by its owner once the API server was back (the probe %s moved to %s)", probe, second)
		require.NoError(t, s2.stop(t))
		require.NoError(t, s1.stop(t))
	})
}

// TestAProbeKeyDeletedOrItsMemberStoppedLeavesNoKeyStranded covers the
// other ways a probe's key leaves: its object deleted (its reconcile
// finds it gone and succeeds, which ends the outage as any success
// does, queueing the held keys again), and, with Sharding, its member
// stopping (the others take its keys, and probe for them). Either way,
// once the API server is back, every remaining Widget is reconciled
// within a probe period. These held on the code before issue 36 too.
func TestAProbeKeyDeletedOrItsMemberStoppedLeavesNoKeyStranded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sharded bool
	}{{"deleted", false}, {"deleted", true}, {"stopped", true}} {
		t.Run(fmt.Sprintf("%s/sharded=%v", tc.name, tc.sharded), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f, keys := outageWidgets(t, 4)
				run := newOutageRun()
				id := ""
				if tc.sharded {
					id = "m1"
				}
				c1, s1 := startOutageMember(t, run, f.clients(), id)
				var s2 *serving
				if tc.name == "stopped" {
					synctest.Wait()
					_, s2 = startOutageMember(t, run, f.clients(), "m2")
				}
				time.Sleep(20 * time.Second)
				synctest.Wait()
				probe := probeOf(c1, keys)
				want := map[string]string{}
				member := func() string {
					if tc.sharded {
						return "m1"
					}
					return "leader"
				}()
				switch tc.name {
				case "deleted":
					require.NotEmpty(t, probe, "m1's outage has a probe")
					name := probe[len(testNamespace)+1:]
					require.NoError(t, f.dynamic.Tracker().Delete(widgetGVR, testNamespace, name))
					for _, k := range keys {
						if k != probe {
							want[k[len(testNamespace)+1:]] = member
						}
					}
				case "stopped":
					require.NoError(t, s1.stop(t))
					for _, k := range keys {
						want[k[len(testNamespace)+1:]] = "m2"
					}
				}
				time.Sleep(5 * time.Second)
				synctest.Wait()

				run.down.Store(false)
				time.Sleep(outage.ProbeMax + 5*time.Second)
				synctest.Wait()
				require.Equal(t, want, run.reconciledBy(), "every Widget reconciled once the API server was back (the probe was %s)", probe)
				if s2 != nil {
					require.NoError(t, s2.stop(t))
				} else {
					require.NoError(t, s1.stop(t))
				}
			})
		})
	}
}

// outageWidgets returns a fake cluster of n Widgets, w0 to w(n-1), and
// their keys.
func outageWidgets(t *testing.T, n int) (*fakeCluster, []string) {
	var objs []runtime.Object
	var keys []string
	for i := range n {
		objs = append(objs, newWidget(fmt.Sprintf("w%d", i), 1))
		keys = append(keys, fmt.Sprintf("%s/w%d", testNamespace, i))
	}
	return newFakeCluster(t, objs...), keys
}

// probeOf returns which of keys is c's outage's probe, or "".
func probeOf(c *Controller, keys []string) string {
	for _, k := range keys {
		if c.outage.Probing(k) {
			return k
		}
	}
	return ""
}
