package humustest

import (
	"context"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// network is an in-memory network: Listen registers an address, and Dial
// connects to a registered one through a buffered in-memory connection.
type network struct {
	mu            sync.Mutex
	listeners     map[string]*listener
	nextPort      int // the last port given to a listener asking for port 0
	nextEphemeral int // the last port given to a dialling end
}

func newNetwork() *network {
	return &network{listeners: map[string]*listener{}, nextPort: 30000, nextEphemeral: 40000}
}

// backlog is how many dialled connections wait for Accept before Dial
// blocks, as a TCP listener's backlog.
const backlog = 16

func (n *network) listen(ctx context.Context, network, address string) (net.Listener, error) {
	if err := ctx.Err(); err != nil {
		return nil, opError("listen", network, address, err)
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, opError("listen", network, address, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if port == "0" || port == "" {
		n.nextPort++
		port = strconv.Itoa(n.nextPort)
	}
	key := net.JoinHostPort(host, port)
	if _, ok := n.listeners[key]; ok {
		return nil, opError("listen", network, key, os.NewSyscallError("bind", syscall.EADDRINUSE))
	}
	l := &listener{
		n:     n,
		key:   key,
		addr:  addr{network, key},
		conns: make(chan net.Conn, backlog),
		done:  make(chan struct{}),
	}
	n.listeners[key] = l
	return l, nil
}

func (n *network) dial(ctx context.Context, network, address string) (net.Conn, error) {
	_, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, opError("dial", network, address, err)
	}
	n.mu.Lock()
	n.nextEphemeral++
	local := addr{network, net.JoinHostPort("127.0.0.1", strconv.Itoa(n.nextEphemeral))}
	l, ok := n.listeners[address]
	if !ok { // a listener on every interface, ":port"
		l, ok = n.listeners[net.JoinHostPort("", port)]
	}
	n.mu.Unlock()
	refused := opError("dial", network, address, os.NewSyscallError("connect", syscall.ECONNREFUSED))
	if !ok {
		return nil, refused
	}
	client, server := newPipe(local, addr{network, address})
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, refused
	case <-ctx.Done():
		return nil, opError("dial", network, address, ctx.Err())
	}
}

func opError(op, network, address string, err error) error {
	return &net.OpError{Op: op, Net: network, Addr: addr{network, address}, Err: err}
}

// addr is an address on the in-memory network.
type addr struct{ network, address string }

func (a addr) Network() string { return a.network }
func (a addr) String() string  { return a.address }

type listener struct {
	n     *network
	key   string
	addr  addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, opError("accept", l.addr.network, l.key, net.ErrClosed)
	}
}

func (l *listener) Close() error {
	l.once.Do(func() {
		l.n.mu.Lock()
		delete(l.n.listeners, l.key)
		l.n.mu.Unlock()
		close(l.done)
		for {
			select {
			case c := <-l.conns:
				c.Close()
			default:
				return
			}
		}
	})
	return nil
}

func (l *listener) Addr() net.Addr { return l.addr }

// pipeChunks is how many writes a connection buffers before Write blocks.
// Buffering lets both ends write at once, as TLS 1.3's handshake does, which
// would deadlock on net.Pipe.
const pipeChunks = 64

// newPipe returns the two ends of a buffered in-memory connection.
func newPipe(a, b net.Addr) (net.Conn, net.Conn) {
	ab := make(chan []byte, pipeChunks)
	ba := make(chan []byte, pipeChunks)
	aClosed := make(chan struct{})
	bClosed := make(chan struct{})
	x := &conn{local: a, remote: b, rx: ba, tx: ab, closed: aClosed, peerClosed: bClosed,
		rd: newDeadline(), wd: newDeadline()}
	y := &conn{local: b, remote: a, rx: ab, tx: ba, closed: bClosed, peerClosed: aClosed,
		rd: newDeadline(), wd: newDeadline()}
	return x, y
}

// conn is one end of a buffered in-memory connection, made only of
// channels so that it blocks durably inside a synctest bubble.
type conn struct {
	local, remote net.Addr
	rx            <-chan []byte
	tx            chan<- []byte
	closed        chan struct{}
	peerClosed    chan struct{}
	closeOnce     sync.Once
	rd, wd        *deadline

	rmu  sync.Mutex
	left []byte
}

func (c *conn) Read(b []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if len(c.left) > 0 {
		n := copy(b, c.left)
		c.left = c.left[n:]
		return n, nil
	}
	select {
	case <-c.closed:
		return 0, c.err("read", net.ErrClosed)
	default:
	}
	select {
	case chunk := <-c.rx:
		return c.take(b, chunk), nil
	case <-c.peerClosed:
		select {
		case chunk := <-c.rx:
			return c.take(b, chunk), nil
		default:
			return 0, io.EOF
		}
	case <-c.closed:
		return 0, c.err("read", net.ErrClosed)
	case <-c.rd.wait():
		return 0, c.err("read", os.ErrDeadlineExceeded)
	}
}

func (c *conn) take(b, chunk []byte) int {
	n := copy(b, chunk)
	c.left = chunk[n:]
	return n
}

func (c *conn) Write(b []byte) (int, error) {
	select {
	case <-c.closed:
		return 0, c.err("write", net.ErrClosed)
	case <-c.peerClosed:
		return 0, c.err("write", io.ErrClosedPipe)
	case <-c.wd.wait():
		return 0, c.err("write", os.ErrDeadlineExceeded)
	default:
	}
	if len(b) == 0 {
		return 0, nil
	}
	chunk := append([]byte(nil), b...)
	select {
	case c.tx <- chunk:
		return len(b), nil
	case <-c.closed:
		return 0, c.err("write", net.ErrClosed)
	case <-c.peerClosed:
		return 0, c.err("write", io.ErrClosedPipe)
	case <-c.wd.wait():
		return 0, c.err("write", os.ErrDeadlineExceeded)
	}
}

func (c *conn) err(op string, err error) error {
	return &net.OpError{Op: op, Net: c.local.Network(), Source: c.local, Addr: c.remote, Err: err}
}

func (c *conn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return nil
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }

func (c *conn) SetDeadline(t time.Time) error {
	c.rd.set(t)
	c.wd.set(t)
	return nil
}
func (c *conn) SetReadDeadline(t time.Time) error  { c.rd.set(t); return nil }
func (c *conn) SetWriteDeadline(t time.Time) error { c.wd.set(t); return nil }

// deadline is a settable deadline whose wait channel is closed once it
// passes, as net.Pipe's is.
type deadline struct {
	mu     sync.Mutex
	timer  *time.Timer
	cancel chan struct{}
}

func newDeadline() *deadline { return &deadline{cancel: make(chan struct{})} }

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.cancel // the timer fired: wait for it to close cancel
	}
	d.timer = nil
	closed := isClosed(d.cancel)
	if t.IsZero() {
		if closed {
			d.cancel = make(chan struct{})
		}
		return
	}
	if dur := time.Until(t); dur > 0 {
		if closed {
			d.cancel = make(chan struct{})
		}
		cancel := d.cancel
		d.timer = time.AfterFunc(dur, func() { close(cancel) })
		return
	}
	if !closed {
		close(d.cancel)
	}
}

func (d *deadline) wait() chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cancel
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
