package chaos

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"
)

// perRequest is an L7 load balancer on 127.0.0.1 in front of the replicas'
// webhook servers, as an Ingress, a mesh or an HTTP/1.1 client pool puts
// one: TLS ends at the balancer, and each request goes to the next backend
// in turn, over a connection kept to that backend. A backend that refuses
// the connection is skipped before the request is sent; a request sent
// over a connection the backend then closes fails, as behind a real
// proxy without retries.
type perRequest struct {
	ln       net.Listener
	srv      *http.Server
	backends []string
	next     atomic.Uint64
	client   *http.Transport
}

// newPerRequest serves the certificate in certDir (tls.crt, tls.key) and
// forwards to backends, each serving a certificate of the same CA.
func newPerRequest(backends []string, certDir string) (*perRequest, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	lb := &perRequest{ln: ln, backends: backends}
	dialer := &net.Dialer{Timeout: 2 * time.Second}
	lb.client = &http.Transport{
		// The backends are this run's replicas on 127.0.0.1.
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		ForceAttemptHTTP2: true,
		DialContext:       dialer.DialContext,
		IdleConnTimeout:   30 * time.Second,
	}
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(*httputil.ProxyRequest) {},
		Transport: roundTripFunc(lb.roundTrip),
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusBadGateway)
		},
	}
	lb.srv = &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12}}
	go func() { _ = lb.srv.ServeTLS(ln, "", "") }()
	return lb, nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// roundTrip sends r to the next backend in turn, and to the one after
// when a backend refuses the connection (nothing was sent).
func (lb *perRequest) roundTrip(r *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	var errs []error
	for range lb.backends {
		out := r.Clone(r.Context())
		out.URL.Scheme, out.URL.Host = "https", lb.backends[lb.next.Add(1)%uint64(len(lb.backends))]
		out.Host = out.URL.Host
		out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		resp, err := lb.client.RoundTrip(out)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
			return resp, err
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("every replica refused the connection: %w", errors.Join(errs...))
}

// Port is the port the load balancer listens on.
func (lb *perRequest) Port() int { return lb.ln.Addr().(*net.TCPAddr).Port }

// Close stops serving and closes the connections to the backends.
func (lb *perRequest) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := lb.srv.Shutdown(ctx); err != nil {
		// The API server's connections stayed open: cut them.
		_ = lb.srv.Close()
	}
	lb.client.CloseIdleConnections()
	return nil
}

// balancerName says how the webhook balancer spreads the calls.
func balancerName(perRequestLB bool) string {
	if perRequestLB {
		return "per request (L7, TLS ends at the balancer)"
	}
	return "per connection (TCP)"
}
