package apitransport

import (
	"context"
	"net/http"
)

// WriteHook is what a reconcile's context gives the transport so that it
// checks the reconcile's lease before each write and notes the writes
// (kube's scope.go and ownedcreations.go) without knowing the Controller:
// NoteWrite sends req through next and returns its answer, or refuses it
// with an error and sends nothing.
type WriteHook interface {
	NoteWrite(req *http.Request, next http.RoundTripper) (*http.Response, error)
}

// writeHookKey is the context key of a request's WriteHook.
type writeHookKey struct{}

// WithWriteHook returns ctx carrying h, to which WriteHooks
// hands the writes of a request made with ctx.
func WithWriteHook(ctx context.Context, h WriteHook) context.Context {
	return context.WithValue(ctx, writeHookKey{}, h)
}

// WriteHooks is the transport's layer that hands a write (a PATCH, PUT,
// POST or DELETE) to the WriteHook of its request's context: a request
// whose context carries none, or isn't a write, passes through untouched.
type WriteHooks struct{ Next http.RoundTripper }

// RoundTrip hands req to its context's WriteHook if it is a write, else
// sends it to Next.
func (t WriteHooks) RoundTrip(req *http.Request) (*http.Response, error) {
	h, ok := req.Context().Value(writeHookKey{}).(WriteHook)
	if !ok || (req.Method != http.MethodPatch && req.Method != http.MethodPut && req.Method != http.MethodPost && req.Method != http.MethodDelete) {
		return t.Next.RoundTrip(req)
	}
	return h.NoteWrite(req, t.Next)
}
