package objects_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

func TestHolderPodOf(t *testing.T) {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "f-abc", UID: "pvc-uid"}}
	holder := objects.HolderPod("f", pvc, "n1", "pause", "low")
	with := func(f func(*corev1.Pod)) *corev1.Pod {
		p := holder.DeepCopy()
		f(p)
		return p
	}
	cases := map[string]struct {
		pod        *corev1.Pod
		byOperator bool
		want       bool
	}{
		"the operator's holder":              {pod: holder, byOperator: true, want: true},
		"created by someone else":            {pod: holder},
		"without the holder label":           {pod: with(func(p *corev1.Pod) { delete(p.Labels, v1alpha1.ComponentLabelKey) }), byOperator: true},
		"labelled for another PVC":           {pod: with(func(p *corev1.Pod) { p.Labels[v1alpha1.WarmClaimLabelKey] = "f-xyz" }), byOperator: true},
		"controlled by an earlier PVC":       {pod: with(func(p *corev1.Pod) { p.OwnerReferences[0].UID = "old-uid" }), byOperator: true},
		"without a controller":               {pod: with(func(p *corev1.Pod) { p.OwnerReferences = nil }), byOperator: true},
		"in another namespace":               {pod: with(func(p *corev1.Pod) { p.Namespace = "other" }), byOperator: true},
		"a volume that is not read-only":     {pod: with(func(p *corev1.Pod) { p.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly = false }), byOperator: true},
		"a container mount that would write": {pod: with(func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts[0].ReadOnly = false }), byOperator: true},
		"a second container that would write": {pod: with(func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "w", VolumeMounts: []corev1.VolumeMount{{Name: "claim", MountPath: "/w"}}})
		}), byOperator: true},
		"a raw block device": {pod: with(func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeDevices = []corev1.VolumeDevice{{Name: "claim", DevicePath: "/dev/x"}}
		}), byOperator: true},
		"an init container that would write": {pod: with(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "i", VolumeMounts: []corev1.VolumeMount{{Name: "claim", MountPath: "/w"}}}}
		}), byOperator: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := objects.HolderPodOf(tc.pod, pvc, tc.byOperator); got != tc.want {
				t.Errorf("HolderPodOf = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPreferNode(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 5}},
	}}}}
	objects.PreferNode(pod, "n1")
	terms := pod.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	if len(terms) != 2 || terms[0].Weight != 5 || terms[1].Weight != 100 || terms[1].Preference.MatchFields[0].Values[0] != "n1" {
		t.Errorf("preferred terms %+v: want the pod's own, then n1 at weight 100", terms)
	}
	bare := &corev1.Pod{}
	objects.PreferNode(bare, "n2")
	if got := bare.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution; len(got) != 1 || got[0].Preference.MatchFields[0].Values[0] != "n2" {
		t.Errorf("preferred terms %+v: want n2", got)
	}
}
