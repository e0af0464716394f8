package pool

import (
	"cmp"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
)

// DefaultStagePerNode is how many warm PVCs, of all pools together, a node
// keeps staged at most, unless --stage-per-node says otherwise.
const DefaultStagePerNode = 8

// StagingOn says whether a pool stages its warm PVCs: setting is the
// FluentPVC's spec.pool.staging, class the template's StorageClass (nil:
// none), driver the CSIDriver named as its provisioner (nil: none, so not
// a CSI volume) and block whether the template asks for a raw block
// volume, which a holder cannot mount as a file system. Auto stages only
// where the driver requires attachment: there a hit saves the attach and
// the first stage; elsewhere it saves almost nothing.
func StagingOn(setting v1alpha1.PoolStaging, class *storagev1.StorageClass, driver *storagev1.CSIDriver, block bool) bool {
	if setting == v1alpha1.PoolStagingDisabled || class == nil || driver == nil || block {
		return false
	}
	if setting == v1alpha1.PoolStagingEnabled {
		return true
	}
	return driver.Spec.AttachRequired == nil || *driver.Spec.AttachRequired
}

// NodeRoom is how many more holders a node may take, negative when it has
// too many: at most perNode holders of all pools in all (holders is how
// many it has), and, when its CSI driver reports an attach limit
// (allocatable, nil: none), at most half of the slots that volumes other
// than holders' leave (attached is the driver's VolumeAttachments on the
// node, holders' included). So a node never gives its last slots to
// holders, and as other volumes come, holders leave: the scheduler does
// not preempt a pod for an attach slot.
func NodeRoom(perNode, holders int, allocatable *int32, attached int) int {
	room := perNode - holders
	if allocatable != nil {
		others := max(0, attached-holders)
		room = min(room, (int(*allocatable)-others)/2-holders)
	}
	return room
}

// StageClaim is a warm PVC that may be staged: Bound, from the current
// template, with its volume's affinity recorded and not being deleted.
type StageClaim struct {
	Name string
	// Node is the node named on it for provisioning ("" if none).
	Node string
	// Reaches reports whether its volume can be used on node.
	Reaches func(node string) bool
}

// Holder is a holder pod as the pool sees it.
type Holder struct {
	Name, Claim string
	// Node is the node it is scheduled to, or else the one it asks for.
	Node     string
	Deleting bool
	// Unschedulable is true when the scheduler found no room for it on
	// its node (its PodScheduled condition).
	Unschedulable bool
}

// Stage is a holder to create: warm PVC Claim staged on Node.
type Stage struct {
	Claim, Node string
}

// StageInput is one namespace's part of a pool, for PlanStaging.
type StageInput struct {
	// On is StagingOn for the pool.
	On bool
	// Warm are the namespace's warm PVCs that may be staged.
	Warm []StageClaim
	// Holders are the pool's holders in the namespace.
	Holders []Holder
	// Eligible tells the nodes a holder may go to (Ready, untainted,
	// with the driver).
	Eligible func(node string) bool
	// Room is NodeRoom of each node; PlanStaging takes what it uses from
	// it, and gives back what it frees on nodes with too many holders, so
	// that namespaces planned one after another share it.
	Room map[string]int
	// Demand are the nodes where the namespace's pods use claims of the
	// pool (Demand).
	Demand []DemandNode
}

// StagePlan is what PlanStaging decides.
type StagePlan struct {
	Create []Stage
	// Delete are holders to remove: of warm PVCs whose node can no longer
	// take them (gone, cordoned, tainted, or its attach slots are needed
	// by other volumes), or has no room for them while another node has
	// (the PVC is then staged there), and every holder of a warm PVC when
	// staging is off.
	// Holders of PVCs handed out are the holder reconciler's.
	Delete []string
	// Staged is how many warm PVCs have a holder (running or not).
	Staged int
	// Unstaged is how many warm PVCs found no node with room: worth
	// planning again soon, since room comes back when volumes detach,
	// which nothing else announces.
	Unstaged int
}

// PlanStaging decides which warm PVCs of a namespace get a holder, and
// where. A PVC named for a node goes there when it has room; others go
// to the node with the most demand not yet covered by staged PVCs, then
// to the node with the most room, among the nodes that can use the
// volume (ties by name). PVCs that find no room stay unstaged: a hit on
// them attaches on demand, as without staging.
func PlanStaging(in StageInput) StagePlan {
	var p StagePlan
	warm := make(map[string]bool, len(in.Warm))
	for _, c := range in.Warm {
		warm[c.Name] = true
	}
	held := map[string]bool{}
	covered := map[string]int{}
	// full are nodes where a holder found no room: none goes there now;
	// stuck are those holders, by PVC.
	full := map[string]bool{}
	stuck := map[string]Holder{}
	for _, h := range in.Holders {
		if !warm[h.Claim] {
			continue // handed out, or gone: the holder reconciler's
		}
		if h.Deleting {
			held[h.Claim] = true
			continue
		}
		if in.On && h.Unschedulable {
			// Its PVC is staged elsewhere in this plan if another node has
			// room; else the holder waits where it is.
			stuck[h.Claim] = h
			full[h.Node] = true
			continue
		}
		held[h.Claim] = true
		if !in.On || !in.Eligible(h.Node) {
			p.Delete = append(p.Delete, h.Name)
			continue
		}
		if in.Room[h.Node] < 0 {
			// Other volumes need the slot. The PVC is staged again once
			// the holder is gone, where there is room.
			in.Room[h.Node]++
			p.Delete = append(p.Delete, h.Name)
			continue
		}
		covered[h.Node]++
		p.Staged++
	}
	if !in.On {
		return p
	}
	demand := map[string]int{}
	for _, d := range in.Demand {
		demand[d.Name] = d.Claims
	}
	nodes := make([]string, 0, len(in.Room))
	for n := range in.Room {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for _, c := range in.Warm {
		if held[c.Name] {
			continue
		}
		fits := func(n string) bool { return in.Room[n] > 0 && !full[n] && in.Eligible(n) && c.Reaches(n) }
		node := ""
		if c.Node != "" && fits(c.Node) {
			node = c.Node
		} else {
			for _, n := range nodes {
				if !fits(n) {
					continue
				}
				if node == "" || cmp.Or(
					cmp.Compare(demand[n]-covered[n], demand[node]-covered[node]),
					cmp.Compare(in.Room[n], in.Room[node])) > 0 {
					node = n
				}
			}
		}
		h, wasStuck := stuck[c.Name]
		if node == "" {
			if wasStuck {
				p.Staged++ // it keeps waiting for room where it is
			} else {
				p.Unstaged++
			}
			continue
		}
		if wasStuck {
			p.Delete = append(p.Delete, h.Name)
		}
		in.Room[node]--
		covered[node]++
		p.Create = append(p.Create, Stage{Claim: c.Name, Node: node})
		p.Staged++
	}
	return p
}

// HolderStaged says whether holder pod has its warm PVC attached and
// staged: it runs on its node (the kubelet mounts a pod's volumes before
// it starts its containers) and is not being deleted.
func HolderStaged(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp.IsZero() && pod.Spec.NodeName != "" && pod.Status.Phase == corev1.PodRunning
}

// HolderPatience is how long a holder stays after its warm PVC was handed
// out while the pod is not yet on a node: long enough for a pod admitted
// with it to be created and scheduled, short enough that a claim whose pod
// never came, or waits unschedulable, does not keep a node's attach slot.
const HolderPatience = time.Minute

// HolderRecheck bounds how long a holder whose PVC was handed out waits,
// while pod (nil: none seen yet) is not seen on a node, before it looks
// again: the pod's events may come late (a cut watch), and the holder may
// stay beside a started pod only seconds. It is MinHolderRecheck, but for
// a pod the scheduler found no node for, which waits for the scheduler's
// own backoff: then it grows with the time since the admission, a quarter
// of it, up to MaxHolderRecheck, so that a pod left unschedulable costs
// about twenty looks within HolderPatience rather than one a second.
func HolderRecheck(pod *corev1.Pod, sinceAdmission time.Duration) time.Duration {
	if pod == nil {
		return MinHolderRecheck
	}
	if _, ok := Unschedulable(pod); !ok {
		return MinHolderRecheck
	}
	return min(max(sinceAdmission/4, MinHolderRecheck), MaxHolderRecheck)
}

// MinHolderRecheck and MaxHolderRecheck bound HolderRecheck.
const (
	MinHolderRecheck = time.Second
	MaxHolderRecheck = 4 * time.Second
)

// Why a holder is removed, the "reason" label of HoldersRemoved.
const (
	// HolderServed: its PVC's pod is on the holder's node, which keeps the
	// volume attached and staged.
	HolderServed = "served"
	// HolderMoved: its PVC's pod went to another node; the volume detaches
	// from the holder's to attach there.
	HolderMoved = "moved"
	// HolderAbandoned: its PVC was handed out and no pod came to a node in
	// HolderPatience, or none carries the claim claim.PodWait after the
	// admission, or the claim moved on without one, or the pod it records
	// is gone.
	HolderAbandoned = "abandoned"
	// HolderOrphaned: its PVC is gone, or is not the one it was made for.
	HolderOrphaned = "orphaned"
	// HolderEvicted: it ended (evicted, preempted, or failed).
	HolderEvicted = "evicted"
)

// HolderFate decides what becomes of holder pod h of warm PVC pvc (nil:
// not found), given pod, the pod the PVC was handed to (nil: none found
// with a node or without), and bound, whether the claim's binding exists,
// at now. A holder stays while its PVC is warm, and while it is reserved
// ahead of its pod (claim.Reservation) and neither a pod carries it nor
// its binding was made without one (the reservation's replica is gone).
// Once the PVC is handed out, it stays until the pod is on a node (the
// pod then keeps the volume attached there, if that is the holder's node),
// or until HolderPatience has passed since the admission (for a reserved
// claim, the pod's creation); recheck is when to look again while it
// waits (HolderRecheck). reason is "" when it stays.
func HolderFate(h *corev1.Pod, pvc *corev1.PersistentVolumeClaim, pod *corev1.Pod, bound bool, now time.Time) (reason string, recheck time.Duration) {
	ref := metav1.GetControllerOfNoCopy(h)
	switch {
	case pvc == nil || ref == nil || ref.UID != pvc.UID || !pvc.DeletionTimestamp.IsZero():
		return HolderOrphaned, 0
	case h.Status.Phase == corev1.PodFailed || h.Status.Phase == corev1.PodSucceeded || disrupted(h):
		return HolderEvicted, 0
	}
	state := claim.StateOf(pvc)
	switch {
	case state == claim.Warm:
		return "", 0
	case pod != nil && pod.Spec.NodeName != "":
		if pod.Spec.NodeName == h.Spec.NodeName {
			return HolderServed, 0
		}
		return HolderMoved, 0
	case pod == nil && recordsPod(pvc):
		// The pod its binding recorded came and is gone (the caller found
		// none carrying the claim): the holder would only keep the claim's
		// drain waiting for it.
		return HolderAbandoned, 0
	}
	if _, _, reserved := claim.Reservation(pvc); reserved && pod == nil && !bound {
		// Held for the replica that reserved it: no pod carries it yet.
		return "", 0
	}
	admitted, err := time.Parse(time.RFC3339Nano, pvc.Annotations[v1alpha1.AdmittedAtAnnotationKey])
	if claim.Reserved(pvc) && pod != nil {
		// Reserved long before: the pod was created at its admission.
		admitted, err = pod.CreationTimestamp.Time, nil
	}
	if err != nil || (state != claim.Claimed && state != claim.Used) {
		return HolderAbandoned, 0
	}
	since := now.Sub(admitted)
	if pod == nil && since >= claim.PodWait {
		// No pod carries the claim: it came and went before anything
		// recorded it, or never came.
		return HolderAbandoned, 0
	}
	if left := HolderPatience - since; left > 0 {
		return "", min(left, HolderRecheck(pod, since))
	}
	return HolderAbandoned, 0
}

// disrupted says whether the scheduler or the kubelet marked pod for
// preemption or eviction.
func disrupted(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// recordsPod says whether claim pvc records the pod it was handed to.
func recordsPod(pvc *corev1.PersistentVolumeClaim) bool {
	used, _ := claim.PodOf(pvc)
	return used.UID != ""
}
