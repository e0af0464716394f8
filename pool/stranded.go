package pool

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// StrandedAfter is the default of how long the volume of a warm PVC may
// stay attached to a node that is gone before the pool replaces the PVC. The attach/detach
// controller detaches such a volume within seconds when it can. When it
// cannot (it waits for an unmount that no kubelet will report, or the CSI
// attacher cannot detach from a node it no longer finds), the volume can
// be attached nowhere else, for minutes or for good, and a pod that took
// the PVC would wait as long.
const StrandedAfter = time.Minute

// GoneAttachment is a VolumeAttachment of a warm PVC's volume to a node
// the cache no longer shows.
type GoneAttachment struct {
	UID    types.UID
	Volume string
	Node   string
}

// Strandings remembers since when each GoneAttachment has been seen. It is
// safe for concurrent use. A restart forgets, and so waits again: a
// replacement is never earlier than the wait after the pool first saw the
// attachment.
type Strandings struct {
	mu    sync.Mutex
	since map[types.UID]time.Time
}

// Due records gone, as seen at now, and returns those seen for after or
// longer, and how long until the next of the others is due (0: none
// waits). It forgets the attachments that exists (by UID) denies: gone
// since, or detached.
func (s *Strandings) Due(gone []GoneAttachment, exists func(types.UID) bool, now time.Time, after time.Duration) (due []GoneAttachment, recheck time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid := range s.since {
		if !exists(uid) {
			delete(s.since, uid)
		}
	}
	for _, g := range gone {
		first, ok := s.since[g.UID]
		if !ok {
			if s.since == nil {
				s.since = map[types.UID]time.Time{}
			}
			s.since[g.UID], first = now, now
		}
		left := first.Add(after).Sub(now)
		if left <= 0 {
			due = append(due, g)
			continue
		}
		if recheck == 0 || left < recheck {
			recheck = left
		}
	}
	return due, recheck
}
