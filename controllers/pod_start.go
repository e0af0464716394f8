package controllers

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// The writes that follow a pod's admission (its claim's binding, and on a
// hit the refill of the warm PVC it took) yield to starting pods: while
// pods with the opt-in label start (startGate), they wait, up to
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

// startQuiet is how long after the cache last saw a pod with the opt-in
// label created or started the writes still yield: pods created one after
// another, each once the last is Running, leave gaps shorter than this
// between them.
const startQuiet = 250 * time.Millisecond

// startGate tells whether pods with the opt-in label are starting, for
// the writes that yield to them (holdFollowUp). A nil gate sees none.
type startGate struct {
	// reader is the cache, with podStartingIndex.
	reader client.Reader
	clock  clock.PassiveClock
	// last is when (unix nanoseconds, on clock) the cache last showed a
	// pod created or started.
	last atomic.Int64
}

func newStartGate(r client.Reader, clk clock.PassiveClock) *startGate {
	return &startGate{reader: r, clock: clk}
}

// observe records a pod's event, old nil for its creation.
func (g *startGate) observe(old, pod *corev1.Pod) {
	if old == nil || objects.PodStarting(old) && !objects.PodStarting(pod) {
		g.last.Store(g.clock.Now().UnixNano())
	}
}

// handler feeds the gate from the pods' informer.
func (g *startGate) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				g.observe(nil, pod)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok := oldObj.(*corev1.Pod)
			pod, ok2 := newObj.(*corev1.Pod)
			if ok && ok2 {
				g.observe(old, pod)
			}
		},
	}
}

// busy says whether, at now, the writes that follow admissions yield: the
// cache showed a pod created or started less than startQuiet ago, or a
// pod created less than wait ago is starting (podsStarting).
func (g *startGate) busy(ctx context.Context, now time.Time, wait time.Duration) (bool, error) {
	if g == nil {
		return false, nil
	}
	if last := g.last.Load(); last != 0 && now.Sub(time.Unix(0, last)) < startQuiet {
		return true, nil
	}
	return podsStarting(ctx, g.reader, now, wait)
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

// seenTTL is how long seenPods remembers a pod: longer than any
// Options.PodStartWait worth setting.
const seenTTL = time.Minute

// seenPods remembers, by claim, the pod whose binding yields to starting
// pods (yieldToStarting), so that the binding made once the wait is over
// records that pod even if it went meanwhile, before the cache showed it
// being deleted. It is lost with the process: a binding made by a
// restarted operator without its pod takes the path of a pod deleted
// before the cache showed it (observeUncachedPod).
type seenPods struct {
	mu sync.Mutex
	m  map[client.ObjectKey]seenPod
}

type seenPod struct {
	id v1alpha1.ObjectIdentity
	at time.Time
}

// put remembers pod id for the claim named key at now, and forgets what
// is older than seenTTL.
func (s *seenPods) put(key client.ObjectKey, id v1alpha1.ObjectIdentity, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[client.ObjectKey]seenPod{}
	}
	for k, p := range s.m {
		if now.Sub(p.at) >= seenTTL {
			delete(s.m, k)
		}
	}
	s.m[key] = seenPod{id: id, at: now}
}

// get is the pod remembered for the claim named key, unless older than
// seenTTL at now.
func (s *seenPods) get(key client.ObjectKey, now time.Time) (v1alpha1.ObjectIdentity, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.m[key]
	if !ok || now.Sub(p.at) >= seenTTL {
		return v1alpha1.ObjectIdentity{}, false
	}
	return p.id, true
}

// forget drops the pod remembered for the claim named key.
func (s *seenPods) forget(key client.ObjectKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}
