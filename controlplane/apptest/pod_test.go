package apptest

import (
	"io/fs"
	"net/http"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/kube/webhookserve"
)

// A pod's Host holds the files a volume mounts beside the service
// account's, so an App run as in a pod finds its webhooks' certificate
// at the CertDir the deploy files mount it at.
func TestAPodMountsTheWebhooksCertificate(t *testing.T) {
	w := NewWebhooks(t)
	p := podHost{fs: fstest.MapFS{}, env: map[string]string{EnvPodName: "app-0"}}
	for _, o := range []PodOption{w.Mount(webhookserve.DefaultCertDir + "/"), PodEnv(map[string]string{"WEBHOOK_CERT_DIR": webhookserve.DefaultCertDir})} {
		o(&p)
	}
	require.Equal(t, map[string]string{EnvPodName: "app-0", "WEBHOOK_CERT_DIR": webhookserve.DefaultCertDir}, p.env)
	crt, err := fs.ReadFile(p.fs, "tmp/k8s-webhook-server/serving-certs/tls.crt")
	require.NoError(t, err)
	require.Equal(t, w.certPEM, crt)

	h := humus.OSHost()
	h.FS = p.fs
	svcs, err := webhookserve.Serve(&humus.Setup{Host: h}, nil, webhookserve.Config{Addr: "127.0.0.1:0", CertDir: webhookserve.DefaultCertDir}, http.NewServeMux())
	require.NoError(t, err, "the mounted certificate is read")
	require.Len(t, svcs, 1)
}
