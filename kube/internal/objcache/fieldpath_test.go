package objcache

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

type podSpec struct {
	Resources corev1.ResourceRequirements `json:"resources"`
	Ports     []struct {
		Port int32 `json:"port"`
	} `json:"ports,omitempty"`
}

type podObject = object[podSpec, benchStatus]

func TestFieldPathNamesTheFieldAnUnmarshalerRefused(t *testing.T) {
	for _, tc := range []struct {
		raw, want string
	}{
		{`{"spec":{"resources":{"limits":{"memory":"1Gx"}}}}`, "spec.resources.limits.memory"},
		{`{"spec":{"ports":[{"port":1},{"port":"http"}]}}`, "spec.ports[1].port"},
		{`{"SPEC":{"resources":{"requests":{"cpu":"x"}}}}`, "SPEC.resources.requests.cpu"},
		{`{"spec":{"resources":{}}}`, ""},
	} {
		require.Equal(t, tc.want, fieldPath([]byte(tc.raw), reflect.TypeFor[podObject]()), tc.raw)
	}
	var obj podObject
	err := decodeTyped([]byte(`{"spec":{"resources":{"limits":{"memory":"1Gx"}}}}`), &obj)
	require.ErrorContains(t, err, "field spec.resources.limits.memory: quantities must match the regular expression")
}
