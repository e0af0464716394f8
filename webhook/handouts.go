package webhook

import (
	"sync"
	"time"

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
// last HandoutTTL, by namespace and name, each until the reinvocation of
// its admission takes it. Claim names are random, and the pod carrying one
// exists nowhere until its admission ends: a pod that carries a claim of
// this set is that admission's output, reinvoked. Only a copy of an
// admitted pod's manifest carries a claim outside it, which the webhook
// then checks by live reads. Safe for concurrent use; the zero value is
// not: use NewHandouts.
type Handouts struct {
	mu sync.Mutex
	at map[types.NamespacedName]time.Time
}

// NewHandouts returns an empty set.
func NewHandouts() *Handouts {
	return &Handouts{at: map[types.NamespacedName]time.Time{}}
}

// Record adds claim, handed out at now.
func (h *Handouts) Record(claim types.NamespacedName, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.at) >= handoutsPruneAt {
		for k, t := range h.at {
			if now.Sub(t) >= HandoutTTL {
				delete(h.at, k)
			}
		}
	}
	h.at[claim] = now
}

// Take says whether claim was handed out in the HandoutTTL before now, and
// forgets it: a second pod carrying it is not a reinvocation.
func (h *Handouts) Take(claim types.NamespacedName, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.at[claim]
	delete(h.at, claim)
	return ok && now.Sub(t) < HandoutTTL && !now.Before(t)
}

// Len is the number of claims in the set, expired ones included until a
// record forgets them.
func (h *Handouts) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.at)
}
