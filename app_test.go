package humus_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
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

// lastWrites is a Service, such as a controller, whose Serve, once its
// context is done, takes writeTime more for its last writes, each of which
// needs server still serving (as a reconcile's write through the API server
// needs the App's webhook server); it records whether server served them.
type lastWrites struct {
	name      string
	server    *service
	writeTime time.Duration
	ev        *events
	started   chan struct{}
	done      chan struct{}
}

func newLastWrites(name string, server *service, ev *events) *lastWrites {
	return &lastWrites{name: name, server: server, writeTime: 2 * time.Second, ev: ev, started: make(chan struct{}), done: make(chan struct{})}
}

func (w *lastWrites) Serve(ctx context.Context) error {
	defer close(w.done)
	close(w.started)
	<-ctx.Done()
	time.Sleep(w.writeTime)
	select {
	case <-w.server.done:
		w.ev.add(w.name + "'s last write refused: " + w.server.name + " had stopped")
	default:
		w.ev.add(w.name + "'s last write served")
	}
	w.ev.add(w.name + " stopped")
	return nil
}

func (w *lastWrites) Shutdown(ctx context.Context) error {
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", w.name, ctx.Err())
	}
}

// TestRunStopsAServiceAfterThoseStopAfterNames: a server marked to stop
// after a controller serves the controller's last writes, made after its
// context is done, and stops only once the controller has; an unordered
// Service stops at once. Before StopAfter, Run stopped every Service at
// once, and the last write found the server gone.
func TestRunStopsAServiceAfterThoseStopAfterNames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &events{}
		webhooks, probes := newService("webhooks", ev), newService("probes", ev)
		ctrl := newLastWrites("controller", webhooks, ev)
		// The server comes first: the order is StopAfter's, not the list's.
		app := humustest.RunApp(t, humustest.NewHost(t).Host, initWith(humus.StopAfter(webhooks, ctrl), ctrl, probes))
		<-ctrl.started
		<-webhooks.started
		<-probes.started

		start := time.Now()
		app.Signal(syscall.SIGTERM)
		<-probes.done
		require.Zero(t, time.Since(start), "an unordered Service is stopped at once")
		<-webhooks.done
		require.Equal(t, ctrl.writeTime, time.Since(start), "the server is stopped once the controller has")

		require.Equal(t, 0, app.Wait())
		got := ev.get()
		require.Contains(t, got, "controller's last write served")
		require.Less(t, slices.Index(got, "controller stopped"), slices.Index(got, "webhooks stopped"), got)
	})
}

// TestRunStopsAServiceAfterEveryOneItIsMarkedToStopAfter: StopAfter of a
// marked Service adds to its order, and a chain stops link by link.
func TestRunStopsAServiceAfterEveryOneItIsMarkedToStopAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &events{}
		last := newService("last", ev)
		a := newLastWrites("a", last, ev)
		b := newLastWrites("b", last, ev)
		b.writeTime = 3 * time.Second
		metrics := newService("metrics", ev)
		c := newLastWrites("c", metrics, ev) // c stops first, then metrics
		app := humustest.RunApp(t, humustest.NewHost(t).Host, initWith(
			humus.StopAfter(humus.StopAfter(last, a), b, metrics), a, b, c, humus.StopAfter(metrics, c)))
		<-last.started

		start := time.Now()
		app.Signal(syscall.SIGTERM)
		<-last.done
		require.Equal(t, b.writeTime, time.Since(start), "after the slower of a and b, and after metrics, which waited for c")
		require.Equal(t, 0, app.Wait())
		require.Subset(t, ev.get(), []string{"a's last write served", "b's last write served", "c's last write served"})
	})
}

// TestRunForcesTheServicesWaitingTheirTurnWhenTheGracePeriodEnds: the grace
// period bounds the whole stop; a Service still waiting for its turn when it
// ends is stopped then, its Shutdown's context done.
func TestRunForcesTheServicesWaitingTheirTurnWhenTheGracePeriodEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &events{}
		stubborn, webhooks := newService("stubborn", ev), newService("webhooks", ev)
		stubborn.ignoreCtx = true
		host := humustest.NewHost(t)
		app := humustest.RunApp(t, host.Host, initWith(stubborn, humus.StopAfter(webhooks, stubborn)), humus.WithGracePeriod(5*time.Second))
		<-stubborn.started
		<-webhooks.started

		start := time.Now()
		app.Signal(syscall.SIGTERM)
		<-webhooks.done
		require.Equal(t, 5*time.Second, time.Since(start), "the server waited for the stubborn Service until the grace period ended")
		require.Equal(t, 1, app.Wait())
		require.Equal(t, 5*time.Second, time.Since(start), "and Run returned then")
		require.Contains(t, ev.get(), "stubborn forced")
	})
}

// unnamable is a Service whose type isn't comparable: StopAfter can't name
// it.
type unnamable struct{ tags []string }

func (unnamable) Serve(ctx context.Context) error { <-ctx.Done(); return nil }
func (unnamable) Shutdown(context.Context) error  { return nil }

func TestRunExitsOneNamingEveryMistakeOfTheStopOrderAndStartsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &events{}
		a, b, c, d, stranger := newService("a", ev), newService("b", ev), newService("c", ev), newService("d", ev), newService("stranger", ev)
		u := unnamable{tags: []string{"x"}}
		host := humustest.NewHost(t)
		code := humus.Run(t.Context(), host.Host, initWith(
			humus.StopAfter(a, stranger, nil), b, humus.StopAfter(c, u), u))
		require.Equal(t, 1, code)
		require.Equal(t, "humus: init: service 0 (*humus_test.service) is to stop after a *humus_test.service that isn't among the Services Init returned: return it too, and name it by the same pointer (a Service whose type isn't comparable matches nothing)\n"+
			"humus: init: service 0 (*humus_test.service) is to stop after a nil Service (StopAfter's Service 2)\n"+
			"humus: init: service 2 (*humus_test.service) is to stop after a humus_test.unnamable that isn't among the Services Init returned: return it too, and name it by the same pointer (a Service whose type isn't comparable matches nothing)\n",
			host.StderrString())

		host = humustest.NewHost(t)
		code = humus.Run(t.Context(), host.Host, initWith(humus.StopAfter(a, c), b, humus.StopAfter(c, d), humus.StopAfter(d, a)))
		require.Equal(t, 1, code)
		require.Equal(t, "humus: init: the stop order has a cycle: service 0 (*humus_test.service), service 2 (*humus_test.service), service 3 (*humus_test.service) never get their turn to stop, since each is to stop after one of them (StopAfter), on the cycle or behind it\n",
			host.StderrString())

		// A Service returned twice, once marked and once not, would be
		// served twice, the unmarked copy stopped at once.
		host = humustest.NewHost(t)
		require.Equal(t, 1, humus.Run(t.Context(), host.Host, initWith(b, a, humus.StopAfter(b, a))))
		require.Equal(t, "humus: init: services 0 and 2 are the same *humus_test.service, returned twice, so it would be served twice and StopAfter's order of one copy would not hold the other: return it once (marked with StopAfter, if it is to stop after others)\n",
			host.StderrString())

		host = humustest.NewHost(t)
		require.Equal(t, 1, humus.Run(t.Context(), host.Host, initWith(humus.StopAfter(nil, a), a)))
		require.Equal(t, "humus: init: Service 0 of 2 is nil\n", host.StderrString())

		synctest.Wait()
		for _, s := range []*service{a, b, c, d, stranger} {
			select {
			case <-s.started:
				t.Fatalf("%s started", s.name)
			default:
			}
		}
	})
}

// A Service StopAfter marks serves and shuts down as its own, outside Run
// too.
func TestStopAfterServesAsTheServiceItMarks(t *testing.T) {
	ev := &events{}
	a, b := newService("a", ev), newService("b", ev)
	served := humustest.TestService(t, humus.StopAfter(a, b))
	<-a.started
	served.Stop()
	require.Equal(t, []string{"a serving", "a stopped", "a shut down"}, ev.get())
}
