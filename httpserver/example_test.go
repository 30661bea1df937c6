package httpserver_test

import (
	"context"
	"net/http"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/httpserver"
)

// An App's Init serving its webhooks over TLS with the certificate a
// cert-manager Certificate keeps in a Secret mounted at
// /tmp/k8s-webhook-server/serving-certs, read again as it rotates.
func ExampleNew() {
	_ = func(ctx context.Context, s *humus.Setup) ([]humus.Service, error) {
		certs, err := httpserver.CertDir(s, "tmp/k8s-webhook-server/serving-certs") // no leading slash: a name in s.Host.FS
		if err != nil {
			return nil, err // names the file that doesn't load
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello\n")) })
		svc, err := httpserver.New(s, httpserver.Config{Name: "webhooks", Addr: ":9443", Handler: mux, Certificate: certs})
		if err != nil {
			return nil, err
		}
		return []humus.Service{svc}, nil
	}
}

// A serving certificate the App makes, with the CA a client is given to
// trust it, such as a webhook configuration's caBundle.
func ExampleNewAuthority() {
	a, err := httpserver.NewAuthority(0, "webhooks.my-system.svc", "127.0.0.1")
	if err != nil {
		panic(err)
	}
	_ = a.CABundle() // PEM, for clientConfig.caBundle
	_, _ = a.ServingPEM()
}
