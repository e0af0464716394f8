package webhook

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// HandoutTTL is how long a claim handed out by an admission is known to
// the webhook as its own: longer than the API server spends on one pod's
// admission (the webhook's timeout, 10 s, per call), within which it
// reinvokes the webhook.
const HandoutTTL = 30 * time.Second

// handoutsPruneAt is the number of entries above which a record first
// forgets the expired ones, so that the set stays as small as the claims
// handed out in the last HandoutTTL.
const handoutsPruneAt = 64

// Handouts are the claims this process's admissions handed to pods in the
// last HandoutTTL, by namespace and name, each with the name (or, before
// the API server names it, the generateName) of the pod it went to, until
// the reinvocation of that admission takes it. Claim names are random,
// and the pod carrying one exists nowhere until its admission ends: a pod
// of that name that carries a claim of this set is either that
// admission's output, reinvoked, or a copy of the admitted pod's manifest
// made within HandoutTTL of it, which, when no reinvocation took the
// claim, the set cannot tell apart. The webhook tells them apart by the
// pods and records its cache holds (ownHandout), and checks a pod carrying
// a claim outside the set by live reads. Safe for concurrent use; the
// zero value is not: use NewHandouts.
type Handouts struct {
	mu sync.Mutex
	at map[types.NamespacedName]handout
}

// handout is a claim's entry in Handouts: when it was handed out, and to
// which pod (HandoutPod).
type handout struct {
	at  time.Time
	pod string
}

// HandoutPod is the name of pod for Handouts: its name and generateName,
// as its admission sees them.
func HandoutPod(pod *corev1.Pod) string {
	return pod.Name + "/" + pod.GenerateName
}

// NewHandouts returns an empty set.
func NewHandouts() *Handouts {
	return &Handouts{at: map[types.NamespacedName]handout{}}
}

// Record adds claim, handed out at now to pod (HandoutPod).
func (h *Handouts) Record(claim types.NamespacedName, pod string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.at) >= handoutsPruneAt {
		for k, e := range h.at {
			if now.Sub(e.at) >= HandoutTTL {
				delete(h.at, k)
			}
		}
	}
	h.at[claim] = handout{at: now, pod: pod}
}

// Take says whether claim was handed out to pod (HandoutPod) in the
// HandoutTTL before now, and forgets it either way: a second pod carrying
// it is not a reinvocation.
func (h *Handouts) Take(claim types.NamespacedName, pod string, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.at[claim]
	delete(h.at, claim)
	return ok && e.pod == pod && now.Sub(e.at) < HandoutTTL && !now.Before(e.at)
}

// Len is the number of claims in the set, expired ones included until a
// record forgets them.
func (h *Handouts) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.at)
}
