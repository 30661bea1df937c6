package kube_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"net"
	"strings"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/kube"
	"k8s.io/client-go/kubernetes"
)

// A pod's Init fills the Connection from what the kubelet provides: the
// API server's address in the environment, and the cluster's CA and the
// service account token in files, all read through the Host. Token reads
// the file again each time the Client calls it, at most once a minute, so
// the kubelet's rotations are picked up.
func ExampleNewClient() {
	const serviceAccount = "var/run/secrets/kubernetes.io/serviceaccount/"

	_ = func(ctx context.Context, s *humus.Setup) ([]humus.Service, error) {
		host, _ := s.Host.LookupEnv("KUBERNETES_SERVICE_HOST")
		port, _ := s.Host.LookupEnv("KUBERNETES_SERVICE_PORT")
		ca, err := fs.ReadFile(s.Host.FS, serviceAccount+"ca.crt")
		if err != nil {
			return nil, err
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(ca) {
			return nil, errors.New("no certificate in ca.crt")
		}

		client, err := kube.NewClient(s, kube.Connection{
			Server: net.JoinHostPort(host, port),
			TLS:    &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
			Token: func(ctx context.Context) (string, error) {
				b, err := fs.ReadFile(s.Host.FS, serviceAccount+"token")
				return strings.TrimSpace(string(b)), err
			},
		})
		if err != nil {
			return nil, err // one error naming every mistake
		}

		// Every client-go client made from Config shares the Client's
		// transport.
		kc, err := kubernetes.NewForConfig(client.Config())
		if err != nil {
			return nil, err
		}
		_ = kc
		return nil, nil
	}
}
