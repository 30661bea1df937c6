// Command upstreamgen rewrites kube's table of the API server's own schema
// for the Kubernetes types a custom resource embeds
// (kube/internal/upstream/types.json.gz), from the /openapi/v3 documents of
// upstream.GroupVersions.
//
// By default it builds (if not cached) and starts a local control plane of
// the kube-apiserver release that matches k8s.io/api in go.mod (package
// controlplane), reads the documents from it and stops it. -kubeconfig reads
// them from an existing cluster's API server instead, which must be of the
// same release; -openapi-dir reads them from a directory of files named as
// in Kubernetes' api/openapi-spec/v3 (api__v1_openapi.json, …).
//
// kube's go:generate runs it, in this module's directory
// (kube/internal/controlplanetests), the working directory -o is relative
// to:
//
//	cd kube && go generate .
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/z5labs/humus/controlplane"
	"github.com/z5labs/humus/kube/internal/upstream"
)

func main() {
	out := flag.String("o", "../upstream/types.json.gz", "the table's file, relative to the working directory")
	kubeconfig := flag.String("kubeconfig", "", "read the documents from this kubeconfig's API server, not a local control plane")
	dir := flag.String("openapi-dir", "", "read the documents from this directory (Kubernetes' api/openapi-spec/v3 layout), not an API server")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *out, *kubeconfig, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "upstreamgen:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out, kubeconfig, dir string) error {
	docs, err := documents(ctx, kubeconfig, dir)
	if err != nil {
		return err
	}
	b, err := upstream.Generate(docs)
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		return err
	}
	fmt.Printf("upstreamgen: wrote %s (%d bytes) from %d documents\n", out, len(b), len(docs))
	return nil
}

func documents(ctx context.Context, kubeconfig, dir string) (map[string][]byte, error) {
	switch {
	case dir != "" && kubeconfig != "":
		return nil, errors.New("give -kubeconfig or -openapi-dir, not both")
	case dir != "":
		docs := map[string][]byte{}
		for _, gv := range upstream.GroupVersions() {
			b, err := os.ReadFile(filepath.Join(dir, strings.ReplaceAll(gv, "/", "__")+"_openapi.json"))
			if err != nil {
				return nil, err
			}
			docs[gv] = b
		}
		return docs, nil
	case kubeconfig != "":
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, err
		}
		return upstream.Fetch(ctx, cfg)
	}
	if _, err := controlplane.Build(ctx, controlplane.BuildOptions{Progress: os.Stderr}); err != nil {
		return nil, err
	}
	c, err := controlplane.Start(ctx, controlplane.Options{Progress: os.Stderr})
	if err != nil {
		return nil, err
	}
	docs, err := upstream.Fetch(ctx, c.RESTConfig())
	return docs, errors.Join(err, c.Stop())
}
