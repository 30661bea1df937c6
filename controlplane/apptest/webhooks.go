package apptest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/util/retry"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/httpserver"
	"github.com/z5labs/humus/kube/webhookserve"
)

// The resources of the admission webhook configurations, for
// Env.RedirectWebhooks.
var (
	ValidatingWebhookConfigurations = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}
	MutatingWebhookConfigurations   = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}
)

// Webhooks is where a whole-App test's App serves its webhooks: a free
// port of 127.0.0.1, with a serving certificate for 127.0.0.1 signed by a
// CA of the test's own, in files as a mounted kubernetes.io/tls Secret
// holds them. The App serves them with Config (webhookserve.Serve); the
// API server calls them once the CRDs' and webhook configurations'
// clientConfigs point at them (RedirectFile before they are installed,
// Env.RedirectWebhooks after).
type Webhooks struct {
	// Addr is where the webhooks are served, 127.0.0.1:port.
	Addr string
	// CertDir is the absolute path of a directory of the test's holding
	// the serving certificate tls.crt and its key tls.key.
	CertDir string

	ca              *httpserver.Authority
	certPEM, keyPEM []byte
}

// NewWebhooks returns the test's Webhooks: a free address, and a new CA's
// serving certificate for 127.0.0.1, valid for httpserver's default
// validity, in a directory of the test's. It fails the test if the CA
// can't be made.
func NewWebhooks(t testing.TB) *Webhooks {
	t.Helper()
	ca, err := httpserver.NewAuthority(0, "127.0.0.1")
	require.NoError(t, err)
	w := &Webhooks{Addr: controlplanetest.FreeAddr(t), CertDir: t.TempDir(), ca: ca}
	w.certPEM, w.keyPEM = ca.ServingPEM()
	require.NoError(t, os.WriteFile(filepath.Join(w.CertDir, httpserver.CertFile), w.certPEM, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(w.CertDir, httpserver.KeyFile), w.keyPEM, 0o600))
	return w
}

// Config is the webhookserve.Config an App serves w with on a Host whose
// FS is the real one (humus.OSHost): Addr and CertDir.
func (w *Webhooks) Config() webhookserve.Config {
	return webhookserve.Config{Addr: w.Addr, CertDir: w.CertDir}
}

// Mount is the PodOption that mounts w's certificate at mountPath in a
// pod's Host (see Env.Pod), such as webhookserve.DefaultCertDir, which the
// App's Config then names as its CertDir (as WEBHOOK_CERT_DIR, for the
// examples' appconfig).
func (w *Webhooks) Mount(mountPath string) PodOption {
	return Mount(mountPath, map[string][]byte{httpserver.CertFile: w.certPEM, httpserver.KeyFile: w.keyPEM})
}

// CABundle is the PEM of w's CA, a clientConfig's caBundle.
func (w *Webhooks) CABundle() []byte { return w.ca.CABundle() }

// URL is the https URL of the webhook w serves at path, such as
// conversion.Path.
func (w *Webhooks) URL(path string) string { return "https://" + w.Addr + path }

// Redirect points every webhook clientConfig of obj at w, if obj is a
// CustomResourceDefinition converting through a webhook, or a
// ValidatingWebhookConfiguration or MutatingWebhookConfiguration: each
// clientConfig's service (or url) becomes w's URL of the same path (a
// service's path, "/" when it has none), and its caBundle w's CA. Any
// other object is left as it is, and so is the rest of obj. It returns an
// error naming a clientConfig whose url can't be parsed.
func (w *Webhooks) Redirect(obj *unstructured.Unstructured) error {
	var configs [][]string
	switch obj.GetKind() {
	case "CustomResourceDefinition":
		if _, ok, _ := unstructured.NestedMap(obj.Object, "spec", "conversion", "webhook", "clientConfig"); ok {
			configs = append(configs, []string{"spec", "conversion", "webhook", "clientConfig"})
		}
	case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
		hooks, _, _ := unstructured.NestedSlice(obj.Object, "webhooks")
		for i, h := range hooks {
			cc, ok, _ := unstructured.NestedMap(h.(map[string]any), "clientConfig")
			if !ok {
				continue
			}
			p, err := w.redirect(cc)
			if err != nil {
				return fmt.Errorf("apptest: %s %s's webhooks[%d].clientConfig: %w", obj.GetKind(), obj.GetName(), i, err)
			}
			h.(map[string]any)["clientConfig"] = p
			hooks[i] = h
		}
		return unstructured.SetNestedSlice(obj.Object, hooks, "webhooks")
	}
	for _, f := range configs {
		cc, _, _ := unstructured.NestedMap(obj.Object, f...)
		p, err := w.redirect(cc)
		if err != nil {
			return fmt.Errorf("apptest: %s %s's clientConfig: %w", obj.GetKind(), obj.GetName(), err)
		}
		if err := unstructured.SetNestedMap(obj.Object, p, f...); err != nil {
			return err
		}
	}
	return nil
}

// redirect returns the clientConfig cc pointed at w.
func (w *Webhooks) redirect(cc map[string]any) (map[string]any, error) {
	p := "/"
	if svc, ok := cc["service"].(map[string]any); ok {
		if s, ok := svc["path"].(string); ok && s != "" {
			p = s
		}
	} else if s, ok := cc["url"].(string); ok {
		u, err := url.Parse(s)
		if err != nil {
			return nil, err
		}
		if u.Path != "" {
			p = u.Path
		}
	}
	return map[string]any{"url": w.URL(p), "caBundle": base64.StdEncoding.EncodeToString(w.CABundle())}, nil
}

// RedirectFile returns the path of a copy, in a directory of the test's,
// of the YAML (or JSON) file path, whose documents are separated by "---"
// lines, with every object's clientConfigs pointed at w (see Redirect):
// such as the App's CRD or webhook configurations, for
// controlplanetest's Env.InstallCRD or Env.Apply. It fails the test if the
// file can't be read or an object can't be redirected.
func (w *Webhooks) RedirectFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out bytes.Buffer
	for {
		var obj unstructured.Unstructured
		err := dec.Decode(&obj.Object)
		if err != nil {
			require.ErrorIs(t, err, io.EOF, "apptest: reading %s", path)
			break
		}
		if len(obj.Object) == 0 {
			continue
		}
		require.NoError(t, w.Redirect(&obj))
		y, err := sigsyaml.Marshal(obj.Object)
		require.NoError(t, err)
		out.WriteString("---\n")
		out.Write(y)
	}
	p := filepath.Join(t.TempDir(), filepath.Base(path))
	require.NoError(t, os.WriteFile(p, out.Bytes(), 0o600))
	return p
}

// RedirectWebhooks points the clientConfigs of the installed object name
// of the resource gvr (controlplanetest.CRDGVR,
// ValidatingWebhookConfigurations or MutatingWebhookConfigurations) at w
// (see Webhooks.Redirect), updating it. The API server's handlers take the
// new clientConfig up a moment after: a test waits for what the webhook
// does. It fails the test if the object can't be read or updated.
func (e Env) RedirectWebhooks(t testing.TB, w *Webhooks, gvr schema.GroupVersionResource, name string) {
	t.Helper()
	ri := e.Dynamic.Resource(gvr)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := ri.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := w.Redirect(obj); err != nil {
			return err
		}
		_, err = ri.Update(context.Background(), obj, metav1.UpdateOptions{})
		return err
	})
	require.NoError(t, err, "apptest: pointing %s %s's webhooks at %s", gvr.Resource, name, w.Addr)
}

// WaitServing waits until the App serves w: a TLS handshake with w.Addr,
// trusting only w's CA, succeeds. It fails the test after 30s.
func (w *Webhooks) WaitServing(t testing.TB) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(w.CABundle())
	d := &tls.Dialer{NetDialer: &net.Dialer{}, Config: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}}
	controlplanetest.Eventually(t, 30*time.Second, "the webhooks to be served on "+w.Addr, func(ctx context.Context) (bool, error) {
		c, err := d.DialContext(ctx, "tcp", w.Addr)
		if err != nil {
			return false, nil
		}
		return true, c.Close()
	})
}
