package controlplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Cluster is a running control plane made by [Start], or an existing
// cluster read by [FromKubeconfig]. Its fields are what a client needs;
// for package kube:
//
//	kube.Connection{
//		Server: c.Server,
//		TLS:    c.TLS,
//		Token:  func(context.Context) (string, error) { return c.Token, nil },
//	}
type Cluster struct {
	// Server is the API server's address, host:port (for example
	// "127.0.0.1:34567"); it is served over HTTPS.
	Server string
	// TLS trusts the API server's CA (RootCAs), names the server
	// (ServerName) and holds the client certificate, if the kubeconfig
	// has one. Clone it before changing it.
	TLS *tls.Config
	// CA is the PEM of the CA that signed the API server's certificate
	// (nil for an existing cluster whose kubeconfig names none, trusting the
	// system roots).
	CA []byte
	// Token is an admin bearer token (group system:masters for a started
	// cluster); "" for an existing cluster that authenticates otherwise.
	Token string
	// Kubeconfig is the path of a kubeconfig file for the cluster, with the
	// CA and token embedded (for a started cluster: in its data directory,
	// removed by Stop).
	Kubeconfig string

	rest    *rest.Config
	dataDir string // "" for an existing cluster

	// For Restart: how each process was started and is checked ready;
	// empty for an existing cluster.
	lifetime context.Context // Start's ctx: the processes live as long as it
	specs    map[string]procSpec

	mu        sync.Mutex
	procs     []*Process
	exited    chan struct{} // closed when the first process exits
	firstExit *Process

	stopOnce sync.Once
	stopErr  error
}

// RESTConfig returns a new client-go rest.Config for the cluster, as admin.
func (c *Cluster) RESTConfig() *rest.Config {
	return rest.CopyConfig(c.rest)
}

// ServiceAccountToken returns a bearer token for the ServiceAccount
// namespace/name from the TokenRequest API (with the API server's default
// audience and expiry of one hour). The ServiceAccount must exist; creating
// it is the caller's job. Errors are the API server's, wrapped.
func (c *Cluster) ServiceAccountToken(ctx context.Context, namespace, name string) (string, error) {
	client, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return "", fmt.Errorf("controlplane: requesting a token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	tr, err := client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("controlplane: requesting a token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// Done returns a channel that is closed when a process of a started
// cluster exits (it crashed, was killed because the context given to Start
// is done, or Stop was called). For an existing cluster it is never closed.
func (c *Cluster) Done() <-chan struct{} {
	if c.exited == nil {
		return nil
	}
	return c.exited
}

// Err returns, once Done is closed, an error naming the first process
// that exited, with the tail of its log; nil before.
func (c *Cluster) Err() error {
	c.mu.Lock()
	p := c.firstExit
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.exitError()
}

// Stop kills the processes of a started cluster (their whole process
// groups, with SIGKILL: the data is thrown away), waits for them to exit,
// and removes the data directory. It is safe to call more than once and
// from several goroutines; later calls return the first call's result.
// For an existing cluster it does nothing. The error is from removing the
// directory.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		procs := slices.Clone(c.procs)
		c.mu.Unlock()
		slices.Reverse(procs)
		for _, p := range procs {
			_ = p.Kill()
		}
		if c.dataDir != "" {
			if err := os.RemoveAll(c.dataDir); err != nil {
				c.stopErr = fmt.Errorf("controlplane: removing the data directory: %w", err)
			}
		}
	})
	return c.stopErr
}

// FromKubeconfig returns a Cluster for the existing cluster of the current
// context of the kubeconfig file at path (as kind or k3s write), so tests
// written against [Start] run against it unchanged. Server, TLS (CA and
// client certificate), CA and Token come from the kubeconfig; Token is ""
// when it authenticates with a client certificate. Stop does nothing.
//
// Errors: the file cannot be read or has no usable current context, the
// server is not an https URL, or its TLS settings are invalid.
func FromKubeconfig(path string) (*Cluster, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("controlplane: reading kubeconfig %s: %w", path, err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("controlplane: kubeconfig %s: server %q: %w", path, cfg.Host, err)
	}
	if u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("controlplane: kubeconfig %s: server %q is not an https URL", path, cfg.Host)
	}
	server := u.Host
	if u.Port() == "" {
		server = net.JoinHostPort(u.Hostname(), "443")
	}
	if err := rest.LoadTLSFiles(cfg); err != nil {
		return nil, fmt.Errorf("controlplane: kubeconfig %s: %w", path, err)
	}
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("controlplane: kubeconfig %s: %w", path, err)
	}
	if tlsConfig == nil {
		return nil, errors.New("controlplane: kubeconfig " + path + ": no TLS settings")
	}
	if tlsConfig.ServerName == "" {
		tlsConfig.ServerName = u.Hostname()
	}
	token := cfg.BearerToken
	if token == "" && cfg.BearerTokenFile != "" {
		b, err := os.ReadFile(cfg.BearerTokenFile)
		if err != nil {
			return nil, fmt.Errorf("controlplane: kubeconfig %s: reading its token file: %w", path, err)
		}
		token = string(trimSpace(b))
	}
	return &Cluster{
		Server:     server,
		TLS:        tlsConfig,
		CA:         cfg.TLSClientConfig.CAData,
		Token:      token,
		Kubeconfig: path,
		rest:       cfg,
	}, nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// restConfig returns the rest.Config of a started cluster.
func restConfig(host string, ca []byte, token string) *rest.Config {
	return &rest.Config{
		Host:            host,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca},
	}
}

// writeKubeconfig writes a kubeconfig for server with the CA and token
// embedded, its current context "humus".
func writeKubeconfig(path, server string, ca []byte, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["humus"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["humus"] = &clientcmdapi.Context{Cluster: "humus", AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = "humus"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("controlplane: writing the kubeconfig: %w", err)
	}
	return nil
}
