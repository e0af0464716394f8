package controllers_test

// The envtest API server runs no Job controller, kubelet or provisioner:
// these functions stand in for them, writing what each would.

import (
	"context"
	"slices"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// completeJob marks job succeeded, as the Job controller would.
func completeJob(ctx context.Context, job *batchv1.Job) {
	now := metav1.Now()
	job.Status.StartTime = &now
	job.Status.CompletionTime = &now
	job.Status.Succeeded = 1
	job.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	ExpectWithOffset(1, k8sClient.Status().Update(ctx, job)).To(Succeed())
}

// failJob marks job failed, as the Job controller would.
func failJob(ctx context.Context, job *batchv1.Job) {
	now := metav1.Now()
	job.Status.StartTime = &now
	job.Status.Failed = 1
	job.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: batchv1.JobReasonBackoffLimitExceeded},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: batchv1.JobReasonBackoffLimitExceeded},
	}
	ExpectWithOffset(1, k8sClient.Status().Update(ctx, job)).To(Succeed())
}

// sidecarTerminated sets the status of the sidecar "sidecar" as the kubelet
// would after it exited with code, now or, with restarted, before a restart:
// in initContainerStatuses for a native sidecar, else in containerStatuses.
func sidecarTerminated(code int32, restarted bool) func(*corev1.Pod) {
	return func(pod *corev1.Pod) {
		terminated := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error"}}
		if code == 0 {
			terminated.Terminated.Reason = "Completed"
		}
		sidecar := corev1.ContainerStatus{Name: "sidecar", Image: "alpine:latest", State: terminated}
		if restarted {
			sidecar.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
			sidecar.LastTerminationState = terminated
			sidecar.RestartCount = 1
		}
		pod.Status.Phase = corev1.PodRunning
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{
			{Name: "app", Image: "registry.k8s.io/pause:3.10", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}},
		}
		if slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == sidecar.Name }) {
			pod.Status.InitContainerStatuses = []corev1.ContainerStatus{sidecar}
		} else {
			pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, sidecar)
		}
	}
}

// evicted sets the status of a pod the kubelet evicted: Failed, its
// containers killed.
func evicted(pod *corev1.Pod) {
	sidecarTerminated(137, false)(pod)
	pod.Status.Phase = corev1.PodFailed
	pod.Status.Reason = "Evicted"
}

// updatePodStatus applies set to the latest pod and writes its status.
func updatePodStatus(ctx context.Context, pod *corev1.Pod, set func(*corev1.Pod)) {
	EventuallyWithOffset(1, func() error {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		set(pod)
		return k8sClient.Status().Update(ctx, pod)
	}).Should(Succeed())
}

// bindClaim plays the PV controller for c: a PV in zone bound to it, and c Bound.
func bindClaim(ctx context.Context, g Gomega, c *corev1.PersistentVolumeClaim, zone string) {
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + string(c.UID)},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: *c.Spec.Resources.Requests.Storage()},
			AccessModes:                   c.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + c.Name}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: c.Namespace, Name: c.Name, UID: c.UID},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{zone}}},
			}}}},
		},
	}
	if c.Spec.StorageClassName != nil {
		pv.Spec.StorageClassName = *c.Spec.StorageClassName
	}
	g.Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, pv))).To(Succeed())
	if c.Spec.VolumeName == "" {
		c.Spec.VolumeName = pv.Name
		g.Expect(k8sClient.Update(ctx, c)).To(Succeed())
	}
	c.Status.Phase = corev1.ClaimBound
	c.Status.Capacity = pv.Spec.Capacity
	c.Status.AccessModes = c.Spec.AccessModes
	g.Expect(k8sClient.Status().Update(ctx, c)).To(Succeed())
}

// updateFluentPVC applies change to the latest f and writes it.
func updateFluentPVC(ctx context.Context, f *v1alpha1.FluentPVC, change func(*v1alpha1.FluentPVC)) {
	EventuallyWithOffset(1, func() error {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(f), f); err != nil {
			return err
		}
		change(f)
		return k8sClient.Update(ctx, f)
	}).Should(Succeed())
}
