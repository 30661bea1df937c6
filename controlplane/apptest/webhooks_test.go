package apptest_test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/z5labs/humus/controlplane/apptest"
	"github.com/z5labs/humus/kube/webhookserve"
)

const files = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: memcacheds.cache.example.com
spec:
  group: cache.example.com
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: ["v1"]
      clientConfig:
        service: {namespace: memcached-system, name: memcached-webhooks, path: /convert}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: memcached
webhooks:
- name: validate.cache.example.com
  clientConfig:
    service: {namespace: memcached-system, name: memcached-webhooks, path: /validate}
- name: other.cache.example.com
  clientConfig:
    url: https://somewhere.example.com:8443/other
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: left
data:
  url: https://somewhere.example.com
`

// RedirectFile points a CRD's conversion and each webhook of a
// configuration at the test's webhooks, keeping each path, with the
// test's CA; any other object is left as it is.
func TestRedirectFilePointsEveryClientConfigAtTheTestsWebhooks(t *testing.T) {
	w := apptest.NewWebhooks(t)
	in := filepath.Join(t.TempDir(), "deploy.yaml")
	require.NoError(t, os.WriteFile(in, []byte(files), 0o600))
	b, err := os.ReadFile(w.RedirectFile(t, in))
	require.NoError(t, err)
	var objs []*unstructured.Unstructured
	for _, doc := range splitDocs(string(b)) {
		var u unstructured.Unstructured
		require.NoError(t, yaml.Unmarshal([]byte(doc), &u.Object))
		objs = append(objs, &u)
	}
	require.Len(t, objs, 3)
	ca := base64.StdEncoding.EncodeToString(w.CABundle())
	want := func(p string) map[string]any { return map[string]any{"url": "https://" + w.Addr + p, "caBundle": ca} }

	cc, _, _ := unstructured.NestedMap(objs[0].Object, "spec", "conversion", "webhook", "clientConfig")
	require.Equal(t, want("/convert"), cc)
	strategy, _, _ := unstructured.NestedString(objs[0].Object, "spec", "conversion", "strategy")
	require.Equal(t, "Webhook", strategy, "the rest kept")

	hooks, _, _ := unstructured.NestedSlice(objs[1].Object, "webhooks")
	require.Len(t, hooks, 2)
	require.Equal(t, want("/validate"), hooks[0].(map[string]any)["clientConfig"])
	require.Equal(t, want("/other"), hooks[1].(map[string]any)["clientConfig"])
	require.Equal(t, "validate.cache.example.com", hooks[0].(map[string]any)["name"])

	data, _, _ := unstructured.NestedStringMap(objs[2].Object, "data")
	require.Equal(t, map[string]string{"url": "https://somewhere.example.com"}, data)

	require.Equal(t, webhookserve.Config{Addr: w.Addr, CertDir: w.CertDir}, w.Config())
	require.NoError(t, w.Config().Check(), "an absolute CertDir, as webhookserve requires")
	_, err = os.Stat(filepath.Join(w.CertDir, "tls.crt"))
	require.NoError(t, err)
}

func splitDocs(s string) []string {
	var docs []string
	for _, d := range strings.Split(s, "---\n") {
		if len(d) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}
