package hostpath

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// ProvisionerName is the provisioner of the StorageClasses this provisioner
// serves, and the value of the PVs' pv.kubernetes.io/provisioned-by.
const ProvisionerName = "test.fluent-pvc-operator.tech.zozo.com/hostpath"

// Well-known keys of the PV controller, the scheduler and the topology API.
const (
	// SelectedNodeAnnotationKey is set on a WaitForFirstConsumer claim by the
	// scheduler once it has picked a node for the claim's first pod.
	SelectedNodeAnnotationKey = "volume.kubernetes.io/selected-node"
	// StorageProvisionerAnnotationKey is set on a claim by the PV controller
	// when it hands the claim to an external provisioner.
	StorageProvisionerAnnotationKey = "volume.kubernetes.io/storage-provisioner"
	// BetaStorageProvisionerAnnotationKey is the deprecated twin of
	// StorageProvisionerAnnotationKey, still written by the PV controller.
	BetaStorageProvisionerAnnotationKey = "volume.beta.kubernetes.io/storage-provisioner"
	// ProvisionedByAnnotationKey marks a PV with the provisioner that made it.
	ProvisionedByAnnotationKey = "pv.kubernetes.io/provisioned-by"
	// ZoneLabelKey is the node label and PV node-affinity key of a zone.
	ZoneLabelKey = corev1.LabelTopologyZone
)

// TopologyKeyParameter is the StorageClass parameter naming the node label
// that keys the PVs' node affinity: topology.kubernetes.io/zone when unset,
// another zone key (e.g. topology.gke.io/zone, as GCE PD CSI does), or
// kubernetes.io/hostname for node-local volumes. A volume's value is the
// selected node's label for WaitForFirstConsumer classes, else the next of
// the cluster's values, round-robin.
const TopologyKeyParameter = "topologyKey"

// TopologyKey is the node label that keys class's volumes.
func TopologyKey(class *storagev1.StorageClass) string {
	if k := class.Parameters[TopologyKeyParameter]; k != "" {
		return k
	}
	return ZoneLabelKey
}

// HostPathRoot is where the PVs point; nothing mounts them on kwok nodes.
const HostPathRoot = "/tmp/fluent-pvc-operator-test-provisioner"

// ClaimDecision says what to do with a claim.
type ClaimDecision int

const (
	// ClaimIgnore: not ours, already bound, or being deleted.
	ClaimIgnore ClaimDecision = iota
	// ClaimWait: ours, but the PV controller or the scheduler has not handed
	// it over yet; an update of the claim will bring it back.
	ClaimWait
	// ClaimProvision: ours and ready for a volume.
	ClaimProvision
)

func (d ClaimDecision) String() string {
	switch d {
	case ClaimIgnore:
		return "Ignore"
	case ClaimWait:
		return "Wait"
	case ClaimProvision:
		return "Provision"
	}
	return fmt.Sprintf("ClaimDecision(%d)", int(d))
}

// DecideClaim says whether the claim needs a volume from this provisioner,
// following the external-provisioner hand-off: the class must name
// ProvisionerName, the PV controller must have annotated the claim with
// StorageProvisionerAnnotationKey, and a WaitForFirstConsumer claim must
// carry the scheduler's SelectedNodeAnnotationKey. class is nil when the
// claim names no class or an unknown one.
func DecideClaim(pvc *corev1.PersistentVolumeClaim, class *storagev1.StorageClass) ClaimDecision {
	switch {
	case pvc.DeletionTimestamp != nil, pvc.Spec.VolumeName != "", class == nil,
		class.Provisioner != ProvisionerName, pvc.Spec.Selector != nil:
		// Like the external-provisioner, claims with a selector are not
		// provisioned: a new volume cannot promise to match it.
		return ClaimIgnore
	}
	handedOver := pvc.Annotations[StorageProvisionerAnnotationKey] == ProvisionerName ||
		pvc.Annotations[BetaStorageProvisionerAnnotationKey] == ProvisionerName
	if !handedOver {
		return ClaimWait
	}
	if isDelayed(class) && pvc.Annotations[SelectedNodeAnnotationKey] == "" {
		return ClaimWait
	}
	return ClaimProvision
}

func isDelayed(class *storagev1.StorageClass) bool {
	return class.VolumeBindingMode != nil && *class.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer
}

// ChooseZone picks the topology value (a zone, or a hostname: see
// TopologyKey) of a new volume. For a WaitForFirstConsumer class it is the
// selected node's (nodeZone). For an Immediate class it is the next-th
// value, round-robin, of the cluster's (from its nodes), narrowed by the
// class's allowedTopologies on ZoneLabelKey when the class is keyed by
// zone; with no nodes yet, of the allowed zones alone.
func ChooseZone(class *storagev1.StorageClass, nodeZone string, clusterZones []string, next int) (string, error) {
	if isDelayed(class) {
		if nodeZone == "" {
			return "", fmt.Errorf("the selected node has no %s label", TopologyKey(class))
		}
		return nodeZone, nil
	}
	candidates := uniqueSorted(clusterZones)
	if allowed, restricted := allowedZones(class); restricted && TopologyKey(class) == ZoneLabelKey {
		if len(candidates) == 0 {
			candidates = allowed
		} else {
			candidates = slices.DeleteFunc(candidates, func(z string) bool { return !slices.Contains(allowed, z) })
		}
	}
	if len(candidates) == 0 {
		return "", errors.New("no zone is both in the cluster and allowed by the class")
	}
	if next < 0 {
		next = -next
	}
	return candidates[next%len(candidates)], nil
}

// allowedZones returns the zones the class's allowedTopologies permit and
// whether they restrict zones at all. Terms are ORed, so their zones add up.
func allowedZones(class *storagev1.StorageClass) ([]string, bool) {
	var zones []string
	restricted := false
	for _, term := range class.AllowedTopologies {
		for _, expr := range term.MatchLabelExpressions {
			if expr.Key == ZoneLabelKey {
				restricted = true
				zones = append(zones, expr.Values...)
			}
		}
	}
	return uniqueSorted(zones), restricted
}

func uniqueSorted(in []string) []string {
	out := slices.Clone(in)
	out = slices.DeleteFunc(out, func(s string) bool { return s == "" })
	sort.Strings(out)
	return slices.Compact(out)
}

// PVName is the name of the claim's volume. It derives from the claim's
// UID, so that a restarted provisioner finds the volume it already made.
func PVName(pvc *corev1.PersistentVolumeClaim) string {
	return "pvc-" + string(pvc.UID)
}

// ConstructPV builds the volume of a claim in a zone (or another topology
// value, see TopologyKey): pre-bound to the claim, sized by its request,
// with its access and volume modes, the class's reclaim policy and mount
// options, and a required node affinity on the class's topology key.
func ConstructPV(pvc *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, zone string) *corev1.PersistentVolume {
	name := PVName(pvc)
	reclaim := corev1.PersistentVolumeReclaimDelete
	if class.ReclaimPolicy != nil {
		reclaim = *class.ReclaimPolicy
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{ProvisionedByAnnotationKey: ProvisionerName},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity: corev1.ResourceList{
				corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage],
			},
			AccessModes: slices.Clone(pvc.Spec.AccessModes),
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{
					Path: path.Join(HostPathRoot, name),
					Type: ptr.To(corev1.HostPathDirectoryOrCreate),
				},
			},
			ClaimRef: &corev1.ObjectReference{
				Kind:       "PersistentVolumeClaim",
				APIVersion: "v1",
				Namespace:  pvc.Namespace,
				Name:       pvc.Name,
				UID:        pvc.UID,
			},
			PersistentVolumeReclaimPolicy: reclaim,
			StorageClassName:              class.Name,
			MountOptions:                  slices.Clone(class.MountOptions),
			VolumeMode:                    pvc.Spec.VolumeMode,
			NodeAffinity: &corev1.VolumeNodeAffinity{
				Required: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchExpressions: []corev1.NodeSelectorRequirement{{
							Key:      TopologyKey(class),
							Operator: corev1.NodeSelectorOpIn,
							Values:   []string{zone},
						}},
					}},
				},
			},
		},
	}
	return pv
}

// ShouldDelete says whether the volume is this provisioner's to delete: made
// by it, released by its claim, and with reclaim policy Delete.
func ShouldDelete(pv *corev1.PersistentVolume) bool {
	return pv.DeletionTimestamp == nil &&
		pv.Annotations[ProvisionedByAnnotationKey] == ProvisionerName &&
		pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimDelete &&
		pv.Status.Phase == corev1.VolumeReleased
}
