package sharding

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestShardOwnerMovesAboutOneNthOnAJoinOrALeave(t *testing.T) {
	const n = 30000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("ns-%d/object-%d", i%7, i)
	}
	three := newView([]string{"pod-a", "pod-b", "pod-c"})
	four := newView([]string{"pod-a", "pod-b", "pod-c", "pod-d"})
	two := newView([]string{"pod-a", "pod-c"})

	share := map[string]int{}
	joined, left := 0, 0
	for _, k := range keys {
		o3, o4, o2 := three.owner(k), four.owner(k), two.owner(k)
		share[o3]++
		if o3 != o4 {
			joined++
			require.Equal(t, "pod-d", o4, "a join moves keys only to the member joining")
		}
		if o3 != o2 {
			left++
			require.Equal(t, "pod-b", o3, "a leave moves only the keys of the member leaving")
		}
	}
	for id, got := range share {
		require.InDelta(t, n/3, got, n/3*0.05, "%s's share of %d keys over 3 members", id, n)
	}
	require.InDelta(t, n/4, joined, n/4*0.05, "a fourth member takes about a quarter")
	require.Equal(t, share["pod-b"], left)
	require.Equal(t, "", newView(nil).owner("k"))
	require.Equal(t, "pod-a,pod-b", newView([]string{"pod-b", "pod-a", "pod-b"}).key)
}
