package leaderelection

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/z5labs/humus/kube/internal/tenure"
)

func TestTheLeaseIsValidOnlyBeforeItsDeadlineByTheClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lost := make(chan struct{})
		l := NewLease(context.Background(), Config{
			Name: "widgets", Namespace: "kube-system", Identity: "replica-1",
			Client:        kubefake.NewClientset().CoordinationV1(),
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		}, func() { close(lost) })
		require.ErrorIs(t, l.Valid(), tenure.ErrNotLeading, "before it leads")

		l.Renewed(time.Now())
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		l.startLeading(ctx)
		require.NoError(t, l.Valid())
		l.Renewed(time.Now().Add(-9 * time.Second)) // a renewal that took 9s
		require.NoError(t, l.Valid())

		// At the deadline the Lease is lost, whether or not the timer's
		// goroutine has run yet, as in a process just woken.
		time.Sleep(time.Second)
		require.ErrorIs(t, l.Valid(), tenure.ErrLeaseExpired)
		<-lost
		require.ErrorIs(t, context.Cause(l.Context()), tenure.ErrLeaseExpired)
		l.Renewed(time.Now())
		require.ErrorIs(t, l.Valid(), tenure.ErrLeaseExpired, "a loss is for good")
	})
}
