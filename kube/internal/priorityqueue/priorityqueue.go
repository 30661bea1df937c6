// Package priorityqueue is a controller's work queue whose keys have a
// priority: a key queued because something changed (a new object, a spec
// change, an owned child changed by someone else) is handed to a worker
// before the keys queued by an informer's initial list, its resyncs, and
// retries after backoff. It is controller-runtime's priority queue
// (sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue, the
// default since v0.23) in its semantics, written on client-go's work queue
// interfaces, since package kube doesn't import controller-runtime.
//
// It keeps client-go's guarantees (k8s.io/client-go/util/workqueue):
//
//   - A key is never handed to two workers at once: one queued again while
//     a worker holds it waits until Done.
//   - A key queued again while it waits is queued once: at the higher of
//     its priorities, and ready at the earlier of its times. Raised, it
//     goes behind the keys already waiting at its new priority, so each
//     priority is first in, first out.
//   - AddRateLimited backs a key off by its rate limiter (per key, as
//     client-go's ItemExponentialFailureRateLimiter), and Forget ends it.
//   - ShutDown stops handing out keys at once (Get returns shutdown), and
//     leaves the keys waiting unhandled: a controller leaves its backlog to
//     the next leader.
//
// A key queued by AddAfter or AddRateLimited while a worker holds it (a
// retry, a requeue after a delay) keeps the priority it was handed out
// with, as controller-runtime's controller does; queued so while no
// worker holds it, it is Low. Add queues at Normal, and so does AddAfter
// with a delay of 0 or less, which client-go's and controller-runtime's
// queues take as a plain add.
package priorityqueue

import (
	"container/heap"
	"strconv"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// Priority is a key's priority: the higher is handed out first.
type Priority int

// The two priorities a controller uses, controller-runtime's values.
const (
	// Low is the priority of a key queued by an informer's initial list,
	// a resync, or a retry: nothing changed that a user waits on.
	Low Priority = -100
	// Normal is the priority of a key queued by a change.
	Normal Priority = 0
)

// String is "low", "normal", or the number: the value of the queue's
// instruments' priority attribute.
func (p Priority) String() string {
	switch p {
	case Low:
		return "low"
	case Normal:
		return "normal"
	}
	return strconv.Itoa(int(p))
}

// Metrics receives what the queue measures. Its methods are called with
// the queue's lock held, so they must not call the queue.
type Metrics interface {
	// Added counts a key queued that wasn't waiting already, at p.
	Added(p Priority)
	// Depth adds delta to the keys waiting at p (ready, or ready but
	// held by a worker), not counting the ones delayed.
	Depth(p Priority, delta int)
	// Waited records how long a key handed out at p waited since it was
	// ready.
	Waited(p Priority, d time.Duration)
	// Unfinished records, every UnfinishedPeriod, how long the keys held
	// by workers have been held, added together, and the longest.
	Unfinished(total, longest time.Duration)
}

// UnfinishedPeriod is how often the queue calls Metrics.Unfinished, as
// client-go's queue does.
const UnfinishedPeriod = 500 * time.Millisecond

// Config configures a Queue.
type Config[T comparable] struct {
	// RateLimiter backs off AddRateLimited; nil is client-go's
	// DefaultTypedControllerRateLimiter.
	RateLimiter workqueue.TypedRateLimiter[T]
	// Metrics receives the queue's measures; nil measures nothing.
	Metrics Metrics
}

// state is where an entry is.
type state int

const (
	ready   state = iota // in the ready heap
	parked               // ready, but a worker holds its key: waits for Done
	delayed              // in the delayed heap until readyAt
)

// entry is a queued key.
type entry[T comparable] struct {
	key     T
	prio    Priority
	seq     uint64    // order of queueing at prio
	readyAt time.Time // delayed: when it is ready
	since   time.Time // ready or parked: since when
	state   state
	index   int // in its heap
}

// held is a key a worker holds.
type held struct {
	prio  Priority
	since time.Time
}

// Queue is the priority work queue. It implements client-go's
// TypedRateLimitingInterface, whose Add queues at Normal; the zero Queue
// is not usable: New makes one.
type Queue[T comparable] struct {
	limiter workqueue.TypedRateLimiter[T]
	metrics Metrics

	mu       sync.Mutex
	cond     *sync.Cond
	entries  map[T]*entry[T]
	ready    readyHeap[T]
	delayed  delayedHeap[T]
	held     map[T]held
	seq      uint64
	shutdown bool
	timer    *time.Timer // fires when the first delayed entry is ready
	tick     *time.Timer // Metrics.Unfinished's, every UnfinishedPeriod
}

var _ workqueue.TypedRateLimitingInterface[string] = (*Queue[string])(nil)

// New returns an empty Queue configured by cfg. It starts no goroutine:
// its timers run only while something waits on them, and ShutDown stops
// them.
func New[T comparable](cfg Config[T]) *Queue[T] {
	q := &Queue[T]{
		limiter: cfg.RateLimiter,
		metrics: cfg.Metrics,
		entries: map[T]*entry[T]{},
		held:    map[T]held{},
	}
	if q.limiter == nil {
		q.limiter = workqueue.DefaultTypedControllerRateLimiter[T]()
	}
	if q.metrics == nil {
		q.metrics = noMetrics{}
	}
	q.cond = sync.NewCond(&q.mu)
	// The timers' functions read q.timer and q.tick under q.mu: set them
	// under it too, or a timer firing before New returns (a synctest
	// bubble's clock jumps) races with the assignment.
	q.mu.Lock()
	defer q.mu.Unlock()
	q.timer = time.AfterFunc(time.Hour, q.due)
	q.timer.Stop()
	if _, ok := q.metrics.(noMetrics); !ok {
		q.tick = time.AfterFunc(UnfinishedPeriod, q.unfinished)
	}
	return q
}

// Add queues key at Normal.
func (q *Queue[T]) Add(key T) { q.AddWithPriority(key, Normal) }

// AddWithPriority queues key at p, ready now.
func (q *Queue[T]) AddWithPriority(key T, p Priority) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.addLocked(key, p, 0)
}

// AddAfter queues key, ready after d, at the priority a worker holding
// it was handed it with, or Low. With d ≤ 0 it is Add, at Normal, as
// client-go's and controller-runtime's AddAfter are a plain add then.
func (q *Queue[T]) AddAfter(key T, d time.Duration) {
	if d <= 0 {
		q.Add(key)
		return
	}
	q.addRetry(key, d)
}

// AddRateLimited queues key after its rate limiter's delay, at the
// priority a worker holding it was handed it with, or Low, even if the
// delay is 0.
func (q *Queue[T]) AddRateLimited(key T) {
	q.addRetry(key, q.limiter.When(key))
}

// addRetry queues key after d at the priority a worker holding it was
// handed it with, or Low.
func (q *Queue[T]) addRetry(key T, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.addLocked(key, q.retryPriorityLocked(key), d)
}

func (q *Queue[T]) retryPriorityLocked(key T) Priority {
	if h, ok := q.held[key]; ok {
		return h.prio
	}
	return Low
}

// Forget ends key's backoff.
func (q *Queue[T]) Forget(key T) { q.limiter.Forget(key) }

// NumRequeues is how many times key was backed off since its last Forget.
func (q *Queue[T]) NumRequeues(key T) int { return q.limiter.NumRequeues(key) }

func (q *Queue[T]) addLocked(key T, p Priority, d time.Duration) {
	if q.shutdown {
		return
	}
	now := time.Now()
	e := q.entries[key]
	if e == nil {
		e = &entry[T]{key: key, prio: p, seq: q.nextSeq()}
		q.entries[key] = e
		if d > 0 {
			e.readyAt = now.Add(d)
			e.state = delayed
			heap.Push(&q.delayed, e)
			q.armLocked()
			return
		}
		q.readyLocked(e, now)
		return
	}
	if p > e.prio {
		if e.state != delayed {
			q.metrics.Depth(e.prio, -1)
			q.metrics.Depth(p, 1)
		}
		e.prio, e.seq = p, q.nextSeq()
		if e.state == ready {
			heap.Fix(&q.ready, e.index)
		}
	}
	if e.state != delayed {
		return
	}
	if d <= 0 {
		heap.Remove(&q.delayed, e.index)
		q.readyLocked(e, now)
		q.armLocked()
		return
	}
	if at := now.Add(d); at.Before(e.readyAt) {
		e.readyAt = at
		heap.Fix(&q.delayed, e.index)
		q.armLocked()
	}
}

func (q *Queue[T]) nextSeq() uint64 {
	q.seq++
	return q.seq
}

// readyLocked makes e ready at now: in the ready heap, or parked while a
// worker holds its key.
func (q *Queue[T]) readyLocked(e *entry[T], now time.Time) {
	e.readyAt, e.since = time.Time{}, now
	q.metrics.Added(e.prio)
	q.metrics.Depth(e.prio, 1)
	if _, ok := q.held[e.key]; ok {
		e.state = parked
		return
	}
	e.state = ready
	heap.Push(&q.ready, e)
	q.cond.Signal()
}

// armLocked sets the timer for the first delayed entry.
func (q *Queue[T]) armLocked() {
	if q.shutdown || len(q.delayed) == 0 {
		q.timer.Stop()
		return
	}
	q.timer.Reset(time.Until(q.delayed[0].readyAt))
}

// due makes the delayed entries whose time has come ready.
func (q *Queue[T]) due() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	now := time.Now()
	for len(q.delayed) > 0 && !q.delayed[0].readyAt.After(now) {
		e := heap.Pop(&q.delayed).(*entry[T])
		// Ready now, it goes behind the keys already ready at its
		// priority, as controller-runtime's does.
		e.seq = q.nextSeq()
		q.readyLocked(e, now)
	}
	q.armLocked()
}

// Get blocks until a key is ready, and hands it out, highest priority
// first and, within one, first queued first; the worker must call Done
// with it. shutdown is true, and key the zero T, once ShutDown is called.
func (q *Queue[T]) Get() (key T, shutdown bool) {
	key, _, shutdown = q.GetWithPriority()
	return key, shutdown
}

// GetWithPriority is Get, and returns the priority key was handed out at.
func (q *Queue[T]) GetWithPriority() (key T, p Priority, shutdown bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.ready) == 0 && !q.shutdown {
		q.cond.Wait()
	}
	if q.shutdown {
		var zero T
		return zero, 0, true
	}
	e := heap.Pop(&q.ready).(*entry[T])
	delete(q.entries, e.key)
	now := time.Now()
	q.held[e.key] = held{prio: e.prio, since: now}
	q.metrics.Depth(e.prio, -1)
	q.metrics.Waited(e.prio, now.Sub(e.since))
	return e.key, e.prio, false
}

// Done marks key no longer held by its worker: queued again meanwhile,
// it is ready once more.
func (q *Queue[T]) Done(key T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.held, key)
	if e := q.entries[key]; e != nil && e.state == parked {
		e.state = ready
		heap.Push(&q.ready, e)
		q.cond.Signal()
	}
	if q.shutdown && len(q.held) == 0 {
		q.cond.Broadcast() // ShutDownWithDrain
	}
}

// Held reports whether a worker holds key, and the priority it was
// handed out at.
func (q *Queue[T]) Held(key T) (Priority, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	h, ok := q.held[key]
	return h.prio, ok
}

// Len is how many keys are ready and not held.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ready)
}

// ShutDown stops the queue: Get returns shutdown from now on, the keys
// waiting are left unhandled, and keys queued from now on are ignored.
// Done may still be called for the keys held.
func (q *Queue[T]) ShutDown() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shutdownLocked()
}

func (q *Queue[T]) shutdownLocked() {
	if q.shutdown {
		return
	}
	q.shutdown = true
	q.timer.Stop()
	if q.tick != nil {
		q.tick.Stop()
	}
	q.cond.Broadcast()
}

// ShutDownWithDrain is ShutDown, then waits until every key held is Done.
// The keys waiting are left unhandled, as controller-runtime's queue does.
func (q *Queue[T]) ShutDownWithDrain() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shutdownLocked()
	for len(q.held) > 0 {
		q.cond.Wait()
	}
}

// ShuttingDown reports whether ShutDown was called.
func (q *Queue[T]) ShuttingDown() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.shutdown
}

// unfinished records the held keys' time, and comes again after
// UnfinishedPeriod until ShutDown.
func (q *Queue[T]) unfinished() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	now := time.Now()
	var total, longest time.Duration
	for _, h := range q.held {
		d := now.Sub(h.since)
		total += d
		longest = max(longest, d)
	}
	q.metrics.Unfinished(total, longest)
	q.tick.Reset(UnfinishedPeriod)
}

type noMetrics struct{}

func (noMetrics) Added(Priority)                          {}
func (noMetrics) Depth(Priority, int)                     {}
func (noMetrics) Waited(Priority, time.Duration)          {}
func (noMetrics) Unfinished(time.Duration, time.Duration) {}

// readyHeap orders the ready entries: the highest priority first, then the
// first queued.
type readyHeap[T comparable] []*entry[T]

func (h readyHeap[T]) Len() int { return len(h) }
func (h readyHeap[T]) Less(i, j int) bool {
	if h[i].prio != h[j].prio {
		return h[i].prio > h[j].prio
	}
	return h[i].seq < h[j].seq
}
func (h readyHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *readyHeap[T]) Push(x any) {
	e := x.(*entry[T])
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *readyHeap[T]) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

// delayedHeap orders the delayed entries by when they are ready.
type delayedHeap[T comparable] []*entry[T]

func (h delayedHeap[T]) Len() int           { return len(h) }
func (h delayedHeap[T]) Less(i, j int) bool { return h[i].readyAt.Before(h[j].readyAt) }
func (h delayedHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *delayedHeap[T]) Push(x any) {
	e := x.(*entry[T])
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *delayedHeap[T]) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
