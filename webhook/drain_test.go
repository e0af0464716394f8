package webhook

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// post sends one POST through c and says whether it went over a reused
// connection, and with which major version of HTTP.
func post(t *testing.T, c *http.Client, url string) (reused bool, proto int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
	}))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return reused, resp.ProtoMajor
}

// TestDrain: once a drain starts, every answer closes its connection
// (HTTP/1.1: Connection: close; HTTP/2: a GOAWAY), so that the client's
// next request opens a new one; before it, connections are reused.
func TestDrain(t *testing.T) {
	for name, h2 := range map[string]bool{"HTTP/1.1": false, "HTTP/2": true} {
		wantProto := 1
		if h2 {
			wantProto = 2
		}
		t.Run(name, func(t *testing.T) {
			var d Drain
			srv := httptest.NewUnstartedServer(d.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, "{}")
			})))
			srv.EnableHTTP2 = h2
			srv.StartTLS()
			defer srv.Close()
			c := srv.Client()
			if tr, ok := c.Transport.(*http.Transport); ok {
				tr.ForceAttemptHTTP2 = h2
				if !h2 {
					tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
				}
			}
			if _, proto := post(t, c, srv.URL); proto != wantProto {
				t.Fatalf("answered over HTTP/%d, want HTTP/%d", proto, wantProto)
			}
			if reused, _ := post(t, c, srv.URL); !reused {
				t.Fatal("before the drain, the second request opened a new connection")
			}
			d.Start()
			for i := range 3 {
				// The answer to the first closes the connection it came
				// on; each later one comes on a new connection.
				if reused, _ := post(t, c, srv.URL); reused != (i == 0) {
					t.Errorf("request %d while draining: reused a connection %v, want %v", i, reused, i == 0)
				}
			}
		})
	}
}

// TestDrainShutdownUnderLoad: a server that drains moves a client's
// kept-alive connections off itself while the client keeps sending, its
// new connections going to another server (as the API server's go to
// another replica once the endpoints drop this one): it is left with no
// connection for its shutdown to cut, and no request fails.
func TestDrainShutdownUnderLoad(t *testing.T) {
	answer := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "{}") })
	var d Drain
	leaving := httptest.NewUnstartedServer(d.Wrap(answer))
	var open atomic.Int32 // the leaving server's connections
	leaving.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	leaving.StartTLS()
	defer leaving.Close()
	staying := httptest.NewTLSServer(answer)
	defer staying.Close()
	var dropped atomic.Bool
	// As the API server's webhook client: HTTP/1.1, connections kept
	// alive and pooled by the Service's name, each dialled to an endpoint.
	cfg := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}} //nolint:gosec // the test servers' own certificates
	dialer := &tls.Dialer{Config: cfg}
	tr := &http.Transport{TLSClientConfig: cfg, MaxIdleConnsPerHost: 8, DialTLSContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		if dropped.Load() {
			return dialer.DialContext(ctx, network, staying.Listener.Addr().String())
		}
		return dialer.DialContext(ctx, network, leaving.Listener.Addr().String())
	}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	ctx, stop := context.WithCancel(context.Background())
	var failed, sent atomic.Int32
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				sent.Add(1)
				resp, err := c.Post("https://webhook-service.test/mutate", "application/json", strings.NewReader("{}"))
				if err != nil {
					failed.Add(1)
					t.Logf("request failed: %v", err)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
	}
	more := func(n int32) {
		t.Helper()
		from := sent.Load()
		waitFor(t, "requests sent", func() bool { return sent.Load() >= from+n })
	}
	more(200)
	if open.Load() == 0 {
		t.Fatal("no connection to the leaving server before the drain")
	}
	dropped.Store(true)
	d.Start()
	waitFor(t, "the leaving server to hold no connection", func() bool { return open.Load() == 0 })
	// A dial made just before the endpoints changed may still wait to be
	// accepted: more traffic, and again none.
	more(200)
	waitFor(t, "the leaving server to hold no connection", func() bool { return open.Load() == 0 })
	shutdownCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := leaving.Config.Shutdown(shutdownCtx); err != nil {
		t.Fatal(err)
	}
	more(200)
	stop()
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d requests failed across the drain and the shutdown", n, sent.Load())
	}
}

// waitFor polls cond until it holds, for at most 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestDrainStopping: the stopping context ends the drain's period after
// its parent, having started the drain; at once with no period.
func TestDrainStopping(t *testing.T) {
	for name, period := range map[string]time.Duration{"no drain": 0, "a drain": 50 * time.Millisecond} {
		t.Run(name, func(t *testing.T) {
			var d Drain
			parent, cancelParent := context.WithCancel(context.Background())
			ctx, stop := d.Stopping(parent, period)
			defer stop()
			if d.Draining() || ctx.Err() != nil {
				t.Fatal("draining or stopped before the parent ended")
			}
			start := time.Now()
			cancelParent()
			if period == 0 {
				<-ctx.Done()
				if d.Draining() {
					t.Error("a drain of 0 started")
				}
				return
			}
			<-ctx.Done()
			if waited := time.Since(start); waited < period {
				t.Errorf("stopped %s after the parent, want %s", waited, period)
			}
			if !d.Draining() {
				t.Error("stopped without draining")
			}
		})
	}
}
