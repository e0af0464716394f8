package pool

import (
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// BinderJob is a Job whose pod uses warm PVC claim, so that the scheduler
// binds a WaitForFirstConsumer volume when it places the pod. The pod need
// not run to completion: the Job is deleted as soon as the PVC is Bound. Its
// pods prefer to spread over zones so that the warm PVCs do too; only
// prefer, since on a cluster whose nodes have no zone label a required
// spread would keep every binder Pending.
func BinderJob(fpvc *v1alpha1.FluentPVC, claim *corev1.PersistentVolumeClaim, image string) *batchv1.Job {
	podLabels := map[string]string{
		v1alpha1.ComponentLabelKey: v1alpha1.ComponentBinder,
		v1alpha1.WarmClaimLabelKey: claim.Name,
		v1alpha1.BinderOfLabelKey:  fpvc.Name,
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:      objects.BinderJobName(claim.Name),
			Namespace: claim.Namespace,
			Labels: map[string]string{
				v1alpha1.FluentPVCNameLabelKey: fpvc.Name,
				v1alpha1.ComponentLabelKey:     v1alpha1.ComponentBinder,
				v1alpha1.WarmClaimLabelKey:     claim.Name,
			},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:            ptr.To[int32](0),
			ActiveDeadlineSeconds:   ptr.To[int64](600),
			TTLSecondsAfterFinished: ptr.To[int32](60),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{
					RestartPolicy:                 corev1.RestartPolicyNever,
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					AutomountServiceAccountToken:  ptr.To(false),
					EnableServiceLinks:            ptr.To(false),
					SecurityContext:               objects.PauseSecurityContext(),
					Containers:                    []corev1.Container{objects.PauseContainer("bind", image)},
					Volumes:                       []corev1.Volume{objects.ClaimVolume("claim", claim.Name)},
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew:           1,
						TopologyKey:       ZoneLabelKey,
						WhenUnsatisfiable: corev1.ScheduleAnyway,
						LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
							v1alpha1.ComponentLabelKey: v1alpha1.ComponentBinder,
							v1alpha1.BinderOfLabelKey:  fpvc.Name,
						}},
					}},
				},
			},
		},
	}
}

// BinderPodLabels select the binder pods of FluentPVC fpvc.
func BinderPodLabels(fpvc string) map[string]string {
	return map[string]string{v1alpha1.ComponentLabelKey: v1alpha1.ComponentBinder, v1alpha1.BinderOfLabelKey: fpvc}
}

// BinderUnschedulable is, for each binder pod that the scheduler could not
// place, a message naming its warm PVC and quoting the scheduler's reason
// (its PodScheduled condition), sorted.
func BinderUnschedulable(pods []corev1.Pod) []string {
	var out []string
	for i := range pods {
		p := &pods[i]
		if why, ok := Unschedulable(p); ok && p.DeletionTimestamp.IsZero() {
			out = append(out, fmt.Sprintf("the binder of warm PVC %s/%s cannot be scheduled: %s", p.Namespace, p.Labels[v1alpha1.WarmClaimLabelKey], why))
		}
	}
	slices.Sort(out)
	return out
}

// Unschedulable says whether the scheduler found no node for pod, which
// is not on one (its PodScheduled condition is False, Unschedulable), and
// quotes the scheduler's reason.
func Unschedulable(pod *corev1.Pod) (string, bool) {
	if pod.Spec.NodeName != "" {
		return "", false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c.Message, true
		}
	}
	return "", false
}
