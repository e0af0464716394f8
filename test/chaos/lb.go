package chaos

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// roundRobin is a TCP pass-through on 127.0.0.1 in front of several
// backends (the replicas' webhook servers): each connection goes to the
// next backend that accepts it, and TLS ends at the backend, as behind a
// Service.
type roundRobin struct {
	ln       net.Listener
	backends []string
	next     atomic.Uint64
	wg       sync.WaitGroup
}

func newRoundRobin(backends []string) (*roundRobin, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	lb := &roundRobin{ln: ln, backends: backends}
	lb.wg.Add(1)
	go lb.serve()
	return lb, nil
}

// Port is the port the load balancer listens on.
func (lb *roundRobin) Port() int { return lb.ln.Addr().(*net.TCPAddr).Port }

func (lb *roundRobin) serve() {
	defer lb.wg.Done()
	for {
		conn, err := lb.ln.Accept()
		if err != nil {
			return
		}
		lb.wg.Add(1)
		go func() {
			defer lb.wg.Done()
			lb.forward(conn)
		}()
	}
}

func (lb *roundRobin) forward(conn net.Conn) {
	defer conn.Close()
	var up net.Conn
	for range lb.backends {
		addr := lb.backends[lb.next.Add(1)%uint64(len(lb.backends))]
		c, err := net.Dial("tcp", addr)
		if err == nil {
			up = c
			break
		}
	}
	if up == nil {
		return // every replica is down: the API server sees a refused call
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, conn)
	go pipe(conn, up)
	<-done
	<-done
}

// Close stops accepting and waits for the open connections to end.
func (lb *roundRobin) Close() error {
	err := lb.ln.Close()
	lb.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("closing the webhook load balancer: %w", err)
	}
	return nil
}
