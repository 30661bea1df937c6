package kube

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/z5labs/humus/kube/internal/apitransport"
	"github.com/z5labs/humus/kube/internal/tenure"
)

// leaseState is a lease whose validity the test sets.
type leaseState struct{ err error }

func (l *leaseState) Valid() error { return l.err }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestAReconcilesWriteIsNotSentOnceItsLeaseIsNoLongerValid is a reconcile
// that passed mayWork and stalled past its tenure's deadline before its
// write reached the transport (a GC pause, a SIGSTOP): the transport's
// write hook checks the lease again and sends no create, update, patch or
// delete, answering with the lease's error; a read still goes through.
func TestAReconcilesWriteIsNotSentOnceItsLeaseIsNoLongerValid(t *testing.T) {
	lease := &leaseState{}
	var sent []string
	rt := apitransport.WriteHooks{Next: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		sent = append(sent, req.Method)
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	})}
	ctx := withReconciling(withLease(context.Background(), lease), nil, "ns/a")
	do := func(method string) error {
		resp, err := rt.RoundTrip(httptest.NewRequestWithContext(ctx, method, "https://kube/apis/example.com/v1/namespaces/ns/gizmos/a", http.NoBody))
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	require.NoError(t, do(http.MethodPatch), "a patch while the lease is valid")
	require.NoError(t, do(http.MethodDelete), "a delete while the lease is valid")
	lease.err = tenure.ErrLeaseExpired
	for _, m := range []string{http.MethodPatch, http.MethodPut, http.MethodPost, http.MethodDelete} {
		require.ErrorIs(t, do(m), tenure.ErrLeaseExpired, "a %s once the lease expired", m)
	}
	require.NoError(t, do(http.MethodGet), "a read once the lease expired")
	require.Equal(t, []string{http.MethodPatch, http.MethodDelete, http.MethodGet}, sent, "the requests sent")
}
