package app

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
)

// stopping is a Service that stops when its context is done, after
// lastWrites more; with needs set, it records whether needs was still
// serving then, as a reconcile's write through the API server needs the
// conversion webhook's server.
type stopping struct {
	lastWrites time.Duration
	needs      *stopping
	served     bool // needs served the last writes; read after done
	started    chan struct{}
	done       chan struct{}
}

func newStopping() *stopping {
	return &stopping{started: make(chan struct{}), done: make(chan struct{})}
}

func (s *stopping) Serve(ctx context.Context) error {
	defer close(s.done)
	close(s.started)
	<-ctx.Done()
	time.Sleep(s.lastWrites)
	if s.needs != nil {
		select {
		case <-s.needs.done:
		default:
			s.served = true
		}
	}
	return nil
}

func (s *stopping) Shutdown(ctx context.Context) error {
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stopping: %w", ctx.Err())
	}
}

// TestTheWebhooksStopOnlyOnceTheControllerHas: on SIGTERM, the webhooks'
// Services (the certificate's keeper and the server) serve the
// Controller's last writes, and stop once it has; the probes and the
// metrics stop at once. Before, every Service stopped at once, and a last
// write's conversion found the server gone ("connection refused").
func TestTheWebhooksStopOnlyOnceTheControllerHas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		certs, server, probes, metrics := newStopping(), newStopping(), newStopping(), newStopping()
		ctrl := newStopping()
		ctrl.lastWrites, ctrl.needs = 2*time.Second, server
		app := humustest.RunApp(t, humustest.NewHost(t).Host, func(context.Context, *humus.Setup) ([]humus.Service, error) {
			return services(ctrl, probes, metrics, []humus.Service{certs, server}), nil
		})
		for _, s := range []*stopping{ctrl, probes, metrics, certs, server} {
			<-s.started
		}

		start := time.Now()
		app.Signal(syscall.SIGTERM)
		<-probes.done
		<-metrics.done
		require.Zero(t, time.Since(start), "the probes and the metrics stop at once")
		<-certs.done
		<-server.done
		require.Equal(t, ctrl.lastWrites, time.Since(start), "the webhooks stop once the Controller has")
		require.Equal(t, 0, app.Wait())
		require.True(t, ctrl.served, "the webhook server served the Controller's last writes")
	})
}

func TestTheAppRunsWithoutMetricsOrWebhooks(t *testing.T) {
	ctrl, probes := newStopping(), newStopping()
	require.Equal(t, []humus.Service{ctrl, probes}, services(ctrl, probes, nil, nil))
}
