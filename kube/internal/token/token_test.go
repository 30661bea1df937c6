package token

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus/humustest"
)

// fakeServer records the Authorization header of each request, and
// answers 401 to every request carrying the token rejected, as the API
// server answers a revoked one.
type fakeServer struct {
	*httptest.Server

	mu       sync.Mutex
	auths    []string
	rejected string
}

func (s *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	a := r.Header.Get("Authorization")
	s.auths = append(s.auths, a)
	rejected := s.rejected != "" && a == "Bearer "+s.rejected
	s.mu.Unlock()
	if rejected {
		w.WriteHeader(http.StatusUnauthorized)
	}
}

// reject makes the server answer 401 to every request carrying token.
func (s *fakeServer) reject(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejected = token
}

// arrived are the Authorization headers of the requests, in order.
func (s *fakeServer) arrived() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auths...)
}

// fakeClock is a fake time for the token source.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// countingToken is a Connection.Token that counts its calls and returns
// what its next field says.
type countingToken struct {
	calls atomic.Int32
	next  atomic.Pointer[func() (string, error)]
}

func newCountingToken(token string) *countingToken {
	ts := &countingToken{}
	ts.set(func() (string, error) { return token, nil })
	return ts
}

func (ts *countingToken) set(f func() (string, error)) { ts.next.Store(&f) }

func (ts *countingToken) Token(context.Context) (string, error) {
	ts.calls.Add(1)
	return (*ts.next.Load())()
}

// fixture is a Source of a Connection.Token and its Bearer in front of a
// fakeServer, with in-memory telemetry and a fake clock.
type fixture struct {
	server *fakeServer
	tel    *humustest.Telemetry
	clock  *fakeClock
	tokens *Source
	client *http.Client
}

func newFixture(t testing.TB, fn func(context.Context) (string, error)) *fixture {
	t.Helper()
	f := &fixture{server: &fakeServer{}, tel: humustest.NewTelemetry(t), clock: &fakeClock{now: time.Unix(1_700_000_000, 0)}}
	f.server.Server = httptest.NewServer(http.HandlerFunc(f.server.serve))
	t.Cleanup(f.server.Close)
	f.tokens = NewSource(fn, f.tel.Telemetry.LoggerProvider.Logger("test"))
	f.tokens.now = f.clock.Now
	f.client = &http.Client{Transport: NewBearer(f.tokens, f.server.Client().Transport)}
	return f
}

// list sends a request with ctx; a 401 is an error.
func (f *fixture) listCtx(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.server.URL+"/api/v1/namespaces", nil)
	if err != nil {
		return err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

func (f *fixture) list(t testing.TB) error {
	t.Helper()
	return f.listCtx(t.Context())
}

func TestTokenIsSentAsBearer(t *testing.T) {
	f := newFixture(t, newCountingToken("abc").Token)
	require.NoError(t, f.list(t))
	require.Equal(t, "Bearer abc", f.server.arrived()[0])
}

func TestTokenIsTrimmedOfAFilesNewline(t *testing.T) {
	f := newFixture(t, newCountingToken("abc\n").Token)
	require.NoError(t, f.list(t))
	require.Equal(t, "Bearer abc", f.server.arrived()[0])
}

func TestARequestWithAnAuthorizationHeaderIsLeftAsItIs(t *testing.T) {
	ts := newCountingToken("abc")
	f := newFixture(t, ts.Token)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, f.server.URL, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Basic x")
	resp, err := f.client.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, "Basic x", f.server.arrived()[0])
	require.Zero(t, ts.calls.Load())
}

func TestTokenIsCalledAtMostOnceAMinute(t *testing.T) {
	ts := newCountingToken("first")
	f := newFixture(t, ts.Token)

	for range 20 {
		require.NoError(t, f.list(t))
	}
	require.EqualValues(t, 1, ts.calls.Load())

	ts.set(func() (string, error) { return "second", nil })
	f.clock.Advance(time.Minute - time.Nanosecond)
	require.NoError(t, f.list(t))
	require.EqualValues(t, 1, ts.calls.Load(), "not yet a minute")

	f.clock.Advance(time.Nanosecond)
	require.NoError(t, f.list(t))
	require.NoError(t, f.list(t))
	require.EqualValues(t, 2, ts.calls.Load())

	got := f.server.arrived()
	require.Equal(t, "Bearer first", got[20])
	require.Equal(t, "Bearer second", got[21])
	require.Equal(t, "Bearer second", got[22])
}

func TestA401CallsTokenAgainAtOnceButAtMostOnceEvery5s(t *testing.T) {
	ts := newCountingToken("revoked")
	f := newFixture(t, ts.Token)
	require.NoError(t, f.list(t))
	require.EqualValues(t, 1, ts.calls.Load())

	// The token is revoked while Token already returns a new one.
	f.server.reject("revoked")
	ts.set(func() (string, error) { return "fresh", nil })
	f.clock.Advance(RejectedPeriod)
	require.EqualError(t, f.list(t), "status 401", "the request that carried the revoked token is answered 401 Unauthorized")
	require.NoError(t, f.list(t), "the request after a 401 carries a new token")
	require.EqualValues(t, 2, ts.calls.Load())
	got := f.server.arrived()
	require.Equal(t, "Bearer revoked", got[1])
	require.Equal(t, "Bearer fresh", got[2])

	// A token that stays rejected: one call per RejectedPeriod after
	// the last, whatever the number of 401s.
	f.server.reject("fresh")
	for range 5 {
		require.Error(t, f.list(t))
	}
	require.EqualValues(t, 2, ts.calls.Load(), "a call less than 5s after the last")
	f.clock.Advance(RejectedPeriod)
	for range 5 {
		require.Error(t, f.list(t))
	}
	require.EqualValues(t, 3, ts.calls.Load())

	// While Token fails after a 401, the last token is still sent.
	ts.set(func() (string, error) { return "", errors.New("token file unreadable") })
	f.clock.Advance(RejectedPeriod)
	require.Error(t, f.list(t))
	require.EqualValues(t, 4, ts.calls.Load())
	require.Equal(t, "Bearer fresh", f.server.arrived()[len(f.server.arrived())-1])

	// A 401 to a token already replaced, as one in flight across a
	// refresh, makes no call due.
	f.server.reject("")
	ts.set(func() (string, error) { return "third", nil })
	f.clock.Advance(Period)
	require.NoError(t, f.list(t))
	require.EqualValues(t, 5, ts.calls.Load())
	f.clock.Advance(RejectedPeriod)
	f.tokens.rejected("fresh")
	require.NoError(t, f.list(t))
	require.EqualValues(t, 5, ts.calls.Load())
}

func TestConcurrentFirstRequestsCallTokenOnce(t *testing.T) {
	ts := newCountingToken("t")
	f := newFixture(t, ts.Token)
	var wg sync.WaitGroup
	errs := make(chan error, 30)
	for range 30 {
		wg.Go(func() { errs <- f.list(t) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, ts.calls.Load())
}
