package webhookcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	extfake "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/httpserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const crdName = "gizmos.conversion.example.com"

// crd is a CRD converting through a webhook at a URL, with no caBundle.
func crd() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: crdName},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "conversion.example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Gizmo", Plural: "gizmos"},
			Conversion: &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{ConversionReviewVersions: []string{"v1"},
					ClientConfig: &apiextensionsv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:9443/convert")}},
			},
		},
	}
}

// config is a valid Config of the Secret gizmo-webhook-cert in "system".
func config() Config {
	return Config{Namespace: "system", Secret: "gizmo-webhook-cert", Hosts: []string{"gizmo-webhooks.system.svc"}, CRDs: []string{crdName}}
}

// fakes returns Certs of cfg on client-go's fake clientsets, the CRD
// objects given to the apiextensions one.
func fakes(t *testing.T, cfg Config, crds ...runtime.Object) (*Certs, *fake.Clientset, *extfake.Clientset) {
	t.Helper()
	cfg = cfg.withDefaults()
	require.NoError(t, cfg.check())
	kc := fake.NewClientset()
	ext := extfake.NewClientset(crds...)
	return newCerts(humus.Telemetry{}, kc, ext, cfg), kc, ext
}

func served(t *testing.T, c *Certs) []byte {
	t.Helper()
	cert, err := c.GetCertificate(&tls.ClientHelloInfo{})
	require.NoError(t, err)
	return cert.Certificate[0]
}

func secret(t *testing.T, kc *fake.Clientset) *corev1.Secret {
	t.Helper()
	sec, err := kc.CoreV1().Secrets("system").Get(context.Background(), "gizmo-webhook-cert", metav1.GetOptions{})
	require.NoError(t, err)
	return sec
}

func caBundle(t *testing.T, ext *extfake.Clientset) []byte {
	t.Helper()
	got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(context.Background(), crdName, metav1.GetOptions{})
	require.NoError(t, err)
	return got.Spec.Conversion.Webhook.ClientConfig.CABundle
}

// certs returns the certificates of a PEM bundle.
func certs(t *testing.T, bundle []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for {
		var b *pem.Block
		if b, bundle = pem.Decode(bundle); b == nil {
			return out
		}
		c, err := x509.ParseCertificate(b.Bytes)
		require.NoError(t, err)
		out = append(out, c)
	}
}

func TestNewNamesEveryMistake(t *testing.T) {
	_, err := New(nil, nil, Config{Namespace: "Not_A_Label", Hosts: []string{""}, CRDs: []string{"UPPER"},
		Validity: time.Minute, CheckInterval: -time.Second})
	require.Error(t, err)
	for _, want := range []string{
		"nil Setup", "nil Client", `Config.Namespace "Not_A_Label" is no valid name`, "Config.Secret is required",
		"Config.Hosts[0] is empty", `Config.CRDs[0] "UPPER"`, "Config.Validity 1m0s is under 3m", "Config.CheckInterval -1s is not positive",
	} {
		require.ErrorContains(t, err, want)
	}
	cfg := config()
	cfg.RenewBefore = 5 * time.Second
	require.ErrorContains(t, cfg.withDefaults().check(), "Config.CheckInterval 1m0s and Propagation 10s are not under Config.RenewBefore 5s")
}

func TestBeforeTheFirstCheckNoHandshakeSucceeds(t *testing.T) {
	c, _, _ := fakes(t, config(), crd())
	_, err := c.GetCertificate(&tls.ClientHelloInfo{})
	require.ErrorContains(t, err, "no certificate yet")
	require.Error(t, c.Healthy(context.Background()))
	require.Nil(t, c.CABundle())
}

// The first check creates the Secret, gives the CRD its CA, and serves a
// certificate for the hosts that CA signed; a second writes nothing.
func TestCheckCreatesTheSecretAndInjectsItsCA(t *testing.T) {
	c, kc, ext := fakes(t, config(), crd())
	ctx := context.Background()
	wait, err := c.Check(ctx)
	require.NoError(t, err)
	require.Equal(t, DefaultCheckInterval, wait)
	require.NoError(t, c.Healthy(ctx))

	sec := secret(t, kc)
	require.Equal(t, corev1.SecretTypeTLS, sec.Type)
	require.Equal(t, sec.Data[corev1.TLSCertKey], pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: served(t, c)}))
	require.Equal(t, sec.Data[CAKey], caBundle(t, ext))
	require.Equal(t, sec.Data[CAKey], c.CABundle())
	leaf, err := x509.ParseCertificate(served(t, c))
	require.NoError(t, err)
	require.Equal(t, []string{"gizmo-webhooks.system.svc"}, leaf.DNSNames)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caBundle(t, ext)))
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "gizmo-webhooks.system.svc"})
	require.NoError(t, err, "the caBundle trusts the certificate served")
	require.Equal(t, "https://127.0.0.1:9443/convert", ptr.Deref(mustCRD(t, ext).Spec.Conversion.Webhook.ClientConfig.URL, ""))

	kc.ClearActions()
	ext.ClearActions()
	_, err = c.Check(ctx)
	require.NoError(t, err)
	for _, a := range append(kc.Actions(), ext.Actions()...) {
		require.Equal(t, "get", a.GetVerb(), "a check that finds everything right only reads: %v", a)
	}
}

func mustCRD(t *testing.T, ext *extfake.Clientset) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(context.Background(), crdName, metav1.GetOptions{})
	require.NoError(t, err)
	return got
}

// shortLived returns Certs on fakes, as fakes does, whose certificates are
// valid 3 minutes and due for renewal 5 seconds after they are made, with
// a CheckInterval of a second, checked once: the Secret created, its CA
// injected.
func shortLived(t *testing.T) (*Certs, *fake.Clientset, *extfake.Clientset) {
	t.Helper()
	cfg := config()
	cfg.Validity, cfg.RenewBefore, cfg.CheckInterval = 3*time.Minute, 3*time.Minute-5*time.Second, time.Second
	c, kc, ext := fakes(t, cfg, crd())
	_, err := c.Check(context.Background())
	require.NoError(t, err)
	return c, kc, ext
}

// A renewal is made in two steps: the next certificate's CA joins the
// caBundle, and the next certificate is served only Propagation after;
// the old CA stays in the bundle until it expires.
func TestARenewalIsServedOnlyPropagationAfterItsCAIsTrusted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, kc, ext := shortLived(t)
		ctx := context.Background()
		first := served(t, c)
		require.Len(t, certs(t, caBundle(t, ext)), 1)

		time.Sleep(6 * time.Second) // due
		_, err := c.Check(ctx)
		require.NoError(t, err)
		sec := secret(t, kc)
		require.NotEmpty(t, sec.Data[NextCertKey], "the next certificate is kept beside the current")
		require.Len(t, certs(t, caBundle(t, ext)), 2, "the next CA joins the caBundle")
		require.Equal(t, first, served(t, c), "and the current certificate is still served")

		time.Sleep(Propagation - time.Second)
		wait, err := c.Check(ctx)
		require.NoError(t, err)
		require.Equal(t, first, served(t, c), "not before Propagation")
		require.Equal(t, time.Second, wait)

		time.Sleep(time.Second)
		_, err = c.Check(ctx)
		require.NoError(t, err)
		sec = secret(t, kc)
		require.Empty(t, sec.Data[NextCertKey])
		require.NotEqual(t, first, served(t, c), "the next certificate, served")
		require.Equal(t, sec.Data[corev1.TLSCertKey], pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: served(t, c)}))
		require.Len(t, certs(t, caBundle(t, ext)), 2, "the old CA is kept until it expires")

		// An expired CA leaves the bundle at the next renewal.
		time.Sleep(3 * time.Minute)
		for range 3 {
			_, err = c.Check(ctx)
			require.NoError(t, err)
			time.Sleep(Propagation)
		}
		for _, ca := range certs(t, caBundle(t, ext)) {
			require.True(t, time.Now().Before(ca.NotAfter), "an expired CA in the bundle: %v", ca.NotAfter)
		}
	})
}

// Two replicas create the Secret at once: the one that loses reads the
// winner's and serves its certificate.
func TestAReplicaThatLosesTheCreateServesTheWinnersCertificate(t *testing.T) {
	c, kc, _ := fakes(t, config(), crd())
	winner, err := httpserver.NewAuthority(0, "gizmo-webhooks.system.svc")
	require.NoError(t, err)
	certPEM, keyPEM := winner.ServingPEM()
	raced := false
	kc.PrependReactor("create", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if raced {
			return false, nil, nil
		}
		raced = true
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gizmo-webhook-cert", Namespace: "system"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM, CAKey: winner.CABundle()}}
		require.NoError(t, kc.Tracker().Add(sec))
		return true, nil, apierrors.NewAlreadyExists(corev1.Resource("secrets"), "gizmo-webhook-cert")
	})
	_, err = c.Check(context.Background())
	require.NoError(t, err)
	require.True(t, raced)
	block, _ := pem.Decode(certPEM)
	require.Equal(t, block.Bytes, served(t, c))
}

// A Secret whose certificate is for other hosts (a Service renamed) is
// replaced at once.
func TestACertificateForOtherHostsIsReplaced(t *testing.T) {
	c, kc, _ := fakes(t, config(), crd())
	other, err := httpserver.NewAuthority(0, "old-name.system.svc")
	require.NoError(t, err)
	certPEM, keyPEM := other.ServingPEM()
	_, err = kc.CoreV1().Secrets("system").Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "gizmo-webhook-cert", Namespace: "system"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM, CAKey: other.CABundle()}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.Check(context.Background())
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(served(t, c))
	require.NoError(t, err)
	require.Equal(t, []string{"gizmo-webhooks.system.svc"}, leaf.DNSNames)
	require.False(t, bytes.Equal(certPEM, secret(t, kc).Data[corev1.TLSCertKey]))
}

func TestACRDWithoutAWebhookOrASecretOfAnotherTypeIsNamed(t *testing.T) {
	none := crd()
	none.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
	c, _, _ := fakes(t, config(), none)
	_, err := c.Check(context.Background())
	require.ErrorContains(t, err, "the CRD gizmos.conversion.example.com has no conversion webhook")
	require.Error(t, c.Healthy(context.Background()))
	_, err = c.GetCertificate(&tls.ClientHelloInfo{})
	require.Error(t, err, "nothing served before the CA is injected")

	c, kc, _ := fakes(t, config(), crd())
	_, err = kc.CoreV1().Secrets("system").Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "gizmo-webhook-cert", Namespace: "system"}, Type: corev1.SecretTypeOpaque}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.Check(context.Background())
	require.ErrorContains(t, err, "is of type Opaque, not kubernetes.io/tls")
}

// Serve checks at once and again; a failing check is retried; it returns
// nil when its context ends, and Shutdown waits for it.
func TestServeChecksUntilItsContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _, ext := fakes(t, config(), crd())
		require.NoError(t, c.Shutdown(context.Background()), "before Serve")
		fail := true
		ext.PrependReactor("get", "customresourcedefinitions", func(k8stesting.Action) (bool, runtime.Object, error) {
			if fail {
				fail = false
				return true, nil, apierrors.NewServiceUnavailable("down")
			}
			return false, nil, nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- c.Serve(ctx) }()
		synctest.Wait()
		require.ErrorContains(t, c.Healthy(ctx), "down")
		time.Sleep(firstRetry)
		synctest.Wait()
		require.NoError(t, c.Healthy(ctx))
		require.ErrorContains(t, c.Serve(ctx), "twice")
		cancel()
		require.NoError(t, c.Shutdown(context.Background()))
		require.NoError(t, <-served)
	})
}

// An IP host written other than as net.IP.String writes it (such as
// 0:0:0:0:0:0:0:1 for ::1, or an IPv4-mapped IPv6 address) is the
// certificate's host all the same: a check that finds the certificate
// right only reads, rather than replace it (and grow ca.crt) every check.
func TestAnIPHostNotInCanonicalFormIsNotReplacedEveryCheck(t *testing.T) {
	cfg := config()
	cfg.Hosts = []string{"gizmo-webhooks.system.svc", "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1"}
	c, kc, ext := fakes(t, cfg, crd())
	ctx := context.Background()
	_, err := c.Check(ctx)
	require.NoError(t, err)
	first := secret(t, kc).Data[corev1.TLSCertKey]
	kc.ClearActions()
	ext.ClearActions()
	_, err = c.Check(ctx)
	require.NoError(t, err)
	for _, a := range append(kc.Actions(), ext.Actions()...) {
		require.Equal(t, "get", a.GetVerb(), "a check that finds everything right only reads: %v", a)
	}
	require.Equal(t, first, secret(t, kc).Data[corev1.TLSCertKey])
}

// Two replicas with different Config.Hosts (a rolling update that changes
// them, neither a superset of the other) replace each other's certificate
// every check; ca.crt stays at most maxCAs certificates rather than grow by
// a CA a replacement until the Secret's 1 MiB limit.
func TestReplicasWithOtherHostsKeepCABundleBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, kc, ext := fakes(t, config(), crd())
		cfg := config()
		cfg.Hosts = []string{"gizmo-webhooks-v2.system.svc"}
		cfg = cfg.withDefaults()
		require.NoError(t, cfg.check())
		b := newCerts(humus.Telemetry{}, kc, ext, cfg)
		ctx := context.Background()
		for i := range 8 {
			c := a
			if i%2 == 1 {
				c = b
			}
			_, err := c.Check(ctx)
			require.NoError(t, err)
			n := len(certs(t, secret(t, kc).Data[CAKey]))
			require.LessOrEqual(t, n, 3, "check %d: ca.crt holds %d CAs", i, n)
			// The certificate each replica serves is trusted by the caBundle.
			bundle := caBundle(t, ext)
			for _, r := range []*Certs{a, b}[:min(i+1, 2)] {
				roots := x509.NewCertPool()
				require.True(t, roots.AppendCertsFromPEM(bundle))
				leaf, err := x509.ParseCertificate(served(t, r))
				require.NoError(t, err)
				_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
				require.NoError(t, err, "check %d", i)
			}
		}
	})
}

// A replica whose Config.Hosts are a subset of the certificate's (an old
// replica, in a rolling update that adds a host) keeps that certificate:
// its check only reads.
func TestACertificateForMoreHostsIsKept(t *testing.T) {
	cfg := config()
	cfg.Hosts = append(cfg.Hosts, "gizmo-webhooks-v2.system.svc")
	wide, kc, ext := fakes(t, cfg, crd())
	ctx := context.Background()
	_, err := wide.Check(ctx)
	require.NoError(t, err)
	first := secret(t, kc).Data[corev1.TLSCertKey]
	narrow := newCerts(humus.Telemetry{}, kc, ext, config().withDefaults())
	kc.ClearActions()
	ext.ClearActions()
	_, err = narrow.Check(ctx)
	require.NoError(t, err)
	for _, a := range append(kc.Actions(), ext.Actions()...) {
		require.Equal(t, "get", a.GetVerb(), "a check that finds a certificate for more hosts only reads: %v", a)
	}
	require.Equal(t, first, secret(t, kc).Data[corev1.TLSCertKey])
}

// failCRDReads makes every read of a CRD fail while *fail is set, as while
// the API server is unreachable.
func failCRDReads(ext *extfake.Clientset, fail *bool) {
	ext.PrependReactor("get", "customresourcedefinitions", func(k8stesting.Action) (bool, runtime.Object, error) {
		if *fail {
			return true, nil, apierrors.NewServiceUnavailable("down")
		}
		return false, nil, nil
	})
}

// A check that fails after one succeeded leaves the replica healthy, its
// certificate still served and trusted; checks that keep failing for
// CheckInterval make it unhealthy, and one that succeeds, healthy again.
// Before, one failed check made every replica unready until a check
// succeeded.
func TestAFailedCheckLeavesTheReplicaHealthyUntilTheFailuresLastCheckInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _, ext := fakes(t, config(), crd())
		fail := false
		failCRDReads(ext, &fail)
		ctx := context.Background()
		_, err := c.Check(ctx)
		require.NoError(t, err)
		require.NoError(t, c.Healthy(ctx))

		fail = true
		_, err = c.Check(ctx)
		require.ErrorContains(t, err, "down")
		require.NoError(t, c.Healthy(ctx), "one failed check")
		time.Sleep(DefaultCheckInterval - time.Second)
		_, err = c.Check(ctx)
		require.Error(t, err)
		require.NoError(t, c.Healthy(ctx), "failing for under CheckInterval")

		time.Sleep(time.Second)
		_, err = c.Check(ctx)
		require.Error(t, err)
		err = c.Healthy(ctx)
		require.ErrorContains(t, err, "the checks have failed for 1m0s")
		require.ErrorContains(t, err, "down")

		fail = false
		_, err = c.Check(ctx)
		require.NoError(t, err)
		require.NoError(t, c.Healthy(ctx))
		fail = true
		_, err = c.Check(ctx)
		require.Error(t, err)
		require.NoError(t, c.Healthy(ctx), "a check that succeeded ends the failures in a row")
	})
}

// A certificate served that expires while the checks that would renew it
// fail makes the replica unhealthy at once.
func TestAnExpiredCertificateMakesTheReplicaUnhealthyAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config()
		cfg.Validity, cfg.RenewBefore, cfg.CheckInterval = 3*time.Minute, time.Minute, 10*time.Second
		c, _, ext := fakes(t, cfg, crd())
		fail := false
		failCRDReads(ext, &fail)
		ctx := context.Background()
		_, err := c.Check(ctx)
		require.NoError(t, err)

		time.Sleep(cfg.Validity - time.Second)
		fail = true
		_, err = c.Check(ctx)
		require.Error(t, err)
		require.NoError(t, c.Healthy(ctx))
		time.Sleep(time.Second)
		require.ErrorContains(t, c.Healthy(ctx), "the certificate served expired at")
	})
}

// A broken current certificate (here its key no longer matches) is
// replaced by the next one, whose CA the caBundle already holds, rather
// than by one of a new CA that no caBundle trusts yet; the caBundle is
// left as it is.
func TestABrokenCertificateIsReplacedByTheNextOneTheCABundleTrusts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, kc, ext := shortLived(t)
		ctx := context.Background()
		time.Sleep(6 * time.Second) // due: the next certificate is made
		_, err := c.Check(ctx)
		require.NoError(t, err)
		sec := secret(t, kc)
		next := sec.Data[NextCertKey]
		require.NotEmpty(t, next)
		bundle := caBundle(t, ext)
		require.Len(t, certs(t, bundle), 2)

		other, err := httpserver.NewAuthority(0, "gizmo-webhooks.system.svc")
		require.NoError(t, err)
		_, sec.Data[corev1.TLSPrivateKeyKey] = other.ServingPEM()
		_, err = kc.CoreV1().Secrets("system").Update(ctx, sec, metav1.UpdateOptions{})
		require.NoError(t, err)

		_, err = c.Check(ctx)
		require.NoError(t, err)
		sec = secret(t, kc)
		require.Equal(t, next, sec.Data[corev1.TLSCertKey], "the next certificate is the current one")
		require.Empty(t, sec.Data[NextCertKey])
		require.Equal(t, next, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: served(t, c)}), "and served")
		require.Equal(t, bundle, caBundle(t, ext), "no new CA")
		require.Equal(t, bundle, sec.Data[CAKey])
	})
}
