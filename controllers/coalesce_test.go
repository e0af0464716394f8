package controllers

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestCoalesced: the events of many objects within the window (a
// scale-up's new nodes, say) enqueue the FluentPVCs they map to once, at
// the end of the window, not once each at once.
func TestCoalesced(t *testing.T) {
	pools := func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: "a"}}, {NamespacedName: client.ObjectKey{Name: "b"}}}
	}
	for name, tc := range map[string]struct {
		window  time.Duration
		events  int
		advance time.Duration
		want    int
	}{
		"no event":                                    {advance: fluentPVCCoalesce},
		"within the window: nothing yet":              {events: 100, advance: fluentPVCCoalesce / 2},
		"after the window: each pool once":            {events: 100, advance: fluentPVCCoalesce, want: 2},
		"one event after the window: each once":       {events: 1, advance: fluentPVCCoalesce, want: 2},
		"nodes: past the claims' window, nothing yet": {window: nodeCoalesce, events: 100, advance: 2 * fluentPVCCoalesce},
		"nodes: after their window, each pool once":   {window: nodeCoalesce, events: 100, advance: nodeCoalesce, want: 2},
	} {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(0, 0))
			q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request](),
				workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Clock: clk})
			defer q.ShutDown()
			h := coalesced(pools)
			if tc.window > 0 {
				h = coalescedAfter(tc.window, pools)
			}
			for i := range tc.events {
				node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n" + string(rune('0'+i%10))}}
				h.Create(context.Background(), event.CreateEvent{Object: node}, q)
			}
			if n := q.Len(); n != 0 {
				t.Fatalf("%d enqueued at once, want 0", n)
			}
			// The delaying queue moves what is due on its own goroutine, in
			// the order it falls due: once a sentinel due at the end of the
			// step is in, so is everything due before it.
			sentinel := reconcile.Request{NamespacedName: client.ObjectKey{Name: "sentinel"}}
			q.AddAfter(sentinel, tc.advance)
			clk.Step(tc.advance)
			_ = wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
				return q.Len() >= tc.want+1, nil
			})
			if n := q.Len() - 1; n != tc.want {
				t.Errorf("%d enqueued, want %d", n, tc.want)
			}
		})
	}
}
