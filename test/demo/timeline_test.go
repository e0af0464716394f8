package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

func TestMarks(t *testing.T) {
	meta := func(name string, labels map[string]string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: "demo", Labels: labels}
	}
	drainLabels := map[string]string{v1alpha1.BindingNameLabelKey: "demo-abc", v1alpha1.ComponentLabelKey: v1alpha1.ComponentDrain}
	readyPod := func(phase corev1.PodPhase, ready corev1.ConditionStatus) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: meta("app-0", nil), Status: corev1.PodStatus{
			Phase:      phase,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}},
		}}
	}
	terminated := func(name, message string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: message}}}
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: meta("demo-abc", nil)}
	now := metav1.Now()
	cases := map[string]struct {
		obj     any
		deleted bool
		want    []mark
	}{
		"a VolumeAttachment not yet attached": {
			obj: &storagev1.VolumeAttachment{Spec: storagev1.VolumeAttachmentSpec{NodeName: "real-0", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-1")}}},
		},
		"an attached VolumeAttachment": {
			obj: &storagev1.VolumeAttachment{
				Spec:   storagev1.VolumeAttachmentSpec{NodeName: "real-0", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-1")}},
				Status: storagev1.VolumeAttachmentStatus{Attached: true},
			},
			want: []mark{{key: "attached/pv-1", note: "real-0"}},
		},
		"a Running pod not yet Ready": {
			obj: readyPod(corev1.PodRunning, corev1.ConditionFalse),
		},
		"a Running and Ready pod": {
			obj:  readyPod(corev1.PodRunning, corev1.ConditionTrue),
			want: []mark{{key: "ready/app-0"}},
		},
		"a pod deleted": {
			obj: &corev1.Pod{ObjectMeta: meta("app-0", nil)}, deleted: true,
			want: []mark{{key: "pod-gone/app-0"}},
		},
		"a drain Job's pod deleted": {
			obj: &corev1.Pod{ObjectMeta: meta("demo-abc-drain-1-xyz", drainLabels)}, deleted: true,
		},
		"a Ready pod of another namespace": {
			obj: func() *corev1.Pod {
				p := readyPod(corev1.PodRunning, corev1.ConditionTrue)
				p.Namespace = "other"
				return p
			}(),
		},
		"a terminated sidecar's message is not the drain's": {
			obj: &corev1.Pod{ObjectMeta: meta("app-0", nil), Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
				{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
				terminated("sidecar", "wrote 12 lines\n"),
			}}},
		},
		"a terminated container without a message": {
			obj: &corev1.Pod{ObjectMeta: meta("app-0", nil), Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{terminated("app", "")}}},
		},
		"a drain Job's pod, Running and Ready, is not a demo pod": {
			obj: &corev1.Pod{ObjectMeta: meta("demo-abc-drain-1-xyz", drainLabels), Status: corev1.PodStatus{
				Phase:      corev1.PodRunning,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			}},
		},
		"a drain Job's pod's message is the drain's, by claim": {
			obj: &corev1.Pod{ObjectMeta: meta("demo-abc-drain-1-xyz", drainLabels), Status: corev1.PodStatus{
				Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{terminated("drain", "drained 12 lines\n")},
			}},
			want: []mark{{key: "drain-said/demo-abc", note: "drained 12 lines\n"}},
		},
		"a drain Job running": {
			obj:  &batchv1.Job{ObjectMeta: meta("demo-abc-drain-1", drainLabels)},
			want: []mark{{key: "drain-job/demo-abc", note: "demo-abc-drain-1"}},
		},
		"a drain Job Complete": {
			obj: &batchv1.Job{ObjectMeta: meta("demo-abc-drain-1", drainLabels), Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
				{Type: batchv1.JobComplete, Status: corev1.ConditionTrue},
			}}},
			want: []mark{{key: "drain-job/demo-abc", note: "demo-abc-drain-1"}, {key: "drained/demo-abc", note: "demo-abc-drain-1"}},
		},
		"a drain Job Failed": {
			obj: &batchv1.Job{ObjectMeta: meta("demo-abc-drain-1", drainLabels), Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue},
			}}},
			want: []mark{{key: "drain-job/demo-abc", note: "demo-abc-drain-1"}},
		},
		"a Job that is not a drain": {
			obj: &batchv1.Job{ObjectMeta: meta("bind", map[string]string{v1alpha1.BindingNameLabelKey: "demo-abc", v1alpha1.ComponentLabelKey: v1alpha1.ComponentBinder})},
		},
		"a PVC updated": {
			obj: pvc,
		},
		"a PVC being deleted": {
			obj:  &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "demo-abc", Namespace: "demo", DeletionTimestamp: &now}},
			want: []mark{{key: "claim-deleted/demo-abc"}},
		},
		"a PVC of another namespace being deleted": {
			obj: &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "demo-abc", Namespace: "other", DeletionTimestamp: &now}},
		},
		"a PVC deleted": {
			obj: pvc, deleted: true,
			want: []mark{{key: "claim-deleted/demo-abc"}, {key: "claim-gone/demo-abc"}},
		},
		"a PVC deleted while the informer was away": {
			obj: toolscache.DeletedFinalStateUnknown{Key: "demo/demo-abc", Obj: pvc}, deleted: true,
			want: []mark{{key: "claim-deleted/demo-abc"}, {key: "claim-gone/demo-abc"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := marks(tc.obj, tc.deleted, "demo")
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(mark{})); diff != "" {
				t.Errorf("marks (-want +got):\n%s", diff)
			}
		})
	}
}
