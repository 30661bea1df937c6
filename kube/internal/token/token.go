// Package token is the bearer token every request to the API server
// carries: a Source calls package kube's Connection.Token at most once
// every Period and keeps its last token, and Bearer is the RoundTripper
// that adds it to each request, as client-go's bearerAuthRoundTripper and
// cachingTokenSource do.
//
// It owns Source, NewSource, Bearer, NewBearer, Period and RejectedPeriod.
// Its invariants: one call of Connection.Token in flight at a time; no
// request waits for it longer than its own context, nor at all while a
// token is in hand; a token once returned is kept while later calls fail
// (each failure one WARN record), and replaced only by a call that
// succeeds; a 401 to the last token makes a call due at once, but no
// sooner than RejectedPeriod after the last call; no request is sent
// without its token, and a request that carries an Authorization header
// already is left as it is.
package token

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otellog "go.opentelemetry.io/otel/log"
)

// Period is how long the transport uses a token before it calls
// Connection.Token again. It is client-go's: a BearerTokenFile is read
// again every minute (transport/token_source.go, NewCachedFileTokenSource).
// The kubelet rotates a projected service account token well before it
// expires (at 80% of its lifetime, an hour at least), so a minute-old token
// is always still valid.
const Period = time.Minute

// RejectedPeriod is how soon after its last call the transport calls
// Connection.Token again once the API server answers 401 Unauthorized to
// a request that carried the last token: a token revoked before it
// expires (its ServiceAccount, or the pod or Secret it is bound to,
// deleted) is replaced at once rather than up to Period later, as
// client-go's cachingTokenSource resets on a 401 (transport/token_source.go,
// ResettableTokenSource), but a token that stays rejected makes no more
// than one call every RejectedPeriod.
const RejectedPeriod = 5 * time.Second

// Source calls a Connection's Token at most once every Period,
// and keeps the last token it returned while a later call fails. A 401
// answer to a request that carried the last token makes the next request
// call Token again, no sooner than RejectedPeriod after the last call
// (rejected).
//
// Until a call has succeeded, every request calls Token, since there is no
// token to keep, and a failure fails the request. Once one has, Token is
// called again only Period after the last call, whether that call
// succeeded or not, so a failing Token is called at most once a minute too.
// A single call is in flight at a time: requests wait for it only while
// there is no token yet, and otherwise go on with the last one. The request
// that makes a call waits for it no longer than its own context, even when
// Token ignores the context: the call goes on in a goroutine of its own
// until Token returns, and what it returns is kept for later requests.
type Source struct {
	fn     func(ctx context.Context) (string, error)
	now    func() time.Time
	logger otellog.Logger

	// call holds one token: whoever takes it calls fn. It makes a request
	// that must wait for the first token wait with its own context.
	call chan struct{}

	mu    sync.Mutex
	token string    // the last token fn returned; "" before the first
	next  time.Time // when fn is due again
	last  time.Time // when the last call of fn returned
}

// NewSource returns the Source of fn, Connection.Token, whose warnings go
// to logger.
func NewSource(fn func(ctx context.Context) (string, error), logger otellog.Logger) *Source {
	return &Source{
		fn:     fn,
		now:    time.Now,
		logger: logger,
		call:   make(chan struct{}, 1),
	}
}

// Token returns the token a request to carry, calling Connection.Token when
// it is due.
func (s *Source) Token(ctx context.Context) (string, error) {
	s.mu.Lock()
	token, due := s.token, !s.now().Before(s.next)
	s.mu.Unlock()
	if !due {
		return token, nil
	}
	if token != "" {
		// A token is in hand: refresh it unless another request already
		// is, and never wait for that request.
		select {
		case s.call <- struct{}{}:
		default:
			return token, nil
		}
	} else {
		select {
		case s.call <- struct{}{}:
		case <-ctx.Done():
			return "", fmt.Errorf("kube: waiting for Connection.Token: %w", context.Cause(ctx))
		}
	}
	// Another request may have refreshed it while this one waited.
	s.mu.Lock()
	token, due = s.token, !s.now().Before(s.next)
	s.mu.Unlock()
	if !due {
		<-s.call
		return token, nil
	}

	// The call runs in a goroutine of its own, which holds the call token
	// until Token returns, so that this request waits no longer than its
	// context even when Token ignores it; what a late call returns is still
	// kept for the requests after.
	type result struct {
		token string
		err   error
	}
	done := make(chan result, 1)
	go func() {
		// The call token is given back before the request hears the
		// result, so that the request after it, once the clock says a
		// call is due, finds no call in flight and makes its own.
		r := func() result {
			defer func() { <-s.call }()
			fresh, err := s.callToken(ctx)
			token, err := s.record(ctx, fresh, err)
			return result{token, err}
		}()
		done <- r
	}()
	select {
	case r := <-done:
		return r.token, r.err
	case <-ctx.Done():
		return "", fmt.Errorf("kube: waiting for Connection.Token: %w", context.Cause(ctx))
	}
}

// record keeps what a call of Connection.Token returned, and returns the
// token a request is to carry: the fresh one, or the last one when the call
// failed, or the call's error when there is no last one.
func (s *Source) record(ctx context.Context, fresh string, err error) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = s.now()
	if err == nil {
		s.token, s.next = fresh, s.now().Add(Period)
		return fresh, nil
	}
	if s.token == "" {
		return "", err
	}
	s.next = s.now().Add(Period)
	s.warn(ctx, err)
	return s.token, nil
}

// rejected records that the API server answered 401 Unauthorized to a
// request that carried token: if it is still the last token, Token is due
// again at once, or RejectedPeriod after the last call if that is
// later. The last token is still sent until a call returns a new one.
func (s *Source) rejected(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token != s.token {
		return // already replaced, or never kept
	}
	due := s.last.Add(RejectedPeriod)
	if now := s.now(); due.Before(now) {
		due = now
	}
	if due.Before(s.next) {
		s.next = due
	}
}

// callToken calls Connection.Token, trimming the token's surrounding white
// space, and turning a panic, an empty token or one no header can carry
// into an error naming Connection.Token.
func (s *Source) callToken(ctx context.Context) (token string, err error) {
	defer func() {
		if v := recover(); v != nil {
			token, err = "", fmt.Errorf("kube: Connection.Token panicked: %v", v)
		}
	}()
	token, err = s.fn(ctx)
	if err != nil {
		return "", fmt.Errorf("kube: Connection.Token: %w", err)
	}
	// A token read from a file often ends in a newline, which client-go
	// trims from a BearerTokenFile too (transport/token_source.go).
	token = strings.TrimSpace(token)
	if token == "" {
		return "", errors.New("kube: Connection.Token returned an empty token")
	}
	if i := strings.IndexFunc(token, func(r rune) bool { return r <= ' ' || r == 0x7f }); i >= 0 {
		return "", fmt.Errorf("kube: Connection.Token returned a token with a space or a control character at byte %d, which no Authorization header can carry", i)
	}
	return token, nil
}

// warn records that a call failed and the last token was kept, as
// client-go logs "Unable to rotate token" (transport/token_source.go), but
// to s.Telemetry's LoggerProvider rather than klog.
func (s *Source) warn(ctx context.Context, err error) {
	var r otellog.Record
	r.SetTimestamp(s.now())
	r.SetSeverity(otellog.SeverityWarn)
	r.SetSeverityText("WARN")
	r.SetBody(attribute.StringValue("kube: Connection.Token failed; the last token is kept"))
	r.SetErr(err)
	s.logger.Emit(ctx, r)
}

// Bearer is the RoundTripper that adds the token to every request, as
// client-go's bearerAuthRoundTripper does (transport/round_trippers.go): a
// request that already carries an Authorization header is left as it is.
// A 401 answer to a request it added the token to makes the token source
// call Connection.Token again (Source.rejected), as client-go's does
// with a ResettableTokenSource.
type Bearer struct {
	tokens *Source
	next   http.RoundTripper
}

// NewBearer returns the RoundTripper that adds tokens' token to every
// request it hands next.
func NewBearer(tokens *Source, next http.RoundTripper) *Bearer {
	return &Bearer{tokens: tokens, next: next}
}

// RoundTrip adds the token to r, unless it carries an Authorization
// header already, and hands it to the next RoundTripper.
func (b *Bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Authorization") != "" {
		return b.next.RoundTrip(r)
	}
	token, err := b.tokens.Token(r.Context())
	if err != nil {
		if r.Body != nil {
			_ = r.Body.Close() // a RoundTripper always closes the body
		}
		return nil, err
	}
	// A RoundTripper must not change its request: copy it, and its header.
	r2 := new(http.Request)
	*r2 = *r
	r2.Header = make(http.Header, len(r.Header)+1)
	for k, v := range r.Header {
		r2.Header[k] = v
	}
	r2.Header.Set("Authorization", "Bearer "+token)
	resp, err := b.next.RoundTrip(r2)
	if err == nil && resp.StatusCode == http.StatusUnauthorized {
		b.tokens.rejected(token)
	}
	return resp, err
}
