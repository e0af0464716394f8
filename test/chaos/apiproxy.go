package chaos

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/st-tech/fluent-pvc-operator/test/cluster"
)

// faultRates are the chances, per request, of each fault of apiProxy.
type faultRates struct {
	// Reset closes the client's connection without an answer.
	Reset float64
	// Throttle answers 429 Too Many Requests with Retry-After: 1.
	Throttle float64
	// Fail answers 500 Internal Server Error.
	Fail float64
	// Lost passes a write (a create, update, patch or delete) on, then
	// answers 500 instead of its result, half the time with Retry-After: 1,
	// on which client-go sends it again (and meets a conflict or the
	// object gone, since the first one landed).
	Lost float64
	// Delay holds the request for up to MaxDelay before passing it on.
	Delay    float64
	MaxDelay time.Duration
	// WatchCut is the chance, every 5-30 s of a watch, that it is cut, as
	// a dropped connection does.
	WatchCut float64
}

// faultCounts are the faults apiProxy injected.
type faultCounts struct {
	Requests, Resets, Throttled, Failed, Lost, Delayed, WatchesCut int64
}

// operatorUser is the user as whom the operator's requests reach the API
// server: the proxy impersonates it with the cluster's admin credentials,
// so that the audit log tells the operator's writes (its holder pods)
// from the driver's, which are the admin's.
const operatorUser = "chaos-operator"

// apiProxy stands between the operator and kube-apiserver: it terminates
// TLS with its own certificate, passes requests on as operatorUser, and
// injects faults while enabled.
type apiProxy struct {
	rates   faultRates
	enabled atomic.Bool
	srv     *http.Server
	ln      net.Listener
	wg      sync.WaitGroup

	requests, resets, throttled, failed, lost, delayed, watchesCut atomic.Int64

	// Kubeconfig is a kubeconfig for the proxy.
	Kubeconfig string
}

func newAPIProxy(c *cluster.Cluster, dir string, rates faultRates) (*apiProxy, error) {
	upstream, err := url.Parse(c.Config.Host)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: operatorUser, Groups: []string{"system:masters", "system:authenticated"}}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	caPEM, err := cluster.WriteServingCert(dir)
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &apiProxy{rates: rates, ln: ln}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream)
			r.Out.Host = upstream.Host
		},
		Transport:     transport,
		FlushInterval: -1, // watches stream
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				w.WriteHeader(http.StatusBadGateway)
			}
		},
	}
	p.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.serve(w, r, rp) }),
		// HTTP/1.1 only, so that a connection can be hijacked and reset.
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_ = p.srv.ServeTLS(ln, "", "")
	}()

	kc := clientcmdapi.NewConfig()
	kc.Clusters["proxy"] = &clientcmdapi.Cluster{Server: fmt.Sprintf("https://%s", ln.Addr()), CertificateAuthorityData: caPEM}
	kc.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	kc.CurrentContext = "proxy"
	p.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p.Kubeconfig); err != nil {
		return nil, errors.Join(err, p.Close())
	}
	return p, nil
}

func (p *apiProxy) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	p.requests.Add(1)
	if !p.enabled.Load() {
		next.ServeHTTP(w, r)
		return
	}
	watch := r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1"
	roll := rand.Float64()
	switch rt := p.rates; {
	case roll < rt.Reset:
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				p.resets.Add(1)
				_ = conn.Close()
				return
			}
		}
	case roll < rt.Reset+rt.Throttle:
		p.throttled.Add(1)
		w.Header().Set("Retry-After", "1")
		writeStatus(w, http.StatusTooManyRequests, "TooManyRequests", "the chaos proxy throttled this request")
		return
	case roll < rt.Reset+rt.Throttle+rt.Fail:
		p.failed.Add(1)
		writeStatus(w, http.StatusInternalServerError, "InternalError", "the chaos proxy failed this request")
		return
	case roll < rt.Reset+rt.Throttle+rt.Fail+rt.Lost && r.Method != http.MethodGet:
		p.lost.Add(1)
		next.ServeHTTP(httptest.NewRecorder(), r)
		if rand.N(2) == 0 {
			w.Header().Set("Retry-After", "1")
		}
		writeStatus(w, http.StatusInternalServerError, "InternalError", "the chaos proxy lost the answer of this write")
		return
	case roll < rt.Reset+rt.Throttle+rt.Fail+rt.Lost+rt.Delay && !watch:
		p.delayed.Add(1)
		t := time.NewTimer(rand.N(rt.MaxDelay))
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if watch {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		go p.maybeCut(ctx, cancel)
		r = r.WithContext(ctx)
	}
	next.ServeHTTP(w, r)
}

// maybeCut ends a watch, as a dropped connection would: every 5-30 s
// while faults are on, with the chance WatchCut.
func (p *apiProxy) maybeCut(ctx context.Context, cancel context.CancelFunc) {
	for {
		t := time.NewTimer(5*time.Second + rand.N(25*time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if p.enabled.Load() && rand.Float64() < p.rates.WatchCut {
			p.watchesCut.Add(1)
			cancel()
			return
		}
	}
}

func writeStatus(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":%q,"reason":%q,"code":%d}`, msg, reason, code)
}

// Counts are the faults injected so far.
func (p *apiProxy) Counts() faultCounts {
	return faultCounts{
		Requests: p.requests.Load(), Resets: p.resets.Load(), Throttled: p.throttled.Load(),
		Failed: p.failed.Load(), Lost: p.lost.Load(), Delayed: p.delayed.Load(), WatchesCut: p.watchesCut.Load(),
	}
}

// Close stops the proxy, ending open watches.
func (p *apiProxy) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := p.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = p.srv.Close()
	}
	p.wg.Wait()
	return err
}
