//go:build controlplane

package conversion_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/httpserver"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube/conversion"
)

// faults are what a test webhook does wrong, changed while it serves.
type faults struct {
	// delay holds every review this long before it is answered.
	delay atomic.Int64 // a time.Duration
	// fail names an object whose conversion fails: the whole review is
	// answered Failed, naming it.
	fail atomic.Pointer[string]
}

// replica is one webhook server, as one of the App's replicas serves it.
type replica struct {
	addr    string
	reviews atomic.Int64 // ConversionReviews answered
	stop    func()
}

// gizmoKind is the Gizmo's conversions, with f's faults.
func gizmoKind(f *faults) conversion.Kind[GizmoV2] {
	check := func(name string) error {
		if bad := f.fail.Load(); bad != nil && *bad == name {
			return fmt.Errorf("the gizmo %s can't be converted", name)
		}
		return nil
	}
	return conversion.Kind[GizmoV2]{
		Group: "conversion.example.com", Kind: "Gizmo", Hub: "v2",
		Spokes: []conversion.Spoke[GizmoV2]{conversion.NewSpoke("v1",
			func(src *GizmoV1, dst *GizmoV2) error {
				dst.ObjectMeta, dst.Spec.Replicas = src.ObjectMeta, src.Spec.Size
				return check(src.Name)
			},
			func(src *GizmoV2, dst *GizmoV1) error {
				dst.ObjectMeta, dst.Spec.Size = src.ObjectMeta, src.Spec.Replicas
				return check(src.Name)
			})},
	}
}

// serveWebhook serves the Gizmo's conversion webhook over TLS with cert
// on a free port of 127.0.0.1, with f's faults (nil, none), until the
// test ends or the replica's stop is called.
func serveWebhook(t testing.TB, cert httpserver.Certificate, f *faults) *replica {
	t.Helper()
	return serveWebhookAt(t, "127.0.0.1:0", cert, f)
}

// serveWebhookAt is serveWebhook on the address addr, such as one a
// stopped replica served on.
func serveWebhookAt(t testing.TB, addr string, cert httpserver.Certificate, f *faults) *replica {
	t.Helper()
	if f == nil {
		f = &faults{}
	}
	tel := humustest.NewTelemetry(t)
	host := humus.OSHost()
	listen := host.Listen
	listening := make(chan net.Addr, 1)
	host.Listen = func(ctx context.Context, network, address string) (net.Listener, error) {
		ln, err := listen(ctx, network, address)
		if err == nil {
			listening <- ln.Addr()
		}
		return ln, err
	}
	s := &humus.Setup{Host: host, Telemetry: tel.Telemetry}
	h, err := conversion.Handler(s, gizmoKind(f))
	require.NoError(t, err)
	r := &replica{}
	mux := http.NewServeMux()
	mux.Handle(conversion.Path, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.reviews.Add(1)
		if d := time.Duration(f.delay.Load()); d > 0 {
			select {
			case <-time.After(d):
			case <-req.Context().Done():
				return
			}
		}
		h.ServeHTTP(w, req)
	}))
	svc, err := httpserver.New(s, httpserver.Config{Name: "webhooks", Addr: addr, Handler: mux, Certificate: cert})
	require.NoError(t, err)
	serveCtx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- svc.Serve(serveCtx) }()
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			ctx, done := context.WithTimeout(context.Background(), 5*time.Second)
			defer done()
			_ = svc.Shutdown(ctx) // a delayed review may be cut short
			<-served
		})
	}
	t.Cleanup(r.stop)
	select {
	case a := <-listening:
		r.addr = a.String()
	case err := <-served:
		served <- err // for stop
		t.Fatalf("serving the webhook on %s: %v", addr, err)
	}
	return r
}

// gizmoCRD returns the Gizmo's CRD calling url, trusting caBundle (nil,
// none yet).
func gizmoCRD(t testing.TB, url string, caBundle []byte) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	var crd apiextensionsv1.CustomResourceDefinition
	require.NoError(t, yaml.UnmarshalStrict(fmt.Appendf(nil, crdYAML, url, base64.StdEncoding.EncodeToString(caBundle)), &crd))
	return &crd
}

// gizmos returns the Gizmos' client at version v in namespace ns.
func gizmos(dyn dynamic.Interface, v, ns string) dynamic.ResourceInterface {
	return dyn.Resource(schema.GroupVersionResource{Group: "conversion.example.com", Version: v, Resource: "gizmos"}).Namespace(ns)
}

// webhookURL is the URL of a webhook server at addr.
func webhookURL(addr string) string { return fmt.Sprintf("https://%s%s", addr, conversion.Path) }

// proxy passes each TCP connection it accepts on 127.0.0.1 to one of its
// backends, as kube-proxy spreads a Service's connections over its
// endpoints, which the local control plane has not: to the replica that
// has answered the fewest ConversionReviews so far, the first of them on
// a tie.
//
// Not in turn: when its caBundle changes, the API server's HTTP/2 client
// dials for several requests at once, keeps the first connection made and
// closes the others after their TLS handshake. Measured here: connections
// 2 to 5 dialed within 2 ms, and only the 4th carried a review. So the
// connections that carry reviews can all land on one backend in turn (1
// run in 4 did: every used one was even), and a test that needs both
// replicas to answer needs a proxy that sends a new connection where
// reviews have not gone. (A backend that stopped would keep being picked,
// as it answers none: no test stops one behind this proxy.)
type proxy struct {
	ln       net.Listener
	backends []*replica
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

func newProxy(t testing.TB, backends ...*replica) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, backends: backends, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.closeAll()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		backend := p.backends[0]
		for _, r := range p.backends[1:] {
			if r.reviews.Load() < backend.reviews.Load() {
				backend = r
			}
		}
		out, err := net.Dial("tcp", backend.addr)
		if err != nil {
			_ = in.Close() // as a connection to a dead endpoint is refused
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
		}
		go pipe(in, out)
		go pipe(out, in)
	}
}

// closeAll closes every connection passed on so far.
func (p *proxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}
