package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
)

// The writes that follow a pod's admission (its claim's binding, and on a
// hit the refill of the warm PVC it took) yield to starting pods: while
// any pod with the opt-in label starts, they wait, up to
// Options.PodStartWait after the admission. A burst of pods then starts
// with one API write of the operator's per pod, its checkout, and the
// rest follows once the burst has started. Under a steady stream of
// starting pods the writes wait out PodStartWait and are made then.

// startingValue is the podStartingIndex value of a starting pod.
const startingValue = "starting"

// startingKey is the podStartingIndex value of a pod: startingValue while
// it starts (objects.PodStarting), none otherwise.
func startingKey(obj client.Object) []string {
	if pod, ok := obj.(*corev1.Pod); ok && objects.PodStarting(pod) {
		return []string{startingValue}
	}
	return nil
}

// startPoll is how often a write held back for starting pods looks again.
const startPoll = 100 * time.Millisecond

// holdFollowUp is how long, at now, a write that follows a pod's admission
// at admitted waits before it looks again: startPoll (or what is left of
// wait after the admission, if less) while pods are starting (starting),
// 0 to make it now: no pod starts, wait is 0, or it has passed.
func holdFollowUp(admitted time.Time, starting bool, now time.Time, wait time.Duration) time.Duration {
	if wait <= 0 || !starting {
		return 0
	}
	left := admitted.Add(wait).Sub(now)
	if left <= 0 {
		return 0
	}
	return min(left, startPoll)
}

// podsStarting says whether a pod with the opt-in label, created less than
// wait before now, is starting, from the cache's podStartingIndex. A pod
// pending for longer (unschedulable, say) holds nothing back.
func podsStarting(ctx context.Context, r client.Reader, now time.Time, wait time.Duration) (bool, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.MatchingFields{podStartingIndex: startingValue}, client.UnsafeDisableDeepCopy); err != nil {
		return false, fmt.Errorf("listing starting pods: %w", err)
	}
	for i := range pods.Items {
		if now.Sub(pods.Items[i].CreationTimestamp.Time) < wait {
			return true, nil
		}
	}
	return false, nil
}
