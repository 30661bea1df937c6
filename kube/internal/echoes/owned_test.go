package echoes

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// widgetOwns are a Widget controller's Owns of ConfigMaps and Deployments.
func widgetOwns() []Owned {
	return []Owned{
		{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}},
		{GVR: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}},
	}
}

func TestOwnedWriteReadsTheAPIServersPaths(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		want         string // the key, or "" for no owned write; "POST" for a POST to a namespace
	}{
		{http.MethodPatch, "/api/v1/namespaces/team-a/configmaps/w1", OwnedKey("team-a/w1", schema.GroupResource{Resource: "configmaps"}, "team-a", "w1")},
		{http.MethodPut, "/api/v1/namespaces/team-a/configmaps/w1/status", OwnedKey("team-a/w1", schema.GroupResource{Resource: "configmaps"}, "team-a", "w1")},
		{http.MethodPatch, "/apis/apps/v1/namespaces/team-a/deployments/w1", OwnedKey("team-a/w1", schema.GroupResource{Group: "apps", Resource: "deployments"}, "team-a", "w1")},
		{http.MethodPatch, "/prefix/apis/apps/v2/namespaces/team-a/deployments/w1", OwnedKey("team-a/w1", schema.GroupResource{Group: "apps", Resource: "deployments"}, "team-a", "w1")},
		{http.MethodPost, "/api/v1/namespaces/team-a/configmaps", "POST"},
		{http.MethodPatch, "/apis/apps/v1/namespaces/team-a/deployments/w1/scale", OwnedKey("team-a/w1", schema.GroupResource{Group: "apps", Resource: "deployments"}, "team-a", "w1")},
		{http.MethodPut, "/apis/apps/v1/namespaces/team-a/deployments/w1/scale", OwnedKey("team-a/w1", schema.GroupResource{Group: "apps", Resource: "deployments"}, "team-a", "w1")},
		{http.MethodPost, "/api/v1/namespaces/team-a/configmaps/w1/status", OwnedKey("team-a/w1", schema.GroupResource{Resource: "configmaps"}, "team-a", "w1")},
		{http.MethodPatch, "/api/v1/namespaces/team-a/configmaps/w1/status/extra", ""},
		{http.MethodPatch, "/api/v1/namespaces/team-a/secrets/w1", ""},
		{http.MethodPatch, "/apis/extensions.example.com/v1/namespaces/team-a/deployments/w1", ""},
		{http.MethodPatch, "/api/v1/namespaces/team-a/configmaps", ""},
		{http.MethodPost, "/api/v1/namespaces/team-a/configmaps/w1", ""},
		{http.MethodPatch, "/version", ""},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			w, ok := OwnedWriteOf("team-a/w1", &http.Request{Method: tc.method, URL: &url.URL{Path: tc.path}}, widgetOwns())
			switch tc.want {
			case "":
				require.False(t, ok)
			case "POST":
				require.True(t, ok)
				require.Empty(t, w.Name)
				require.Equal(t, "team-a", w.Namespace)
			default:
				require.True(t, ok)
				require.Equal(t, tc.want, w.Key(w.Name))
			}
		})
	}
}
