package token

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
)

func TestTokenKeepsTheLastTokenWhileACallFails(t *testing.T) {
	ts := newCountingToken("good")
	f := newFixture(t, ts.Token)
	require.NoError(t, f.list(t))

	ts.set(func() (string, error) { return "", errors.New("token file unreadable") })
	f.clock.Advance(time.Minute)
	require.NoError(t, f.list(t))
	require.EqualValues(t, 2, ts.calls.Load())
	require.NoError(t, f.list(t))
	require.EqualValues(t, 2, ts.calls.Load(), "a failing Token is called at most once a minute too")

	ts.set(func() (string, error) { panic("kaput") })
	f.clock.Advance(time.Minute)
	require.NoError(t, f.list(t))
	ts.set(func() (string, error) { return "", nil })
	f.clock.Advance(time.Minute)
	require.NoError(t, f.list(t))
	require.EqualValues(t, 4, ts.calls.Load())

	for _, a := range f.server.arrived() {
		require.Equal(t, "Bearer good", a)
	}

	records := f.tel.Records()
	require.Len(t, records, 3, "one WARN record per failed call")
	require.Contains(t, records[0].Body().AsString(), "last token is kept")
	var msgs []string
	for _, r := range records {
		require.Equal(t, "WARN", r.SeverityText())
		r.WalkAttributes(func(kv attribute.KeyValue) bool {
			if kv.Key == "exception.message" {
				msgs = append(msgs, kv.Value.AsString())
			}
			return true
		})
	}
	require.Equal(t, []string{
		"kube: Connection.Token: token file unreadable",
		"kube: Connection.Token panicked: kaput",
		"kube: Connection.Token returned an empty token",
	}, msgs)

	ts.set(func() (string, error) { return "rotated", nil })
	f.clock.Advance(time.Minute)
	require.NoError(t, f.list(t))
	got := f.server.arrived()
	require.Equal(t, "Bearer rotated", got[len(got)-1])
}

func TestFirstTokenFailureFailsTheRequest(t *testing.T) {
	for name, tc := range map[string]struct {
		token func() (string, error)
		want  string
	}{
		"error": {func() (string, error) { return "", errors.New("no such file") }, "kube: Connection.Token: no such file"},
		"panic": {func() (string, error) { panic("boom") }, "kube: Connection.Token panicked: boom"},
		"empty": {func() (string, error) { return "", nil }, "kube: Connection.Token returned an empty token"},
		"blank": {func() (string, error) { return " \n", nil }, "kube: Connection.Token returned an empty token"},
		"inner newline": {
			func() (string, error) { return "abc\ndef", nil },
			"kube: Connection.Token returned a token with a space or a control character at byte 3",
		},
	} {
		t.Run(name, func(t *testing.T) {
			ts := &countingToken{}
			ts.set(tc.token)
			f := newFixture(t, ts.Token)

			err := f.list(t)
			require.ErrorContains(t, err, tc.want)
			require.Empty(t, f.server.arrived(), "no request is sent without its token")

			// Until a call succeeds, every request calls Token.
			ts.set(func() (string, error) { return "late", nil })
			require.NoError(t, f.list(t))
			require.EqualValues(t, 2, ts.calls.Load())
			require.Equal(t, "Bearer late", f.server.arrived()[0])
		})
	}
}

// blockingToken is a Connection.Token that ignores its context and returns
// token only once release is closed.
type blockingToken struct {
	calls   atomic.Int32
	called  chan struct{}
	release chan struct{}
	token   string
}

func newBlockingToken(token string) *blockingToken {
	return &blockingToken{called: make(chan struct{}, 10), release: make(chan struct{}), token: token}
}

func (b *blockingToken) Token(context.Context) (string, error) {
	b.calls.Add(1)
	b.called <- struct{}{}
	<-b.release
	return b.token, nil
}

func TestARequestWaitsForABlockedFirstTokenNoLongerThanItsContext(t *testing.T) {
	bt := newBlockingToken("late")
	f := newFixture(t, bt.Token)

	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-bt.called; cancel() }()
	err := f.listCtx(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "kube: waiting for Connection.Token")
	require.Empty(t, f.server.arrived())

	close(bt.release)
	require.NoError(t, f.list(t))
	require.EqualValues(t, 1, bt.calls.Load(), "the late call's token is kept")
	require.Equal(t, "Bearer late", f.server.arrived()[0])
}

func TestABlockedRefreshHoldsUpNoOtherRequest(t *testing.T) {
	ts := newCountingToken("first")
	f := newFixture(t, ts.Token)
	require.NoError(t, f.list(t))

	bt := newBlockingToken("second")
	ts.set(func() (string, error) { return bt.Token(t.Context()) })
	f.clock.Advance(time.Minute)
	ctx, cancel := context.WithCancel(t.Context())
	refreshing := make(chan error, 1)
	go func() { refreshing <- f.listCtx(ctx) }()
	<-bt.called

	for range 5 {
		require.NoError(t, f.list(t), "requests go on with the last token during a refresh")
	}
	cancel()
	require.ErrorIs(t, <-refreshing, context.Canceled)

	close(bt.release)
	// The refresh's goroutine holds the one call until Token has returned
	// and its token is kept.
	f.tokens.call <- struct{}{}
	<-f.tokens.call
	require.NoError(t, f.list(t))
	require.Equal(t, "Bearer second", f.server.arrived()[6], "the late refresh's token is kept")
	require.EqualValues(t, 2, ts.calls.Load())
	for _, a := range f.server.arrived()[:6] {
		require.Equal(t, "Bearer first", a)
	}
}
