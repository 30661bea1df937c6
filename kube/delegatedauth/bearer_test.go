package delegatedauth

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBearerReadsTheTokenAsTheAPIServerDoes(t *testing.T) {
	for header, want := range map[string]string{
		"Bearer abc":   "abc",
		"bearer abc":   "abc",
		" Bearer abc ": "abc",
		"Bearer":       "",
		"Bearer ":      "",
		"Bearer  abc":  "",
		"Bearer a b":   "",
		"Basic abc":    "",
		"":             "",
	} {
		require.Equal(t, want, bearer(header), "%q", header)
	}
}
