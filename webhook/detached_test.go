package webhook

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// TestDetached admits with the manager's context canceled, as SIGTERM
// leaves an admission in flight on a replica that a rolling upgrade
// stops: the handler still runs with a live context, bounded by
// detachedTimeout. Before, it read the canceled context, and the
// admission failed with "context canceled" (seen once in 202 admissions
// of the real-node Helm upgrade spec).
func TestDetached(t *testing.T) {
	for name, cancelFirst := range map[string]bool{"manager running": false, "manager stopping": true} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			if cancelFirst {
				cancel()
			} else {
				defer cancel()
			}
			var seen error
			var deadline time.Time
			h := detached{admission.HandlerFunc(func(ctx context.Context, _ admission.Request) admission.Response {
				seen = ctx.Err()
				deadline, _ = ctx.Deadline()
				return admission.Allowed("")
			})}
			if resp := h.Handle(ctx, admission.Request{}); !resp.Allowed {
				t.Fatalf("response %+v", resp)
			}
			latest := time.Now().Add(detachedTimeout)
			if seen != nil {
				t.Errorf("the handler saw %v, want a live context", seen)
			}
			if deadline.IsZero() || deadline.After(latest) {
				t.Errorf("deadline %v, want within %s", deadline, detachedTimeout)
			}
		})
	}
}
