package httpserver_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/httpserver"
	"github.com/z5labs/humus/humustest"
)

// hello answers "hello" and the request's protocol.
var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.WriteString(w, "hello over "+r.Proto)
})

// setup returns a fake Host and in-memory Telemetry.
func setup(t *testing.T) (*humustest.Host, *humustest.Telemetry, *humus.Setup) {
	h := humustest.NewHost(t)
	tel := humustest.NewTelemetry(t)
	return h, tel, &humus.Setup{Host: h.Host, Telemetry: tel.Telemetry}
}

// client returns an HTTP client dialling through h that trusts caPEM, and
// closes its idle connections when the test ends.
func client(t *testing.T, h *humustest.Host, caPEM []byte, keepAlive bool) *http.Client {
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	tr := &http.Transport{
		DialContext:       h.Dial,
		TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: "webhooks.test.svc", MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
		DisableKeepAlives: !keepAlive,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func get(c *http.Client, url string) (string, *tls.ConnectionState, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), resp.TLS, err
}

func TestServesHTTP2AndHTTP1OverTLSWithASelfMadeAuthority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, _, s := setup(t)
		a, err := httpserver.NewAuthority(0, "webhooks.test.svc", "127.0.0.1")
		require.NoError(t, err)
		svc, err := httpserver.New(s, httpserver.Config{Name: "webhooks", Addr: ":9443", Handler: hello, Certificate: a})
		require.NoError(t, err)
		humustest.TestService(t, svc)
		synctest.Wait()

		body, state, err := get(client(t, h, a.CABundle(), true), "https://pod.test:9443/")
		require.NoError(t, err, "the client trusts the Authority's CA bundle")
		require.Equal(t, "hello over HTTP/2.0", body)
		require.Equal(t, "h2", state.NegotiatedProtocol)

		svc1, err := httpserver.New(s, httpserver.Config{Name: "metrics", Addr: ":8443", Handler: hello, Certificate: a, HTTP1Only: true})
		require.NoError(t, err)
		humustest.TestService(t, svc1)
		synctest.Wait()
		body, _, err = get(client(t, h, a.CABundle(), true), "https://pod.test:8443/")
		require.NoError(t, err)
		require.Equal(t, "hello over HTTP/1.1", body)
	})
}

func TestServesPlainHTTPWithoutACertificate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, _, s := setup(t)
		svc, err := httpserver.New(s, httpserver.Config{Name: "local", Addr: "127.0.0.1:8080", Handler: hello})
		require.NoError(t, err)
		humustest.TestService(t, svc)
		synctest.Wait()
		body, state, err := get(h.Client(), "http://127.0.0.1:8080/")
		require.NoError(t, err)
		require.Equal(t, "hello over HTTP/1.1", body)
		require.Nil(t, state)
	})
}

// writePair writes a new Authority's serving pair to certs/ and returns
// the Authority.
func writePair(t *testing.T, h *humustest.Host) *httpserver.Authority {
	a, err := httpserver.NewAuthority(0, "webhooks.test.svc")
	require.NoError(t, err)
	c, k := a.ServingPEM()
	h.WriteFile("certs/tls.crt", c)
	h.WriteFile("certs/tls.key", k)
	return a
}

// trusting returns a client that trusts each of the Authorities.
func trusting(t *testing.T, h *humustest.Host, as ...*httpserver.Authority) *http.Client {
	var bundle []byte
	for _, a := range as {
		bundle = append(bundle, a.CABundle()...)
	}
	return client(t, h, bundle, false)
}

func TestCertFilesRotateWhileRequestsFlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, tel, s := setup(t)
		first := writePair(t, h)
		files, err := httpserver.CertDir(s, "certs")
		require.NoError(t, err)
		svc, err := httpserver.New(s, httpserver.Config{Name: "webhooks", Addr: ":9443", Handler: hello, Certificate: files})
		require.NoError(t, err)
		humustest.TestService(t, svc)
		synctest.Wait()

		// Clients that trust both CAs keep requesting, each on a new
		// connection, while the files are replaced and time passes.
		var second *httpserver.Authority
		c := trusting(t, h, first)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var served atomic.Int64
		var mu sync.Mutex
		issuers := map[string]int{}
		both := func() *http.Client { mu.Lock(); defer mu.Unlock(); return c }
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					body, state, err := get(both(), "https://pod.test:9443/")
					if err != nil {
						t.Errorf("a request during the rotation: %v", err)
						return
					}
					if body != "hello over HTTP/2.0" {
						t.Errorf("body %q", body)
					}
					served.Add(1)
					mu.Lock()
					issuers[state.PeerCertificates[0].Issuer.CommonName]++
					mu.Unlock()
					time.Sleep(time.Second)
				}
			})
		}
		time.Sleep(3 * time.Second)
		second, err = httpserver.NewAuthority(0, "webhooks.test.svc")
		require.NoError(t, err)
		mu.Lock()
		c = trusting(t, h, first, second)
		mu.Unlock()
		cert, key := second.ServingPEM()
		h.WriteFile("certs/tls.crt", cert)
		h.WriteFile("certs/tls.key", key)
		time.Sleep(httpserver.ReloadInterval + 2*time.Second)
		close(stop)
		wg.Wait()

		require.Greater(t, served.Load(), int64(40))
		require.Len(t, issuers, 2, "both certificates were served: %v", issuers)
		body, state, err := get(trusting(t, h, second), "https://pod.test:9443/")
		require.NoError(t, err, "the renewed certificate alone is served now")
		require.Equal(t, "hello over HTTP/2.0", body)
		require.Equal(t, "webhooks.test.svc", state.PeerCertificates[0].Subject.CommonName)

		var renewed []sdklog.Record
		for _, r := range tel.Records() {
			if r.Body().AsString() == "serving the renewed certificate" {
				renewed = append(renewed, r)
			}
		}
		require.Len(t, renewed, 1, "read again every ReloadInterval, logged only when it changed")
		require.Equal(t, "/certs/tls.crt", attr(renewed[0], "tls.certificate.file"))
	})
}

func attr(r sdklog.Record, key string) string {
	var v string
	r.WalkAttributes(func(kv attribute.KeyValue) bool {
		if string(kv.Key) == key {
			v = kv.Value.AsString()
			return false
		}
		return true
	})
	return v
}

func TestCertFilesNameTheFileThatDoesntLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, tel, s := setup(t)
		_, err := httpserver.CertDir(s, "certs")
		require.EqualError(t, err, "httpserver: reading the certificate /certs/tls.crt: open certs/tls.crt: file does not exist")

		first := writePair(t, h)
		h.WriteFile("certs/tls.key", []byte("not a key"))
		_, err = httpserver.CertDir(s, "certs")
		require.ErrorContains(t, err, "httpserver: the certificate /certs/tls.crt with its key /certs/tls.key: tls: failed to find any PEM data in key input")

		_, err = httpserver.CertFiles(s, "/tmp/certs/tls.crt", "../tls.key")
		require.EqualError(t, err, `httpserver: the certificate file "/tmp/certs/tls.crt" starts with a slash: names in the Host's FS have none, since it is rooted at / (/tmp/certs/tls.crt is "tmp/certs/tls.crt")`+"\n"+
			`httpserver: the key file "../tls.key" is no file name in the Host's FS: names are slash-separated, with no leading slash and no . or .. element`)
		_, err = httpserver.CertDir(s, "/tmp/certs")
		require.ErrorContains(t, err, `httpserver: the directory "/tmp/certs" starts with a slash`)

		// A rotation that doesn't load keeps the last pair, and says so.
		first = writePair(t, h)
		files, err := httpserver.CertDir(s, "certs")
		require.NoError(t, err)
		h.WriteFile("certs/tls.key", []byte("half-written"))
		time.Sleep(httpserver.ReloadInterval)
		got, err := files.GetCertificate(nil)
		require.NoError(t, err)
		c, _ := first.ServingPEM()
		block, _ := pem.Decode(c)
		require.Equal(t, block.Bytes, got.Certificate[0], "the last pair that loaded")
		records := tel.Records()
		require.Len(t, records, 1)
		require.Equal(t, log.SeverityError, records[0].Severity())
		require.Equal(t, "the certificate files don't load; the last certificate read is still served", records[0].Body().AsString())
		require.Contains(t, attr(records[0], "error"), "/certs/tls.key: tls: failed to find any PEM data in key input")
	})
}

func TestHandshakeErrorsGoToTheAppsLoggerNamingTheServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, tel, s := setup(t)
		a, err := httpserver.NewAuthority(0, "webhooks.test.svc")
		require.NoError(t, err)
		svc, err := httpserver.New(s, httpserver.Config{Name: "webhooks", Addr: ":9443", Handler: hello, Certificate: a})
		require.NoError(t, err)
		humustest.TestService(t, svc)
		synctest.Wait()

		// A client that doesn't trust the CA, and one that hangs up at once,
		// as a TCP probe does.
		other, err := httpserver.NewAuthority(0, "webhooks.test.svc")
		require.NoError(t, err)
		_, _, err = get(trusting(t, h, other), "https://pod.test:9443/")
		require.ErrorContains(t, err, "certificate signed by unknown authority")
		conn, err := h.Dial(t.Context(), "tcp", "pod.test:9443")
		require.NoError(t, err)
		conn.Close()
		synctest.Wait()

		records := tel.Records()
		require.Len(t, records, 2)
		severities := map[string]log.Severity{}
		for _, r := range records {
			body := r.Body().AsString()
			require.Contains(t, body, "http: TLS handshake error from 127.0.0.1:")
			switch {
			case strings.HasSuffix(body, "bad certificate"):
				severities["untrusted"] = r.Severity()
			case strings.HasSuffix(body, ": EOF"):
				severities["hung up"] = r.Severity()
			}
		}
		require.Equal(t, map[string]log.Severity{"untrusted": log.SeverityWarn, "hung up": log.SeverityDebug}, severities)
		for _, r := range records {
			require.Equal(t, "webhooks", attr(r, "humus.server.name"))
			require.Equal(t, ":9443", attr(r, "server.address"))
		}
		require.Empty(t, h.StderrString(), "nothing on the Host's standard error")
	})
}

func TestAHandlersPanicIsLoggedAtError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, tel, s := setup(t)
		svc, err := httpserver.New(s, httpserver.Config{Name: "local", Addr: "127.0.0.1:8080",
			Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") })})
		require.NoError(t, err)
		humustest.TestService(t, svc)
		synctest.Wait()
		_, _, err = get(h.Client(), "http://127.0.0.1:8080/")
		require.Error(t, err)
		records := tel.Records()
		require.Len(t, records, 1)
		require.Equal(t, log.SeverityError, records[0].Severity())
		require.Contains(t, records[0].Body().AsString(), "http: panic serving")
		require.Contains(t, records[0].Body().AsString(), "boom")
	})
}

func TestNewNamesEveryMistakeAndTheServer(t *testing.T) {
	_, err := httpserver.New(nil, httpserver.Config{Name: "webhooks", Addr: "9443", ReadHeaderTimeout: -1})
	require.EqualError(t, err, `httpserver "webhooks": Config.Addr "9443" is not host:port, such as :9443: address 9443: missing port in address`+"\n"+
		"Config.Handler is nil\n"+
		"Config.ReadHeaderTimeout is -1ns: it is 0 (the default) or more\n"+
		"New was given a nil Setup")
	_, err = httpserver.New(&humus.Setup{}, httpserver.Config{})
	require.ErrorContains(t, err, "Config.Name is empty")
	require.ErrorContains(t, err, "Config.Addr is empty")
	require.ErrorContains(t, err, "s.Host.Listen is nil")

	_, err = httpserver.NewAuthority(-time.Second, "a", "")
	require.EqualError(t, err, "httpserver: NewAuthority: host 1 is empty\nhttpserver: NewAuthority: the validity -1s is negative")
}

func TestNewRefusesANilCertificateOfAType(t *testing.T) {
	_, _, s := setup(t)
	var files *httpserver.Files // a CertDir whose error went unchecked
	_, err := httpserver.New(s, httpserver.Config{Name: "webhooks", Addr: ":9443", Handler: hello, Certificate: files})
	require.EqualError(t, err, `httpserver "webhooks": Config.Certificate is a nil *httpserver.Files: give the one CertFiles, CertDir or NewAuthority returned with no error, or nil for plain HTTP`)
}

func TestServeNamesTheServerWhenItCantListen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, _, s := setup(t)
		s.Host.Listen = func(context.Context, string, string) (net.Listener, error) { return nil, errors.New("address in use") }
		svc, err := httpserver.New(s, httpserver.Config{Name: "metrics", Addr: ":8443", Handler: hello})
		require.NoError(t, err)
		require.EqualError(t, svc.Serve(t.Context()), `httpserver "metrics": listening on :8443: address in use`)
	})
}

func TestShutdownForcesARequestInFlightAndLeavesNoGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, _, s := setup(t)
		a, err := httpserver.NewAuthority(0, "webhooks.test.svc")
		require.NoError(t, err)
		entered := make(chan struct{})
		svc, err := httpserver.New(s, httpserver.Config{Name: "webhooks", Addr: ":9443", Certificate: a,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(entered)
				<-r.Context().Done() // until the connection closes
			})})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		served := make(chan error, 1)
		go func() { served <- svc.Serve(ctx) }()
		synctest.Wait()
		requested := make(chan error, 1)
		go func() { _, _, err := get(trusting(t, h, a), "https://pod.test:9443/"); requested <- err }()
		<-entered
		cancel()
		sctx, scancel := context.WithTimeout(t.Context(), time.Second)
		defer scancel()
		err = svc.Shutdown(sctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, `httpserver "webhooks": forced to stop`)
		require.NoError(t, <-served)
		require.Error(t, <-requested)
		// synctest.Test fails the test if any goroutine of the bubble is
		// still running once this function returns.
	})
}
