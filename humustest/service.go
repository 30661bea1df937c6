package humustest

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/z5labs/humus"
	"go.uber.org/goleak"
)

// Served is a Service that TestService is running.
type Served struct {
	t        testing.TB
	svc      humus.Service
	cancel   context.CancelFunc
	done     chan struct{}
	serveErr error
	ignore   goleak.Option
	stopOnce sync.Once
}

// TestService calls svc.Serve in a goroutine of its own, and stops it when
// the test ends, or earlier with Stop.
//
// Stopping cancels Serve's context and calls Shutdown with a context that is
// done after humus.DefaultGracePeriod (20s), as humus.Run would. It fails
// the test if Serve or Shutdown returned an error, if Serve panicked, if
// Serve had not returned ForcedStopWait (1s) after Shutdown did, or if any goroutine started since
// TestService was called is still running (go.uber.org/goleak, ignoring the
// goroutines that were running when TestService was called). Goroutines of
// tests running in parallel count too, so it is meant for tests that don't
// call t.Parallel.
func TestService(t testing.TB, svc humus.Service) *Served {
	t.Helper()
	if svc == nil {
		t.Fatal("humustest: TestService: the Service is nil")
	}
	ignore := goleak.IgnoreCurrent()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Served{t: t, svc: svc, cancel: cancel, done: make(chan struct{}), ignore: ignore}
	go func() {
		defer close(s.done)
		// A panic in Serve fails the test, rather than the whole binary.
		defer func() {
			if r := recover(); r != nil {
				s.serveErr = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
			}
		}()
		s.serveErr = svc.Serve(ctx)
	}()
	t.Cleanup(s.Stop)
	return s
}

// Done is closed once Serve has returned.
func (s *Served) Done() <-chan struct{} { return s.done }

// Stop stops the Service now, and checks what TestService says it checks.
// Only its first call does anything.
func (s *Served) Stop() {
	s.t.Helper()
	s.stopOnce.Do(func() {
		s.cancel()
		ctx, cancel := context.WithTimeout(context.Background(), humus.DefaultGracePeriod)
		defer cancel()
		if err := s.svc.Shutdown(ctx); err != nil {
			s.t.Errorf("humustest: %T.Shutdown: %v", s.svc, err)
		}
		timer := time.NewTimer(humus.ForcedStopWait)
		defer timer.Stop()
		select {
		case <-s.done:
		case <-timer.C:
			s.t.Errorf("humustest: %T.Serve had not returned %v after Shutdown returned", s.svc, humus.ForcedStopWait)
			return
		}
		if s.serveErr != nil {
			s.t.Errorf("humustest: %T.Serve: %v", s.svc, s.serveErr)
		}
		if err := goleak.Find(s.ignore); err != nil {
			s.t.Errorf("humustest: a goroutine outlived %T: %v", s.svc, err)
		}
	})
}
