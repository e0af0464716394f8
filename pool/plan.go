package pool

import (
	"cmp"
	"slices"
	"time"
)

// Claim is what planning needs to know of one pool PVC.
type Claim struct {
	Name     string
	Bound    bool
	Deleting bool
	// Hash is the claim's template hash.
	Hash string
	// Recorded is true once the claim carries its volume's node affinity
	// (NodeAffinityAnnotationKey).
	Recorded bool
	// Replace is true for a claim to delete and create anew elsewhere: no
	// node can use its volume any more, or it serves no demand node while
	// one waits (FollowDemand).
	Replace bool
	// NodeSelected is true once the claim names the node to provision for
	// (v1alpha1.SelectedNodeAnnotationKey).
	NodeSelected bool
	// Zone is where the claim's volume is or will be: its recorded zones, or
	// its selected node's zone; "" when not known yet.
	Zone    string
	Created time.Time
}

// Input is one namespace's pool as observed.
type Input struct {
	// Size is the number of warm PVCs wanted; 0 empties the pool.
	Size int32
	// Hash is the current template hash.
	Hash string
	// WaitForFirstConsumer is true when the template's StorageClass binds a
	// volume only once a pod uses it, so that a binder is needed.
	WaitForFirstConsumer bool
	// SelectNodes is true when the pool hands WaitForFirstConsumer claims
	// straight to the provisioner by naming a node (new claims at creation,
	// others by SelectNode) instead of running a binder Job for each.
	SelectNodes bool
	Claims      []Claim
	// Binders are the names of the warm PVCs that have a binder Job.
	Binders []string
}

// Plan is what to do in one namespace.
type Plan struct {
	// Create is the number of warm PVCs to create.
	Create int
	// Delete are warm PVCs to delete: stale ones and the surplus.
	Delete []string
	// SelectNode are unbound warm PVCs that need a node named: their
	// provisioner gave the last one back, or they predate SelectNodes.
	SelectNode []string
	// PerZone counts the kept claims by Zone, for spreading new ones.
	PerZone map[string]int
	// CreateBinders are unbound warm PVCs that need a binder Job.
	CreateBinders []string
	// DeleteBinders are the PVCs whose binder Job is done or pointless.
	DeleteBinders []string
	// Record are Bound warm PVCs whose volume's node affinity is not
	// recorded yet.
	Record []string
	// Warm and Provisioning count the current, non-stale claims kept.
	Warm, Provisioning int32
}

// PlanNamespace decides how to bring one namespace's pool to in.Size: create
// the missing PVCs all at once, replace stale ones (made from another
// template) and those marked Replace, delete the surplus (unbound and newest first, so that the PVCs
// that took longest to provision are kept), and give every unbound PVC of a
// WaitForFirstConsumer class a selected node (SelectNodes) or else a binder,
// until it is Bound.
func PlanNamespace(in Input) Plan {
	p := Plan{PerZone: map[string]int{}}
	var valid []Claim
	for _, c := range in.Claims {
		switch {
		case c.Deleting:
		case c.Hash != in.Hash, c.Replace:
			p.Delete = append(p.Delete, c.Name)
		default:
			valid = append(valid, c)
		}
	}
	// Keep bound before unbound, older before newer.
	slices.SortStableFunc(valid, func(a, b Claim) int {
		if a.Bound != b.Bound {
			if a.Bound {
				return -1
			}
			return 1
		}
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Name, b.Name))
	})
	size := max(int(in.Size), 0)
	if len(valid) > size {
		for _, c := range valid[size:] {
			p.Delete = append(p.Delete, c.Name)
		}
		valid = valid[:size]
	}
	p.Create = size - len(valid)

	kept, replaced := map[string]bool{}, map[string]bool{}
	for _, c := range valid {
		kept[c.Name] = true
		if c.Zone != "" {
			p.PerZone[c.Zone]++
		}
		if c.Bound {
			p.Warm++
			if !c.Recorded {
				p.Record = append(p.Record, c.Name)
			}
			continue
		}
		p.Provisioning++
		switch {
		case !in.WaitForFirstConsumer, c.NodeSelected:
		case in.SelectNodes:
			// A binder whose pod has not been placed yet is replaced too.
			p.SelectNode = append(p.SelectNode, c.Name)
			replaced[c.Name] = true
		case !slices.Contains(in.Binders, c.Name):
			p.CreateBinders = append(p.CreateBinders, c.Name)
		}
	}
	for _, name := range in.Binders {
		if !kept[name] || replaced[name] || boundClaim(in.Claims, name) {
			p.DeleteBinders = append(p.DeleteBinders, name)
		}
	}
	return p
}

func boundClaim(claims []Claim, name string) bool {
	i := slices.IndexFunc(claims, func(c Claim) bool { return c.Name == name })
	return i >= 0 && claims[i].Bound
}

// Learning limits what Namespaces learns from admissions.
type Learning struct {
	// Selected tells whether a namespace may use the FluentPVC at all (its
	// namespaceSelector); nil selects every namespace.
	Selected func(ns string) bool
	// Max caps the learned namespaces (0: no cap); the most recently active
	// are kept.
	Max int
}

// Namespaces decides which namespaces hold a pool. Listed namespaces always
// do. With none listed, a namespace learned from admissions (lastAdmission)
// keeps its pool until idleTTL passes without an admission, if learn
// selects it and its cap leaves room; capped are the selected, active
// namespaces the cap leaves out. requeueAfter is when the next one expires
// (0 when none will).
func Namespaces(listed []string, lastAdmission map[string]time.Time, now time.Time, idleTTL time.Duration, learn Learning) (keep []string, requeueAfter time.Duration, capped []string) {
	if len(listed) > 0 {
		keep = slices.Clone(listed)
		slices.Sort(keep)
		return keep, 0, nil
	}
	for ns, t := range lastAdmission {
		left := t.Add(idleTTL).Sub(now)
		if left <= 0 || (learn.Selected != nil && !learn.Selected(ns)) {
			continue
		}
		keep = append(keep, ns)
	}
	// Most recently active first, so that a cap keeps those.
	slices.SortFunc(keep, func(a, b string) int {
		return cmp.Or(lastAdmission[b].Compare(lastAdmission[a]), cmp.Compare(a, b))
	})
	if learn.Max > 0 && len(keep) > learn.Max {
		capped = slices.Clone(keep[learn.Max:])
		slices.Sort(capped)
		keep = keep[:learn.Max]
	}
	for _, ns := range keep {
		left := lastAdmission[ns].Add(idleTTL).Sub(now)
		if requeueAfter == 0 || left < requeueAfter {
			requeueAfter = left
		}
	}
	slices.Sort(keep)
	return keep, requeueAfter, capped
}
