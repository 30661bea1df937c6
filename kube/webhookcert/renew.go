package webhookcert

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// A certificate in the Secret: loading it, the hosts it names, and its
// renewal in two steps, the new CA trusted before the new certificate is
// served (ca.crt holding at most maxCAs).

// load returns the Secret's certificate under certKey and keyKey, or why
// it can't be served.
func (c *Certs) load(sec *corev1.Secret, certKey, keyKey string) (*tls.Certificate, string) {
	if len(sec.Data[certKey]) == 0 {
		return nil, "the Secret has no " + certKey
	}
	pair, err := tls.X509KeyPair(sec.Data[certKey], sec.Data[keyKey])
	if err != nil {
		return nil, fmt.Sprintf("its %s doesn't load: %v", certKey, err)
	}
	leaf := pair.Leaf
	// A certificate for more hosts than Config.Hosts is served as it is:
	// in a rolling update that adds a host, the old replicas keep the new
	// replicas' certificate rather than replace it every check.
	if have, want := hostsOf(leaf), canonicalHosts(c.cfg.Hosts); slices.ContainsFunc(want, func(h string) bool { return !slices.Contains(have, h) }) {
		return nil, fmt.Sprintf("its %s is for %v, not every one of %v", certKey, have, want)
	}
	if !c.now().Before(leaf.NotAfter) {
		return nil, fmt.Sprintf("its %s expired at %s", certKey, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(sec.Data[CAKey]) {
		return nil, "its " + CAKey + " holds no certificate"
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: c.now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return nil, fmt.Sprintf("its %s isn't signed by a CA of its %s: %v", certKey, CAKey, err)
	}
	return &pair, ""
}

// hostsOf returns a certificate's DNS names and IP addresses, sorted.
func hostsOf(leaf *x509.Certificate) []string {
	hosts := slices.Clone(leaf.DNSNames)
	for _, ip := range leaf.IPAddresses {
		hosts = append(hosts, ip.String())
	}
	slices.Sort(hosts)
	return slices.Compact(hosts)
}

// canonicalHosts returns hosts as a certificate made for them names them,
// sorted: each IP address as net.IP.String writes it (::1 for
// 0:0:0:0:0:0:0:1, 127.0.0.1 for ::ffff:127.0.0.1), as hostsOf reads it.
func canonicalHosts(hosts []string) []string {
	out := make([]string, 0, len(hosts))
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			h = ip.String()
		}
		out = append(out, h)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// maxCAs is how many CAs ca.crt holds at most: the newest, and the two
// before it that haven't expired (see renew).
const maxCAs = 3

// renew makes a new CA and serving certificate into sec's certKey and
// keyKey, and sets its ca.crt to the new CA followed by the CAs of the old
// ca.crt that haven't expired, newest first, maxCAs in all: a replica
// still serving the old certificate stays trusted until it reads the new
// one.
//
// The rule, and why dropping the oldest is safe: each renew puts its CA
// first, so ca.crt is newest first. On a renewal it holds the next CA, the
// current one (served by every replica until the promotion, and by a
// replica that hasn't checked since for up to CheckInterval after it) and
// the one before (served until the last promotion, a whole renewal period
// earlier, which every replica has long stopped serving). A CA falls out
// only when two newer ones have been made after it, the older of which was
// served past Propagation or replaced as broken: a replica serving a
// certificate of the dropped CA would have had to miss two writes of the
// Secret in a row. Without this bound, two replicas with different
// Config.Hosts (a rolling update that changes them) would replace each
// other's certificate every check, and ca.crt would grow by a CA each time
// until the Secret's 1 MiB limit.
func (c *Certs) renew(sec *corev1.Secret, certKey, keyKey string) error {
	a, err := c.newCA(c.cfg.Validity, c.cfg.Hosts...)
	if err != nil {
		return fmt.Errorf("webhookcert: making a certificate: %w", err)
	}
	certPEM, keyPEM := a.ServingPEM()
	bundle := a.CABundle()
	rest := sec.Data[CAKey]
	for kept := 1; kept < maxCAs; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if ca, err := x509.ParseCertificate(b.Bytes); err == nil && b.Type == "CERTIFICATE" && c.now().Before(ca.NotAfter) {
			bundle = append(bundle, pem.EncodeToMemory(b)...)
			kept++
		}
	}
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}
	sec.Data[certKey], sec.Data[keyKey], sec.Data[CAKey] = certPEM, keyPEM, bundle
	return nil
}
