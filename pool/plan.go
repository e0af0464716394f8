package pool

import (
	"cmp"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
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
	// Replace is true for a claim to delete at once and create anew
	// elsewhere: no node can use its volume any more.
	Replace bool
	// Spare is true for a claim that serves no node where the namespace's
	// pods run (FollowDemand): among the surplus, it goes first.
	Spare bool
	// Move is true for a spare to replace by a claim on a node in demand
	// (FollowDemand). Make before break: the replacement is created, and
	// the moving claim, still handed to pods meanwhile, is deleted once no
	// kept claim is still provisioning.
	Move bool
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
	// Uncovered counts the nodes in demand that no warm PVC serves
	// (FollowDemand), which new claims are named for first: a claim marked
	// Move is replaced only where the claims the pool is short of do not
	// already go.
	Uncovered int
	// Binders are the names of the warm PVCs that have a binder Job.
	Binders []string
	// Reserved counts the claims of the current template that webhook
	// replicas reserved ahead of their pods (claim.Reservation) and whose
	// reservations are not over: they are the pool's too, ready to be
	// handed out, so the pool keeps that many fewer warm PVCs.
	Reserved int
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
	// Moved are the claims marked Move that this plan creates a
	// replacement for.
	Moved []string
	// Leaving are Bound surplus claims kept, still warm, until the kept
	// claims that provision meanwhile are Bound.
	Leaving []string
	// Warm and Provisioning count the current, non-stale claims kept,
	// Leaving ones among the Warm.
	Warm, Provisioning int32
}

// PlanNamespace decides how to bring one namespace's pool to in.Size: create
// the missing PVCs all at once, replace stale ones (made from another
// template) and those marked Replace, delete the surplus, and give every
// unbound PVC of a WaitForFirstConsumer class a selected node (SelectNodes)
// or else a binder, until it is Bound. Claims are kept in this order:
// Bound ones serving demand, unbound ones serving demand, then spares,
// Bound before unbound; older before newer in each. A claim marked Move is
// never kept: a new one takes its place. A Bound claim of the surplus
// stays (Leaving) while a kept one still provisions, so that the pool never
// holds fewer warm PVCs than before it changed.
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
	size := max(int(in.Size)-in.Reserved, 0)
	moveOnly(valid, size, in.Uncovered)
	rank := func(c Claim) int {
		r := 0
		if c.Spare || c.Move {
			r += 2
		}
		if !c.Bound {
			r++
		}
		if c.Move {
			r += 4
		}
		return r
	}
	slices.SortStableFunc(valid, func(a, b Claim) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), a.Created.Compare(b.Created), cmp.Compare(a.Name, b.Name))
	})
	staying := len(valid) - countFunc(valid, func(c Claim) bool { return c.Move })
	keepN := min(size, staying)
	// The moving claims a replacement is made for: those that, unmarked,
	// would have been kept.
	if n := min(len(valid), size) - staying; n > 0 {
		for _, c := range valid[staying : staying+n] {
			p.Moved = append(p.Moved, c.Name)
		}
	}
	p.Create = size - keepN
	surplus := valid[keepN:]
	valid = valid[:keepN]
	provisioning := p.Create + countFunc(valid, func(c Claim) bool { return !c.Bound })
	for _, c := range surplus {
		if c.Bound && provisioning > 0 {
			provisioning--
			p.Leaving = append(p.Leaving, c.Name)
			p.Warm++
			if !c.Recorded {
				p.Record = append(p.Record, c.Name)
			}
			continue
		}
		p.Delete = append(p.Delete, c.Name)
	}

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

// moveOnly leaves marked Move only the claims a move needs, oldest first:
// one per uncovered node that the claims the pool is short of (size less
// its valid claims) do not already go to.
func moveOnly(valid []Claim, size, uncovered int) {
	needed := max(0, uncovered-max(0, size-len(valid)))
	var moving []int
	for i := range valid {
		if valid[i].Move {
			moving = append(moving, i)
		}
	}
	slices.SortStableFunc(moving, func(a, b int) int {
		return cmp.Or(valid[a].Created.Compare(valid[b].Created), cmp.Compare(valid[a].Name, valid[b].Name))
	})
	for _, i := range moving[min(needed, len(moving)):] {
		valid[i].Move = false
	}
}

func countFunc[T any](s []T, f func(T) bool) int {
	n := 0
	for _, v := range s {
		if f(v) {
			n++
		}
	}
	return n
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

// PoolNamespaces are the namespaces that hold f's pool: those
// spec.pool.namespaces lists when it lists any, else those its status
// shows learned (Namespaces decides them).
func PoolNamespaces(f *v1alpha1.FluentPVC) sets.Set[string] {
	if len(f.Spec.Pool.Namespaces) > 0 {
		return sets.New(f.Spec.Pool.Namespaces...)
	}
	out := sets.New[string]()
	for _, p := range f.Status.Pool {
		out.Insert(p.Namespace)
	}
	return out
}
