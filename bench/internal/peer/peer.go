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
	"os"
	"runtime"
	"runtime/pprof"
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
// Before its first answer it calls first, if not nil: the benchmark asks
// right after convergence, so a CPU profile stopped there covers the same
// span as the CPU seconds it reports. It returns at EOF.
func ReportMemory(in io.Reader, out io.Writer, mu *sync.Mutex, first func()) {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if sc.Text() != "mem" {
			continue
		}
		if first != nil {
			first()
			first = nil
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		mu.Lock()
		fmt.Fprintf(out, "heapinuse %d heapalloc %d\n", ms.HeapInuse, ms.HeapAlloc)
		mu.Unlock()
	}
}

// CPUProfile starts a CPU profile written to path, and returns the function
// that stops it and closes the file; with an empty path it does nothing and
// returns a function that does nothing. Errors are creating the file and
// starting the profile.
func CPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("creating the CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting the CPU profile: %w", err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
		})
	}, nil
}
