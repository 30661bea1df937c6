package conversion

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"

	metafuzzer "k8s.io/apimachinery/pkg/apis/meta/fuzzer"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/randfill"

	"github.com/z5labs/humus/kube/internal/jsondiff"
)

// RoundTripOptions tunes RoundTrip. The zero value is usable.
type RoundTripOptions struct {
	// Iterations is how many fuzzed objects each spoke and the hub are
	// converted, per spoke and direction. Zero means 100.
	Iterations int
	// Seed seeds the fuzzer, so that a failure repeats; RoundTrip's error
	// names it. Zero means 1.
	Seed int64
	// Funcs are randfill custom fill functions, each a
	// func(*T, randfill.Continue), that make the fuzzed objects valid where
	// random values are not (a cron schedule, a value a webhook or the
	// schema would refuse): a conversion may fail, or lose information, on
	// an object the API server never stores. They come after, and so win
	// over, apimachinery's fill functions for metav1's types
	// (k8s.io/apimachinery/pkg/apis/meta/fuzzer), which RoundTrip always
	// uses, as apimachinery's own round-trip tests do.
	Funcs []any
}

// maxDiffs is how many differing paths a RoundTrip error names per object.
const maxDiffs = 5

// RoundTrip checks k's conversions in both directions, for every spoke:
// fuzzed objects of the spoke (sigs.k8s.io/randfill, as apimachinery's
// round-trip tests fill them) converted to the hub and back, and fuzzed
// objects of the hub converted to the spoke and back, must come back equal,
// compared as JSON (what the API server stores and serves), apiVersion and
// kind aside, which the Handler sets. Numbers are compared exactly, as
// their JSON text's values, never as float64: an int64 above 2^53 that
// came back rounded (through a float64 field, say) is a difference, as it
// is on the wire. A null and an absent field are alike; lists are
// compared element by element, by index, when they have one length, and
// whole otherwise (internal/jsondiff's rules, which Preserving and
// package admission's patch share). It calls the functions k's Handler
// serves, so what is tested is what is served, and is meant for a unit
// test:
//
//	require.NoError(t, conversion.RoundTrip(widgets, conversion.RoundTripOptions{}))
//
// Objects are filled with a nil chance of 0.2, up to two elements in each
// list and map, and to a depth of 12 fields.
//
// Each object is first encoded and decoded as JSON, as the Handler decodes
// it, so that what JSON does not carry (an unexported field, a field
// tagged "-") is not counted as lost.
//
// The error names, for the first object that failed in each spoke and
// direction, its seed and iteration, the first differing JSON paths (such
// as spec.schedule.minute or status.conditions[0].reason) with both
// values, or the error or panic of a conversion; and every mistake in k as
// Handler names it. A field one version lacks fails the round trip through
// that version unless the conversions keep it (see Preserving).
//
// A conversion that returns an error on an object its version's schema
// admits fails the API server's write of that object with a 500 from the
// webhook: when a version can hold what the hub can't (a value out of the
// hub's range, a form it can't parse), refuse it at admission with a CEL
// rule on that version's types, and give Funcs fill functions that make
// only what the rule admits, so RoundTrip proves each admitted object
// converts.
//
// RoundTrip does not import package testing, so that a test fails with its
// error the way it prefers.
func RoundTrip[H any](k Kind[H], o RoundTripOptions) error {
	c, err := k.compile()
	if err != nil {
		return prefixed(fmt.Sprintf("conversion: RoundTrip of %s: ", c.gk), err)
	}
	if o.Iterations <= 0 {
		o.Iterations = 100
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	funcs := append(slices.Clone(metafuzzer.Funcs(serializer.NewCodecFactory(runtime.NewScheme()))), o.Funcs...)
	var errs []error
	for _, name := range c.versions[1:] {
		v := c.spokes[name]
		f := randfill.NewWithSeed(o.Seed).NilChance(0.2).NumElements(0, 2).MaxDepth(12).Funcs(funcs...)
		for i := range o.Iterations {
			if err := roundTrip(v.newObject, c.newHub, f, v.toHub, v.fromHub); err != nil {
				errs = append(errs, fmt.Errorf("conversion: %s %s → hub %s → %s (seed %d, iteration %d): %w", c.gk, name, c.hub, name, o.Seed, i, err))
				break
			}
		}
		f = randfill.NewWithSeed(o.Seed).NilChance(0.2).NumElements(0, 2).MaxDepth(12).Funcs(funcs...)
		for i := range o.Iterations {
			if err := roundTrip(c.newHub, v.newObject, f, v.fromHub, v.toHub); err != nil {
				errs = append(errs, fmt.Errorf("conversion: %s hub %s → %s → hub %s (seed %d, iteration %d): %w", c.gk, c.hub, name, c.hub, o.Seed, i, err))
				break
			}
		}
	}
	return errors.Join(errs...)
}

// roundTrip fills a new object of newSrc's, converts it with there into a
// new object of newMid's and back with back, and returns an error naming
// where the result differs from what it was filled with.
func roundTrip(newSrc, newMid func() any, f *randfill.Filler, there, back convertFunc) error {
	filled := newSrc()
	f.Fill(filled)
	before, err := json.Marshal(filled)
	if err != nil {
		return fmt.Errorf("encoding the fuzzed object: %w (add a fill function to Funcs making it valid)", err)
	}
	src := newSrc()
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(before, src); err != nil {
		return fmt.Errorf("decoding the fuzzed object: %w", err)
	}
	mid := newMid()
	if err := callSafe(there, src, mid); err != nil {
		return fmt.Errorf("there: %w", err)
	}
	out := newSrc()
	if err := callSafe(back, mid, out); err != nil {
		return fmt.Errorf("back: %w", err)
	}
	after, err := json.Marshal(out)
	if err != nil {
		return fmt.Errorf("encoding the result: %w", err)
	}
	// Decoded with exact numbers: an int64 above 2^53 that came back
	// rounded is a difference, as it is on the wire.
	a, err := jsondiff.Decode(before)
	if err != nil {
		return err
	}
	b, err := jsondiff.Decode(after)
	if err != nil {
		return err
	}
	for _, m := range []any{a, b} {
		if m, ok := m.(map[string]any); ok {
			delete(m, "apiVersion")
			delete(m, "kind")
		}
	}
	var diffs []string
	// An absent map is compared as an empty one, so that a lost key is
	// named rather than its map; a null is absent.
	jsondiff.Diff(a, b, jsondiff.Options{Lists: jsondiff.ByIndex, AbsentAsEmpty: true, NullAsAbsent: true}, func(c jsondiff.Change) {
		diffs = append(diffs, fmt.Sprintf("%s: sent %s, got %s", c.Path, short(c.A, c.AOK), short(c.B, c.BOK)))
	})
	if len(diffs) == 0 {
		return nil
	}
	more := ""
	if len(diffs) > maxDiffs {
		more = fmt.Sprintf(", and %d more", len(diffs)-maxDiffs)
		diffs = diffs[:maxDiffs]
	}
	return fmt.Errorf("came back different at %s%s", strings.Join(diffs, "; "), more)
}

// callSafe calls f, returning a panic in it as an error.
func callSafe(f convertFunc, src, dst any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return f(src, dst)
}

// short returns v as JSON, cut to 80 bytes; absent for a missing value.
func short(v any, ok bool) string {
	if !ok || v == nil {
		return "absent"
	}
	b, _ := json.Marshal(v)
	if len(b) > 80 {
		return string(b[:77]) + "..."
	}
	return string(b)
}
