package objcache

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/stretchr/testify/require"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/randfill"
)

// decodeBoth decodes raw into a new value of T with decodeJSON and with
// encoding/json, and fails t unless both give the same value, or both an
// error.
func decodeBoth[T any](t *testing.T, raw []byte) {
	t.Helper()
	var got, want T
	errGot := decodeTyped(raw, &got)
	errWant := json.Unmarshal(raw, &want)
	if (errGot == nil) != (errWant == nil) {
		t.Fatalf("decodeJSON(%.200q) = %v; encoding/json: %v", raw, errGot, errWant)
	}
	if errGot == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeJSON(%.200q) = %+v; encoding/json decodes %+v", raw, got, want)
	}
}

// TestDecodeJSONAgreesWithEncodingJSON decodes random objects of the
// controller's and Kubernetes' own types, as randfill fills them and
// encoding/json encodes them, with decodeJSON's fast decoder and with
// encoding/json, and requires the same values.
func TestDecodeJSONAgreesWithEncodingJSON(t *testing.T) {
	f := randfill.NewWithSeed(1).NilChance(0.2).NumElements(0, 3).MaxDepth(12)
	agree := func(name string, fill func() any, decode func(*testing.T, []byte)) {
		t.Run(name, func(t *testing.T) {
			for range 200 {
				v := fill()
				raw, err := json.Marshal(v)
				if err != nil {
					continue // a random value that doesn't encode (an invalid Quantity)
				}
				decode(t, raw)
			}
		})
	}
	agree("Object", func() any { var o benchObject; f.Fill(&o); return o }, decodeBoth[benchObject])
	agree("Memcached", func() any { var o object[benchMemcachedSpec, benchMemcachedStatus]; f.Fill(&o); return o }, decodeBoth[object[benchMemcachedSpec, benchMemcachedStatus]])
	agree("PodTemplateSpec", func() any { var o corev1.PodTemplateSpec; f.Fill(&o); return o }, decodeBoth[corev1.PodTemplateSpec])
	agree("Deployment", func() any { var o appsv1.Deployment; f.Fill(&o); return o }, decodeBoth[appsv1.Deployment])
}

// TestDecodeJSONErrorsAreEncodingJSONs shows that on bad input decodeJSON
// returns encoding/json's error, with the field path.
func TestDecodeJSONErrorsAreEncodingJSONs(t *testing.T) {
	for _, c := range []struct{ raw, want string }{
		{`{"spec":{"replicas":1099511627776}}`, "field spec.replicas: a JSON number 1099511627776 doesn't fit a Go int32"},
		{`{"spec":{"replicas":1.5}}`, "field spec.replicas: a JSON number 1.5 doesn't fit a Go int32"},
		{`{"spec":{"replicas":"3"}}`, "field spec.replicas: a JSON string doesn't fit a Go int32"},
		{`{"spec":{"env":{}}}`, "field spec.env: a JSON object doesn't fit a Go []objcache.benchEnv"},
	} {
		var obj benchObject
		if err := decodeTyped([]byte(c.raw), &obj); err == nil || err.Error() != c.want {
			t.Errorf("decodeJSON(%s) = %v, want %q", c.raw, err, c.want)
		}
	}
	var notAPointer benchObject
	if err := decodeTyped([]byte(`{}`), notAPointer); err == nil {
		t.Error("decodeJSON into a non-pointer succeeded")
	}
}

// FuzzDecodeJSON holds decodeJSON to encoding/json's result, into an
// object with integers of every width and strings in fields, maps and
// slices, on two inputs: the fuzzer's valid JSON as is (a number or a
// string a preserve-unknown-fields or int-or-string schema lets through
// reaches the cache as the API server wrote it), and as encoding/json
// re-encodes what it decodes of it (the cache's JSON when NewObject
// made it). Keys are the type's JSON names: an input with a key that
// differs from a field's name only in case is skipped, as encoding/json
// matches it and the fast decoder may not, and a structural schema lets no
// such key through. Invalid JSON is skipped: the cache never holds it, and
// the fast decoder skips an unknown field without checking its syntax.
// `go test` runs the seeds; `go test -fuzz FuzzDecodeJSON` searches.
func FuzzDecodeJSON(f *testing.F) {
	for _, seed := range []string{
		`{"metadata":{"name":"a","labels":{"x":"y"}},"spec":{"image":"i","replicas":3,"env":[{"name":"A","value":"1"}]}}`,
		`{"spec":{"replicas":-1}}`, `{"spec":{"replicas":1e3}}`, `{"Spec":{"Replicas":2}}`,
		`{"status":{"conditions":[{"type":"Ready","lastTransitionTime":"2026-12-01T00:00:00Z"}]}}`,
		`{"status":{"conditions":[{"lastTransitionTime":"yesterday"}]}}`, `{"spec":null}`, `[]`, `{"spec":{"resources":{"cpu":1}}}`,
		"{\"spec\":{\"image\":\"\xff\"}}", `{"spec":{"image":"\ud800"}}`, `{"a":1} trailing`,
		`{"spec":{"count":9223372036854775807,"size":18446744073709551615,"small":-2147483648,"byte":255}}`,
		`{"spec":{"count":-9223372036854775808,"n":1,"u":2,"ptr":3}}`,
		`{"spec":{"counts":{"a":1,"b":-2},"sizes":[0,1,2]}}`,
		"{\"spec\":{\"labels\":{\"k\xc3\":\"v\"}}}", `{"metadata":{"generation":12345678901234567}}`,
		`{"spec":{"count":9223372036854775808,"sizes":[18446744073709551616]}}`,
	} {
		f.Add([]byte(seed))
	}
	names := jsonNames(reflect.TypeFor[fuzzObject](), map[string]bool{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) || hasCaseVariantKey(raw, names) {
			return
		}
		decodeBoth[fuzzObject](t, raw)
		var v fuzzObject
		if json.Unmarshal(raw, &v) != nil {
			return
		}
		canonical, err := json.Marshal(v)
		if err != nil {
			return
		}
		decodeBoth[fuzzObject](t, canonical)
	})
}

// jsonNames adds to names the JSON names of t's fields, and of the fields
// of the types it holds, and returns names.
func jsonNames(t reflect.Type, names map[string]bool) map[string]bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		return jsonNames(t.Elem(), names)
	case reflect.Struct:
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" {
				name = f.Name
			}
			if !names[name] {
				names[name] = true
				jsonNames(f.Type, names)
			}
		}
	}
	return names
}

// hasCaseVariantKey reports whether the valid JSON raw has an object key
// (or string: the decoder doesn't tell them apart) that is not one of
// names but equals one of them but for case.
func hasCaseVariantKey(raw []byte, names map[string]bool) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		key, ok := tok.(string)
		if !ok || names[key] {
			continue
		}
		for name := range names {
			if strings.EqualFold(key, name) {
				return true
			}
		}
	}
}

// decodeTyped is decodeJSON as the controller calls it: fast where the
// type allows.
func decodeTyped(raw []byte, obj any) error {
	return decodeJSON(raw, obj, fastDecodable(reflect.TypeOf(obj), map[reflect.Type]bool{}))
}

// TestANumberTooLargeForAFloatIsAnError shows a float32 field given 1e39
// (which go-json decodes as +Inf, without an error) refused as
// encoding/json refuses it, and which types take the fast decoder.
func TestANumberTooLargeForAFloatIsAnError(t *testing.T) {
	type status struct {
		Seen  float32 `json:"seen"`
		Ratio float64 `json:"ratio"`
	}
	var st status
	err := decodeTyped([]byte(`{"seen":1e39}`), &st)
	require.ErrorContains(t, err, "field seen: a JSON number 1e39 doesn't fit a Go float32")
	require.Error(t, decodeTyped([]byte(`{"ratio":1e400}`), &st))
	for _, c := range []struct {
		v    any
		fast bool
	}{
		{benchObject{}, true}, {corev1.PodTemplateSpec{}, true}, {appsv1.Deployment{}, true},
		{status{}, false}, {struct{ A []map[string]any }{}, false}, {struct{ A *struct{ B [2]float64 } }{}, false},
	} {
		v, fast := c.v, c.fast
		require.Equal(t, fast, fastDecodable(reflect.TypeOf(v), map[reflect.Type]bool{}), "fastDecodable(%T)", v)
	}
}

// fuzzSpec is a spec with every integer width and string place a
// preserve-unknown-fields or int-or-string schema lets any JSON number or
// string into: fields, map keys and values, slice elements.
type fuzzSpec struct {
	benchSpec
	Count  int64             `json:"count,omitempty"`
	Size   uint64            `json:"size,omitempty"`
	N      int               `json:"n,omitempty"`
	U      uint              `json:"u,omitempty"`
	Small  int32             `json:"small,omitempty"`
	Byte   uint8             `json:"byte,omitempty"`
	Counts map[string]int64  `json:"counts,omitempty"`
	Sizes  []uint64          `json:"sizes,omitempty"`
	Ptr    *int64            `json:"ptr,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
}

type fuzzObject = object[fuzzSpec, benchStatus]

// TestOutOfRangeIntegersAndInvalidUTF8DecodeAsEncodingJSONDoes shows a
// number that overflows an int64 or a uint64 by a little (which go-json
// wraps without an error), in a field, a map value or a slice element, an
// error as encoding/json makes it, and invalid UTF-8 (which go-json keeps)
// made U+FFFD as encoding/json makes it.
func TestOutOfRangeIntegersAndInvalidUTF8DecodeAsEncodingJSONDoes(t *testing.T) {
	for _, raw := range []string{
		`{"spec":{"count":9223372036854775808}}`,
		`{"spec":{"count":-9223372036854775809}}`,
		`{"spec":{"size":18446744073709551616}}`,
		`{"spec":{"n":9223372036854775808}}`,
		`{"spec":{"u":18446744073709551617}}`,
		`{"spec":{"ptr":9999999999999999999}}`,
		`{"spec":{"counts":{"a":9223372036854775808}}}`,
		`{"spec":{"sizes":[1,18446744073709551616]}}`,
		`{"metadata":{"generation":9223372036854775808}}`,
	} {
		var obj fuzzObject
		err := decodeTyped([]byte(raw), &obj)
		require.Error(t, err, "decodeJSON(%s) = %+v", raw, obj.Spec)
		require.ErrorContains(t, err, "doesn't fit a Go")
	}
	for _, raw := range []string{
		"{\"spec\":{\"image\":\"a\xffb\"}}",
		"{\"spec\":{\"labels\":{\"k\xc3\":\"v\xed\xa0\x80\"}}}",
		"{\"metadata\":{\"name\":\"\xf0\x9f\"}}",
	} {
		decodeBoth[fuzzObject](t, []byte(raw))
	}
	var obj fuzzObject
	require.NoError(t, decodeTyped([]byte(`{"spec":{"count":-9223372036854775808,"size":18446744073709551615,"image":"123456789012345678901234"}}`), &obj))
	require.Equal(t, fuzzSpec{Count: -1 << 63, Size: 1<<64 - 1, benchSpec: benchSpec{Image: "123456789012345678901234"}}, obj.Spec)
	require.True(t, fastDecodable(reflect.TypeFor[fuzzObject](), map[reflect.Type]bool{}))
}

// TestFastJSONFindsEveryLongRunOfDigits holds fastJSON's strided read to
// the plain one: a run of more than maxFastDigits digits anywhere, and
// only such a run or invalid UTF-8, sends the JSON to encoding/json.
func TestFastJSONFindsEveryLongRunOfDigits(t *testing.T) {
	for n := range 60 {
		for run := maxFastDigits - 1; run <= maxFastDigits+2; run++ {
			for at := 0; at+run <= n; at++ {
				b := bytes.Repeat([]byte{'x'}, n)
				copy(b[at:], strings.Repeat("7", run))
				require.Equal(t, run <= maxFastDigits, fastJSON(b), "%q", b)
			}
		}
	}
	require.True(t, fastJSON([]byte(`{"a":"é","n":123456789012345678}`)))
	require.False(t, fastJSON([]byte("{\"a\":\"\xe9\"}")))
}

// BenchmarkFastJSON measures fastJSON, the check that lets a decode take
// go-json, on a 4 KiB object's JSON, beside the fast decode itself.
func BenchmarkFastJSON(b *testing.B) {
	var o benchObject
	o.Name, o.Namespace, o.ResourceVersion = "w1", "default", "123456"
	for i := range 60 {
		o.Spec.Env = append(o.Spec.Env, benchEnv{Name: fmt.Sprintf("VARIABLE_%02d", i), Value: fmt.Sprintf("value-%d", i*7919)})
	}
	raw, err := json.Marshal(o)
	require.NoError(b, err)
	b.Run("check", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			if !fastJSON(raw) {
				b.Fatal("not fastJSON")
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			var v benchObject
			if err := decodeJSON(raw, &v, true); err != nil {
				b.Fatal(err)
			}
		}
	})
}
