package pool

import (
	"cmp"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// Node is a node a warm PVC may be provisioned for.
type Node struct {
	Name string
	// Zone is the node's topology.kubernetes.io/zone label ("" if none).
	Zone string
}

// EligibleNodes are the nodes that an ordinary pod could be scheduled to
// and that class's allowedTopologies permit (class nil: any): Ready, not
// cordoned, and without NoSchedule or NoExecute taints. When the class's
// provisioner is a CSI driver that some node registered (csiNodes), only
// nodes that registered it qualify: its provisioner needs the node's
// topology from there. Sorted by name.
func EligibleNodes(nodes []corev1.Node, class *storagev1.StorageClass, csiNodes []storagev1.CSINode) []Node {
	withDriver := csiDriverNodes(class, csiNodes)
	var out []Node
	for i := range nodes {
		n := &nodes[i]
		if n.Spec.Unschedulable || !n.DeletionTimestamp.IsZero() || !nodeReady(n) || hardTainted(n) || !allowedByClass(n, class) {
			continue
		}
		if withDriver != nil && !withDriver[n.Name] {
			continue
		}
		out = append(out, Node{Name: n.Name, Zone: n.Labels[ZoneLabelKey]})
	}
	slices.SortFunc(out, func(a, b Node) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// csiDriverNodes are the nodes whose CSINode lists class's provisioner, or
// nil when none does (not a CSI driver, or CSINodes not known).
func csiDriverNodes(class *storagev1.StorageClass, csiNodes []storagev1.CSINode) map[string]bool {
	if class == nil {
		return nil
	}
	var out map[string]bool
	for _, cn := range csiNodes {
		if slices.ContainsFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == class.Provisioner }) {
			if out == nil {
				out = map[string]bool{}
			}
			out[cn.Name] = true
		}
	}
	return out
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hardTainted(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	})
}

// allowedByClass is true when the node matches one of the class's
// allowedTopologies terms (all of a term's label requirements), or the class
// restricts nothing.
func allowedByClass(n *corev1.Node, class *storagev1.StorageClass) bool {
	if class == nil || len(class.AllowedTopologies) == 0 {
		return true
	}
	return slices.ContainsFunc(class.AllowedTopologies, func(term corev1.TopologySelectorTerm) bool {
		for _, req := range term.MatchLabelExpressions {
			v, ok := n.Labels[req.Key]
			if !ok || !slices.Contains(req.Values, v) {
				return false
			}
		}
		return true
	})
}

// SpreadNodes picks a node for each of n new warm PVCs. The first go to
// the preferred nodes (FollowDemand's uncovered ones), one each, in order.
// The others keep the pool's zones balanced: each goes to the zone with the
// fewest warm PVCs so far (perZone, updated as it goes; ties by name), on a
// random node of that zone. Nodes without a zone form a zone of their own
// (""). intN picks the node (rand.IntN in production). It returns nil when
// there is no node.
func SpreadNodes(nodes []Node, perZone map[string]int, n int, preferred []string, intN func(int) int) []string {
	if len(nodes) == 0 || n <= 0 {
		return nil
	}
	byZone := map[string][]string{}
	zoneOf := map[string]string{}
	for _, node := range nodes {
		byZone[node.Zone] = append(byZone[node.Zone], node.Name)
		zoneOf[node.Name] = node.Zone
	}
	perZone = maps.Clone(perZone)
	if perZone == nil {
		perZone = map[string]int{}
	}
	out := make([]string, 0, n)
	for _, name := range preferred {
		zone, ok := zoneOf[name]
		if !ok || len(out) == n {
			continue
		}
		out = append(out, name)
		perZone[zone]++
	}
	zones := make([]string, 0, len(byZone))
	counts := map[string]int{}
	for z := range byZone {
		zones = append(zones, z)
		counts[z] = perZone[z]
	}
	slices.Sort(zones)
	for len(out) < n {
		best := zones[0]
		for _, z := range zones[1:] {
			if counts[z] < counts[best] {
				best = z
			}
		}
		counts[best]++
		names := byZone[best]
		out = append(out, names[intN(len(names))])
	}
	return out
}
