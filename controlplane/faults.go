package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// procSpec is how Start started one of a cluster's processes, so that
// Restart starts it again the same way, and how it is checked ready.
type procSpec struct {
	path  string
	args  []string
	ready func(context.Context) error // nil when ready
}

// The faults a test causes on a started cluster: a process killed and
// restarted, or paused and continued. Each takes a process's name: Etcd,
// KubeAPIServer or KubeControllerManager.

// Process returns the running process name of a started cluster (Etcd,
// KubeAPIServer or KubeControllerManager), to pause, continue or signal it;
// after Restart, the new one. Errors: an existing cluster (FromKubeconfig),
// whose processes are not this one's; an unknown name; the process was
// killed and not restarted.
func (c *Cluster) Process(name string) (*Process, error) {
	if c.specs == nil {
		return nil, errors.New("controlplane: the cluster was not started by this process: its processes can't be reached")
	}
	if _, ok := c.specs[name]; !ok {
		return nil, fmt.Errorf("controlplane: no process is named %q; the names are %q, %q and %q", name, Etcd, KubeAPIServer, KubeControllerManager)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("controlplane: %s is not running: it was killed and not restarted", name)
}

// Kill kills the process name (SIGKILL to its group, as a crash or an
// out-of-memory kill does) and waits for it to exit; the exit is not
// reported by Done. Its ports, PKI and data stay, for Restart. With
// kube-apiserver killed, clients are refused; with etcd killed, the API
// server answers errors until etcd is back. It must not be called
// concurrently with Stop. Errors: as Process's.
func (c *Cluster) Kill(name string) error {
	p, err := c.Process(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.procs = slices.DeleteFunc(c.procs, func(q *Process) bool { return q == p })
	c.mu.Unlock()
	return p.Kill()
}

// Restart starts the process name again with the arguments Start gave it,
// on the same ports, with the same PKI, token and data (etcd keeps every
// object), after killing it if it runs, and waits until it is ready
// (etcd's /health, kube-apiserver's /readyz, kube-controller-manager's
// /healthz), so that clients reconnect as to a restarted server. Measured
// on a busy 2-core machine: kube-apiserver is ready again in about 5s. It
// must not be called concurrently with Stop.
//
// Errors: an existing cluster or an unknown name (as Process's), the new
// process exits or is not ready within a minute (with the tail of its log),
// or ctx is done.
func (c *Cluster) Restart(ctx context.Context, name string) error {
	if _, err := c.Process(name); err == nil {
		if err := c.Kill(name); err != nil {
			return err
		}
	} else if c.specs == nil || c.specs[name].path == "" {
		return err
	}
	p, err := c.startSpec(c.lifetime, name)
	if err != nil {
		return err
	}
	return c.waitFor(ctx, time.Now().Add(time.Minute), p, c.specs[name].ready)
}

// Pause stops the process name's group with SIGSTOP: etcd frozen, or an
// API server that accepts connections and answers nothing, until Continue.
// Errors: as Process's, or the signal's.
func (c *Cluster) Pause(name string) error {
	p, err := c.Process(name)
	if err != nil {
		return err
	}
	return p.Pause()
}

// Continue resumes the paused process name with SIGCONT. Errors: as
// Pause's.
func (c *Cluster) Continue(name string) error {
	p, err := c.Process(name)
	if err != nil {
		return err
	}
	return p.Continue()
}

// tlsClient returns an HTTP client that trusts the cluster's CA, for
// readiness checks; its idle connections are the caller's to close.
func (c *Cluster) tlsClient() *http.Client {
	return &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: c.TLS.Clone()},
	}
}
