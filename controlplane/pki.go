package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the key material made for one run, as PEM.
type pki struct {
	CACert     []byte // the CA's certificate; the API server's client CA too
	ServerCert []byte // the API server's serving certificate, signed by the CA
	ServerKey  []byte
	SAKey      []byte // the service-account token signing key (PKCS #8)
	SAPub      []byte // its public key (PKIX), for verifying tokens
}

// pkiValidity is how long the run's certificates are valid.
const pkiValidity = 365 * 24 * time.Hour

// newPKI makes a CA, a serving certificate for the API server on 127.0.0.1,
// ::1 and localhost (plus the in-cluster names of the kubernetes Service and
// its first service IP, serviceIP), and a service-account signing key, all
// ECDSA P-256.
func newPKI(now time.Time, serviceIP net.IP) (*pki, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "humus-controlplane-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(pkiValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}

	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	if serviceIP != nil {
		ips = append(ips, serviceIP)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(pkiValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		IPAddresses: ips,
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	srvKeyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		return nil, err
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saKeyDER, err := x509.MarshalPKCS8PrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}

	return &pki{
		CACert:     pemBlock("CERTIFICATE", caDER),
		ServerCert: pemBlock("CERTIFICATE", srvDER),
		ServerKey:  pemBlock("PRIVATE KEY", srvKeyDER),
		SAKey:      pemBlock("PRIVATE KEY", saKeyDER),
		SAPub:      pemBlock("PUBLIC KEY", saPubDER),
	}, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// serial returns a random 128-bit certificate serial number.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		// crypto/rand does not fail on supported platforms.
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// pkiFiles are the paths the PKI is written to.
type pkiFiles struct {
	CACert, ServerCert, ServerKey, SAKey, SAPub string
}

// write writes the PKI into dir, keys readable by the owner only.
func (p *pki) write(dir string) (pkiFiles, error) {
	f := pkiFiles{
		CACert:     filepath.Join(dir, "ca.crt"),
		ServerCert: filepath.Join(dir, "apiserver.crt"),
		ServerKey:  filepath.Join(dir, "apiserver.key"),
		SAKey:      filepath.Join(dir, "sa.key"),
		SAPub:      filepath.Join(dir, "sa.pub"),
	}
	for _, w := range []struct {
		path string
		data []byte
	}{
		{f.CACert, p.CACert}, {f.ServerCert, p.ServerCert}, {f.ServerKey, p.ServerKey},
		{f.SAKey, p.SAKey}, {f.SAPub, p.SAPub},
	} {
		if err := os.WriteFile(w.path, w.data, 0o600); err != nil {
			return pkiFiles{}, fmt.Errorf("controlplane: writing the PKI: %w", err)
		}
	}
	return f, nil
}
