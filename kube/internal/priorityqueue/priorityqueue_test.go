package priorityqueue

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"k8s.io/client-go/util/workqueue"
)

// drain gets n keys, marking each done, and returns them in order.
func drain(t *testing.T, q *Queue[string], n int) []string {
	t.Helper()
	var got []string
	for range n {
		k, shutdown := q.Get()
		require.False(t, shutdown)
		got = append(got, k)
		q.Done(k)
	}
	return got
}

func TestAChangeGoesAheadOfTheBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		for _, k := range []string{"l1", "l2", "l3"} {
			q.AddWithPriority(k, Low)
		}
		q.Add("c1")
		q.AddWithPriority("l4", Low)
		q.Add("c2")
		require.Equal(t, []string{"c1", "c2", "l1", "l2", "l3", "l4"}, drain(t, q, 6),
			"changes first, each priority first in, first out")
		require.Zero(t, q.Len())
	})
}

func TestAKeyQueuedTwiceWaitsOnceAtTheHigherPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		q.AddWithPriority("a", Low)
		q.AddWithPriority("b", Low)
		q.AddWithPriority("a", Low)
		require.Equal(t, 2, q.Len(), "a waits once")
		q.Add("c")
		q.Add("b") // raised: behind c, the change queued before it
		q.AddWithPriority("c", Low)
		require.Equal(t, 3, q.Len())
		require.Equal(t, []string{"c", "b", "a"}, drain(t, q, 3), "a lower priority never lowers a key")
	})
}

func TestAChangeEndsABackoffAndARetryKeepsItsPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, time.Minute)})
		defer q.ShutDown()
		// A change fails twice: backed off 1s, then 2s, at Normal.
		q.Add("x")
		for _, want := range []time.Duration{time.Second, 2 * time.Second} {
			k, p, _ := q.GetWithPriority()
			require.Equal(t, "x", k)
			require.Equal(t, Normal, p, "a retry keeps the priority it was handed out at")
			start := time.Now()
			q.AddRateLimited(k)
			q.Done(k)
			require.Zero(t, q.Len(), "backed off")
			q.AddWithPriority("backlog", Low)
			k, p, _ = q.GetWithPriority()
			require.Equal(t, "backlog", k)
			require.Equal(t, Low, p)
			q.Done(k)
			k, _ = q.Get()
			require.Equal(t, "x", k)
			require.Equal(t, want, time.Since(start), "per-key exponential backoff")
			if want == 2*time.Second {
				q.Done(k)
				break
			}
			q.Done(k)
			q.Add("x")
		}
		require.Equal(t, 2, q.NumRequeues("x"))
		q.Forget("x")
		require.Zero(t, q.NumRequeues("x"))

		// A change to a key in backoff is ready at once.
		q.AddRateLimited("y")
		require.Zero(t, q.Len())
		q.Add("y")
		require.Equal(t, 1, q.Len())
		start := time.Now()
		require.Equal(t, []string{"y"}, drain(t, q, 1))
		require.Zero(t, time.Since(start))
		time.Sleep(time.Minute)
		synctest.Wait()
		require.Zero(t, q.Len(), "its backoff ended with it")

		// A later delay never postpones an earlier one; an earlier one
		// brings it forward.
		q.AddAfter("z", 3*time.Second)
		q.AddAfter("z", 5*time.Second)
		q.AddAfter("z", 2*time.Second)
		start = time.Now()
		k, p, _ := q.GetWithPriority()
		require.Equal(t, "z", k)
		require.Equal(t, Low, p, "a delayed key no worker holds is Low")
		require.Equal(t, 2*time.Second, time.Since(start))
		q.Done(k)
	})
}

// TestAddAfterWithNoDelayIsAPlainAdd: client-go's and controller-runtime's
// queues take AddAfter(key, d) with d ≤ 0 as Add, so a key queued so (the
// outage's probe, handed on when it was due already) goes ahead of a Low
// backlog, at Normal; it was Low, behind the backlog. A rate-limited
// retry with no delay stays Low.
func TestAddAfterWithNoDelayIsAPlainAdd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](0, 0)})
		defer q.ShutDown()
		q.AddWithPriority("backlog", Low)
		q.AddAfter("now", 0)
		q.AddAfter("past", -time.Second)
		q.AddRateLimited("retry")
		var got []string
		var prios []Priority
		for range 4 {
			k, p, _ := q.GetWithPriority()
			got, prios = append(got, k), append(prios, p)
			q.Done(k)
		}
		require.Equal(t, []string{"now", "past", "backlog", "retry"}, got)
		require.Equal(t, []Priority{Normal, Normal, Low, Low}, prios)
	})
}

func TestAKeyIsNeverHandedToTwoWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		q.Add("k")
		k, _ := q.Get()
		q.Add("k") // a change while a worker holds it
		q.AddWithPriority("other", Low)
		var second string
		var wg sync.WaitGroup
		wg.Go(func() {
			second, _ = q.Get()
			q.Done(second)
			k2, _ := q.Get() // blocks until the first worker is done with k
			second += "," + k2
			q.Done(k2)
		})
		synctest.Wait()
		require.Equal(t, "other", second, "k waits for its worker, though its priority is higher")
		q.Done(k)
		wg.Wait()
		require.Equal(t, "other,k", second)
	})
}

func TestManyWorkersNeverShareAKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		var mu sync.Mutex
		busy := map[string]bool{}
		handled := 0
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for {
					k, shutdown := q.Get()
					if shutdown {
						return
					}
					mu.Lock()
					require.False(t, busy[k], "two workers hold %s", k)
					busy[k] = true
					mu.Unlock()
					time.Sleep(time.Millisecond)
					mu.Lock()
					busy[k] = false
					handled++
					mu.Unlock()
					q.Done(k)
				}
			})
		}
		for i := range 1000 {
			k := string(rune('a' + i%5))
			if i%2 == 0 {
				q.Add(k)
			} else {
				q.AddWithPriority(k, Low)
			}
			if i%7 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		time.Sleep(time.Second)
		synctest.Wait()
		q.ShutDown()
		wg.Wait()
		require.Positive(t, handled)
	})
}

func TestShutDownLeavesTheBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		q.Add("a")
		q.AddAfter("c", time.Second)
		k, _ := q.Get()
		q.AddWithPriority("a", Low) // waits for its worker
		var wg sync.WaitGroup
		var shut bool
		wg.Go(func() { _, shut = q.Get() })
		synctest.Wait()
		q.ShutDown()
		wg.Wait()
		require.True(t, shut, "a worker waiting, or coming, gets shutdown, with keys still waiting")
		require.True(t, q.ShuttingDown())
		q.Add("d")
		q.AddRateLimited(k) // a retry of the key held
		q.Done(k)
		require.Equal(t, 1, q.Len(), "a is left, nothing is added")
		_, shut = q.Get()
		require.True(t, shut, "and never handed out")
		time.Sleep(time.Minute) // c's timer is stopped
		synctest.Wait()
		require.Equal(t, 1, q.Len())
	})
	goleak.VerifyNone(t)
}

func TestShutDownWithDrainWaitsForTheKeysHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		q.Add("a")
		k, _ := q.Get()
		drained := false
		var wg sync.WaitGroup
		wg.Go(func() { q.ShutDownWithDrain(); drained = true })
		synctest.Wait()
		require.False(t, drained)
		q.Done(k)
		wg.Wait()
		require.True(t, drained)
	})
}

// recorder is a Metrics that keeps what it receives.
type recorder struct {
	mu         sync.Mutex
	added      map[Priority]int
	depth      map[Priority]int
	waited     map[Priority][]time.Duration
	unfinished [][2]time.Duration
}

func newRecorder() *recorder {
	return &recorder{added: map[Priority]int{}, depth: map[Priority]int{}, waited: map[Priority][]time.Duration{}}
}

func (r *recorder) Added(p Priority) { r.mu.Lock(); r.added[p]++; r.mu.Unlock() }
func (r *recorder) Depth(p Priority, d int) {
	r.mu.Lock()
	r.depth[p] += d
	r.mu.Unlock()
}
func (r *recorder) Waited(p Priority, d time.Duration) {
	r.mu.Lock()
	r.waited[p] = append(r.waited[p], d)
	r.mu.Unlock()
}
func (r *recorder) Unfinished(total, longest time.Duration) {
	r.mu.Lock()
	r.unfinished = append(r.unfinished, [2]time.Duration{total, longest})
	r.mu.Unlock()
}

// snapshot returns copies of what r received.
func (r *recorder) snapshot() (added, depth map[Priority]int, waited map[Priority][]time.Duration, unfinished [][2]time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	added, depth, waited = map[Priority]int{}, map[Priority]int{}, map[Priority][]time.Duration{}
	for p, n := range r.added {
		added[p] = n
	}
	for p, n := range r.depth {
		depth[p] = n
	}
	for p, d := range r.waited {
		waited[p] = append([]time.Duration(nil), d...)
	}
	return added, depth, waited, append([][2]time.Duration(nil), r.unfinished...)
}

func TestMetricsByPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		q := New(Config[string]{Metrics: r})
		defer q.ShutDown()
		q.AddWithPriority("a", Low)
		q.AddWithPriority("b", Low)
		q.AddWithPriority("b", Low) // waiting already: not an add
		q.AddAfter("c", time.Second)
		added, depth, _, _ := r.snapshot()
		require.Equal(t, map[Priority]int{Low: 2}, added)
		require.Equal(t, map[Priority]int{Low: 2}, depth, "a delayed key isn't waiting for a worker yet")
		q.Add("b") // raised
		_, depth, _, _ = r.snapshot()
		require.Equal(t, map[Priority]int{Low: 1, Normal: 1}, depth)

		time.Sleep(3 * time.Second)
		k, _ := q.Get()
		require.Equal(t, "b", k)
		_, depth, waited, _ := r.snapshot()
		require.Equal(t, []time.Duration{3 * time.Second}, waited[Normal], "since it was ready")
		require.Equal(t, map[Priority]int{Low: 2, Normal: 0}, depth, "a, and c once ready")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		q.Done(k)
		require.Equal(t, []string{"a", "c"}, drain(t, q, 2))
		added, depth, waited, unfinished := r.snapshot()
		require.Equal(t, map[Priority]int{Low: 3}, added)
		require.Equal(t, []time.Duration{5 * time.Second, 4 * time.Second}, waited[Low])
		require.Equal(t, map[Priority]int{Low: 0, Normal: 0}, depth)
		require.Len(t, unfinished, 10, "every UnfinishedPeriod")
		require.Equal(t, [2]time.Duration{}, unfinished[5], "nothing held at 3s")
		require.Equal(t, [2]time.Duration{1500 * time.Millisecond, 1500 * time.Millisecond}, unfinished[8], "b held since 3s")
	})
}

func TestPriorityString(t *testing.T) {
	require.Equal(t, "low", Low.String())
	require.Equal(t, "normal", Normal.String())
	require.Equal(t, "7", Priority(7).String())
}

// TestAnUntouchedQueueReportsUnfinishedWork: the first Metrics.Unfinished
// of a queue nobody used since New is reported, and under the race
// detector its timer reads what New set without a race.
func TestAnUntouchedQueueReportsUnfinishedWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		q := New(Config[string]{Metrics: r})
		time.Sleep(UnfinishedPeriod)
		synctest.Wait()
		q.ShutDown()
		_, _, _, unfinished := r.snapshot()
		require.Equal(t, [][2]time.Duration{{}}, unfinished)
	})
}
