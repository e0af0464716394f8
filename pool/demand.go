package pool

import (
	"cmp"
	"slices"
	"time"
)

// SpareSettle is how long a Bound warm PVC that serves no demand node is
// kept before it is replaced by one where pods run: long enough that a pool
// being filled, or pods being rescheduled, do not make it churn.
const SpareSettle = 30 * time.Second

// DemandNode is a node where a namespace's pods use claims of the pool: the
// node named on each claim (the scheduler names it for a miss; the pool, for
// a hit). Misses say that the pool had nothing usable there.
type DemandNode struct {
	Name           string
	Misses, Claims int
}

// WarmPlace is a kept warm PVC as FollowDemand sees it.
type WarmPlace struct {
	Name    string
	Bound   bool
	Created time.Time
	// Reaches reports whether the PVC's volume can be used on node: by its
	// recorded affinity once Bound, else only on the node named for it.
	Reaches func(node string) bool
}

// Following is how a namespace's pool follows its demand (FollowDemand).
type Following struct {
	// Uncovered are the demand nodes left without a warm PVC that new PVCs
	// may be named for, most wanted first.
	Uncovered []string
	// Move are settled spares to replace by PVCs on uncovered nodes, oldest
	// first, at most one per uncovered node. A moving PVC is deleted only
	// once its replacement is Bound (PlanNamespace), so that it still
	// serves pods meanwhile.
	Move []string
	// Spare are the warm PVCs that cover no demand node, the first to go
	// when the pool holds more than its size.
	Spare []string
	// RequeueAfter is when the next spare settles (0: none waits).
	RequeueAfter time.Duration
}

// FollowDemand places a pool where its namespace's pods run, in
// select-node mode. It matches each warm PVC to at most one demand node,
// nodes with the most misses (then claims) first, so that a zonal PVC
// covers one pod of its zone and a node-local one its own node. The warm
// PVCs that cover none are spares; a Bound spare that has settled
// (SpareSettle) moves to an uncovered node, at most one per node, so that
// the pool converges instead of churning.
func FollowDemand(demand []DemandNode, warm []WarmPlace, eligible func(node string) bool, now time.Time) Following {
	var out Following
	demand = slices.Clone(demand)
	slices.SortFunc(demand, func(a, b DemandNode) int {
		return cmp.Or(cmp.Compare(b.Misses, a.Misses), cmp.Compare(b.Claims, a.Claims), cmp.Compare(a.Name, b.Name))
	})
	used := make([]bool, len(warm))
	for _, d := range demand {
		i := -1
		for j, w := range warm {
			if !used[j] && w.Reaches(d.Name) {
				i = j
				break
			}
		}
		if i >= 0 {
			used[i] = true
		} else if eligible(d.Name) {
			out.Uncovered = append(out.Uncovered, d.Name)
		}
	}
	var settled []WarmPlace
	for j, w := range warm {
		if used[j] {
			continue
		}
		out.Spare = append(out.Spare, w.Name)
		if !w.Bound || len(out.Uncovered) == 0 {
			continue
		}
		if left := w.Created.Add(SpareSettle).Sub(now); left > 0 {
			if out.RequeueAfter == 0 || left < out.RequeueAfter {
				out.RequeueAfter = left
			}
			continue
		}
		settled = append(settled, w)
	}
	slices.SortFunc(settled, func(a, b WarmPlace) int { return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Name, b.Name)) })
	for _, w := range settled[:min(len(settled), len(out.Uncovered))] {
		out.Move = append(out.Move, w.Name)
	}
	return out
}
