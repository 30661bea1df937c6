package jsondiff

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func decode(t *testing.T, s string) any {
	t.Helper()
	v, err := Decode([]byte(s))
	require.NoError(t, err)
	return v
}

func TestEqualComparesNumbersExactly(t *testing.T) {
	require.False(t, Equal(decode(t, `9007199254740993`), decode(t, `9007199254740992`)), "2^53+1 is not 2^53, as float64 would have it")
	require.False(t, Equal(decode(t, `18446744073709551615`), decode(t, `18446744073709551614`)))
	require.True(t, Equal(decode(t, `1`), decode(t, `1.0`)))
	require.True(t, Equal(decode(t, `100`), decode(t, `1e2`)))
	require.True(t, Equal(decode(t, `{"a":[1,"x",true,null]}`), decode(t, `{"a":[1,"x",true,null]}`)))
	require.False(t, Equal(decode(t, `{"a":1}`), decode(t, `{"a":1,"b":2}`)))
	require.False(t, Equal(decode(t, `"1"`), decode(t, `1`)))
}

func TestDecodeRefusesDataAfterTheValue(t *testing.T) {
	_, err := Decode([]byte(`{} {}`))
	require.Error(t, err)
}

func TestPairByKeysAndByIndex(t *testing.T) {
	a := decode(t, `[{"name":"a","x":1},{"name":"b"}]`).([]any)
	b := decode(t, `[{"name":"b"},{"name":"a"}]`).([]any)
	p, ok := Pair(a, b, []string{"name"}, ByIndex)
	require.True(t, ok)
	require.Equal(t, []int{1, 0}, p.AtB)

	_, ok = Pair(a, b[:1], []string{"name"}, ByIndex)
	require.False(t, ok, "not the same elements")
	_, ok = Pair(a, decode(t, `[{"name":"a"},{"name":"a"}]`).([]any), []string{"name"}, ByIndex)
	require.False(t, ok, "two elements with one key")
	_, ok = Pair(a, decode(t, `[{"name":"a"},{"x":1}]`).([]any), []string{"name"}, ByIndex)
	require.False(t, ok, "an element without its key")

	_, ok = Pair(a, b, nil, Whole)
	require.False(t, ok)
	p, ok = Pair(a, b, nil, ByIndex)
	require.True(t, ok)
	require.Equal(t, []int{0, 1}, p.AtB)
	_, ok = Pair(a, b[:1], nil, ByIndex)
	require.False(t, ok)
	p, ok = Pair(b[:1], a, nil, Appended)
	require.True(t, ok)
	require.Equal(t, []int{0}, p.AtB)
}

func TestDiffNamesElementsByKeysAndListsWithoutWhole(t *testing.T) {
	a := decode(t, `{"spec":{"members":[{"name":"a","zone":"z"},{"name":"b"}],"args":["x","y"]}}`)
	b := decode(t, `{"spec":{"members":[{"name":"a"},{"name":"b"}],"args":["x","z"]}}`)
	var got []string
	Diff(a, b, Options{Lists: Whole, ListMapKeys: func(p string) []string {
		if p == "spec.members" {
			return []string{"name"}
		}
		return nil
	}}, func(c Change) { got = append(got, c.Path.String()) })
	require.Equal(t, []string{"spec.args", "spec.members[name=a].zone"}, got)

	got = nil
	Diff(a, b, Options{}, func(c Change) { got = append(got, c.Path.String()) })
	require.Equal(t, []string{"spec.args[1]", "spec.members[0].zone"}, got)

	got = nil
	Diff(decode(t, `{"n":9007199254740993}`), decode(t, `{"n":9007199254740992}`), Options{}, func(c Change) { got = append(got, c.Path.String()) })
	require.Equal(t, []string{"n"}, got)
}

func TestPathForms(t *testing.T) {
	p := Path{"spec", "groups", 0, "members", map[string]any{"name": "b", "port": int64(80)}, "zone"}
	require.Equal(t, "spec.groups[0].members[name=b,port=80].zone", p.String())
	require.Equal(t, "spec.groups[].members[].zone", p.Schema())
	require.Equal(t, "/spec/a~1b~0c", Pointer("/spec", "a/b~c"))
}

func TestDiffNamesAKeyedListOutOfOrderAsAWholeAndElementByElement(t *testing.T) {
	a := decode(t, `{"members":[{"name":"b","zone":"zb"},{"name":"a","zone":"za"}]}`)
	b := decode(t, `{"members":[{"name":"a"},{"name":"b"}]}`)
	byName := Options{Lists: Whole, ListMapKeys: func(p string) []string {
		if p == "members" {
			return []string{"name"}
		}
		return nil
	}}
	var got []string
	Diff(a, b, byName, func(c Change) { got = append(got, c.Path.String()) })
	require.Equal(t, []string{"members", "members[name=b].zone", "members[name=a].zone"}, got,
		"the order's change first, then each element's, in a's order")

	got = nil
	Diff(a, b, Options{Lists: Whole}, func(c Change) { got = append(got, c.Path.String()) })
	require.Equal(t, []string{"members"}, got, "without keys, only the whole")
}
