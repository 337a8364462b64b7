package pgtest

import (
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
)

// ServiceProxy stands in for the -rw Service: a loopback port that forwards each new
// connection to whichever server is the primary now (SetTarget), as a Service follows the
// primary's label.
type ServiceProxy struct {
	Port     int
	target   atomic.Int64
	listener net.Listener
	wg       sync.WaitGroup
	mu       sync.Mutex
	open     map[net.Conn]bool
}

// NewServiceProxy listens on a free loopback port until the test ends.
func NewServiceProxy(t TB) *ServiceProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &ServiceProxy{Port: l.Addr().(*net.TCPAddr).Port, listener: l, open: map[net.Conn]bool{}}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		_ = l.Close()
		p.mu.Lock()
		for c := range p.open {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// SetTarget sends new connections to the server on port; 0 refuses them (no endpoint).
func (p *ServiceProxy) SetTarget(port int) { p.target.Store(int64(port)) }

func (p *ServiceProxy) serve() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		target := p.target.Load()
		if target == 0 {
			_ = client.Close()
			continue
		}
		p.wg.Go(func() { p.forward(client, net.JoinHostPort(Loopback, strconv.FormatInt(target, 10))) })
	}
}

func (p *ServiceProxy) forward(client net.Conn, address string) {
	server, err := net.Dial("tcp", address)
	if err != nil {
		_ = client.Close()
		return
	}
	p.track(client, server)
	defer p.untrack(client, server)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(server, client); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, server); done <- struct{}{} }()
	<-done // either side closing ends both
}

func (p *ServiceProxy) track(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		p.open[c] = true
	}
}

func (p *ServiceProxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
		delete(p.open, c)
	}
}
