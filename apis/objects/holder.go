package objects

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// HolderName is the name of the holder pod of warm PVC claimName.
func HolderName(claimName string) string {
	return claimName + "-hold"
}

// holderMountPath is where a holder's container mounts its warm PVC.
const holderMountPath = "/held"

// HolderPod is the pod that keeps warm PVC claim attached and staged on
// node: it mounts the PVC read-only and runs image (a pause image) until it
// is deleted. It is controlled by the PVC, so that it goes with it. Its
// required node affinity names node, so the scheduler checks the node's
// room and volume limits; priorityClass (none when "") is a low priority
// that never preempts, so that real pods preempt holders, never the
// reverse. It carries the FluentPVC's label, which puts it in the
// operator's cache; the pod webhook leaves it alone (HolderLabels). It
// carries the holder request claim records
// (v1alpha1.HolderRequestAnnotationKey), if any.
func HolderPod(fpvc string, claim *corev1.PersistentVolumeClaim, node, image, priorityClass string) *corev1.Pod {
	var annotations map[string]string
	if req, ok := claim.Annotations[v1alpha1.HolderRequestAnnotationKey]; ok {
		annotations = map[string]string{v1alpha1.HolderRequestAnnotationKey: req}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        HolderName(claim.Name),
			Namespace:   claim.Namespace,
			Annotations: annotations,
			Labels: map[string]string{
				v1alpha1.FluentPVCNameLabelKey: fpvc,
				v1alpha1.ComponentLabelKey:     v1alpha1.ComponentHolder,
				v1alpha1.WarmClaimLabelKey:     claim.Name,
			},
			OwnerReferences: []metav1.OwnerReference{holderOwner(claim)},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			PriorityClassName:             priorityClass,
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
				}}},
			}},
			SecurityContext: PauseSecurityContext(),
			Containers:      []corev1.Container{holdContainer(image)},
			Volumes: []corev1.Volume{{Name: "claim", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim.Name, ReadOnly: true},
			}}},
		},
	}
}

// holderOwner is the controller reference of claim's holder. It does not
// block the PVC's deletion: a holder holds no data, and blocking would
// need the right to set finalizers on PVCs.
func holderOwner(claim *corev1.PersistentVolumeClaim) metav1.OwnerReference {
	ref := metav1.NewControllerRef(claim, corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"))
	ref.BlockOwnerDeletion = ptr.To(false)
	return *ref
}

// holdContainer is PauseContainer mounting the claim read-only: the
// kubelet attaches, stages and mounts only the volumes a container mounts.
func holdContainer(image string) corev1.Container {
	c := PauseContainer("hold", image)
	c.VolumeMounts = []corev1.VolumeMount{{Name: "claim", MountPath: holderMountPath, ReadOnly: true}}
	return c
}

// PauseContainer is the container of the operator's pause pods (binders
// and holders): image, tiny requests and limits, no privilege, a
// read-only root.
func PauseContainer(name, image string) corev1.Container {
	return corev1.Container{
		Name:  name,
		Image: image,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("4Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
		},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
}

// PauseSecurityContext is the pod security context of the operator's
// pause pods: non-root, the runtime's default seccomp profile.
func PauseSecurityContext() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](65532),
		RunAsGroup:     ptr.To[int64](65532),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// IsHolder says whether pod is labelled as a holder pod. The label proves
// nothing: HolderPodOf does.
func IsHolder(pod *corev1.Pod) bool {
	return pod.Labels[v1alpha1.ComponentLabelKey] == v1alpha1.ComponentHolder
}

// HolderPodOf says whether pod is the operator's holder of pvc: created by
// the operator itself (byOperator, which the admission request's user
// tells), controlled by pvc (name and UID), labelled as its holder, and
// mounting it read-only only. Labels and owner references alone prove
// nothing, since whoever creates a pod chooses them; the creator does.
func HolderPodOf(pod *corev1.Pod, pvc *corev1.PersistentVolumeClaim, byOperator bool) bool {
	if !byOperator || !IsHolder(pod) || pod.Labels[v1alpha1.WarmClaimLabelKey] != pvc.Name || pod.Namespace != pvc.Namespace {
		return false
	}
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil || ref.Kind != "PersistentVolumeClaim" || ref.APIVersion != "v1" || ref.Name != pvc.Name || ref.UID != pvc.UID {
		return false
	}
	return readOnlyMounts(pod, pvc.Name)
}

// HolderOf is the warm PVC a pod labelled as a holder names by its
// controller reference ("" when it names none): the holder reconciler
// and the pool know their holders by it.
func HolderOf(pod *corev1.Pod) string {
	ref := metav1.GetControllerOfNoCopy(pod)
	if !IsHolder(pod) || ref == nil || ref.Kind != "PersistentVolumeClaim" || ref.Name != pod.Labels[v1alpha1.WarmClaimLabelKey] {
		return ""
	}
	return ref.Name
}

// readOnlyMounts says whether every volume of pod that mounts claim is
// read-only, and so is every container's mount of it.
func readOnlyMounts(pod *corev1.Pod, claim string) bool {
	var names []string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
			if !v.PersistentVolumeClaim.ReadOnly {
				return false
			}
			names = append(names, v.Name)
		}
	}
	containers := slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers)
	for _, c := range containers {
		for _, m := range c.VolumeMounts {
			if slices.Contains(names, m.Name) && !m.ReadOnly {
				return false
			}
		}
		for _, d := range c.VolumeDevices {
			if slices.Contains(names, d.Name) {
				return false
			}
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		for _, m := range c.VolumeMounts {
			if slices.Contains(names, m.Name) && !m.ReadOnly {
				return false
			}
		}
	}
	return len(names) > 0
}

// stagedNodeWeight is the weight of the preferred node affinity that
// steers a pod to the node its warm PVC is staged on: the most a
// preference may weigh, so that it outweighs the spreading scores of an
// otherwise even choice, while a node that cannot take the pod is still
// passed over.
const stagedNodeWeight = 100

// PreferNode adds to pod a preferred node affinity for node, where its
// claim is staged. Only preferred: a pod the staged node cannot take runs
// elsewhere, as it would have without the operator.
func PreferNode(pod *corev1.Pod, node string) {
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := pod.Spec.Affinity.NodeAffinity
	na.PreferredDuringSchedulingIgnoredDuringExecution = append(na.PreferredDuringSchedulingIgnoredDuringExecution, corev1.PreferredSchedulingTerm{
		Weight: stagedNodeWeight,
		Preference: corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
		}}},
	})
}
