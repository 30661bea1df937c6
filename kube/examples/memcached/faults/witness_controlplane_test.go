//go:build controlplane

package faults_test

import (
	"encoding/pem"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/z5labs/humus/controlplane/apptest"
)

// witness is a reverse proxy, served by the test, between one replica and
// the API server: the replica's kubeconfig names the proxy, which records
// each request as it arrives and passes it on. What it records is what the
// API server was sent, independent of the replica's own telemetry.
type witness struct {
	kubeconfig string // the replica's kubeconfig, naming the proxy

	mu   sync.Mutex
	reqs []sent
}

// sent is one request a witness saw arrive: when its headers arrived and
// when its answer had been passed back (zero until then), by the test's
// clock, its method and its URL's path.
type sent struct {
	T, Done time.Time
	Method  string
	Path    string
}

// newWitness serves a witness over HTTPS (HTTP/2, as the API server) on
// 127.0.0.1, passing each request on to e's API server with the request's
// own credentials, and writes the kubeconfig that names it, with e's
// admin token. It is closed when the test ends, after the replicas
// started later are killed.
func newWitness(t *testing.T, e apptest.Env) *witness {
	t.Helper()
	w := &witness{}
	target := &url.URL{Scheme: "https", Host: e.Cluster.Server}
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport: &http.Transport{TLSClientConfig: e.Cluster.TLS.Clone(), ForceAttemptHTTP2: true},
		// A watch's events pass at once.
		FlushInterval: -1,
		// A request the replica gives up on (its Lease lost, or the
		// process killed) is no proxy error to log.
		ErrorHandler: func(rw http.ResponseWriter, _ *http.Request, _ error) { rw.WriteHeader(http.StatusBadGateway) },
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.mu.Lock()
		i := len(w.reqs)
		w.reqs = append(w.reqs, sent{T: time.Now(), Method: r.Method, Path: r.URL.Path})
		w.mu.Unlock()
		proxy.ServeHTTP(rw, r)
		w.mu.Lock()
		w.reqs[i].Done = time.Now()
		w.mu.Unlock()
	}))
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(discard{}, "", 0) // TLS handshakes cut short by a kill
	srv.StartTLS()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})

	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["witness"] = &clientcmdapi.Cluster{
		Server:                   srv.URL,
		CertificateAuthorityData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}),
	}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: e.Cluster.Token}
	cfg.Contexts["witness"] = &clientcmdapi.Context{Cluster: "witness", AuthInfo: "admin"}
	cfg.CurrentContext = "witness"
	w.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, w.kubeconfig))
	return w
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// writes returns the requests the witness saw that write Memcacheds or
// Deployments (every method but GET, HEAD and OPTIONS), in the order they
// arrived.
func (w *witness) writes() []sent {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []sent
	for _, r := range w.reqs {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			continue
		}
		if strings.Contains(r.Path, "/memcacheds") || strings.Contains(r.Path, "/deployments") {
			out = append(out, r)
		}
	}
	return out
}

// requireNoWriteSentAfter fails the test if old, the old leader, sent the
// API server a write of a Memcached or a Deployment after at, the new
// leader's acquireTime, as the witness in front of it saw. So that it
// cannot pass for a witness that saw nothing, old must have sent some
// before at, and next, the new leader, some after. It logs how many of
// the old leader's writes were still unanswered at at: sent before, they
// are not failures, but the API server may have applied them after.
func requireNoWriteSentAfter(t *testing.T, old, next *witness, at time.Time) {
	t.Helper()
	var before, inFlight, late int
	var last time.Time
	for _, r := range old.writes() {
		if !r.T.After(at) {
			before++
			last = r.T
			if r.Done.IsZero() || r.Done.After(at) {
				inFlight++
			}
			continue
		}
		late++
		t.Errorf("the old leader sent %s %s at %s, %v after the new leader acquired the Lease", r.Method, r.Path,
			r.T.Format(time.StampMicro), r.T.Sub(at).Round(time.Millisecond))
		if late == 10 {
			t.FailNow()
		}
	}
	after := 0
	for _, r := range next.writes() {
		if r.T.After(at) {
			after++
		}
	}
	t.Logf("the witnesses saw the old leader send %d writes of Memcacheds and Deployments, the last %v before the new leader acquired (%d of them unanswered then), and none after; the new leader %d after",
		before, at.Sub(last).Round(time.Millisecond), inFlight, after)
	require.Positive(t, before, "writes the old leader's witness saw before the new leader acquired")
	require.Positive(t, after, "writes the new leader's witness saw after it acquired")
}
