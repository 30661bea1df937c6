package app

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/health"
)

// certs stands in for a webhookcert.Certs: a Service that is a
// health.Monitor.
type certs struct{ err error }

func (certs) Serve(context.Context) error     { return nil }
func (certs) Shutdown(context.Context) error  { return nil }
func (c certs) Healthy(context.Context) error { return c.err }

// server stands in for the webhook server: a Service that isn't a Monitor.
type server struct{}

func (server) Serve(context.Context) error    { return nil }
func (server) Shutdown(context.Context) error { return nil }

// TestTheAppIsNotReadyUntilItsWebhookCertificateIs: the readiness probe
// fails while the certificate the App keeps isn't served and trusted, as
// while the caches haven't synced, and passes once both are.
func TestTheAppIsNotReadyUntilItsWebhookCertificateIs(t *testing.T) {
	var synced health.Binary
	synced.MarkHealthy()
	notYet := errors.New("webhookcert: the Secret hasn't been read yet")
	probe := health.Readiness(readiness(&synced, []humus.Service{certs{err: notYet}, server{}})...)
	require.ErrorIs(t, probe.Healthy(t.Context()), notYet)

	probe = health.Readiness(readiness(&synced, []humus.Service{certs{}, server{}})...)
	require.NoError(t, probe.Healthy(t.Context()))

	synced.MarkUnhealthy()
	require.Error(t, health.Readiness(readiness(&synced, nil)...).Healthy(t.Context()), "no webhooks: the caches alone")
}
