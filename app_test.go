package humus_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
)

// events records what happened, in order, across goroutines.
type events struct {
	mu   sync.Mutex
	list []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, s)
}

func (e *events) get() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.list...)
}

// service keeps the humus.Service contract, unless ignoreCtx makes its Serve
// run on after its context is done until Shutdown forces it.
type service struct {
	name      string
	ignoreCtx bool
	fail      error // Serve returns it at once
	ev        *events

	started   chan struct{}
	force     chan struct{}
	forceOnce sync.Once
	done      chan struct{}
}

func newService(name string, ev *events) *service {
	return &service{name: name, ev: ev, started: make(chan struct{}), force: make(chan struct{}), done: make(chan struct{})}
}

func (s *service) Serve(ctx context.Context) error {
	defer close(s.done)
	close(s.started)
	s.ev.add(s.name + " serving")
	if s.fail != nil {
		return s.fail
	}
	if s.ignoreCtx {
		<-s.force
	} else {
		select {
		case <-ctx.Done():
		case <-s.force:
		}
	}
	s.ev.add(s.name + " stopped")
	return nil
}

func (s *service) Shutdown(ctx context.Context) error {
	select {
	case <-s.done:
		s.ev.add(s.name + " shut down")
		return nil
	case <-ctx.Done():
		s.forceOnce.Do(func() { close(s.force) })
		<-s.done
		s.ev.add(s.name + " forced")
		return fmt.Errorf("%s: forced to stop: %w", s.name, ctx.Err())
	}
}

func initWith(svcs ...humus.Service) humus.Init {
	return func(context.Context, *humus.Setup) ([]humus.Service, error) { return svcs, nil }
}

func TestRunExitsZeroOnSIGTERMWhenEveryServiceStopsCleanly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &events{}
		a, b := newService("a", ev), newService("b", ev)
		host := humustest.NewHost(t)
		tel := humustest.NewTelemetry(t)
		app := humustest.RunApp(t, host.Host, initWith(a, b), humus.WithTelemetry(tel.Build))
		<-a.started
		<-b.started

		host.Signal(syscall.SIGTERM)

		require.Equal(t, 0, app.Wait(), host.StderrString())
		require.Subset(t, ev.get(), []string{"a stopped", "b stopped", "a shut down", "b shut down"})
		require.Equal(t, 1, tel.Shutdowns())
	})
}

func TestRunExitsZeroOnSIGINT(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newService("a", &events{})
		app := humustest.RunApp(t, humustest.NewHost(t).Host, initWith(a))
		<-a.started
		app.Signal(os.Interrupt)
		require.Equal(t, 0, app.Wait())
	})
}

func TestRunExitsOneOnInitErrorAndStartsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newService("a", &events{})
		host := humustest.NewHost(t)
		tel := humustest.NewTelemetry(t)
		init := func(context.Context, *humus.Setup) ([]humus.Service, error) {
			return []humus.Service{a}, errors.New("no settings")
		}

		code := humus.Run(t.Context(), host.Host, init, humus.WithTelemetry(tel.Build))

		require.Equal(t, 1, code)
		require.Contains(t, host.StderrString(), "init: no settings")
		synctest.Wait()
		select {
		case <-a.started:
			t.Fatal("a Service started after Init failed")
		default:
		}
		require.Equal(t, 1, tel.Shutdowns(), "telemetry is still shut down")
	})
}

func TestRunExitsOneOnTelemetryErrorBeforeInit(t *testing.T) {
	host := humustest.NewHost(t)
	called := false
	code := humus.Run(t.Context(), host.Host, func(context.Context, *humus.Setup) ([]humus.Service, error) {
		called = true
		return nil, nil
	}, humus.WithTelemetry(func(context.Context, humus.Host) (humus.Telemetry, error) {
		return humus.Telemetry{}, errors.New("no exporter")
	}))
	require.Equal(t, 1, code)
	require.False(t, called)
	require.Contains(t, host.StderrString(), "building telemetry: no exporter")
}

func TestRunShutsTheOthersDownAndExitsOneWhenAServeFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &events{}
		failing, other := newService("failing", ev), newService("other", ev)
		failing.fail = errors.New("lost the lease")
		host := humustest.NewHost(t)

		code := humus.Run(t.Context(), host.Host, initWith(other, failing))

		require.Equal(t, 1, code)
		require.Contains(t, host.StderrString(), "lost the lease")
		require.Contains(t, ev.get(), "other stopped")
		require.Contains(t, ev.get(), "other shut down")
	})
}

func TestRunTurnsAPanickingServeIntoExitOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := humustest.NewHost(t)
		code := humus.Run(t.Context(), host.Host, initWith(panicking{}))
		require.Equal(t, 1, code)
		require.Contains(t, host.StderrString(), "panic: boom")
	})
}

type panicking struct{}

func (panicking) Serve(context.Context) error    { panic("boom") }
func (panicking) Shutdown(context.Context) error { return nil }

func TestRunForcesAServiceIgnoringItsContextWhenTheGracePeriodEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &events{}
		stubborn, clean := newService("stubborn", ev), newService("clean", ev)
		stubborn.ignoreCtx = true
		host := humustest.NewHost(t)
		tel := humustest.NewTelemetry(t)
		app := humustest.RunApp(t, host.Host, initWith(stubborn, clean),
			humus.WithGracePeriod(5*time.Second), humus.WithTelemetry(tel.Build))
		<-stubborn.started
		<-clean.started

		start := time.Now()
		app.Signal(syscall.SIGTERM)
		code := app.Wait()

		require.Equal(t, 1, code)
		require.Equal(t, 5*time.Second, time.Since(start), "Run returns when the grace period ends")
		require.Contains(t, ev.get(), "stubborn forced")
		require.Contains(t, ev.get(), "clean shut down")
		require.Contains(t, host.StderrString(), "forced to stop: context deadline exceeded")
		require.Equal(t, 1, tel.Shutdowns())
	})
}

func TestRunShutsDownTelemetryLast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &events{}
		a := newService("a", ev)
		tel := humustest.NewTelemetry(t)
		build := func(ctx context.Context, h humus.Host) (humus.Telemetry, error) {
			tt := tel.Telemetry
			tt.Shutdown = func(ctx context.Context) error {
				ev.add("telemetry shut down")
				return tel.Telemetry.Shutdown(ctx)
			}
			return tt, nil
		}
		app := humustest.RunApp(t, humustest.NewHost(t).Host, initWith(a), humus.WithTelemetry(build))
		<-a.started
		app.Signal(syscall.SIGTERM)
		require.Equal(t, 0, app.Wait())
		got := ev.get()
		require.Equal(t, "telemetry shut down", got[len(got)-1], got)
		require.Equal(t, 1, tel.Shutdowns())
	})
}

func TestRunWaitsForTheDrainBeforeCancellingServices(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &events{}
		a := newService("a", ev)
		app := humustest.RunApp(t, humustest.NewHost(t).Host, initWith(a), humus.WithDrain(3*time.Second))
		<-a.started
		start := time.Now()
		app.Signal(syscall.SIGTERM)
		<-a.done
		require.Equal(t, 3*time.Second, time.Since(start))
		require.Equal(t, 0, app.Wait())
	})
}

func TestRunExitsZeroWhenEveryServiceReturnsOnItsOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newService("a", &events{})
		close(a.force)
		require.Equal(t, 0, humus.Run(t.Context(), humustest.NewHost(t).Host, initWith(a)))
	})
}

func TestRunGivesInitNoopProvidersForNilOnes(t *testing.T) {
	var got humus.Telemetry
	code := humus.Run(t.Context(), humustest.NewHost(t).Host, func(_ context.Context, s *humus.Setup) ([]humus.Service, error) {
		got = s.Telemetry
		return nil, nil
	})
	require.Equal(t, 0, code)
	require.NotNil(t, got.TracerProvider)
	require.NotNil(t, got.MeterProvider)
	require.NotNil(t, got.LoggerProvider)
	require.True(t, got.Propagator != nil)
}

// TestRunOnOSHostStopsOnARealSIGTERM sends the test process SIGTERM once
// Run relays it (Init runs after Run has asked the Host for signals).
func TestRunOnOSHostStopsOnARealSIGTERM(t *testing.T) {
	a := newService("a", &events{})
	initDone := make(chan struct{})
	init := func(context.Context, *humus.Setup) ([]humus.Service, error) {
		defer close(initDone)
		return []humus.Service{a}, nil
	}
	app := humustest.RunApp(t, humus.OSHost(), init)
	<-initDone
	<-a.started
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	require.Equal(t, 0, app.Wait())
}

func TestRunOnOSHostStopsOnAnInjectedSignal(t *testing.T) {
	a := newService("a", &events{})
	app := humustest.RunApp(t, humus.OSHost(), initWith(a))
	<-a.started
	app.Signal(syscall.SIGTERM)
	require.Equal(t, 0, app.Wait())
}

func TestRunWithANilOptionIgnoresIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newService("a", &events{})
		close(a.force)
		var code int
		require.NotPanics(t, func() {
			code = humus.Run(t.Context(), humustest.NewHost(t).Host, initWith(a), nil, humus.WithDrain(0), nil)
		})
		require.Equal(t, 0, code)
	})
}

func TestRunWithANilInitExitsOneNamingIt(t *testing.T) {
	host := humustest.NewHost(t)
	require.Equal(t, 1, humus.Run(t.Context(), host.Host, nil))
	require.Equal(t, "humus: init: the Init function is nil\n", host.StderrString())
}

func TestRunExitsOneAndStartsNothingWhenInitReturnsANilService(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newService("a", &events{})
		host := humustest.NewHost(t)
		code := humus.Run(t.Context(), host.Host, initWith(a, nil, a, nil))
		require.Equal(t, 1, code)
		require.Equal(t, "humus: init: Service 1 of 4 is nil\nhumus: init: Service 3 of 4 is nil\n", host.StderrString())
		synctest.Wait()
		select {
		case <-a.started:
			t.Fatal("a Service started beside a nil one")
		default:
		}
	})
}

func TestRunTurnsAPanickingShutdownIntoExitOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := humustest.NewHost(t)
		app := humustest.RunApp(t, host.Host, initWith(panickingShutdown{}))
		synctest.Wait()
		app.Signal(syscall.SIGTERM)
		require.Equal(t, 1, app.Wait())
		require.Contains(t, host.StderrString(), "shutdown: panic: shutdown boom")
	})
}

type panickingShutdown struct{}

func (panickingShutdown) Serve(ctx context.Context) error { <-ctx.Done(); return nil }
func (panickingShutdown) Shutdown(context.Context) error  { panic("shutdown boom") }

func TestRunEndsTheDrainWhenItsContextIsDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newService("a", &events{})
		host := humustest.NewHost(t)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan int)
		go func() { done <- humus.Run(ctx, host.Host, initWith(a), humus.WithDrain(time.Hour)) }()
		<-a.started
		host.Signal(syscall.SIGTERM)
		synctest.Wait() // draining
		start := time.Now()
		cancel()
		require.Equal(t, 0, <-done)
		require.Zero(t, time.Since(start), "the drain ends when ctx is done")
	})
}

func TestRunIgnoresASecondSignal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newService("a", &events{})
		host := humustest.NewHost(t)
		app := humustest.RunApp(t, host.Host, initWith(a), humus.WithDrain(time.Second))
		<-a.started
		host.Signal(syscall.SIGTERM)
		host.Signal(syscall.SIGINT)
		require.Equal(t, 0, app.Wait())
		require.Equal(t, 1, strings.Count(host.StderrString(), "received"), host.StderrString())
	})
}

func TestTelemetryWithNoopsFillsOnlyTheNilParts(t *testing.T) {
	got := humus.Telemetry{}.WithNoops()
	require.NotNil(t, got.TracerProvider)
	require.NotNil(t, got.MeterProvider)
	require.NotNil(t, got.LoggerProvider)
	// An empty composite propagator is a nil slice in a non-nil interface,
	// which testify's NotNil takes for nil.
	require.True(t, got.Propagator != nil)
	require.Empty(t, got.Propagator.Fields(), "the empty propagator injects nothing")
	require.Nil(t, got.Shutdown)

	tel := humustest.NewTelemetry(t)
	require.Equal(t, tel.Telemetry.TracerProvider, tel.Telemetry.WithNoops().TracerProvider, "a set provider is kept")
}
