// Package peer is what the benchmark's child processes share: reading the
// kubeconfig the benchmark hands them, and answering its requests for the
// heap in use.
package peer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"runtime"
	"sync"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/z5labs/humus/kube"
)

// RESTConfig reads the kubeconfig at path with client-go's clientcmd, and
// returns its current context's rest.Config with client-side rate limiting
// off (QPS -1), as controller-runtime v0.25 and kube.Client have it, and
// userAgent set.
func RESTConfig(path, userAgent string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig %s: %w", path, err)
	}
	cfg.QPS = -1
	cfg.UserAgent = userAgent
	return cfg, nil
}

// Connection turns the kubeconfig at path into a kube.Connection: its
// server's host:port, a TLS config with its CA and client certificate, and
// its bearer token, if any.
func Connection(path string) (kube.Connection, error) {
	cfg, err := RESTConfig(path, "")
	if err != nil {
		return kube.Connection{}, err
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return kube.Connection{}, fmt.Errorf("kubeconfig %s: server %q: %w", path, cfg.Host, err)
	}
	if u.Port() == "" {
		return kube.Connection{}, fmt.Errorf("kubeconfig %s: server %q has no port", path, cfg.Host)
	}
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return kube.Connection{}, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	if tlsCfg == nil {
		return kube.Connection{}, errors.New("kubeconfig " + path + ": the server isn't https")
	}
	conn := kube.Connection{Server: u.Host, TLS: tlsCfg.Clone()}
	if tok := cfg.BearerToken; tok != "" {
		conn.Token = func(context.Context) (string, error) { return tok, nil }
	}
	return conn, nil
}

// ReportMemory answers each line "mem" read from in with one line on out,
// "heapinuse <bytes> heapalloc <bytes>", measured after a garbage
// collection, so it is the heap the process holds rather than its garbage.
// It returns at EOF.
func ReportMemory(in io.Reader, out io.Writer, mu *sync.Mutex) {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if sc.Text() != "mem" {
			continue
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		mu.Lock()
		fmt.Fprintf(out, "heapinuse %d heapalloc %d\n", ms.HeapInuse, ms.HeapAlloc)
		mu.Unlock()
	}
}
