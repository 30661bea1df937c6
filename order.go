package humus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// StopAfter returns svc marked so that Run stops it only once every one of
// first has stopped. When the App stops, Run cancels the context of svc's
// Serve and calls its Shutdown only after the Serve and the Shutdown of
// each of first have returned; Services that nothing orders are stopped at
// once, as ever. It is how a server that another Service's work needs
// outlives that work: a Kubernetes controller's reconciles write through
// the API server, which calls the App's own conversion or admission
// webhook, so the webhook server is StopAfter(webhooks, controller) and
// serves the controller's last writes.
//
// Each of first must be one of the Services Init returns (as it is, or
// marked with StopAfter itself). Run matches them with ==, so name a
// Service by the same pointer Init returns: one whose type isn't
// comparable (a struct holding a slice or a map) matches nothing. Run
// exits 1 before any Service starts, naming each mistake, when one of
// first is nil or isn't among the Services Init returns, when Init returns
// one Service twice, or when the order has a cycle (a Service that would
// stop after itself).
// StopAfter(StopAfter(svc, a), b) stops svc after both a and b; with no
// first, it is svc unordered.
//
// The grace period (WithGracePeriod) bounds the whole stop, not each step:
// when it ends, Run cancels every Service still waiting for its turn and
// calls its Shutdown, whose context is then done, so that it is forced to
// stop at once.
//
// The Service returned serves and shuts down as svc does, so it runs
// outside Run too (as in humustest.TestService); the order is Run's.
func StopAfter(svc Service, first ...Service) Service {
	if o, ok := svc.(*ordered); ok {
		return &ordered{svc: o.svc, first: append(slices.Clone(o.first), first...)}
	}
	return &ordered{svc: svc, first: slices.Clone(first)}
}

// ordered is a Service StopAfter marked: svc, to be stopped after first.
type ordered struct {
	svc   Service
	first []Service
}

func (o *ordered) Serve(ctx context.Context) error    { return o.svc.Serve(ctx) }
func (o *ordered) Shutdown(ctx context.Context) error { return o.svc.Shutdown(ctx) }

// unwrap returns the Service s is, without StopAfter's mark, and the
// Services it is to stop after.
func unwrap(s Service) (Service, []Service) {
	if o, ok := s.(*ordered); ok {
		return o.svc, o.first
	}
	return s, nil
}

// stopOrder returns Init's Services without StopAfter's marks, and for
// each, the indices of the Services it stops after; or an error naming
// every mistake of the order. No Service of svcs is nil.
func stopOrder(svcs []Service) ([]Service, [][]int, error) {
	plain := make([]Service, len(svcs))
	for i, s := range svcs {
		plain[i], _ = unwrap(s)
	}
	after := make([][]int, len(svcs))
	var errs []error
	for i := range plain {
		for j := i + 1; j < len(plain); j++ {
			if plain[i] != nil && same(plain[i], plain[j]) {
				errs = append(errs, fmt.Errorf("init: services %d and %d are the same %T, returned twice, so it would be served twice and StopAfter's order of one copy would not hold the other: return it once (marked with StopAfter, if it is to stop after others)", i, j, plain[i]))
			}
		}
	}
	for i, s := range svcs {
		_, first := unwrap(s)
		for k, f := range first {
			f, _ = unwrap(f)
			if f == nil {
				errs = append(errs, fmt.Errorf("init: service %d (%T) is to stop after a nil Service (StopAfter's Service %d)", i, plain[i], k+1))
				continue
			}
			found := false
			for j, p := range plain {
				if same(f, p) {
					after[i] = append(after[i], j)
					found = true
				}
			}
			if !found {
				errs = append(errs, fmt.Errorf("init: service %d (%T) is to stop after a %T that isn't among the Services Init returned: return it too, and name it by the same pointer (a Service whose type isn't comparable matches nothing)", i, plain[i], f))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	if cycle := cyclic(after); len(cycle) > 0 {
		names := make([]string, len(cycle))
		for k, i := range cycle {
			names[k] = fmt.Sprintf("service %d (%T)", i, plain[i])
		}
		return nil, nil, fmt.Errorf("init: the stop order has a cycle: %s never get their turn to stop, since each is to stop after one of them (StopAfter), on the cycle or behind it", strings.Join(names, ", "))
	}
	return plain, after, nil
}

// same reports whether a and b are the same Service; a type that isn't
// comparable is the same as nothing.
func same(a, b Service) (eq bool) {
	defer func() {
		if recover() != nil {
			eq = false
		}
	}()
	return a == b
}

// cyclic returns the indices of the Services that never get their turn to
// stop, those on or behind a cycle of after, in order; none when there is
// no cycle.
func cyclic(after [][]int) []int {
	done := make([]bool, len(after))
	for progress := true; progress; {
		progress = false
		for i, deps := range after {
			if !done[i] && !slices.ContainsFunc(deps, func(j int) bool { return !done[j] }) {
				done[i], progress = true, true
			}
		}
	}
	var left []int
	for i, d := range done {
		if !d {
			left = append(left, i)
		}
	}
	return left
}
