package webhook

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"
)

// Drain lets a replica that is about to stop hand its webhook traffic to
// the others without failing a request. The API server calls webhooks
// over HTTP/1.1 and keeps its connections to a replica open, reusing them
// whatever the Service's endpoints say, so it goes on sending admissions
// to a replica that is leaving. When the replica's server shuts down, it
// closes the connections that are idle at that moment; a request the API
// server writes on one of them just then fails with EOF, and the API
// server does not retry a POST. Once started, a Drain answers every
// request with "Connection: close": each connection ends after the answer
// to its next request, and the API server opens the next one to a
// replica that is still in the endpoints. Left to drain for a few seconds
// of traffic, a replica then has no connection left for the shutdown to
// cut. (Over HTTP/2 the answer starts a graceful GOAWAY, as the shutdown
// itself would.) The zero Drain is ready to use.
type Drain struct{ on atomic.Bool }

// Start makes every answer from now on close its connection.
func (d *Drain) Start() { d.on.Store(true) }

// Draining says whether Start was called.
func (d *Drain) Draining() bool { return d.on.Load() }

// Wrap is h, whose answers close their connections once d is draining.
func (d *Drain) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.Draining() {
			// net/http honours it over HTTP/1.1, and over HTTP/2 turns it
			// into a graceful GOAWAY.
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// Stopping is the context the replica runs under when it drains for
// period before it stops: it starts d when ctx ends, and ends period
// later (at once when period is 0, or when cancel is called).
func (d *Drain) Stopping(ctx context.Context, period time.Duration) (context.Context, context.CancelFunc) {
	if period <= 0 {
		return context.WithCancel(ctx)
	}
	stopping, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-stopping.Done():
			return
		case <-ctx.Done():
		}
		d.Start()
		t := time.NewTimer(period)
		defer t.Stop()
		select {
		case <-t.C:
		case <-stopping.Done():
		}
		cancel()
	}()
	return stopping, cancel
}
