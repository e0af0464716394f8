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

// FollowDemand places a pool where its namespace's pods run, in
// select-node mode. It matches each warm PVC to at most one demand node,
// nodes with the most misses (then claims) first, so that a zonal PVC
// covers one pod of its zone and a node-local one its own node. uncovered
// are the demand nodes left without a PVC that new PVCs may be named for
// (eligible), in that order. replace are Bound warm PVCs that cover no
// demand node and have settled (SpareSettle), oldest first, at most one per
// uncovered node: each is replaced by a PVC on an uncovered node, so the
// pool converges instead of churning. requeueAfter is when the next spare
// settles (0: none waits).
func FollowDemand(demand []DemandNode, warm []WarmPlace, eligible func(node string) bool, now time.Time) (uncovered, replace []string, requeueAfter time.Duration) {
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
			uncovered = append(uncovered, d.Name)
		}
	}
	if len(uncovered) == 0 {
		return uncovered, nil, 0
	}
	var spares []WarmPlace
	for j, w := range warm {
		if used[j] || !w.Bound {
			continue
		}
		if left := w.Created.Add(SpareSettle).Sub(now); left > 0 {
			if requeueAfter == 0 || left < requeueAfter {
				requeueAfter = left
			}
			continue
		}
		spares = append(spares, w)
	}
	slices.SortFunc(spares, func(a, b WarmPlace) int { return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Name, b.Name)) })
	for _, w := range spares[:min(len(spares), len(uncovered))] {
		replace = append(replace, w.Name)
	}
	return uncovered, replace, requeueAfter
}
