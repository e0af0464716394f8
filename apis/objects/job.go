package objects

import (
	"fmt"
	"strconv"

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
