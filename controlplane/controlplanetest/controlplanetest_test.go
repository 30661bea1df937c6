package controlplanetest_test

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/z5labs/humus/controlplane/controlplanetest"
)

// With HUMUS_TEST_KUBECONFIG set, Start uses that cluster: its Server, TLS
// and Token reach it as a kube.Connection would, and nothing is started.
func TestStartWithKubeconfigConnectsToTheExistingCluster(t *testing.T) {
	const token = "s3cret"
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		w.Write([]byte(`{"gitVersion":"v1.31.0+k3s1"}`))
	}))
	defer srv.Close()

	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["k3s"] = &clientcmdapi.Cluster{
		Server:                   srv.URL,
		CertificateAuthorityData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}),
	}
	cfg.AuthInfos["me"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["k3s"] = &clientcmdapi.Context{Cluster: "k3s", AuthInfo: "me"}
	cfg.CurrentContext = "k3s"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	t.Setenv(controlplanetest.KubeconfigEnv, path)
	t.Setenv("PATH", t.TempDir()) // nothing can be built or started

	c := controlplanetest.Start(t)
	if want := strings.TrimPrefix(srv.URL, "https://"); c.Server != want {
		t.Errorf("Server = %q, want %q", c.Server, want)
	}
	if c.Token != token || c.Kubeconfig != path {
		t.Errorf("Token, Kubeconfig = %q, %q; want %q, %q", c.Token, c.Kubeconfig, token, path)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: c.TLS.Clone()}}
	req, _ := http.NewRequest(http.MethodGet, "https://"+c.Server+"/version", nil)
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET /version with the Cluster's TLS: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /version: %s", resp.Status)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("Stop of an existing cluster: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("Stop removed the user's kubeconfig: %v", err)
	}
}
