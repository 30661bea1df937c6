package humus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"time"
)

// DefaultGracePeriod is how long Run gives the Services' Shutdowns, and then
// Telemetry's Shutdown, to finish once the App stops, unless WithGracePeriod
// sets another. It fits inside Kubernetes' default
// terminationGracePeriodSeconds of 30s.
const DefaultGracePeriod = 20 * time.Second

// ForcedStopWait is how long Run still waits, once the grace period has
// ended and the Services' Shutdowns have been told to force them to stop, for
// the forced Services to return. Past it, Run gives up on them and returns 1.
const ForcedStopWait = time.Second

// An Option changes how Run and Main run an App. A nil Option changes
// nothing.
type Option func(*options)

type options struct {
	telemetry   func(ctx context.Context, h Host) (Telemetry, error)
	gracePeriod time.Duration
	drain       time.Duration
}

// WithTelemetry sets the function that builds the App's Telemetry. Run calls
// it once, before Init, with the App's Host; an error ends the App with exit
// code 1 before Init is called. Any nil provider it returns is replaced by
// the matching no-op provider, and a nil Propagator by an empty composite
// propagator.
//
// Without this option, the App records nothing.
func WithTelemetry(build func(ctx context.Context, h Host) (Telemetry, error)) Option {
	return func(o *options) { o.telemetry = build }
}

// WithGracePeriod sets how long the Services' Shutdowns may take once the
// App stops: their context is done when it ends, which forces every Service
// still running to stop. Telemetry's Shutdown then gets a grace period of its
// own. The default is DefaultGracePeriod (20s); a value of zero or less
// keeps the default.
func WithGracePeriod(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.gracePeriod = d
		}
	}
}

// WithDrain sets how long Run waits, after SIGTERM or SIGINT, before it
// cancels the Services' contexts, so that whatever routes work to the
// process (such as a Kubernetes Service's endpoints) can stop doing so
// first. The default is 0, no wait; a negative value is taken as 0. A
// Service failing during the drain, or Run's context being done, ends it at
// once.
func WithDrain(d time.Duration) Option {
	return func(o *options) { o.drain = max(d, 0) }
}

// Main runs the App that init builds on the real process, OSHost, and exits
// the process with Run's exit code. It does not return.
func Main(init Init, opts ...Option) {
	os.Exit(Run(context.Background(), OSHost(), init, opts...))
}

// Run runs the App that init builds on host, and returns its exit code. It
// is what Main does, without exiting, so a whole App can run in a test.
//
// Run builds the Telemetry (see WithTelemetry), calls init, and calls every
// returned Service's Serve in a goroutine of its own. The App stops when
// host.Signals delivers SIGTERM or SIGINT, when ctx is done, when any Serve
// returns an error, or when every Serve has returned. Then Run waits for the
// drain (after a signal only; see WithDrain), and stops the Services: it
// cancels a Service's Serve context and calls its Shutdown, with a context
// that is done when the grace period ends (see WithGracePeriod), at once
// for every Service, but for one marked with StopAfter, which waits for
// its turn: until the Services it is to stop after have stopped, or the
// grace period has ended. Run waits for every Shutdown and
// every Serve to return, but no longer than ForcedStopWait past the grace
// period's end. Last, it calls Telemetry's Shutdown with a fresh grace
// period, so that the records of a slow stop are still flushed.
//
// Run returns 0 when the App stopped on a signal, on ctx or on its own, and
// every Serve and Shutdown returned nil; it returns 1 when building the
// Telemetry or init failed, init is nil, or init returned a nil Service or
// a StopAfter order that names a Service it didn't return, returns one
// twice or has a cycle
// (and then no Service starts), or when any Serve or
// Shutdown returned an error or panicked, or was still running ForcedStopWait
// after the grace period ended, or when Telemetry's Shutdown failed. Every
// error, and the signal that stopped the App, is written to host.Stderr, one
// line each, starting "humus: ". A nil host.Signals delivers no signal, and
// a nil host.Stderr discards what would be written.
func Run(ctx context.Context, host Host, init Init, opts ...Option) int {
	o := options{gracePeriod: DefaultGracePeriod}
	for _, opt := range opts {
		if opt != nil { // a nil Option changes nothing
			opt(&o)
		}
	}
	stderr := host.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	report := func(err error) {
		fmt.Fprintf(stderr, "humus: %v\n", err)
	}

	sigCtx, stopSignals := context.WithCancel(ctx)
	defer stopSignals()
	var signals <-chan os.Signal
	if host.Signals != nil {
		signals = host.Signals(sigCtx)
	}

	tel := Telemetry{}
	if o.telemetry != nil {
		var err error
		tel, err = safeCall(func() (Telemetry, error) { return o.telemetry(ctx, host) })
		if err != nil {
			report(fmt.Errorf("building telemetry: %w", err))
			return 1
		}
	}
	tel = tel.WithNoops()

	code := run(ctx, host, tel, init, o, signals, report)

	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.gracePeriod)
	defer cancel()
	if tel.Shutdown != nil {
		if _, err := safeCall(func() (struct{}, error) { return struct{}{}, tel.Shutdown(shutdownCtx) }); err != nil {
			report(fmt.Errorf("shutting down telemetry: %w", err))
			code = 1
		}
	}
	return code
}

// run calls init and runs the Services; it returns the exit code before
// Telemetry's Shutdown.
func run(ctx context.Context, host Host, tel Telemetry, init Init, o options, signals <-chan os.Signal, report func(error)) int {
	svcs, after, ok := initServices(ctx, host, tel, init, report)
	if !ok {
		return 1
	}
	serveCtx, cancelServe := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelServe()
	g := serveAll(serveCtx, svcs, after, report)
	if g.waitForStop(ctx, signals, o.drain) {
		return g.code
	}
	return g.stop(ctx, o.gracePeriod)
}

// initServices calls init, and reports whether it returned Services, none
// of them nil, in a stop order without mistakes; otherwise it has reported
// why not. It returns the Services without StopAfter's marks, and for each
// the indices of those it stops after.
func initServices(ctx context.Context, host Host, tel Telemetry, init Init, report func(error)) ([]Service, [][]int, bool) {
	if init == nil {
		report(errors.New("init: the Init function is nil"))
		return nil, nil, false
	}
	svcs, err := safeCall(func() ([]Service, error) { return init(ctx, &Setup{Host: host, Telemetry: tel}) })
	if err != nil {
		report(fmt.Errorf("init: %w", err))
		return nil, nil, false
	}
	var nils []error
	for i, svc := range svcs {
		if plain, _ := unwrap(svc); plain == nil {
			nils = append(nils, fmt.Errorf("init: Service %d of %d is nil", i, len(svcs)))
		}
	}
	if len(nils) > 0 {
		for _, err := range nils {
			report(err)
		}
		return nil, nil, false
	}
	svcs, after, err := stopOrder(svcs)
	if err != nil {
		for _, err := range unjoin(err) {
			report(err)
		}
		return nil, nil, false
	}
	return svcs, after, true
}

// unjoin returns the errors errors.Join joined into err, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// served is one Service's Serve returning: its index and its error.
type served struct {
	i   int
	err error
}

// serving is the Services of a running App, and the exit code so far.
type serving struct {
	svcs     []Service
	after    [][]int              // for each Service, those it stops after
	cancels  []context.CancelFunc // each Serve's context's
	returned []bool               // which Serves have returned
	served   chan served
	running  int // the Serves that have not returned
	code     int
	report   func(error)
}

// serveAll calls every Service's Serve with a context of its own under
// ctx, each in a goroutine of its own.
func serveAll(ctx context.Context, svcs []Service, after [][]int, report func(error)) *serving {
	g := &serving{svcs: svcs, after: after, cancels: make([]context.CancelFunc, len(svcs)), returned: make([]bool, len(svcs)),
		served: make(chan served, len(svcs)), running: len(svcs), report: report}
	for i, svc := range svcs {
		svcCtx, cancel := context.WithCancel(ctx)
		g.cancels[i] = cancel
		go func() {
			_, err := safeCall(func() (struct{}, error) { return struct{}{}, svc.Serve(svcCtx) })
			g.served <- served{i, err}
		}()
	}
	return g
}

// onServed records that a Serve returned, and reports its error.
func (g *serving) onServed(r served) {
	g.running--
	g.returned[r.i] = true
	if r.err != nil {
		g.report(fmt.Errorf("service %d (%T): serve: %w", r.i, g.svcs[r.i], r.err))
		g.code = 1
	}
}

// waitForStop waits for the App to stop: every Serve returned, one failed,
// a signal arrived (then it waits up to drain more for the Serves to
// return), or ctx is done. It reports whether every Serve has returned.
func (g *serving) waitForStop(ctx context.Context, signals <-chan os.Signal, drain time.Duration) bool {
	signalled := false
wait:
	for g.running > 0 {
		select {
		case r := <-g.served:
			g.onServed(r)
			if r.err != nil {
				break wait
			}
		case sig, ok := <-signals:
			if !ok {
				signals = nil
				continue
			}
			g.report(fmt.Errorf("received %v, stopping", sig))
			signalled = true
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	if signalled && drain > 0 && g.running > 0 {
		timer := time.NewTimer(drain)
	drain:
		for g.running > 0 {
			select {
			case <-timer.C:
				break drain
			case <-ctx.Done():
				break drain
			case r := <-g.served:
				g.onServed(r)
				if r.err != nil {
					break drain
				}
			}
		}
		timer.Stop()
	}
	return g.running == 0
}

// stop stops every Service in its turn within gracePeriod: it cancels the
// Service's Serve context and calls its Shutdown once every Service it
// stops after has stopped (its Serve and its Shutdown returned), or once
// the grace period has ended. It waits for every Serve and Shutdown to
// return, but no longer than ForcedStopWait past the grace period's end.
// It returns the exit code.
func (g *serving) stop(ctx context.Context, gracePeriod time.Duration) int {
	graceCtx, cancelGrace := context.WithTimeout(context.WithoutCancel(ctx), gracePeriod)
	defer cancelGrace()
	n := len(g.svcs)
	shutDown := make(chan served, n) // each Shutdown returning
	shutdownErrs := make([]error, n)
	begun := make([]bool, n)        // whose stop has begun
	shutDownDone := make([]bool, n) // whose Shutdown has returned
	shutdowns := 0
	// begin starts the stop of every Service whose turn it is.
	begin := func() {
		for i, svc := range g.svcs {
			if begun[i] || (graceCtx.Err() == nil && slices.ContainsFunc(g.after[i], func(j int) bool { return !shutDownDone[j] || !g.returned[j] })) {
				continue
			}
			begun[i] = true
			g.cancels[i]()
			go func() {
				_, err := safeCall(func() (struct{}, error) { return struct{}{}, svc.Shutdown(graceCtx) })
				shutDown <- served{i, err}
			}()
		}
	}
	begin()

	// A Service forced when the grace period ends gets ForcedStopWait more to
	// return.
	waitCtx, cancelWait := context.WithTimeout(context.WithoutCancel(ctx), gracePeriod+ForcedStopWait)
	defer cancelWait()
	graceEnded := graceCtx.Done()
	for g.running > 0 || shutdowns < n {
		select {
		case r := <-g.served:
			g.onServed(r)
		case r := <-shutDown:
			shutDownDone[r.i], shutdownErrs[r.i] = true, r.err
			shutdowns++
		case <-graceEnded:
			graceEnded = nil
		case <-waitCtx.Done():
			g.report(fmt.Errorf("%d Serve(s) still running %v after the grace period of %v ended (Shutdowns returned: %t)",
				g.running, ForcedStopWait, gracePeriod, shutdowns == n))
			return 1
		}
		begin()
	}
	for i, err := range shutdownErrs {
		if err != nil {
			g.report(fmt.Errorf("service %d (%T): shutdown: %w", i, g.svcs[i], err))
			g.code = 1
		}
	}
	return g.code
}

// safeCall calls f, and turns a panic into an error carrying the stack.
func safeCall[T any](f func() (T, error)) (v T, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return f()
}
