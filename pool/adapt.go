package pool

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// Nodes is what the pool knows of the cluster's nodes when it adapts warm
// PVCs to the planner's input. Its nodes are the cache's: never modify them.
type Nodes struct {
	// SelectNodes is true in select-node mode (Input.SelectNodes).
	SelectNodes bool
	// Zones is the zone of every node, by name.
	Zones map[string]string
	// ByName is every node, by name.
	ByName map[string]*corev1.Node
	// Stranded are the volumes attached, for StrandedAfter or longer, to
	// a node that is proved gone: volume name to node name.
	Stranded map[string]string
}

// Adapted is one namespace's warm PVCs as the planner (PlanNamespace) and
// FollowDemand see them.
type Adapted struct {
	Claims []Claim
	// Places are the kept warm PVCs (current template, neither being
	// deleted nor replaced), for FollowDemand.
	Places []WarmPlace
	// Unreachable are the Bound warm PVCs that no node can use any more,
	// marked Replace.
	Unreachable []string
	// Stranded are the Bound warm PVCs whose volume stays attached to a
	// node that is gone (Nodes.Stranded), marked Replace.
	Stranded []string
}

// Adapt turns one namespace's warm PVCs, as read from the cache, and the
// ones created but not cached yet (unseen), into the planner's claims.
// hash is the current template's hash. A Bound warm PVC that no node can
// use is marked Replace, judged only when some node is known, since a pool
// is never emptied on an empty node list. In select-node mode, a warm PVC
// named for a node that is gone and not yet Bound counts as having no node
// named, so that another one is. A Bound warm PVC whose volume is stranded
// on a gone node (Nodes.Stranded) is marked Replace too: a warm PVC holds
// no pod's data.
func Adapt(warm []corev1.PersistentVolumeClaim, unseen []Expected, hash string, nodes Nodes, affinities *Affinities) Adapted {
	var out Adapted
	anyNode := NewPlacement(nil, func() ([]*corev1.Node, error) { return slices.Collect(maps.Values(nodes.ByName)), nil }, affinities)
	seen := make(map[string]bool, len(warm))
	for i := range warm {
		c := &warm[i]
		seen[c.Name] = true
		node := c.Annotations[v1alpha1.SelectedNodeAnnotationKey]
		zones, ok := c.Annotations[v1alpha1.ZonesAnnotationKey]
		if !ok {
			zones = nodes.Zones[node]
		}
		if _, exists := nodes.Zones[node]; nodes.SelectNodes && node != "" && !exists && c.Status.Phase != corev1.ClaimBound {
			node = "" // named for a node that is gone: name another
		}
		_, recorded := c.Annotations[v1alpha1.NodeAffinityAnnotationKey]
		claim := Claim{
			Name: c.Name, Bound: c.Status.Phase == corev1.ClaimBound, Deleting: !c.DeletionTimestamp.IsZero(),
			Hash: c.Labels[v1alpha1.TemplateHashLabelKey], Recorded: recorded, NodeSelected: node != "",
			Zone: zones, Created: c.CreationTimestamp.Time,
		}
		affinity, known := WarmAffinity(c)
		switch {
		case claim.Bound && known && len(nodes.ByName) > 0 && !anyNode.Usable(affinity):
			claim.Replace = true
			out.Unreachable = append(out.Unreachable, c.Name)
		case claim.Bound && !claim.Deleting && c.Spec.VolumeName != "" && nodes.Stranded[c.Spec.VolumeName] != "":
			claim.Replace = true
			out.Stranded = append(out.Stranded, c.Name)
		}
		if !claim.Deleting && !claim.Replace && claim.Hash == hash {
			out.Places = append(out.Places, Place(claim, node, affinity, known, nodes.ByName, affinities))
		}
		out.Claims = append(out.Claims, claim)
	}
	for _, x := range unseen {
		if seen[x.Key.Name] {
			continue // reached the cache since
		}
		claim := Claim{Name: x.Key.Name, Hash: hash, NodeSelected: true, Zone: x.Zone, Created: x.At}
		out.Claims = append(out.Claims, claim)
		out.Places = append(out.Places, Place(claim, x.Node, "", false, nodes.ByName, affinities))
	}
	return out
}

// Place is warm PVC claim as FollowDemand sees it: once Bound with its
// volume's affinity recorded, it reaches the nodes that affinity accepts;
// before, only the node named for it (if any).
func Place(claim Claim, node, affinity string, recorded bool, nodes map[string]*corev1.Node, affinities *Affinities) WarmPlace {
	w := WarmPlace{Name: claim.Name, Bound: claim.Bound, Created: claim.Created}
	m, err := affinities.Parse(affinity)
	switch {
	case claim.Bound && recorded && err == nil:
		w.Reaches = func(n string) bool { return nodes[n] != nil && m.Match(nodes[n]) }
	default:
		w.Reaches = func(n string) bool { return node != "" && n == node }
	}
	return w
}

// Demand are the nodes named on a namespace's claims, with how many claims
// and misses each holds, in the order first seen.
func Demand(claimed []corev1.PersistentVolumeClaim) []DemandNode {
	idx := map[string]int{}
	var out []DemandNode
	for _, c := range claimed {
		node := c.Annotations[v1alpha1.SelectedNodeAnnotationKey]
		if node == "" {
			continue
		}
		i, ok := idx[node]
		if !ok {
			i = len(out)
			idx[node] = i
			out = append(out, DemandNode{Name: node})
		}
		out[i].Claims++
		if c.Annotations[v1alpha1.CheckoutAnnotationKey] == v1alpha1.CheckoutMiss {
			out[i].Misses++
		}
	}
	return out
}
