package controlplane_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/z5labs/humus/controlplane"
)

// Build the binaries (once per version), start a control plane, and use it.
func ExampleStart() {
	ctx := context.Background()
	if _, err := controlplane.Build(ctx, controlplane.BuildOptions{Progress: os.Stderr}); err != nil {
		log.Fatal(err)
	}
	c, err := controlplane.Start(ctx, controlplane.Options{Workloads: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Stop()

	fmt.Println("API server:", "https://"+c.Server)
	fmt.Println("kubeconfig:", c.Kubeconfig)
	// c.RESTConfig() for client-go; c.Server, c.TLS and c.Token for kube.Connection.
}
