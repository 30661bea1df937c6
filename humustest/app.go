package humustest

import (
	"context"
	"os"
	"syscall"
	"testing"

	"github.com/z5labs/humus"
)

// App is a whole App that RunApp is running in-process.
type App struct {
	t        testing.TB
	injected chan os.Signal
	done     chan struct{}
	code     int
}

// RunApp runs the App that init builds with humus.Run, on host, in a
// goroutine of its own, and returns at once. host may be a fake Host's
// humus.Host or humus.OSHost(); either way, the App's Signals also receives
// what App.Signal sends. If the App is still running when the test ends,
// it is sent SIGTERM and waited for.
func RunApp(t testing.TB, host humus.Host, init humus.Init, opts ...humus.Option) *App {
	a := &App{t: t, injected: make(chan os.Signal, 8), done: make(chan struct{})}
	hostSignals := host.Signals
	host.Signals = func(ctx context.Context) <-chan os.Signal {
		var in <-chan os.Signal
		if hostSignals != nil {
			in = hostSignals(ctx)
		}
		out := make(chan os.Signal, 1)
		go func() {
			for {
				var sig os.Signal
				select {
				case <-ctx.Done():
					return
				case s, ok := <-in:
					if !ok {
						in = nil
						continue
					}
					sig = s
				case sig = <-a.injected:
				}
				select {
				case out <- sig:
				case <-ctx.Done():
					return
				}
			}
		}()
		return out
	}
	go func() {
		defer close(a.done)
		a.code = humus.Run(context.Background(), host, init, opts...)
	}()
	t.Cleanup(func() {
		select {
		case <-a.done:
		default:
			a.Signal(syscall.SIGTERM)
			a.Wait()
		}
	})
	return a
}

// Signal delivers sig to the App as its Host's Signals would. It fails the
// test if 8 signals are already waiting.
func (a *App) Signal(sig os.Signal) {
	select {
	case a.injected <- sig:
	default:
		a.t.Errorf("humustest: App.Signal(%v): 8 signals already waiting", sig)
	}
}

// Done is closed once the App has exited.
func (a *App) Done() <-chan struct{} { return a.done }

// Wait waits for the App to exit and returns its exit code: 0 when it
// stopped cleanly, 1 otherwise (see humus.Run).
func (a *App) Wait() int {
	<-a.done
	return a.code
}
