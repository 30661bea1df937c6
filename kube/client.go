package kube

import "k8s.io/client-go/rest"

// Client reaches one API server through the Host.
type Client struct {
	config *rest.Config
}

// Config returns a rest.Config for client-go's clients, such as the
// clientset kubernetes.NewForConfig returns. They share the Client's
// transport: its dialler, its credentials and its telemetry. Each call
// returns a new copy, which the caller may change.
func (c *Client) Config() *rest.Config {
	return rest.CopyConfig(c.config)
}
