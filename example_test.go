package humus_test

import (
	"context"
	"fmt"
	"os"
	"syscall"

	"github.com/z5labs/humus"
)

// ticker is a Service that keeps the humus.Service contract: Serve returns
// nil once its context is done, and Shutdown waits for that.
type ticker struct{ done chan struct{} }

func (s ticker) Serve(ctx context.Context) error {
	defer close(s.done)
	<-ctx.Done()
	return nil
}

func (s ticker) Shutdown(ctx context.Context) error {
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ticker: %w", ctx.Err())
	}
}

// Run is Main without the exit: here the App stops on a SIGTERM that its
// Host delivers once Init has run, and exits 0 because its Service stopped
// cleanly.
func ExampleRun() {
	signals := make(chan os.Signal, 1)
	host := humus.Host{
		Signals: func(context.Context) <-chan os.Signal { return signals },
	}
	init := func(ctx context.Context, s *humus.Setup) ([]humus.Service, error) {
		signals <- syscall.SIGTERM
		return []humus.Service{ticker{done: make(chan struct{})}}, nil
	}
	fmt.Println("exit code:", humus.Run(context.Background(), host, init))
	// Output: exit code: 0
}
