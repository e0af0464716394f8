package objects

import (
	"fmt"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// DrainJobName is the deterministic name of a claim's attempt-th finalizer
// Job, so that a restarted operator finds the Job it started before.
func DrainJobName(claimName string, attempt int32) string {
	return fmt.Sprintf("%s-drain-%d", claimName, attempt)
}

// DrainJob is the attempt-th finalizer Job of binding b: fpvc's
// pvcFinalizerJobSpecTemplate with the claim mounted at pvcVolumeMountPath
// and the common volumes, mounts and envs, without the template's
// ttlSecondsAfterFinished. It is owned by the binding.
func DrainJob(fpvc *v1alpha1.FluentPVC, b *v1alpha1.FluentPVCBinding, attempt int32) *batchv1.Job {
	spec := fpvc.Spec.PVCFinalizerJobSpecTemplate.DeepCopy()
	// The binding owns its Jobs' lifetime: a Job its TTL removed before the
	// operator saw the result would count as vanished, so a drain that
	// succeeded would run again and a failure be retried without backoff.
	// The garbage collector removes the Jobs with their binding.
	spec.TTLSecondsAfterFinished = nil
	if spec.Template.Spec.RestartPolicy == "" {
		spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	}
	injectPodSpec(&spec.Template.Spec, &fpvc.Spec, b.Spec.PVC.Name)
	if spec.Template.Labels == nil {
		spec.Template.Labels = map[string]string{}
	}
	spec.Template.Labels[v1alpha1.BindingNameLabelKey] = b.Name
	spec.Template.Labels[v1alpha1.ComponentLabelKey] = v1alpha1.ComponentDrain
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:      DrainJobName(b.Name, attempt),
			Namespace: b.Namespace,
			Labels: map[string]string{
				v1alpha1.FluentPVCNameLabelKey: fpvc.Name,
				v1alpha1.BindingNameLabelKey:   b.Name,
				v1alpha1.ComponentLabelKey:     v1alpha1.ComponentDrain,
				v1alpha1.DrainAttemptLabelKey:  strconv.Itoa(int(attempt)),
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(b, v1alpha1.GroupVersion.WithKind("FluentPVCBinding"))},
		},
		Spec: *spec,
	}
}

// BinderJobName is the name of the pool's binder Job of warm PVC claimName.
func BinderJobName(claimName string) string {
	return claimName + "-bind"
}

// isDrainJobName says whether name is DrainJobName(binding, n) for some
// attempt n >= 1.
func isDrainJobName(name, binding string) bool {
	rest, ok := strings.CutPrefix(name, binding+"-drain-")
	if !ok {
		return false
	}
	n, err := strconv.ParseInt(rest, 10, 32)
	return err == nil && n >= 1 && strconv.FormatInt(n, 10) == rest
}

// jobController is the Job that controls pod, as its controller reference
// names it, or nil.
func jobController(pod *corev1.Pod) *metav1.OwnerReference {
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil || ref.Kind != "Job" || ref.APIVersion != batchv1.SchemeGroupVersion.String() {
		return nil
	}
	return ref
}

// ControlledByDrainJob says, from pod alone, whether pod's controller is a
// Job named as a drain Job of binding: its labels are not enough, since
// anyone who creates a pod chooses them.
func ControlledByDrainJob(pod *corev1.Pod, binding string) bool {
	ref := jobController(pod)
	return ref != nil && isDrainJobName(ref.Name, binding)
}

// DrainPodOf says whether pod is a pod of job and job a drain Job of
// binding: pod's controller is job (name and UID), job is named
// DrainJobName(binding, n) and is controlled by FluentPVCBinding binding,
// and both carry the drain component label. job is the Job as read, nil
// when pod has no controlling Job or it was not found.
func DrainPodOf(pod *corev1.Pod, job *batchv1.Job, binding string) bool {
	if job == nil || !controlledBy(pod, job) || !isDrainJobName(job.Name, binding) ||
		pod.Labels[v1alpha1.ComponentLabelKey] != v1alpha1.ComponentDrain || job.Labels[v1alpha1.ComponentLabelKey] != v1alpha1.ComponentDrain {
		return false
	}
	owner := metav1.GetControllerOfNoCopy(job)
	return owner != nil && owner.Kind == "FluentPVCBinding" && owner.APIVersion == v1alpha1.GroupVersion.String() && owner.Name == binding
}

// BinderPodOf says whether pod is a pod of job and job the pool's binder
// Job of warm PVC claim: pod's controller is job (name and UID), job is
// named BinderJobName(claim), and both carry the binder component label
// and claim's warm-claim label. job is as DrainPodOf's.
func BinderPodOf(pod *corev1.Pod, job *batchv1.Job, claim string) bool {
	return job != nil && controlledBy(pod, job) && job.Name == BinderJobName(claim) &&
		pod.Labels[v1alpha1.ComponentLabelKey] == v1alpha1.ComponentBinder && job.Labels[v1alpha1.ComponentLabelKey] == v1alpha1.ComponentBinder &&
		pod.Labels[v1alpha1.WarmClaimLabelKey] == claim && job.Labels[v1alpha1.WarmClaimLabelKey] == claim
}

// controlledBy says whether job, by name and UID, is pod's controller.
func controlledBy(pod *corev1.Pod, job *batchv1.Job) bool {
	ref := jobController(pod)
	return ref != nil && ref.Name == job.Name && ref.UID == job.UID && pod.Namespace == job.Namespace
}
