package appconfig

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"path"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/z5labs/humus/kube"
)

// ServiceAccountDir is where the kubelet mounts a pod's service account
// credentials: ca.crt, token and namespace. It is a name in a humus.Host's
// FS, so it has no leading slash.
const ServiceAccountDir = "var/run/secrets/kubernetes.io/serviceaccount/"

// InPod returns the Connection of a pod's own service account: the API
// server at host:port, the kubelet's KUBERNETES_SERVICE_HOST and
// KUBERNETES_SERVICE_PORT, trusting the CA in ServiceAccountDir's ca.crt, and
// sending the token in ServiceAccountDir's token, which it reads again each
// time the Client asks for it (at most once a minute), so a token the kubelet
// rotates is picked up. Both files are read through fsys. It returns an
// error when ca.crt can't be read or holds no certificate.
func InPod(fsys fs.FS, host, port string) (kube.Connection, error) {
	ca, err := fs.ReadFile(fsys, ServiceAccountDir+"ca.crt")
	if err != nil {
		return kube.Connection{}, fmt.Errorf("reading the service account's CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return kube.Connection{}, fmt.Errorf("%sca.crt holds no PEM certificate", ServiceAccountDir)
	}
	return kube.Connection{
		// JoinHostPort brackets an IPv6 host.
		Server: net.JoinHostPort(host, port),
		TLS:    &tls.Config{RootCAs: roots},
		Token: func(context.Context) (string, error) {
			b, err := fs.ReadFile(fsys, ServiceAccountDir+"token")
			return string(bytes.TrimSpace(b)), err
		},
	}, nil
}

// FromKubeconfig returns the Connection that the kubeconfig file at
// kubeconfigPath gives for its context contextName, or for its current
// context when contextName is "". The file is parsed with client-go's
// clientcmd.Load.
//
// It reads the kubeconfig, and any file it names (a CA, a client
// certificate and key, a token file), through fsys, whose names have no
// leading slash; a relative file name in the kubeconfig is relative to the
// kubeconfig's directory, as kubectl takes it. kubeconfigPath must be
// absolute. The cluster's CA and the user's client certificate may be
// embedded data or files; the user's token may be a token or a token file,
// which is read again each time the Client asks for it. Exec plugins, auth
// providers and basic auth are errors: humus leaves those credentials to the
// end user's code (see the spec's Out of scope).
func FromKubeconfig(fsys fs.FS, kubeconfigPath, contextName string) (kube.Connection, error) {
	if !path.IsAbs(kubeconfigPath) {
		return kube.Connection{}, fmt.Errorf("kubeconfig %q: the path must be absolute", kubeconfigPath)
	}
	read := func(name string) ([]byte, error) {
		if !path.IsAbs(name) {
			name = path.Join(path.Dir(kubeconfigPath), name)
		}
		return fs.ReadFile(fsys, strings.TrimPrefix(path.Clean(name), "/"))
	}
	b, err := read(kubeconfigPath)
	if err != nil {
		return kube.Connection{}, fmt.Errorf("reading kubeconfig %s: %w", kubeconfigPath, err)
	}
	cfg, err := clientcmd.Load(b)
	if err != nil {
		return kube.Connection{}, fmt.Errorf("kubeconfig %s: %w", kubeconfigPath, err)
	}
	if contextName == "" {
		contextName = cfg.CurrentContext
	}
	kctx, ok := cfg.Contexts[contextName]
	if !ok {
		return kube.Connection{}, fmt.Errorf("kubeconfig %s: no context %q", kubeconfigPath, contextName)
	}
	cluster, ok := cfg.Clusters[kctx.Cluster]
	if !ok {
		return kube.Connection{}, fmt.Errorf("kubeconfig %s: context %q names no known cluster %q", kubeconfigPath, contextName, kctx.Cluster)
	}
	user, ok := cfg.AuthInfos[kctx.AuthInfo]
	if !ok {
		user = clientcmdapi.NewAuthInfo()
	}

	var errs []error
	server, err := serverAddr(cluster.Server)
	if err != nil {
		errs = append(errs, err)
	}
	tlsConfig := &tls.Config{ServerName: cluster.TLSServerName, InsecureSkipVerify: cluster.InsecureSkipTLSVerify}
	if ca, err := dataOrFile(read, cluster.CertificateAuthorityData, cluster.CertificateAuthority); err != nil {
		errs = append(errs, fmt.Errorf("cluster %q: certificate authority: %w", kctx.Cluster, err))
	} else if ca != nil {
		tlsConfig.RootCAs = x509.NewCertPool()
		if !tlsConfig.RootCAs.AppendCertsFromPEM(ca) {
			errs = append(errs, fmt.Errorf("cluster %q: certificate authority holds no PEM certificate", kctx.Cluster))
		}
	}

	var token func(context.Context) (string, error)
	switch {
	case user.Exec != nil:
		errs = append(errs, fmt.Errorf("user %q: exec credential plugins are not supported: fill the Connection's Token from the cloud's SDK", kctx.AuthInfo))
	case user.AuthProvider != nil:
		errs = append(errs, fmt.Errorf("user %q: auth providers are not supported: fill the Connection's Token from the cloud's SDK", kctx.AuthInfo))
	case user.Username != "" || user.Password != "":
		errs = append(errs, fmt.Errorf("user %q: basic auth is not supported", kctx.AuthInfo))
	case user.Token != "":
		t := user.Token
		token = func(context.Context) (string, error) { return t, nil }
	case user.TokenFile != "":
		f := user.TokenFile
		token = func(context.Context) (string, error) {
			b, err := read(f)
			return string(bytes.TrimSpace(b)), err
		}
	}
	cert, err := dataOrFile(read, user.ClientCertificateData, user.ClientCertificate)
	if err != nil {
		errs = append(errs, fmt.Errorf("user %q: client certificate: %w", kctx.AuthInfo, err))
	}
	key, err := dataOrFile(read, user.ClientKeyData, user.ClientKey)
	if err != nil {
		errs = append(errs, fmt.Errorf("user %q: client key: %w", kctx.AuthInfo, err))
	}
	if cert != nil || key != nil {
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			errs = append(errs, fmt.Errorf("user %q: client certificate and key: %w", kctx.AuthInfo, err))
		}
		tlsConfig.Certificates = []tls.Certificate{pair}
	}
	if err := errors.Join(errs...); err != nil {
		return kube.Connection{}, fmt.Errorf("kubeconfig %s, context %q: %w", kubeconfigPath, contextName, err)
	}
	return kube.Connection{Server: server, TLS: tlsConfig, Token: token}, nil
}

// serverAddr turns a kubeconfig's server URL, such as
// https://127.0.0.1:6443, into the host:port a Connection dials. A URL
// without a port takes https's 443.
func serverAddr(server string) (string, error) {
	u, err := url.Parse(server)
	if err != nil {
		return "", fmt.Errorf("server %q: %w", server, err)
	}
	if u.Scheme != "https" {
		return "", fmt.Errorf("server %q: the scheme must be https", server)
	}
	if u.Path != "" && u.Path != "/" {
		return "", fmt.Errorf("server %q: a path is not supported", server)
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "443"), nil
	}
	return u.Host, nil
}

// dataOrFile returns data when it isn't empty, else the file named file, or
// nil when neither is given.
func dataOrFile(read func(string) ([]byte, error), data []byte, file string) ([]byte, error) {
	if len(data) > 0 {
		return data, nil
	}
	if file == "" {
		return nil, nil
	}
	return read(file)
}
