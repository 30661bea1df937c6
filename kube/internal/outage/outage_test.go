package outage

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
)

func TestCommonFailures(t *testing.T) {
	gr := schema.GroupResource{Resource: "widgets"}
	for _, tc := range []struct {
		err    error
		common bool
	}{
		{apierrors.NewUnauthorized("revoked"), true},
		{apierrors.NewForbidden(gr, "w", errors.New("RBAC")), true},
		{apierrors.NewTooManyRequests("APF", 1), true},
		{apierrors.NewInternalError(errors.New("etcd")), true},
		{apierrors.NewServiceUnavailable("starting"), true},
		{apierrors.NewTimeoutError("slow", 1), true},
		{fmt.Errorf("kube: applying: %w", apierrors.NewGenericServerResponse(http.StatusBadGateway, "patch", gr, "w", "", 0, false)), true},
		{fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Err: errors.New("connection refused")}), true},
		{context.DeadlineExceeded, true},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "Widget"}, "w", nil), false},
		{apierrors.NewConflict(gr, "w", errors.New("changed")), false},
		{apierrors.NewNotFound(gr, "w"), false},
		{errors.New("the Reconciler's own"), false},
	} {
		require.Equal(t, tc.common, CommonFailure(tc.err), "%v", tc.err)
	}
}

// TestAProbeThatFailsOnItsOwnHandsTheProbeOn: in an outage the held keys
// wait for the probe's success; when the probe's key fails for a reason of
// its own (the API server back, the object invalid), another held key
// probes in its place, or the held keys waited for good.
func TestAProbeThatFailsOnItsOwnHandsTheProbeOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
		defer q.ShutDown()
		o := New(q, time.Hour)
		forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "widgets"}, "w", errors.New("RBAC"))
		take := func() string {
			k, _ := q.Get()
			q.Done(k)
			return k
		}
		o.Failed("a", forbidden)
		o.Failed("b", forbidden)
		require.ElementsMatch(t, []string{"a", "b"}, []string{take(), take()}, "backed off, within After")
		time.Sleep(After)
		o.Failed("a", forbidden) // the probe
		o.Failed("b", forbidden) // held
		require.Equal(t, "a", take(), "the probe, after ProbeMin")
		o.Failed("a", apierrors.NewInvalid(schema.GroupKind{Kind: "Widget"}, "a", nil))
		require.Equal(t, "a", take(), "backed off on its own")
		got := make(chan string)
		go func() { got <- take() }()
		time.Sleep(time.Minute)
		synctest.Wait()
		select {
		case k := <-got:
			require.Equal(t, "b", k, "the held key, probing in a's place")
		default:
			t.Fatal("the held key b was never queued again")
		}
	})
}
