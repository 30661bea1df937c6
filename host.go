package humus

import (
	"context"
	"net"
	"os"
	"os/signal"
	"syscall"
)

// OSHost returns the Host of the real process: Dial and Listen use the
// operating system's network (a zero net.Dialer and net.ListenConfig), FS is
// os.DirFS("/"), whose names have no leading slash (tmp/certs/tls.crt for
// /tmp/certs/tls.crt) and whose error for a name with one says so,
// LookupEnv is os.LookupEnv, Signals relays SIGTERM and SIGINT
// with os/signal, and Stderr is os.Stderr.
//
// It is the only place humus reaches the process directly.
func OSHost() Host {
	return Host{
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, address)
		},
		Listen: func(ctx context.Context, network, address string) (net.Listener, error) {
			var lc net.ListenConfig
			return lc.Listen(ctx, network, address)
		},
		FS:        newRootFS(),
		LookupEnv: os.LookupEnv,
		Signals:   osSignals,
		Stderr:    os.Stderr,
	}
}

// osSignals relays SIGTERM and SIGINT to the returned channel until ctx is
// done, and then closes it. While it relays them, they no longer end the
// process.
func osSignals(ctx context.Context) <-chan os.Signal {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-ctx.Done()
		signal.Stop(c) // no send to c once Stop returns, so closing it is safe
		close(c)
	}()
	return c
}
