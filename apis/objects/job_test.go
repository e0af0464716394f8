package objects_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/google/go-cmp/cmp"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

func TestDrainJob(t *testing.T) {
	fpvc := fixtures.MakeFluentPVC("f").Obj()
	b := claim.Binding(claim.NewClaimed(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutMiss, "token", "", fixtures.Epoch).Object, fpvc.UID)
	cases := map[string]struct {
		restartPolicy corev1.RestartPolicy
		ttl           *int32
		attempt       int32
		wantName      string
		wantRestart   corev1.RestartPolicy
	}{
		"first attempt, template's policy kept": {restartPolicy: corev1.RestartPolicyOnFailure, attempt: 1, wantName: "f-abc-drain-1", wantRestart: corev1.RestartPolicyOnFailure},
		"unset policy becomes Never":            {attempt: 3, wantName: "f-abc-drain-3", wantRestart: corev1.RestartPolicyNever},
		// A Job removed by its TTL before the operator saw its result would
		// count as vanished: a good drain run again, a failure retried
		// without backoff. The binding owns the Job's lifetime instead.
		"template's ttlSecondsAfterFinished dropped": {ttl: ptr.To[int32](0), attempt: 1, wantName: "f-abc-drain-1", wantRestart: corev1.RestartPolicyNever},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := fpvc.DeepCopy()
			f.Spec.PVCFinalizerJobSpecTemplate.Template.Spec.RestartPolicy = tc.restartPolicy
			f.Spec.PVCFinalizerJobSpecTemplate.TTLSecondsAfterFinished = tc.ttl
			job := objects.DrainJob(f, b, tc.attempt)
			if job.Spec.TTLSecondsAfterFinished != nil {
				t.Errorf("ttlSecondsAfterFinished = %d, want unset", *job.Spec.TTLSecondsAfterFinished)
			}
			if job.Name != tc.wantName {
				t.Errorf("name = %q, want %q", job.Name, tc.wantName)
			}
			ps := job.Spec.Template.Spec
			if ps.RestartPolicy != tc.wantRestart {
				t.Errorf("restartPolicy = %q, want %q", ps.RestartPolicy, tc.wantRestart)
			}
			if diff := cmp.Diff([]corev1.Volume{objects.ClaimVolume("fluent-pvc", "f-abc"), f.Spec.CommonVolumes[0]}, ps.Volumes); diff != "" {
				t.Errorf("volumes (-want +got):\n%s", diff)
			}
			c := ps.Containers[0]
			if diff := cmp.Diff([]corev1.EnvVar{{Name: "FLUENT_PVC_MOUNT_DIR", Value: "/mnt/fluent-pvc"}}, c.Env); diff != "" {
				t.Errorf("envs (-want +got):\n%s", diff)
			}
			if len(job.OwnerReferences) != 1 || job.OwnerReferences[0].Name != "f-abc" || job.OwnerReferences[0].Kind != "FluentPVCBinding" {
				t.Errorf("owner = %v, want the binding", job.OwnerReferences)
			}
			if job.Labels[v1alpha1.BindingNameLabelKey] != "f-abc" || job.Labels[v1alpha1.ComponentLabelKey] != v1alpha1.ComponentDrain {
				t.Errorf("labels = %v", job.Labels)
			}
			if f.Spec.PVCFinalizerJobSpecTemplate.Template.Spec.Volumes != nil || f.Spec.PVCFinalizerJobSpecTemplate.Template.Spec.Containers[0].Env != nil {
				t.Errorf("the FluentPVC's template was modified")
			}
		})
	}
}

func TestControlledByDrainJob(t *testing.T) {
	owned := func(kind, apiVersion, name string) *corev1.Pod {
		p := fixtures.MakePod("p", "ns").Obj()
		p.OwnerReferences = []metav1.OwnerReference{{Kind: kind, APIVersion: apiVersion, Name: name, UID: "uid", Controller: ptr.To(true)}}
		return p
	}
	notController := owned("Job", "batch/v1", "f-abc-drain-1")
	notController.OwnerReferences[0].Controller = nil
	cases := map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"a pod of the first drain Job":          {pod: owned("Job", "batch/v1", "f-abc-drain-1"), want: true},
		"a pod of the twelfth drain Job":        {pod: owned("Job", "batch/v1", "f-abc-drain-12"), want: true},
		"no owner":                              {pod: fixtures.MakePod("p", "ns").Obj()},
		"an owner that is not its controller":   {pod: notController},
		"a ReplicaSet of that name":             {pod: owned("ReplicaSet", "apps/v1", "f-abc-drain-1")},
		"another claim's drain Job":             {pod: owned("Job", "batch/v1", "f-abcd-drain-1")},
		"attempt zero":                          {pod: owned("Job", "batch/v1", "f-abc-drain-0")},
		"an attempt that is not a number":       {pod: owned("Job", "batch/v1", "f-abc-drain-x")},
		"an attempt with a leading zero":        {pod: owned("Job", "batch/v1", "f-abc-drain-01")},
		"the claim's binder Job, not its drain": {pod: owned("Job", "batch/v1", objects.BinderJobName("f-abc"))},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := objects.ControlledByDrainJob(tc.pod, "f-abc"); got != tc.want {
				t.Errorf("ControlledByDrainJob = %v, want %v", got, tc.want)
			}
		})
	}
}
