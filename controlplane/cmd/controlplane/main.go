// Command controlplane builds and runs the local Kubernetes control plane of
// package github.com/z5labs/humus/controlplane.
//
// Usage:
//
//	controlplane build [-bin dir]
//	controlplane up [-bin dir | -assets dir] [-workloads] [-controllers a,b]
//
// build builds etcd, kube-apiserver and kube-controller-manager into the
// cache (once per version; a cold build takes minutes). up builds if needed,
// starts the control plane, prints its kubeconfig path, and runs until
// Ctrl-C or SIGTERM, then stops it and removes its data.
//
// up -assets dir runs the binaries a user already has in dir, such as
// envtest's assets, and builds nothing: a binary missing there is an error
// naming it. Its default is the environment variable KUBEBUILDER_ASSETS
// (controlplane.AssetsEnv), as envtest's; -assets "" ignores it. The
// binaries' versions are printed when it starts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/z5labs/humus/controlplane"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage:
  controlplane build [-bin dir]
  controlplane up [-bin dir | -assets dir] [-workloads] [-controllers a,b]
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fs := flag.NewFlagSet("controlplane "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	binDir := fs.String("bin", "", "directory of the binaries (default: the user cache, see controlplane.DefaultBinDir)")
	var err error
	switch args[0] {
	case "build":
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		_, err = controlplane.Build(ctx, controlplane.BuildOptions{BinDir: *binDir, Progress: stderr})
	case "up":
		workloads := fs.Bool("workloads", false, "also run deployment-controller and replicaset-controller")
		controllers := fs.String("controllers", "", "comma-separated extra kube-controller-manager controllers")
		assets := fs.String("assets", os.Getenv(controlplane.AssetsEnv), "directory of etcd, kube-apiserver and kube-controller-manager you already have, such as envtest's, run without building (default: $"+controlplane.AssetsEnv+")")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		if *assets != "" && *binDir != "" {
			fmt.Fprintln(stderr, "controlplane up: give -bin (built if needed) or -assets (run as they are), not both")
			return 2
		}
		opts := controlplane.Options{BinDir: *binDir, Workloads: *workloads, Progress: stderr}
		if *controllers != "" {
			opts.ExtraControllers = strings.Split(*controllers, ",")
		}
		build := true
		if *assets != "" {
			opts.BinDir, build = *assets, false
		}
		err = up(ctx, opts, build, stdout, stderr)
	default:
		fmt.Fprint(stderr, usage)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// up builds if build is true and the binaries aren't there, starts the
// control plane and waits for ctx (Ctrl-C) or the exit of one of its
// processes.
func up(ctx context.Context, opts controlplane.Options, build bool, stdout, stderr io.Writer) error {
	if build {
		if _, err := controlplane.Build(ctx, controlplane.BuildOptions{BinDir: opts.BinDir, Progress: stderr}); err != nil {
			return err
		}
	} else if err := controlplane.BinariesIn(opts.BinDir).Check(); err != nil {
		return fmt.Errorf("controlplane up -assets %s: %s: %w", opts.BinDir, controlplane.MissingAssetsHint(opts.BinDir), err)
	} else {
		fmt.Fprintln(stderr, controlplane.DescribeBinaries(ctx, opts.BinDir))
	}
	c, err := controlplane.Start(ctx, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, `control plane %s is up at https://%s
kubeconfig: %s

  export KUBECONFIG=%[3]s
  HUMUS_TEST_KUBECONFIG=%[3]s go test -tags controlplane -p 1 ./controlplane/... ./kube/internal/controlplanetests/... ./kube/examples/...
  curl --cacert %s -H 'Authorization: Bearer %s' https://%[2]s/version

Press Ctrl-C to stop.
`, controlplane.Version, c.Server, c.Kubeconfig, filepath.Join(filepath.Dir(c.Kubeconfig), "ca.crt"), c.Token)
	select {
	case <-ctx.Done():
		fmt.Fprintln(stderr, "stopping the control plane")
		return c.Stop()
	case <-c.Done():
		if ctx.Err() != nil { // killed because of the signal
			fmt.Fprintln(stderr, "stopping the control plane")
			return c.Stop()
		}
		crash := c.Err()
		return errors.Join(crash, c.Stop())
	}
}
