package pool

import (
	"math/rand/v2"

	corev1 "k8s.io/api/core/v1"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// Candidates are the warm PVCs a pod may take, in random order: Bound,
// made from the current template (hash), not being deleted, with their
// volume's node affinity recorded, and usable on a node the pod can run on
// (usable, given that record; Placement.Usable). Random order spreads
// concurrent checkouts over the pool instead of making them all race for
// one PVC.
func Candidates(warm []corev1.PersistentVolumeClaim, hash string, usable func(affinity string) bool) []*corev1.PersistentVolumeClaim {
	var out []*corev1.PersistentVolumeClaim
	for i := range warm {
		c := &warm[i]
		if c.Labels[v1alpha1.ClaimRoleLabelKey] != v1alpha1.ClaimRoleWarm || c.Labels[v1alpha1.TemplateHashLabelKey] != hash ||
			c.Status.Phase != corev1.ClaimBound || !c.DeletionTimestamp.IsZero() {
			continue
		}
		if affinity, ok := WarmAffinity(c); !ok || !usable(affinity) {
			continue
		}
		out = append(out, c)
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// Rank orders candidates by where their volume is staged, keeping the
// order within each rank: first those whose holder is on a node the pod
// can run on (holderNode names it; fits tells), where the pod finds the
// volume attached and staged; then those without a holder, or whose
// holder is not on a node yet, which attach where the pod goes; last
// those staged on a node the pod cannot run on, which must detach from
// it first. A pod that pins itself to its nodes (pinned) never takes one
// of the last: it would take a volume staged for others away from them.
func Rank(cands []*corev1.PersistentVolumeClaim, holderNode func(claim string) (string, bool), fits func(node string) bool, pinned bool) []*corev1.PersistentVolumeClaim {
	rank := func(c *corev1.PersistentVolumeClaim) int {
		node, held := holderNode(c.Name)
		switch {
		case !held || node == "":
			return 1
		case fits(node):
			return 0
		}
		return 2
	}
	out := make([]*corev1.PersistentVolumeClaim, 0, len(cands))
	for r := range 3 {
		if r == 2 && pinned {
			break
		}
		for _, c := range cands {
			if rank(c) == r {
				out = append(out, c)
			}
		}
	}
	return out
}

// HolderRequestKey names holder request req of warm PVC claim: requests
// are times, which two PVCs may share.
func HolderRequestKey(claim, req string) string {
	return claim + "/" + req
}
