// Package apiclock tells the time on the API server's clock, estimated
// from the Date headers of its responses. Timers that compare with
// timestamps the API server wrote (an object's creationTimestamp) run on
// it, so that a replica whose clock is off ends them no earlier than the
// server's time says.
package apiclock

import (
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// Clock is a clock.PassiveClock that reads the local clock shifted by the
// offset learnt from the API server's last response. The offset is a lower
// bound of the true one: a Date header is truncated to the second and was
// written before the response arrived, so Now is never later than the
// server's time, give or take the local clock's drift since the last
// response. Before any response it is the local clock.
type Clock struct {
	local clock.PassiveClock
	// offset is the server's time minus the local time, in nanoseconds.
	offset atomic.Int64
}

// New is a Clock over local, the real clock when nil.
func New(local clock.PassiveClock) *Clock {
	if local == nil {
		local = clock.RealClock{}
	}
	return &Clock{local: local}
}

// Now implements clock.PassiveClock.
func (c *Clock) Now() time.Time {
	return c.local.Now().Add(time.Duration(c.offset.Load()))
}

// Since implements clock.PassiveClock.
func (c *Clock) Since(t time.Time) time.Duration {
	return c.Now().Sub(t)
}

// Offset is the server's time minus the local time, as last learnt.
func (c *Clock) Offset() time.Duration {
	return time.Duration(c.offset.Load())
}

// Observe learns the offset from a response's Date header, received at
// the local time received. A missing or malformed header changes nothing.
func (c *Clock) Observe(header http.Header, received time.Time) {
	date, err := http.ParseTime(header.Get("Date"))
	if err != nil {
		return
	}
	c.offset.Store(int64(date.Sub(received)))
}

// Wrap makes every response of the clients built from cfg teach c.
func (c *Clock) Wrap(cfg *rest.Config) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper{next: rt, clock: c}
	})
}

type roundTripper struct {
	next  http.RoundTripper
	clock *Clock
}

func (r roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil {
		r.clock.Observe(resp.Header, r.clock.local.Now())
	}
	return resp, err
}

var _ clock.PassiveClock = &Clock{}
