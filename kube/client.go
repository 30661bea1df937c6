package kube

import (
	"k8s.io/client-go/rest"
)

// Client reaches one API server through the Host. NewClient builds it; it
// is safe for concurrent use, and every client-go client made from its
// Config shares its one transport and so its connections.
type Client struct {
	config    *rest.Config
	transport *transport
}

// newClient returns the Client of server, whose rest.Config hands client-go
// the transport t.
func newClient(server string, t *transport) *Client {
	return &Client{
		transport: t,
		config: &rest.Config{
			Host: serverURL(server),
			// Transport replaces client-go's own transports, so it may
			// carry no TLS fields: transport.New refuses "a custom transport
			// with TLS certificate options" (transport/transport.go).
			Transport: t,
			// A negative QPS with no RateLimiter gives the REST client no
			// rate limiter at all (rest/config.go, RESTClientForConfigAndClient):
			// client-go's default is 5 requests a second, bursting to 10,
			// and the API server's priority and fairness limits clients
			// itself.
			QPS: -1,
		},
	}
}

// Config returns a rest.Config for client-go's clients, such as the
// clientset kubernetes.NewForConfig returns, dynamic.NewForConfig and
// metadata.NewForConfig. They share the Client's transport: its dialler,
// its credentials and its telemetry. Host is "https://" and the
// Connection's Server (an IPv6 zone escaped as %25), Transport is the Client's, QPS is -1 (no client-side
// rate limit), and no TLS or credential field is set, since the transport
// carries them. Each call returns a new copy, which the caller may change;
// setting TLS fields on it makes client-go refuse it. A write a Reconciler
// makes through such a client, with its reconcile's context, that creates
// an object of a resource its Controller Owns is noted, so that the Owns
// event of what it created doesn't reconcile its owner again
// (ownedcreations.go).
func (c *Client) Config() *rest.Config {
	return rest.CopyConfig(c.config)
}

// CloseIdleConnections closes the connections of the Client's transport
// that carry no request, HTTP/1.1 and HTTP/2 alike, as
// http.Client.CloseIdleConnections does; a watch keeps its connection, and
// a later request opens a new one. A Controller calls it as its Serve
// returns, so that no connection's goroutines outlive it; a Client that no
// Controller uses is its user's to close.
func (c *Client) CloseIdleConnections() { c.transport.CloseIdleConnections() }
