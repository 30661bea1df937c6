package httpserver

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"path"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/log"

	"github.com/z5labs/humus"
)

// ReloadInterval is how often, at most, CertFiles' files are read again:
// on the first TLS handshake after it has passed since they were last
// read. It is controller-runtime's certwatcher's polling interval. A
// renewed certificate is thus served within ReloadInterval of the kubelet
// writing it into the mounted Secret (which itself takes up to the
// kubelet's sync period, about a minute).
const ReloadInterval = 10 * time.Second

// The files of a kubernetes.io/tls Secret mounted as a volume, such as a
// cert-manager Certificate's: CertDir reads them.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
)

// Files is a serving certificate read from files through a Host's FS, and
// read again as they rotate. Its methods are safe for concurrent use.
type Files struct {
	fsys              fs.FS
	certFile, keyFile string
	now               func() time.Time
	logger            log.Logger

	mu              sync.Mutex
	cert            *tls.Certificate
	certPEM, keyPEM []byte // the files' bytes cert was parsed from
	read            time.Time
}

// CertDir returns CertFiles(s, dir/tls.crt, dir/tls.key): the files of a
// kubernetes.io/tls Secret mounted at dir, a name in s.Host.FS (no leading
// slash: /tmp/k8s-webhook-server/serving-certs is
// "tmp/k8s-webhook-server/serving-certs").
func CertDir(s *humus.Setup, dir string) (*Files, error) {
	if strings.HasPrefix(dir, "/") {
		return nil, leadingSlash("directory", dir)
	}
	return CertFiles(s, path.Join(dir, CertFile), path.Join(dir, KeyFile))
}

// CertFiles returns the Certificate of a PEM certificate (chain) in
// certFile and its PEM private key in keyFile, names in s.Host.FS (no
// leading slash), read now, and again on a TLS handshake once
// ReloadInterval has passed since they were last read: a pair that
// changed is served from then on, so that a certificate cert-manager
// renews is served without a restart. A pair read again that doesn't load
// (a half-written rotation, a key that doesn't match) keeps the last one
// served, and is logged at ERROR with s.Telemetry's LoggerProvider, naming
// the file; a renewed one is logged at INFO with its expiry.
//
// It returns an error naming each name with a leading slash or otherwise
// invalid in an io/fs FS, and a nil s or s.Host.FS; and, reading them, an
// error naming the file that can't be read or the pair that doesn't load,
// with its path as "/" + its name.
func CertFiles(s *humus.Setup, certFile, keyFile string) (*Files, error) {
	var errs []error
	for _, f := range []struct{ what, name string }{{"certificate file", certFile}, {"key file", keyFile}} {
		switch {
		case strings.HasPrefix(f.name, "/"):
			errs = append(errs, leadingSlash(f.what, f.name))
		case !fs.ValidPath(f.name) || f.name == ".":
			errs = append(errs, fmt.Errorf("httpserver: the %s %q is no file name in the Host's FS: names are slash-separated, with no leading slash and no . or .. element", f.what, f.name))
		}
	}
	switch {
	case s == nil:
		errs = append(errs, errors.New("httpserver: CertFiles was given a nil Setup"))
	case s.Host.FS == nil:
		errs = append(errs, errors.New("httpserver: CertFiles: s.Host.FS is nil"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	f := &Files{
		fsys:     s.Host.FS,
		certFile: certFile,
		keyFile:  keyFile,
		now:      time.Now,
		logger:   s.Telemetry.WithNoops().LoggerProvider.Logger(scope),
	}
	certPEM, keyPEM, cert, err := f.load()
	if err != nil {
		return nil, err
	}
	f.cert, f.certPEM, f.keyPEM, f.read = cert, certPEM, keyPEM, f.now()
	return f, nil
}

func leadingSlash(what, name string) error {
	return fmt.Errorf("httpserver: the %s %q starts with a slash: names in the Host's FS have none, since it is rooted at / (%s is %q)",
		what, name, name, strings.TrimLeft(name, "/"))
}

// load reads and parses the pair.
func (f *Files) load() (certPEM, keyPEM []byte, cert *tls.Certificate, err error) {
	certPEM, err = fs.ReadFile(f.fsys, f.certFile)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("httpserver: reading the certificate /%s: %w", f.certFile, err)
	}
	keyPEM, err = fs.ReadFile(f.fsys, f.keyFile)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("httpserver: reading the certificate's key /%s: %w", f.keyFile, err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("httpserver: the certificate /%s with its key /%s: %w", f.certFile, f.keyFile, err)
	}
	return certPEM, keyPEM, &c, nil
}

// GetCertificate returns the pair read last, having read the files again
// if ReloadInterval has passed since. It never fails: a pair that doesn't
// load keeps the last one.
func (f *Files) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now := f.now(); now.Sub(f.read) >= ReloadInterval {
		f.read = now
		f.reload()
	}
	return f.cert, nil
}

// reload reads the files again, and keeps a pair that changed and loads.
func (f *Files) reload() {
	certPEM, keyPEM, cert, err := f.load()
	if err != nil {
		f.log(log.SeverityError, "ERROR", "the certificate files don't load; the last certificate read is still served", err)
		return
	}
	if bytes.Equal(certPEM, f.certPEM) && bytes.Equal(keyPEM, f.keyPEM) {
		return
	}
	f.cert, f.certPEM, f.keyPEM = cert, certPEM, keyPEM
	f.log(log.SeverityInfo, "INFO", "serving the renewed certificate", nil,
		attribute.String("tls.server.not_after", cert.Leaf.NotAfter.UTC().Format(time.RFC3339)))
}

func (f *Files) log(sev log.Severity, text, msg string, err error, attrs ...attribute.KeyValue) {
	var r log.Record
	r.SetTimestamp(f.now())
	r.SetSeverity(sev)
	r.SetSeverityText(text)
	r.SetBody(attribute.StringValue(msg))
	r.AddAttributes(attribute.String("tls.certificate.file", "/"+f.certFile), attribute.String("tls.key.file", "/"+f.keyFile))
	r.AddAttributes(attrs...)
	if err != nil {
		r.AddAttributes(attribute.String("error", err.Error()))
	}
	f.logger.Emit(context.Background(), r)
}

// DefaultValidity is how long an Authority's CA and serving certificate
// are valid, from the moment NewAuthority makes them: a year, as client-go's
// cert.GenerateSelfSignedCertKey makes them.
const DefaultValidity = 365 * 24 * time.Hour

// Authority is a CA the App makes, and a serving certificate it signs. The
// CA's certificate is what a client trusts, such as a webhook's caBundle.
// Its methods are safe for concurrent use.
type Authority struct {
	caPEM           []byte
	certPEM, keyPEM []byte
	cert            tls.Certificate
}

// NewAuthority makes a CA, with an ECDSA P-256 key, and a serving
// certificate it signs for hosts: each an IP address (such as 127.0.0.1)
// or a DNS name (such as webhooks.memcached-system.svc, the name the API
// server calls a Service by). Both are valid for validity from now, or
// DefaultValidity when validity is 0; the App must make a new one before
// then. It returns an error when hosts is empty, a host is "", validity is
// negative, or generating a key fails.
func NewAuthority(validity time.Duration, hosts ...string) (*Authority, error) {
	var errs []error
	if len(hosts) == 0 {
		errs = append(errs, errors.New("httpserver: NewAuthority was given no host: name the serving certificate's DNS names or IP addresses"))
	}
	for i, h := range hosts {
		if h == "" {
			errs = append(errs, fmt.Errorf("httpserver: NewAuthority: host %d is empty", i))
		}
	}
	if validity < 0 {
		errs = append(errs, fmt.Errorf("httpserver: NewAuthority: the validity %v is negative", validity))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if validity == 0 {
		validity = DefaultValidity
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("httpserver: generating the CA's key: %w", err)
	}
	caTemplate := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: hosts[0] + "-ca@" + fmt.Sprint(now.Unix())},
		NotBefore:             now.Add(-time.Minute), // a client's clock a little behind
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("httpserver: making the CA's certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("httpserver: parsing the CA's certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("httpserver: generating the serving certificate's key: %w", err)
	}
	template := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    caTemplate.NotBefore,
		NotAfter:     caTemplate.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			template.IPAddresses = append(template.IPAddresses, ip)
		} else {
			template.DNSNames = append(template.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("httpserver: making the serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("httpserver: encoding the serving certificate's key: %w", err)
	}
	a := &Authority{
		caPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
	if a.cert, err = tls.X509KeyPair(a.certPEM, a.keyPEM); err != nil {
		return nil, fmt.Errorf("httpserver: loading the serving certificate: %w", err)
	}
	return a, nil
}

// serial returns a random 128-bit certificate serial number, as RFC 5280
// asks to be unique per CA.
func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128)) // crypto/rand doesn't fail
	return n
}

// CABundle returns the CA's certificate, PEM-encoded: what a client trusts,
// such as a CRD's spec.conversion.webhook.clientConfig.caBundle.
func (a *Authority) CABundle() []byte { return bytes.Clone(a.caPEM) }

// ServingPEM returns the serving certificate and its key, PEM-encoded, as
// a kubernetes.io/tls Secret's tls.crt and tls.key hold them.
func (a *Authority) ServingPEM() (certPEM, keyPEM []byte) {
	return bytes.Clone(a.certPEM), bytes.Clone(a.keyPEM)
}

// GetCertificate returns the serving certificate.
func (a *Authority) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return &a.cert, nil
}
