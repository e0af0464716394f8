package webhook

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestDetached serves an admission with the manager's context canceled,
// as SIGTERM leaves an admission in flight on a replica that a rolling
// upgrade stops: a call of the API server, which names its timeout, runs
// with a live context bounded by that timeout. Before, it read the
// canceled context, and the admission failed with "context canceled"
// (seen once in 202 admissions of the real-node Helm upgrade spec).
func TestDetached(t *testing.T) {
	for name, tc := range map[string]struct {
		query      string
		stopping   bool
		wantErr    bool
		wantWithin time.Duration // 0: no deadline
	}{
		"manager running":                    {query: "?timeout=10s", wantWithin: 10 * time.Second},
		"manager stopping":                   {query: "?timeout=10s", stopping: true, wantWithin: 10 * time.Second},
		"a shorter timeout of the webhook":   {query: "?timeout=3s", stopping: true, wantWithin: 3 * time.Second},
		"no timeout named, manager running":  {},
		"no timeout named, manager stopping": {stopping: true, wantErr: true},
		"a timeout that is not a duration":   {query: "?timeout=soon", stopping: true, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			if tc.stopping {
				cancel()
			} else {
				defer cancel()
			}
			var seen error
			var deadline time.Time
			h := detached(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				seen = r.Context().Err()
				deadline, _ = r.Context().Deadline()
			}))
			r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/mutate"+tc.query, nil)
			h.ServeHTTP(httptest.NewRecorder(), r)
			if (seen != nil) != tc.wantErr {
				t.Errorf("the handler saw %v, want an error: %t", seen, tc.wantErr)
			}
			switch {
			case tc.wantWithin == 0 && !deadline.IsZero():
				t.Errorf("deadline %v, want none", deadline)
			case tc.wantWithin > 0 && (deadline.IsZero() || deadline.After(time.Now().Add(tc.wantWithin))):
				t.Errorf("deadline %v, want within %s", deadline, tc.wantWithin)
			}
		})
	}
}
