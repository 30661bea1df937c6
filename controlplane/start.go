package controlplane

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Options configures [Start]. The zero value runs the binaries in
// [DefaultBinDir] on free ports with the base controllers, and waits up to
// a minute for the control plane to be ready.
type Options struct {
	// BinDir holds the binaries ([Build] writes them), or binaries a user
	// already has, such as envtest's assets (see [AssetsEnv] and
	// [DescribeBinaries]). Default: DefaultBinDir().
	BinDir string
	// DataDir is the directory in which the run's own directory (PKI,
	// etcd data, logs, kubeconfig) is made; that directory is removed by
	// Stop. Default: os.TempDir().
	DataDir string

	// APIServerPort, EtcdClientPort and EtcdPeerPort are the ports on
	// 127.0.0.1 to listen on. Default (0): free ports picked by the kernel.
	// A port that is in use is an error.
	APIServerPort, EtcdClientPort, EtcdPeerPort int

	// Workloads adds deployment-controller and replicaset-controller to the
	// controllers, for tests that want ReplicaSets made from Deployments.
	// (There is no scheduler or kubelet: Pods are never run.)
	Workloads bool
	// ExtraControllers are added to kube-controller-manager's --controllers,
	// in its names (with the -controller suffix, for example
	// "job-controller"). The base list is always on: BaseControllers.
	ExtraControllers []string

	// Progress receives a line as each process is ready, with the time
	// it took. Default: nothing is printed.
	Progress io.Writer

	// APIServerFlags and ControllerManagerFlags are added after the flags
	// Start passes to kube-apiserver and kube-controller-manager (a flag
	// given twice takes its last value), for example
	// "--feature-gates=...". Default: none.
	APIServerFlags, ControllerManagerFlags []string
	// EtcdFlags are added after the flags Start passes to etcd, for example
	// "--quota-backend-bytes=8589934592" (etcd's default quota is 2 GiB) for
	// a benchmark that holds 100,000 objects. Default: none.
	EtcdFlags []string

	// StartTimeout bounds the whole start, until the API server is ready
	// and the controller manager has made the default ServiceAccount.
	// Default: 60s.
	StartTimeout time.Duration
}

// BaseControllers are the kube-controller-manager controllers [Start] always
// runs: the garbage collector, namespace deletion, and ServiceAccounts with
// their tokens.
func BaseControllers() []string {
	return []string{
		"garbage-collector-controller",
		"namespace-controller",
		"serviceaccount-controller",
		"serviceaccount-token-controller",
	}
}

// WorkloadControllers are the controllers Options.Workloads adds.
func WorkloadControllers() []string {
	return []string{"deployment-controller", "replicaset-controller"}
}

// serviceCIDR is the API server's --service-cluster-ip-range; its first
// address is the kubernetes Service's cluster IP.
const (
	serviceCIDR = "10.0.0.0/24"
	serviceIP   = "10.0.0.1"
	issuer      = "https://kubernetes.default.svc.cluster.local"
)

// Start starts etcd, kube-apiserver and kube-controller-manager from
// opts.BinDir on 127.0.0.1, and returns when the API server's /readyz
// answers 200 and the controller manager has made the default
// ServiceAccount of the default namespace (so its controllers run).
//
// It makes, in a new directory under opts.DataDir: a CA, a serving
// certificate for 127.0.0.1 and localhost, a service-account signing key
// (all in Go, ECDSA P-256), a static token file with one random admin token
// in the group system:masters, and a kubeconfig with the CA and that token.
// The API server authorizes with RBAC; the controller manager runs
// BaseControllers (plus Options.Workloads and Options.ExtraControllers)
// without leader election or a serving port.
//
// The processes run until [Cluster.Stop] is called or ctx is done (then
// their process groups are killed; Stop still has to be called to remove the
// data directory). On Linux they are also killed when this process dies.
//
// Errors (each one error; nothing is left running and the directory is
// removed): binaries not built, a port in use, a process that exits while
// starting (with the tail of its log), not ready within StartTimeout (with
// the tail of the log of the process waited for), or ctx done.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	bins, err := builtBinaries(opts.BinDir)
	if err != nil {
		return nil, err
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	t0 := time.Now()
	deadline := t0.Add(timeout)
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}

	ports, err := pickPorts([]namedPort{
		{"kube-apiserver", opts.APIServerPort},
		{"etcd client", opts.EtcdClientPort},
		{"etcd peer", opts.EtcdPeerPort},
		{"kube-controller-manager", 0},
	})
	if err != nil {
		return nil, err
	}
	apiPort, etcdPort, peerPort, kcmPort := ports[0], ports[1], ports[2], ports[3]

	dir, err := os.MkdirTemp(opts.DataDir, "humus-controlplane-")
	if err != nil {
		return nil, fmt.Errorf("controlplane: making the data directory: %w", err)
	}
	c = &Cluster{
		Server:   net.JoinHostPort("127.0.0.1", strconv.Itoa(apiPort)),
		dataDir:  dir,
		exited:   make(chan struct{}),
		lifetime: ctx,
		specs:    map[string]procSpec{},
	}
	defer func() {
		if err != nil {
			_ = c.Stop()
			c = nil
		}
	}()
	files, tokenFile, err := c.writeCredentials(dir)
	if err != nil {
		return c, err
	}

	etcdURL := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(etcdPort))
	peerURL := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(peerPort))
	tlsClient := c.tlsClient()
	defer tlsClient.CloseIdleConnections()
	// The controller manager's controllers run once it has made the
	// default ServiceAccount of the default namespace.
	defaultServiceAccount := func(ctx context.Context) error {
		return get(ctx, tlsClient, "https://"+c.Server+"/api/v1/namespaces/default/serviceaccounts/default", c.Token)
	}
	// Each process in turn, started once the one before is ready.
	for _, step := range []struct {
		name string
		spec procSpec
		also func(context.Context) error // a check beyond spec.ready, or nil
	}{
		{Etcd, etcdSpec(bins.Etcd, dir, etcdURL, peerURL, opts.EtcdFlags), nil},
		{KubeAPIServer, c.apiServerSpec(bins.KubeAPIServer, dir, etcdURL, apiPort, files, tokenFile, opts.APIServerFlags), nil},
		{KubeControllerManager, c.controllerManagerSpec(bins.KubeControllerManager, kcmPort, files, opts), defaultServiceAccount},
	} {
		since := time.Now()
		if err := c.startReady(ctx, deadline, step.name, step.spec, step.also); err != nil {
			return c, err
		}
		fmt.Fprintf(progress, "controlplane: %s ready in %s\n", step.name, time.Since(since).Round(time.Millisecond))
	}
	fmt.Fprintf(progress, "controlplane: %s ready at https://%s in %s\n", Version, c.Server, time.Since(t0).Round(time.Millisecond))
	return c, nil
}

// builtBinaries returns the binaries in binDir, or in DefaultBinDir if
// binDir is "", or an error naming those missing and what to do.
func builtBinaries(binDir string) (Binaries, error) {
	def, defErr := DefaultBinDir()
	if binDir == "" {
		if defErr != nil {
			return Binaries{}, defErr
		}
		binDir = def
	}
	bins := BinariesIn(binDir)
	if err := bins.Check(); err != nil && binDir != def {
		return Binaries{}, fmt.Errorf("controlplane: the binaries in %s are not built or missing: %s: %w", binDir, MissingAssetsHint(binDir), err)
	} else if err != nil {
		return Binaries{}, fmt.Errorf("controlplane: the %s binaries are not built (run controlplane.Build, or `go run github.com/z5labs/humus/controlplane/cmd/controlplane build`): %w", Version, err)
	}
	return bins, nil
}

// writeCredentials makes, in dir, the cluster's PKI, a static token file
// with one random admin token in the group system:masters, and a
// kubeconfig with the CA and that token, and sets c's CA, TLS, Token,
// Kubeconfig and REST config from them. It returns the PKI's files and the
// token file's path.
func (c *Cluster) writeCredentials(dir string) (pkiFiles, string, error) {
	p, err := newPKI(time.Now(), net.ParseIP(serviceIP))
	if err != nil {
		return pkiFiles{}, "", fmt.Errorf("controlplane: making the PKI: %w", err)
	}
	files, err := p.write(dir)
	if err != nil {
		return pkiFiles{}, "", err
	}
	c.CA = p.CACert
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.CACert)
	c.TLS = &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	c.Token = randomToken()
	tokenFile := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(c.Token+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		return pkiFiles{}, "", fmt.Errorf("controlplane: writing the token file: %w", err)
	}
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(c.Kubeconfig, "https://"+c.Server, c.CA, c.Token); err != nil {
		return pkiFiles{}, "", err
	}
	c.rest = restConfig("https://"+c.Server, c.CA, c.Token)
	return files, tokenFile, nil
}

// startReady starts the process name from spec, which Restart then starts
// it from again, and waits until spec.ready, and then also unless it is
// nil, passes: see waitFor.
func (c *Cluster) startReady(ctx context.Context, deadline time.Time, name string, spec procSpec, also func(context.Context) error) error {
	c.specs[name] = spec
	p, err := c.startSpec(ctx, name)
	if err != nil {
		return err
	}
	return c.waitFor(ctx, deadline, p, func(ctx context.Context) error {
		if err := spec.ready(ctx); err != nil || also == nil {
			return err
		}
		return also(ctx)
	})
}

// etcdSpec is etcd's: one member named humus, serving clients at etcdURL
// and its peer at peerURL, with its data in dir/etcd, unsynced, with extra
// flags last, and ready when its /health answers 200.
func etcdSpec(path, dir, etcdURL, peerURL string, extra []string) procSpec {
	return procSpec{path: path, args: append([]string{
		"--name=humus",
		"--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=humus=" + peerURL,
		"--initial-cluster-state=new",
		"--unsafe-no-fsync", // the data is thrown away at Stop
		"--log-level=warn",
	}, extra...), ready: func(ctx context.Context) error {
		plain := &http.Client{Timeout: 2 * time.Second}
		defer plain.CloseIdleConnections()
		return get(ctx, plain, etcdURL+"/health", "")
	}}
}

// apiServerSpec is kube-apiserver's: on etcdURL, serving on 127.0.0.1 at
// apiPort with the PKI's files, the static token file and RBAC, with extra
// flags last, and ready when its /readyz answers 200 to the admin token.
func (c *Cluster) apiServerSpec(path, dir, etcdURL string, apiPort int, files pkiFiles, tokenFile string, extra []string) procSpec {
	return procSpec{path: path, args: append([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		// Advertise loopback, which the default (lease) endpoint reconciler
		// rejects ("may not be in the loopback range"); with no kubelet and
		// no Pods, nothing needs the kubernetes Service's endpoints.
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(apiPort),
		"--cert-dir=" + dir,
		"--tls-cert-file=" + files.ServerCert,
		"--tls-private-key-file=" + files.ServerKey,
		"--client-ca-file=" + files.CACert,
		"--token-auth-file=" + tokenFile,
		"--service-account-issuer=" + issuer,
		"--service-account-key-file=" + files.SAPub,
		"--service-account-signing-key-file=" + files.SAKey,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--authorization-mode=RBAC",
		"--profiling=false",
	}, extra...), ready: func(ctx context.Context) error {
		tlsClient := c.tlsClient()
		defer tlsClient.CloseIdleConnections()
		return get(ctx, tlsClient, "https://"+c.Server+"/readyz", c.Token)
	}}
}

// controllerManagerSpec is kube-controller-manager's: with c's kubeconfig,
// without leader election, serving on 127.0.0.1 at kcmPort, running
// BaseControllers, WorkloadControllers if opts.Workloads, and
// opts.ExtraControllers, with opts.ControllerManagerFlags last, and ready
// when its /healthz answers 200.
func (c *Cluster) controllerManagerSpec(path string, kcmPort int, files pkiFiles, opts Options) procSpec {
	controllers := BaseControllers()
	if opts.Workloads {
		controllers = append(controllers, WorkloadControllers()...)
	}
	controllers = append(controllers, opts.ExtraControllers...)
	args := []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--authentication-kubeconfig=" + c.Kubeconfig,
		"--authorization-kubeconfig=" + c.Kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(kcmPort),
		"--tls-cert-file=" + files.ServerCert,
		"--tls-private-key-file=" + files.ServerKey,
		"--controllers=" + strings.Join(controllers, ","),
		"--service-account-private-key-file=" + files.SAKey,
		"--root-ca-file=" + files.CACert,
		"--cluster-name=humus",
		"--profiling=false",
	}
	healthz := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(kcmPort)) + "/healthz"
	return procSpec{path: path, args: append(args, opts.ControllerManagerFlags...), ready: func(ctx context.Context) error {
		tlsClient := c.tlsClient()
		defer tlsClient.CloseIdleConnections()
		return get(ctx, tlsClient, healthz, "")
	}}
}

// RestartControllerManager restarts kube-controller-manager and waits for
// its /healthz, so that its garbage collector discovers the resources of
// CRDs created since it started at once. Otherwise it finds them only at its
// next discovery sync (every 30s, fixed in kube-controller-manager), and the
// dependents of a custom resource deleted before then are collected up to a
// minute late (measured: 41s), as on any cluster. Call it after creating
// CRDs whose objects own others. For an existing cluster (FromKubeconfig) it
// does nothing. It must not be called concurrently with Stop.
//
// Errors: as Restart's.
func (c *Cluster) RestartControllerManager(ctx context.Context) error {
	if c.specs == nil {
		return nil
	}
	return c.Restart(ctx, KubeControllerManager)
}

// namedPort is a port asked for (0: any free port) and what it is for.
type namedPort struct {
	name string
	port int
}

// pickPorts returns the ports to use on 127.0.0.1: each asked-for port if it
// is free, and a free port picked by the kernel for each 0. All are held
// open together until the end, so the picked ports are distinct.
func pickPorts(asked []namedPort) ([]int, error) {
	var (
		ports []int
		errs  []error
		held  []net.Listener
	)
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for _, a := range asked {
		if a.port < 0 || a.port > 65535 {
			errs = append(errs, fmt.Errorf("controlplane: %s port %d is out of range [0, 65535]", a.name, a.port))
			ports = append(ports, 0)
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(a.port)))
		if err != nil {
			errs = append(errs, fmt.Errorf("controlplane: port 127.0.0.1:%d for %s is in use: %w", a.port, a.name, err))
			ports = append(ports, 0)
			continue
		}
		held = append(held, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, errors.Join(errs...)
}

// randomToken returns 32 random bytes in hex.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail
	return hex.EncodeToString(b)
}

// get returns nil if a GET of url answers 200.
func get(ctx context.Context, client *http.Client, url, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// startSpec starts one of the cluster's processes, as c.specs says; its
// exit before Stop, unless it was killed on purpose, is reported by Done
// and Err.
func (c *Cluster) startSpec(ctx context.Context, name string) (*Process, error) {
	spec := c.specs[name]
	p, err := startProcess(ctx, name, spec.path, spec.args, c.dataDir, c.processExited)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

func (c *Cluster) processExited(p *Process) {
	if p.intended.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.firstExit == nil {
		c.firstExit = p
		close(c.exited)
	}
}

// waitFor polls check every 100ms until it returns nil, and fails when any
// process of the cluster exits (with the tail of its log), when ctx is done,
// or at deadline (with the last check error and the tail of p's log).
func (c *Cluster) waitFor(ctx context.Context, deadline time.Time, p *Process, check func(context.Context) error) error {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-c.exited:
			if ctx.Err() != nil { // the exit is the kill that ctx caused
				return fmt.Errorf("controlplane: waiting for %s to be ready: %w", p.name, context.Cause(ctx))
			}
			return c.Err()
		case <-ctx.Done():
			return fmt.Errorf("controlplane: waiting for %s to be ready: %w", p.name, context.Cause(ctx))
		case <-timer.C:
			return fmt.Errorf("controlplane: %s was not ready within the start timeout (last check: %v); its log ends:\n%s", p.name, err, p.logTail(20))
		case <-tick.C:
		}
	}
}
