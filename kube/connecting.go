package kube

import (
	"context"
	"crypto/tls"
	"errors"

	"github.com/z5labs/humus"
)

// Connection is how a Client reaches an API server. Every field is a plain
// value.
type Connection struct {
	Server string
	TLS    *tls.Config
	Token  func(ctx context.Context) (string, error)
}

// NewClient returns a Client that dials c.Server with s.Host.Dial. (Being
// written.)
func NewClient(s *humus.Setup, c Connection) (*Client, error) {
	return nil, errors.New("kube: NewClient is not written yet")
}
