package apiclock

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestObserve(t *testing.T) {
	local := time.Date(2026, 3, 1, 12, 0, 0, 500_000_000, time.UTC)
	for _, tc := range []struct {
		name string
		date string
		want time.Duration
	}{
		{"server ahead", "Sun, 01 Mar 2026 12:05:00 GMT", 5*time.Minute - 500*time.Millisecond},
		{"server behind", "Sun, 01 Mar 2026 11:59:00 GMT", -time.Minute - 500*time.Millisecond},
		{"same second: the truncated header is a lower bound", "Sun, 01 Mar 2026 12:00:00 GMT", -500 * time.Millisecond},
		{"no header keeps the local clock", "", 0},
		{"malformed header keeps the local clock", "yesterday", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(clocktesting.NewFakePassiveClock(local))
			h := http.Header{}
			if tc.date != "" {
				h.Set("Date", tc.date)
			}
			c.Observe(h, local)
			if got := c.Offset(); got != tc.want {
				t.Errorf("offset = %v, want %v", got, tc.want)
			}
			if got := c.Now(); !got.Equal(local.Add(tc.want)) {
				t.Errorf("Now = %v, want %v", got, local.Add(tc.want))
			}
		})
	}
}

func TestWrap(t *testing.T) {
	server := time.Date(2026, 3, 1, 13, 0, 0, 0, time.UTC)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Date", server.Format(http.TimeFormat))
	}))
	defer srv.Close()
	local := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := New(clocktesting.NewFakePassiveClock(local))
	cfg := &rest.Config{Host: srv.URL}
	c.Wrap(cfg)
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if got := c.Now(); !got.Equal(server) {
		t.Errorf("Now = %v, want the server's %v", got, server)
	}
}
