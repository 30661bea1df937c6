package kube

import (
	"context"
	"net/http"
	"sync"

	"github.com/z5labs/humus/kube/internal/apitransport"
	"github.com/z5labs/humus/kube/internal/applyset"
)

// scope is what a worker's and a reconcile's context carry, in one value
// under scopeKey. A worker's context carries the lease it works under; a
// reconcile's a copy of it (withReconciling) that adds the Controller, the
// key it reconciles and its Recorder. ReconcileTest.Context makes one with
// a test's caches and Recorder and no lease.
type scope struct {
	// lease is the replica's right to work: a leader's
	// *leaderelection.Lease, or a *member with Sharding on (mayWork,
	// takeKey). nil in the package's tests, which then may always work.
	lease interface{ Valid() error }
	// c is the reconcile's Controller, for ListerFrom and its owned
	// writes; nil in a worker's context.
	c *Controller
	// key is the key the reconcile reconciles, for its owned writes.
	key string
	// rec is RecorderFrom's Recorder; nil records nothing.
	rec *Recorder
	// applied are the children of pruned resources the reconcile wrote
	// (prune.go).
	applied applyset.Written

	// mu guards newChildren.
	mu sync.Mutex
	// newChildren are the owned objects the reconcile created whose
	// events won't queue it again, as "resource namespace/name"
	// (reportUnseenCreations).
	newChildren []string
}

// created adds child, "resource namespace/name", to s's newChildren.
func (s *scope) created(child string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.newChildren = append(s.newChildren, child)
}

// takeCreated returns s's newChildren and forgets them.
func (s *scope) takeCreated() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.newChildren
	s.newChildren = nil
	return out
}

// scopeKey is the context key of a worker's or reconcile's scope.
type scopeKey struct{}

// scopeOf returns ctx's scope, or nil if ctx carries none.
func scopeOf(ctx context.Context) *scope {
	s, _ := ctx.Value(scopeKey{}).(*scope)
	return s
}

// withLease returns ctx, a worker's, carrying l, a *leaderelection.Lease or a
// *member.
func withLease(ctx context.Context, l interface{ Valid() error }) context.Context {
	return context.WithValue(ctx, scopeKey{}, &scope{lease: l})
}

// withReconciling returns ctx carrying the scope of c's reconcile of key:
// ctx's lease, if any, c, key and c's Recorder, if Serve has started one.
// Its writes go to the transport's write hook (apitransport.WriteHooks).
func withReconciling(ctx context.Context, c *Controller, key string) context.Context {
	s := &scope{c: c, key: key}
	if w := scopeOf(ctx); w != nil {
		s.lease = w.lease
	}
	if c != nil {
		s.rec = c.recorder.Load()
	}
	return withScope(ctx, s)
}

// withScope returns ctx carrying s, a reconcile's, as its scope and its
// apitransport.WriteHook.
func withScope(ctx context.Context, s *scope) context.Context {
	return apitransport.WithWriteHook(context.WithValue(ctx, scopeKey{}, s), s)
}

// NoteWrite is the reconcile's apitransport.WriteHook. It checks the
// reconcile's lease again as each write (a create, update, patch or
// delete) enters the client's transport: a reconcile that passed mayWork
// and then stalled past its tenure's deadline (a long GC pause, a
// SIGSTOP) gets the lease's error and sends nothing. Valid reads the
// clock, so it refuses even when the deadline's timer hasn't run yet.
// It then notes a create, update or patch of an owned resource: see
// ownedCreations and noteApplied.
func (s *scope) NoteWrite(req *http.Request, next http.RoundTripper) (*http.Response, error) {
	if err := s.mayWork(); err != nil {
		return nil, err
	}
	if s.c == nil || req.Method == http.MethodDelete {
		return next.RoundTrip(req)
	}
	resp, err := s.c.noteOwnedWrite(s, req, next)
	s.noteApplied(req, resp, err)
	return resp, err
}
