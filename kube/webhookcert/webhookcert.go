// Package webhookcert makes and keeps the serving certificate of an App's
// webhooks (conversion and admission) itself, when no cert-manager issues
// one: a CA and a serving certificate it signs, kept in one Secret, so that
// every replica serves the same certificate, renewed before it expires,
// and the CA injected into the caBundle of the CRDs (and webhook
// configurations) that call the webhooks.
//
// It is what OPA's cert-controller (Gatekeeper's) and Knative's
// certificates reconciler do, within the rules of this project: plain
// values, no package state, RBAC on that one Secret and those named CRDs.
//
// Certificates given as files, such as a cert-manager Certificate's Secret
// mounted as a volume, need none of this: give httpserver.CertDir's
// Certificate to the webhooks' server, and let cert-manager's cainjector
// fill the caBundle (the annotation cert-manager.io/inject-ca-from).
//
// # Wiring it
//
//	certs, err := webhookcert.New(s, client, webhookcert.Config{
//		Namespace: podNamespace, Secret: "memcached-webhook-cert",
//		Hosts: []string{"memcached-webhooks.memcached-system.svc"},
//		CRDs:  []string{"memcacheds.cache.example.com"},
//	})
//	svc, err := httpserver.New(s, httpserver.Config{Name: "webhooks", Addr: ":9443", Handler: mux, Certificate: certs})
//	return []humus.Service{certs, svc, ...}, nil // and health.Readiness(certs, ...)
//
// # RBAC
//
// The App's ServiceAccount needs, in its own namespace, a Role with
//
//	rules:
//	- apiGroups: [""]
//	  resources: [secrets]
//	  resourceNames: [memcached-webhook-cert]
//	  verbs: [get, update]
//	- apiGroups: [""]
//	  resources: [secrets]
//	  verbs: [create]
//
// (create can't be limited by resourceNames: the API server authorizes a
// create before the object, and so its name, is known to RBAC; it is
// limited to the App's own namespace), and a ClusterRole with
//
//	rules:
//	- apiGroups: [apiextensions.k8s.io]
//	  resources: [customresourcedefinitions]
//	  resourceNames: [memcacheds.cache.example.com]
//	  verbs: [get, patch]
//
// and the same get and patch on validatingwebhookconfigurations or
// mutatingwebhookconfigurations (admissionregistration.k8s.io) by name,
// for those Config names. No list, no watch, and no permission on any
// other Secret: Certs reads its Secret and CRDs by name, every
// CheckInterval.
package webhookcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/httpserver"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/internal/logattrs"
)

// The periods, and the Secret's CA key. The defaults are cert-manager's
// for a Certificate with no duration or renewBefore of its own, but for
// the validity, a year rather than 90 days, as httpserver.NewAuthority
// (and client-go's self-signed certificates) make them: nothing but the
// App's own replicas reads the certificate, and a renewal is a moment the
// API server and the replicas must agree through the caBundle.
const (
	// DefaultCheckInterval is how often the Secret and the caBundles are
	// read again: a certificate another replica renewed is served, and a
	// caBundle someone overwrote (a kubectl apply of the CRD) restored,
	// within it.
	DefaultCheckInterval = time.Minute
	// DefaultFieldManager is the field manager of the caBundle applies.
	DefaultFieldManager = "humus-webhookcert"
	// CAKey is the Secret's key of the CA bundle, as cert-manager names
	// it; tls.crt and tls.key (corev1.TLSCertKey, TLSPrivateKeyKey) hold
	// the serving certificate and its key.
	CAKey = "ca.crt"
	// firstRetry is the wait after a failed check, doubled after each
	// failure in a row up to CheckInterval.
	firstRetry = time.Second
	// conflicts is how many times a check reads the Secret again after a
	// conflict (another replica renewed it first) before it waits.
	conflicts = 3
	// Propagation is how long a replica waits, after it saw every
	// caBundle hold a new CA, before it serves the certificate that CA
	// signed: the API server rebuilds a CRD's webhook client when it sees
	// the CRD change, within a second on the local control plane, and
	// likewise an admission webhook configuration's.
	Propagation = 10 * time.Second
	// NextCertKey and NextKeyKey are the Secret's keys of the next
	// certificate while a renewal waits for Propagation.
	NextCertKey = "next-tls.crt"
	NextKeyKey  = "next-tls.key"
)

// Config names the Secret, what the certificate is for and who trusts it.
type Config struct {
	// Namespace is the Secret's namespace: the App's own (its pod's,
	// from the downward API). Required.
	Namespace string
	// Secret is the Secret's name, of type kubernetes.io/tls with a
	// ca.crt: created if it doesn't exist. Required.
	Secret string
	// Hosts are the serving certificate's DNS names or IP addresses: the
	// name the API server calls the webhooks' Service by,
	// <service>.<namespace>.svc, or the URL's host of a clientConfig's
	// url. At least one is required. A Secret whose certificate lacks
	// one of them is renewed; one whose certificate names them and more
	// is kept (a rolling update that adds a host doesn't make the old
	// and new replicas replace each other's certificate every check).
	Hosts []string
	// CRDs are the names of the CustomResourceDefinitions, such as
	// memcacheds.cache.example.com, whose
	// spec.conversion.webhook.clientConfig.caBundle is set to the
	// Secret's ca.crt. Each must convert with strategy Webhook.
	CRDs []string
	// ValidatingWebhookConfigurations and MutatingWebhookConfigurations
	// name the admission webhook configurations each of whose webhooks'
	// clientConfig.caBundle is set to the Secret's ca.crt.
	ValidatingWebhookConfigurations []string
	MutatingWebhookConfigurations   []string
	// Validity is how long each certificate made is valid. Default
	// httpserver.DefaultValidity, a year; at least 3 minutes.
	Validity time.Duration
	// RenewBefore is how long before the serving certificate expires a
	// new one is made. Default a third of Validity (cert-manager's
	// default); less than Validity, and more than CheckInterval and
	// Propagation together, so that every replica serves the renewed one
	// before the old one expires.
	RenewBefore time.Duration
	// CheckInterval is how often the Secret and the caBundles are read
	// again. Default DefaultCheckInterval.
	CheckInterval time.Duration
	// FieldManager is the caBundle applies' field manager. Default
	// DefaultFieldManager.
	FieldManager string
}

// withDefaults returns c with its zero fields at their defaults.
func (c Config) withDefaults() Config {
	if c.Validity == 0 {
		c.Validity = httpserver.DefaultValidity
	}
	if c.RenewBefore == 0 {
		c.RenewBefore = c.Validity / 3
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = DefaultCheckInterval
	}
	if c.FieldManager == "" {
		c.FieldManager = DefaultFieldManager
	}
	return c
}

// check names every mistake of c, defaulted.
func (c Config) check() error {
	var errs []error
	name := func(field, v string, f func(string) []string) {
		if v == "" {
			errs = append(errs, fmt.Errorf("Config.%s is required", field))
			return
		}
		if msgs := f(v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("Config.%s %q is no valid name: %v", field, v, msgs))
		}
	}
	name("Namespace", c.Namespace, validation.IsDNS1123Label)
	name("Secret", c.Secret, validation.IsDNS1123Subdomain)
	if len(c.Hosts) == 0 {
		errs = append(errs, errors.New("Config.Hosts is empty: name the serving certificate's DNS names, such as <service>.<namespace>.svc"))
	}
	for i, h := range c.Hosts {
		if h == "" {
			errs = append(errs, fmt.Errorf("Config.Hosts[%d] is empty", i))
		}
	}
	for field, names := range map[string][]string{"CRDs": c.CRDs,
		"ValidatingWebhookConfigurations": c.ValidatingWebhookConfigurations,
		"MutatingWebhookConfigurations":   c.MutatingWebhookConfigurations} {
		for i, n := range names {
			name(fmt.Sprintf("%s[%d]", field, i), n, validation.IsDNS1123Subdomain)
		}
	}
	if c.Validity < 3*time.Minute {
		errs = append(errs, fmt.Errorf("Config.Validity %v is under 3m", c.Validity))
	}
	if c.RenewBefore <= 0 || c.RenewBefore >= c.Validity {
		errs = append(errs, fmt.Errorf("Config.RenewBefore %v is not between 0 and Config.Validity %v", c.RenewBefore, c.Validity))
	}
	if c.CheckInterval <= 0 {
		errs = append(errs, fmt.Errorf("Config.CheckInterval %v is not positive", c.CheckInterval))
	} else if c.CheckInterval+Propagation >= c.RenewBefore {
		errs = append(errs, fmt.Errorf("Config.CheckInterval %v and Propagation %v are not under Config.RenewBefore %v: a replica would serve an expired certificate before it read the renewed one", c.CheckInterval, Propagation, c.RenewBefore))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("webhookcert: %w", err)
	}
	return nil
}

// Certs is a serving certificate kept in a Secret: an
// httpserver.Certificate, a humus.Service that keeps it, and a
// health.Monitor, healthy once it serves a certificate whose CA every
// named CRD and webhook configuration trusts, and while that certificate
// stays usable (see Healthy). Its methods are safe for concurrent use.
type Certs struct {
	cfg    Config
	kc     kubernetes.Interface
	ext    apiextensionsclient.Interface
	log    *slog.Logger
	now    func() time.Time
	newCA  func(validity time.Duration, hosts ...string) (*httpserver.Authority, error)
	cert   atomic.Pointer[tls.Certificate]
	bundle atomic.Pointer[[]byte]

	// checking makes Check one at a time; injected, which it guards, is
	// when this replica first saw every caBundle hold bundle.
	checking sync.Mutex
	injected time.Time

	mu      sync.Mutex
	lastErr error
	// failingSince is when the checks began to fail, the first of the
	// failed checks in a row; zero while the last one succeeded.
	failingSince time.Time
	started      bool
	done         chan struct{}
	force        context.CancelFunc
	forced       context.Context
}

// New returns the Certs of cfg, read and written through c, whose
// credentials need the rules the package doc lists. It reads nothing yet:
// its Serve does, at once and then every CheckInterval, and until the
// first read succeeds GetCertificate fails every TLS handshake and Healthy
// reports why. It returns one error naming every mistake of cfg (and a nil
// s or c).
func New(s *humus.Setup, c *kube.Client, cfg Config) (*Certs, error) {
	var errs []error
	if s == nil {
		errs = append(errs, errors.New("webhookcert: New was given a nil Setup"))
	}
	if c == nil {
		errs = append(errs, errors.New("webhookcert: New was given a nil Client: make it with kube.NewClient"))
	}
	cfg = cfg.withDefaults()
	errs = append(errs, cfg.check())
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	kc, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		return nil, fmt.Errorf("webhookcert: the Secret's client: %w", err)
	}
	ext, err := apiextensionsclient.NewForConfig(c.Config())
	if err != nil {
		return nil, fmt.Errorf("webhookcert: the CRDs' client: %w", err)
	}
	return newCerts(s.Telemetry, kc, ext, cfg), nil
}

// newCerts returns the Certs of a checked cfg through kc and ext.
func newCerts(tel humus.Telemetry, kc kubernetes.Interface, ext apiextensionsclient.Interface, cfg Config) *Certs {
	forced, force := context.WithCancel(context.Background())
	c := &Certs{
		cfg: cfg, kc: kc, ext: ext,
		log: logattrs.NewLogger("github.com/z5labs/humus/kube/webhookcert", tel.WithNoops().LoggerProvider).With(
			"k8s.namespace.name", cfg.Namespace, "k8s.secret.name", cfg.Secret),
		now:     time.Now,
		newCA:   httpserver.NewAuthority,
		lastErr: errors.New("webhookcert: the Secret hasn't been read yet"),
		done:    make(chan struct{}),
		forced:  forced,
		force:   force,
	}
	return c
}

// GetCertificate returns the serving certificate last read from the
// Secret, as tls.Config's GetCertificate: every replica serves the same.
// Before the first read it returns an error, which fails the handshake.
func (c *Certs) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if cert := c.cert.Load(); cert != nil {
		return cert, nil
	}
	return nil, fmt.Errorf("webhookcert: no certificate yet: the Secret %s/%s hasn't been read", c.cfg.Namespace, c.cfg.Secret)
}

// CABundle returns the PEM CA bundle the named CRDs and webhook
// configurations were last given, the Secret's ca.crt, or nil before.
func (c *Certs) CABundle() []byte {
	if b := c.bundle.Load(); b != nil {
		return bytes.Clone(*b)
	}
	return nil
}

// Healthy returns nil once a check has succeeded (a certificate is served
// and its CA injected), and while the certificate served is still usable:
// a check that fails after one succeeded, such as when the API server is
// briefly unreachable, leaves the replica healthy, since the certificate
// served and the caBundles that trust it are as they were. It returns the
// last check's error, wrapped, when no check has succeeded yet, when the
// certificate served has expired, or when the checks have failed in a row
// for CheckInterval or longer (such as RBAC that no longer lets it read the
// Secret, or a caBundle it can't restore). A one-off failure thus never
// makes every replica unready at once, and a failure that persists does,
// within CheckInterval.
func (c *Certs) Healthy(context.Context) error {
	c.mu.Lock()
	err, since := c.lastErr, c.failingSince
	c.mu.Unlock()
	if err == nil {
		return nil
	}
	cert := c.cert.Load()
	if cert == nil {
		return err
	}
	now := c.now()
	if !now.Before(cert.Leaf.NotAfter) {
		return fmt.Errorf("webhookcert: the certificate served expired at %s, and the check that would replace it fails: %w", cert.Leaf.NotAfter.UTC().Format(time.RFC3339), err)
	}
	if failing := now.Sub(since); failing >= c.cfg.CheckInterval {
		return fmt.Errorf("webhookcert: the checks have failed for %v, since %s (Config.CheckInterval is %v): %w", failing, since.UTC().Format(time.RFC3339), c.cfg.CheckInterval, err)
	}
	return nil
}

// Serve checks the Secret and the caBundles at once, and then every
// CheckInterval, or sooner when the certificate is due for renewal, until
// ctx is done; a check that fails is logged at ERROR and tried again after
// a second, doubling up to CheckInterval. It returns nil when ctx is done,
// and an error when called twice.
func (c *Certs) Serve(ctx context.Context) error {
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return errors.New("webhookcert: Serve was called twice")
	}
	c.started = true
	c.mu.Unlock()
	defer close(c.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.forced, cancel)
	defer stop()
	retry := firstRetry
	for {
		wait, err := c.Check(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			c.log.ErrorContext(ctx, "the webhooks' certificate check failed; the last certificate read is still served", "error", err.Error())
			wait, retry = retry, min(2*retry, c.cfg.CheckInterval)
		} else {
			retry = firstRetry
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// Shutdown waits for Serve to return, and, if ctx is done first, stops it
// and returns an error wrapping ctx.Err(). Before Serve it returns nil.
func (c *Certs) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	started := c.started
	c.mu.Unlock()
	if !started {
		return nil
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		c.force()
		<-c.done
		return fmt.Errorf("webhookcert: shutdown: %w", ctx.Err())
	}
}

// Check reads the Secret, creating it if it doesn't exist, gives its CA
// bundle to every named CRD and webhook configuration whose caBundle
// differs, renews its certificate as it falls due, and then serves its
// certificate. It returns how long until the next check: CheckInterval,
// or less when a renewal is due sooner. Serve calls it; it is exported
// for a test or an App that checks at a moment of its own.
//
// A renewal takes two checks, so that the API server trusts a new
// certificate before any replica serves it: the first makes a new CA and
// certificate, keeps them in the Secret as the next ones (NextCertKey,
// NextKeyKey) beside the current, and adds the new CA to ca.crt, which is
// given to the caBundles; a check at least Propagation after this replica
// saw every caBundle hold that ca.crt makes the next certificate the
// current one. The old CA stays in ca.crt until it expires or two newer
// CAs follow it (ca.crt holds at most three: see renew), so a replica
// still serving the old certificate (until its next check) stays trusted.
// A certificate that is broken (doesn't load, lacks one of Config.Hosts,
// isn't signed by a CA of ca.crt, or has expired) is replaced at once: by
// the next certificate, promoted without waiting for Propagation, when
// there is one that isn't broken itself (its CA, in ca.crt since it was
// made, is the one the caBundles already trust), or else by a new CA and
// certificate, which calls to the webhooks fail to trust until the API
// server sees the new caBundle. One for more hosts than Config.Hosts is
// kept.
func (c *Certs) Check(ctx context.Context) (time.Duration, error) {
	c.checking.Lock()
	defer c.checking.Unlock()
	for i := 0; ; i++ {
		wait, err := c.check(ctx)
		if i < conflicts && (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) {
			continue // another replica wrote first: read again
		}
		c.mu.Lock()
		c.lastErr = err
		switch {
		case err == nil:
			c.failingSince = time.Time{}
		case c.failingSince.IsZero():
			c.failingSince = c.now()
		}
		c.mu.Unlock()
		return wait, err
	}
}

// secret reads the Secret, or creates it with a new CA and certificate,
// and checks its type.
func (c *Certs) secret(ctx context.Context) (*corev1.Secret, error) {
	secrets := c.kc.CoreV1().Secrets(c.cfg.Namespace)
	sec, err := secrets.Get(ctx, c.cfg.Secret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: c.cfg.Secret, Namespace: c.cfg.Namespace,
				Labels: map[string]string{"app.kubernetes.io/managed-by": c.cfg.FieldManager}},
			Type: corev1.SecretTypeTLS,
		}
		if err := c.renew(sec, corev1.TLSCertKey, corev1.TLSPrivateKeyKey); err != nil {
			return nil, err
		}
		sec, err = secrets.Create(ctx, sec, metav1.CreateOptions{FieldManager: c.cfg.FieldManager})
		if err != nil {
			return nil, fmt.Errorf("webhookcert: creating the Secret %s/%s: %w", c.cfg.Namespace, c.cfg.Secret, err)
		}
		c.log.InfoContext(ctx, "created the Secret of the webhooks' certificate")
	} else if err != nil {
		return nil, fmt.Errorf("webhookcert: reading the Secret %s/%s: %w", c.cfg.Namespace, c.cfg.Secret, err)
	}
	if sec.Type != corev1.SecretTypeTLS {
		return nil, fmt.Errorf("webhookcert: the Secret %s/%s is of type %s, not %s: delete it, or name another", c.cfg.Namespace, c.cfg.Secret, sec.Type, corev1.SecretTypeTLS)
	}
	return sec, nil
}

func (c *Certs) check(ctx context.Context) (time.Duration, error) {
	sec, err := c.secret(ctx)
	if err != nil {
		return 0, err
	}
	pair, broken := c.load(sec, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
	_, nextBroken := c.load(sec, NextCertKey, NextKeyKey)
	switch {
	case broken != "" && nextBroken == "":
		// Nothing to keep serving, but the next certificate, whose CA the
		// caBundles were given when it was made: promote it at once,
		// rather than make a new CA that no caBundle trusts yet.
		if sec, err = c.promote(ctx, sec, "promoted the webhooks' next certificate in place of the current one, which is broken: "+broken); err != nil {
			return 0, err
		}
	case broken != "":
		// Nothing to keep serving: replace it at once.
		sec = sec.DeepCopy()
		delete(sec.Data, NextCertKey)
		delete(sec.Data, NextKeyKey)
		if err := c.renew(sec, corev1.TLSCertKey, corev1.TLSPrivateKeyKey); err != nil {
			return 0, err
		}
		if sec, err = c.update(ctx, sec, "replaced the webhooks' certificate: "+broken); err != nil {
			return 0, err
		}
	case c.now().After(pair.Leaf.NotAfter.Add(-c.cfg.RenewBefore)) && nextBroken != "":
		// Due: the next certificate, whose CA the caBundles get first.
		sec = sec.DeepCopy()
		if err := c.renew(sec, NextCertKey, NextKeyKey); err != nil {
			return 0, err
		}
		if sec, err = c.update(ctx, sec, "made the webhooks' next certificate, to be served once the caBundles trust it"); err != nil {
			return 0, err
		}
	}
	bundle := sec.Data[CAKey]
	// The caBundles first: a certificate is served only once the API
	// server trusts its CA.
	if err := c.inject(ctx, bundle); err != nil {
		return 0, err
	}
	if last := c.bundle.Load(); last == nil || !bytes.Equal(*last, bundle) {
		c.bundle.Store(&bundle)
		c.injected = c.now()
	}
	wait := c.cfg.CheckInterval
	if _, nextBroken = c.load(sec, NextCertKey, NextKeyKey); nextBroken == "" {
		if since := c.now().Sub(c.injected); since < Propagation {
			wait = min(wait, Propagation-since)
		} else {
			// Every caBundle has held the next CA for Propagation:
			// promote it.
			if sec, err = c.promote(ctx, sec, "promoted the webhooks' next certificate"); err != nil {
				return 0, err
			}
		}
	}
	pair, broken = c.load(sec, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
	if broken != "" {
		return 0, fmt.Errorf("webhookcert: the Secret %s/%s's certificate, just written: %s", c.cfg.Namespace, c.cfg.Secret, broken)
	}
	if old := c.cert.Load(); old == nil || !bytes.Equal(old.Certificate[0], pair.Certificate[0]) {
		c.cert.Store(pair)
		c.log.InfoContext(ctx, "serving the webhooks' certificate", "tls.server.not_after", pair.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if due := pair.Leaf.NotAfter.Add(-c.cfg.RenewBefore).Sub(c.now()); due < wait {
		wait = max(due, 0) + time.Second
	}
	return wait, nil
}

// promote writes sec with its next certificate as the current one, and
// none next, and logs what was done.
func (c *Certs) promote(ctx context.Context, sec *corev1.Secret, what string) (*corev1.Secret, error) {
	sec = sec.DeepCopy()
	sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey] = sec.Data[NextCertKey], sec.Data[NextKeyKey]
	delete(sec.Data, NextCertKey)
	delete(sec.Data, NextKeyKey)
	return c.update(ctx, sec, what)
}

// update writes sec, and logs what was done.
func (c *Certs) update(ctx context.Context, sec *corev1.Secret, what string) (*corev1.Secret, error) {
	out, err := c.kc.CoreV1().Secrets(c.cfg.Namespace).Update(ctx, sec, metav1.UpdateOptions{FieldManager: c.cfg.FieldManager})
	if err != nil {
		return nil, fmt.Errorf("webhookcert: writing the Secret %s/%s (%s): %w", c.cfg.Namespace, c.cfg.Secret, what, err)
	}
	c.log.InfoContext(ctx, what)
	return out, nil
}
