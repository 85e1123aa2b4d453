package testenv

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// HoldProxy is a TCP proxy on loopback in front of a server (the test
// Redis) that can hold the server's replies: between Hold and Release the
// bytes the server sends are kept, then delivered in order. It counts the
// connections clients open and close, so a test can tell how many a
// client dialled and how many it gave up.
type HoldProxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	held     bool
	released *sync.Cond // broadcast on Release and Close
	closed   bool
	conns    []net.Conn

	wg                sync.WaitGroup
	accepted, dropped int // connections opened, and closed by the client
}

// NewHoldProxy starts a proxy to target; it stops when tb ends.
func NewHoldProxy(tb testing.TB, target string) *HoldProxy {
	tb.Helper()
	ln, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &HoldProxy{ln: ln, target: target}
	p.released = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.serve()
	tb.Cleanup(p.close)
	return p
}

// Addr is the address clients dial.
func (p *HoldProxy) Addr() string { return p.ln.Addr().String() }

// Hold keeps the server's replies from now on.
func (p *HoldProxy) Hold() { p.mu.Lock(); p.held = true; p.mu.Unlock() }

// Release delivers the held replies and lets the next ones through.
func (p *HoldProxy) Release() {
	p.mu.Lock()
	p.held = false
	p.mu.Unlock()
	p.released.Broadcast()
}

// Accepted is how many connections clients opened.
func (p *HoldProxy) Accepted() int { p.mu.Lock(); defer p.mu.Unlock(); return p.accepted }

// Dropped is how many connections clients closed.
func (p *HoldProxy) Dropped() int { p.mu.Lock(); defer p.mu.Unlock(); return p.dropped }

func (p *HoldProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.released.Broadcast()
	p.wg.Wait()
}

func (p *HoldProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := new(net.Dialer).DialContext(context.Background(), "tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			return
		}
		p.accepted++
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			// Client to server: as it comes. The client's close ends it.
			_, err := io.Copy(s, c)
			if !errors.Is(err, net.ErrClosed) {
				p.mu.Lock()
				if !p.closed {
					p.dropped++
				}
				p.mu.Unlock()
			}
			_ = s.Close()
		}()
		go func() {
			defer p.wg.Done()
			// Server to client: each read waits while the replies are held.
			buf := make([]byte, 32<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 {
					p.mu.Lock()
					for p.held && !p.closed {
						p.released.Wait()
					}
					p.mu.Unlock()
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					_ = c.Close()
					return
				}
			}
		}()
	}
}
