package appconfig

import (
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"
	certutil "k8s.io/client-go/util/cert"
)

func TestACertDirIsReadAgainAtMostOnceAMinute(t *testing.T) {
	pair := func(host string) (*fstest.MapFile, *fstest.MapFile) {
		c, k, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
		require.NoError(t, err)
		return &fstest.MapFile{Data: c}, &fstest.MapFile{Data: k}
	}
	fsys := fstest.MapFS{}
	fsys["certs/tls.crt"], fsys["certs/tls.key"] = pair("first")
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	get, err := certificate(fsys, "certs", func() time.Time { return now })
	require.NoError(t, err)
	name := func() string {
		c, err := get(nil)
		require.NoError(t, err)
		return c.Leaf.DNSNames[0]
	}
	require.Equal(t, "first", name())

	fsys["certs/tls.crt"], fsys["certs/tls.key"] = pair("renewed")
	now = now.Add(59 * time.Second)
	require.Equal(t, "first", name(), "within a minute, the pair read last")
	now = now.Add(time.Second)
	require.Equal(t, "renewed", name(), "a minute on, the files again")

	fsys["certs/tls.key"] = &fstest.MapFile{Data: []byte("half-written")}
	now = now.Add(time.Minute)
	require.Equal(t, "renewed", name(), "a pair that doesn't load keeps the last one")
}
