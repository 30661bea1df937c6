package throttle

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// squeezedServer is an API server's priority level as APF runs it, squeezed
// to one seat and a queue of one: a request that finds the seat taken
// waits in the queue, and one that finds the queue full too is answered
// 429 at once. Each request holds the seat for hold.
type squeezedServer struct {
	hold time.Duration

	mu      sync.Mutex
	seat    bool
	queued  int
	free    chan struct{}
	answers map[string][]int // by kind, "lease" or "work"
}

func newSqueezedServer(hold time.Duration) *squeezedServer {
	return &squeezedServer{hold: hold, free: make(chan struct{}, 1), answers: map[string][]int{}}
}

func (s *squeezedServer) RoundTrip(r *http.Request) (*http.Response, error) {
	kind := "work"
	if isLease(r) {
		kind = "lease"
	}
	s.mu.Lock()
	switch {
	case !s.seat:
		s.seat = true
		s.mu.Unlock()
	case s.queued == 0:
		s.queued++
		s.mu.Unlock()
		<-s.free // the seat, handed over by the request in it
	default:
		s.answers[kind] = append(s.answers[kind], http.StatusTooManyRequests)
		s.mu.Unlock()
		return &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"1"}}, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	}
	time.Sleep(s.hold)
	s.mu.Lock()
	s.answers[kind] = append(s.answers[kind], http.StatusOK)
	if s.queued > 0 {
		s.queued--
		s.free <- struct{}{} // the seat passes to the queued request
	} else {
		s.seat = false
	}
	s.mu.Unlock()
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
}

// refused counts the 429s the server answered requests of kind.
func (s *squeezedServer) refused(kind string) (refused, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, code := range s.answers[kind] {
		if code == http.StatusTooManyRequests {
			refused++
		}
	}
	return refused, len(s.answers[kind])
}

// squeeze runs 16 workers that send requests through rt as fast as it
// answers, retrying a 429 after its Retry-After of 1s as client-go does,
// beside a Lease renewal every 500ms, for a minute.
func squeeze(t *testing.T, rt http.RoundTripper) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	send := func(url string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, nil)
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return // ctx ended
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
			}
		}
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for ctx.Err() == nil {
				send("https://api/apis/cache.example.com/v1alpha1/namespaces/ns/memcacheds/m")
			}
		})
	}
	wg.Go(func() {
		// The renewals keep their own time, not the workers' seats: a
		// renewal that came at the very instant a seat changed hands (or
		// the window grew) would find the API server's queue full or not
		// by the order synctest runs the goroutines of one instant in.
		time.Sleep(5 * time.Millisecond)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				send("https://api/apis/coordination.k8s.io/v1/namespaces/ns/leases/controller")
			}
		}
	})
	wg.Wait()
}

func TestTheWorkersBackOffOn429BeforeTheLeaseDoes(t *testing.T) {
	t.Run("WithoutTheWindowTheWorkersStarveTheLease", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := newSqueezedServer(10 * time.Millisecond)
			squeeze(t, srv)
			refused, total := srv.refused("lease")
			t.Logf("Lease requests refused: %d of %d", refused, total)
			require.Greater(t, refused, total/2, "the fault the window is for")
		})
	})
	t.Run("WithTheWindowNoLeaseRequestIsRefused", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := newSqueezedServer(10 * time.Millisecond)
			squeeze(t, New(srv, isWatch))
			refused, total := srv.refused("lease")
			workRefused, work := srv.refused("work")
			t.Logf("Lease requests refused: %d of %d; the workers': %d of %d", refused, total, workRefused, work)
			// Before the first 429 the window limits nothing: the workers'
			// first requests fill the queue, and one Lease request may
			// meet it full.
			require.LessOrEqual(t, refused, 1, "Lease requests refused")
			require.Greater(t, work, 2000, "the workers still work: about one request per 10ms seat")
		})
	})
}

func TestTheWindowHalvesOn429AndGrowsBackAfter10sByOneASecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		answer := make(chan int)
		next := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			code := http.StatusOK // a Lease request or a watch: at once
			if !isLease(r) && !isWatch(r) {
				code = <-answer
			}
			return &http.Response{StatusCode: code, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
		})
		c := New(next, isWatch)
		send := func() {
			req, _ := http.NewRequest(http.MethodGet, "https://api/api/v1/namespaces/ns/configmaps/c", nil)
			if resp, err := c.RoundTrip(req); err == nil {
				_ = resp.Body.Close()
			}
		}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(send)
		}
		synctest.Wait()
		require.Equal(t, 8, c.inFlight, "no limit before a 429")
		answer <- http.StatusTooManyRequests
		synctest.Wait()
		require.Equal(t, 4, c.limit, "halved from the 8 in flight")
		for range 7 {
			answer <- http.StatusOK
		}
		wg.Wait()

		// The window holds 4 at once now, the fifth waits.
		for range 5 {
			wg.Go(send)
		}
		synctest.Wait()
		require.Equal(t, 4, c.inFlight)
		require.Len(t, c.waiting, 1)
		time.Sleep(congestionHold - time.Nanosecond)
		c.mu.Lock()
		c.growLocked()
		require.Equal(t, 4, c.limit, "not before congestionHold")
		c.mu.Unlock()
		time.Sleep(time.Nanosecond)
		answer <- http.StatusOK // a release grows the window
		synctest.Wait()
		require.Equal(t, 5, c.limit)
		require.Equal(t, 4, c.inFlight, "the fifth is in flight")
		for range 4 {
			answer <- http.StatusOK
		}
		wg.Wait()

		// A request waiting for room ends with its context.
		for range 5 {
			wg.Go(send)
		}
		synctest.Wait()
		ctx, cancel := context.WithCancel(t.Context())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api/api/v1/namespaces/ns/configmaps/c", nil)
		done := make(chan error)
		go func() {
			_, err := c.RoundTrip(req)
			done <- err
		}()
		synctest.Wait()
		cancel()
		require.ErrorContains(t, <-done, "waiting for the API server to accept more requests")
		for range 5 {
			answer <- http.StatusOK
		}
		wg.Wait()
		require.Zero(t, c.inFlight)

		// A Lease request and a watch never wait.
		for range 5 {
			wg.Go(send)
		}
		synctest.Wait()
		for _, url := range []string{
			"https://api/apis/coordination.k8s.io/v1/namespaces/ns/leases/controller",
			"https://api/api/v1/namespaces/ns/configmaps?watch=true",
		} {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			resp, err := c.RoundTrip(req)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode)
		}
		for range 5 {
			answer <- http.StatusOK
		}
		wg.Wait()
	})
}

func TestALeaseRequestsTooManyRequestsShrinksTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		answer := make(chan int)
		next := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			code := http.StatusTooManyRequests // the Lease's, at once
			if !isLease(r) {
				code = <-answer
			}
			return &http.Response{StatusCode: code, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
		})
		c := New(next, isWatch)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodGet, "https://api/api/v1/namespaces/ns/configmaps/c", nil)
				if resp, err := c.RoundTrip(req); err == nil {
					_ = resp.Body.Close()
				}
			})
		}
		synctest.Wait()
		req, _ := http.NewRequest(http.MethodPut, "https://api/apis/coordination.k8s.io/v1/namespaces/ns/leases/controller", nil)
		resp, err := c.RoundTrip(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		c.mu.Lock()
		require.Equal(t, 2, c.limit, "halved from the workers' 4 in flight")
		require.Equal(t, 4, c.inFlight, "the Lease's request is never counted")
		c.mu.Unlock()
		for range 4 {
			answer <- http.StatusOK
		}
		wg.Wait()
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// isWatch is package kube's test of a watch, as far as these tests send
// one: a watch query parameter of true.
func isWatch(r *http.Request) bool { return r.URL.Query().Get("watch") == "true" }
