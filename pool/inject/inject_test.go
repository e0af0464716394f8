package inject

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

func TestClaimName(t *testing.T) {
	cases := map[string]struct {
		fluentPVC  string
		wantPrefix string
	}{
		"short name":               {fluentPVC: "fluent-pvc-sample", wantPrefix: "fluent-pvc-sample-"},
		"60-character name":        {fluentPVC: strings.Repeat("a", 60), wantPrefix: strings.Repeat("a", 40) + "-"},
		"dots become dashes":       {fluentPVC: "logs.example.com", wantPrefix: "logs-example-com-"},
		"no dash before suffix":    {fluentPVC: strings.Repeat("a", 39) + "-b", wantPrefix: strings.Repeat("a", 39) + "-"},
		"253-character subdomain":  {fluentPVC: strings.Repeat("ab.", 84), wantPrefix: "ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-"[:38] + "-"},
		"name that is only dashes": {fluentPVC: "-", wantPrefix: "fluent-pvc-"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ClaimName(tc.fluentPVC)
			if !strings.HasPrefix(got, tc.wantPrefix) {
				t.Errorf("ClaimName(%q) = %q, want prefix %q", tc.fluentPVC, got, tc.wantPrefix)
			}
			if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
				t.Errorf("ClaimName(%q) = %q is not a DNS-1123 label: %v", tc.fluentPVC, got, errs)
			}
			job := DrainJobName(got, 99999)
			if errs := validation.IsValidLabelValue(job); len(errs) > 0 {
				t.Errorf("drain Job name %q is not a label value: %v", job, errs)
			}
			if again := ClaimName(tc.fluentPVC); again == got {
				t.Errorf("ClaimName(%q) returned %q twice", tc.fluentPVC, got)
			}
		})
	}
}

func TestConflicts(t *testing.T) {
	fpvc := fixtures.MakeFluentPVC("f").Obj() // pvcVolumeName fluent-pvc, sidecar "sidecar", common volume some-secret
	cases := map[string]struct {
		pod       *corev1.Pod
		wantPaths []string
	}{
		"no conflict": {
			pod: fixtures.MakePod("p", "ns").Volume("data").Mount("data", "/data").Obj(),
		},
		"volume named like pvcVolumeName": {
			pod:       fixtures.MakePod("p", "ns").Volume("fluent-pvc").Obj(),
			wantPaths: []string{"spec.volumes[0].name"},
		},
		"volume named like a common volume": {
			pod:       fixtures.MakePod("p", "ns").Volume("x").Volume("some-secret").Obj(),
			wantPaths: []string{"spec.volumes[1].name"},
		},
		"container named like the sidecar": {
			pod:       fixtures.MakePod("p", "ns").Container(corev1.Container{Name: "sidecar"}).Obj(),
			wantPaths: []string{"spec.containers[1].name"},
		},
		"init container named like the sidecar": {
			pod: func() *corev1.Pod {
				p := fixtures.MakePod("p", "ns").Obj()
				p.Spec.InitContainers = []corev1.Container{{Name: "sidecar"}}
				return p
			}(),
			wantPaths: []string{"spec.initContainers[0].name"},
		},
		"mount at pvcVolumeMountPath": {
			pod:       fixtures.MakePod("p", "ns").Volume("d").Mount("d", "/mnt/fluent-pvc").Obj(),
			wantPaths: []string{"spec.containers[0].volumeMounts[0].mountPath"},
		},
		"mount at a common mount path": {
			pod:       fixtures.MakePod("p", "ns").Volume("d").Mount("d", "/path/to/secret").Obj(),
			wantPaths: []string{"spec.containers[0].volumeMounts[0].mountPath"},
		},
		"several at once": {
			pod:       fixtures.MakePod("p", "ns").Volume("fluent-pvc").Container(corev1.Container{Name: "sidecar"}).Obj(),
			wantPaths: []string{"spec.volumes[0].name", "spec.containers[1].name"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var gotPaths []string
			for _, e := range Conflicts(tc.pod, &fpvc.Spec) {
				gotPaths = append(gotPaths, e.Field)
				if !strings.Contains(e.Detail, "rename") {
					t.Errorf("detail %q does not say how to fix it", e.Detail)
				}
			}
			if diff := cmp.Diff(tc.wantPaths, gotPaths); diff != "" {
				t.Errorf("conflict paths (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPod(t *testing.T) {
	fpvc := fixtures.MakeFluentPVC("f").Obj() // commonEnvs FLUENT_PVC_MOUNT_DIR=/mnt/fluent-pvc
	cases := map[string]struct {
		pod      *corev1.Pod
		wantEnvs map[string][]corev1.EnvVar // per container
	}{
		"adds the common env": {
			pod: fixtures.MakePod("p", "ns").Env("A", "1").Obj(),
			wantEnvs: map[string][]corev1.EnvVar{
				"app":     {{Name: "A", Value: "1"}, {Name: "FLUENT_PVC_MOUNT_DIR", Value: "/mnt/fluent-pvc"}},
				"sidecar": {{Name: "FLUENT_PVC_MOUNT_DIR", Value: "/mnt/fluent-pvc"}},
			},
		},
		"replaces a same-named env in place": {
			pod: fixtures.MakePod("p", "ns").Env("FLUENT_PVC_MOUNT_DIR", "old").Env("B", "2").Obj(),
			wantEnvs: map[string][]corev1.EnvVar{
				"app":     {{Name: "FLUENT_PVC_MOUNT_DIR", Value: "/mnt/fluent-pvc"}, {Name: "B", Value: "2"}},
				"sidecar": {{Name: "FLUENT_PVC_MOUNT_DIR", Value: "/mnt/fluent-pvc"}},
			},
		},
		"collapses duplicates of a common env": {
			pod: fixtures.MakePod("p", "ns").Env("FLUENT_PVC_MOUNT_DIR", "x").Env("FLUENT_PVC_MOUNT_DIR", "y").Obj(),
			wantEnvs: map[string][]corev1.EnvVar{
				"app":     {{Name: "FLUENT_PVC_MOUNT_DIR", Value: "/mnt/fluent-pvc"}},
				"sidecar": {{Name: "FLUENT_PVC_MOUNT_DIR", Value: "/mnt/fluent-pvc"}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := tc.pod.DeepCopy()
			Pod(pod, &fpvc.Spec, "claim-1")

			if got := pod.Labels[v1alpha1.BindingNameLabelKey]; got != "claim-1" {
				t.Errorf("binding label = %q, want claim-1", got)
			}
			if diff := cmp.Diff([]string{v1alpha1.PodProtectionFinalizer}, pod.Finalizers); diff != "" {
				t.Errorf("finalizers (-want +got):\n%s", diff)
			}
			wantVolumes := []corev1.Volume{ClaimVolume("fluent-pvc", "claim-1"), fpvc.Spec.CommonVolumes[0]}
			if diff := cmp.Diff(wantVolumes, pod.Spec.Volumes); diff != "" {
				t.Errorf("volumes (-want +got):\n%s", diff)
			}
			gotEnvs := map[string][]corev1.EnvVar{}
			for _, c := range pod.Spec.Containers {
				gotEnvs[c.Name] = c.Env
				wantMounts := []corev1.VolumeMount{{Name: "fluent-pvc", MountPath: "/mnt/fluent-pvc"}, {Name: "some-secret", MountPath: "/path/to/secret"}}
				if diff := cmp.Diff(wantMounts, c.VolumeMounts); diff != "" {
					t.Errorf("container %s mounts (-want +got):\n%s", c.Name, diff)
				}
			}
			if diff := cmp.Diff(tc.wantEnvs, gotEnvs); diff != "" {
				t.Errorf("envs (-want +got):\n%s", diff)
			}
			if !Injected(pod, &fpvc.Spec) {
				t.Errorf("Injected is false after Pod")
			}
			if Injected(tc.pod, &fpvc.Spec) {
				t.Errorf("Injected is true before Pod")
			}
			if errs := Conflicts(tc.pod, &fpvc.Spec); len(errs) > 0 {
				t.Errorf("unexpected conflicts: %v", errs)
			}
		})
	}
}

func TestDrainJob(t *testing.T) {
	fpvc := fixtures.MakeFluentPVC("f").Obj()
	b := BindingFor(Claim(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutMiss, fixtures.Epoch), fpvc.UID)
	cases := map[string]struct {
		restartPolicy corev1.RestartPolicy
		attempt       int32
		wantName      string
		wantRestart   corev1.RestartPolicy
	}{
		"first attempt, template's policy kept": {restartPolicy: corev1.RestartPolicyOnFailure, attempt: 1, wantName: "f-abc-drain-1", wantRestart: corev1.RestartPolicyOnFailure},
		"unset policy becomes Never":            {attempt: 3, wantName: "f-abc-drain-3", wantRestart: corev1.RestartPolicyNever},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := fpvc.DeepCopy()
			f.Spec.PVCFinalizerJobSpecTemplate.Template.Spec.RestartPolicy = tc.restartPolicy
			job := DrainJob(f, b, tc.attempt)
			if job.Name != tc.wantName {
				t.Errorf("name = %q, want %q", job.Name, tc.wantName)
			}
			ps := job.Spec.Template.Spec
			if ps.RestartPolicy != tc.wantRestart {
				t.Errorf("restartPolicy = %q, want %q", ps.RestartPolicy, tc.wantRestart)
			}
			if diff := cmp.Diff([]corev1.Volume{ClaimVolume("fluent-pvc", "f-abc"), f.Spec.CommonVolumes[0]}, ps.Volumes); diff != "" {
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

func TestBindingFor(t *testing.T) {
	fpvc := fixtures.MakeFluentPVC("f").Obj()
	fpvc.UID = "fpvc-uid"
	claim := Claim(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutHit, fixtures.Epoch)
	claim.UID = "claim-uid"
	want := &v1alpha1.FluentPVCBinding{
		ObjectMeta: metav1.ObjectMeta{
			Name: "f-abc", Namespace: "ns",
			Labels: map[string]string{v1alpha1.FluentPVCNameLabelKey: "f"},
			Annotations: map[string]string{
				v1alpha1.AdmittedAtAnnotationKey: fixtures.Epoch.UTC().Format(time.RFC3339),
				v1alpha1.CheckoutAnnotationKey:   v1alpha1.CheckoutHit,
			},
			Finalizers: []string{v1alpha1.BindingProtectionFinalizer},
		},
		Spec: v1alpha1.FluentPVCBindingSpec{
			FluentPVC: v1alpha1.ObjectIdentity{Name: "f", UID: "fpvc-uid"},
			PVC:       v1alpha1.ObjectIdentity{Name: "f-abc", UID: "claim-uid"},
		},
	}
	if diff := cmp.Diff(want, BindingFor(claim, fpvc.UID)); diff != "" {
		t.Errorf("BindingFor (-want +got):\n%s", diff)
	}
}

func TestClaimed(t *testing.T) {
	fpvc := fixtures.MakeFluentPVC("f").Obj()
	claimed := func(mutate func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
		c := Claim(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutMiss, fixtures.Epoch)
		mutate(c)
		return c
	}
	cases := map[string]struct {
		claim *corev1.PersistentVolumeClaim
		want  bool
	}{
		"a claim made at admission":         {claimed(func(*corev1.PersistentVolumeClaim) {}), true},
		"a warm PVC":                        {claimed(func(c *corev1.PersistentVolumeClaim) { c.Labels[v1alpha1.ClaimRoleLabelKey] = v1alpha1.ClaimRoleWarm }), false},
		"no binding label":                  {claimed(func(c *corev1.PersistentVolumeClaim) { delete(c.Labels, v1alpha1.BindingNameLabelKey) }), false},
		"no FluentPVC label":                {claimed(func(c *corev1.PersistentVolumeClaim) { delete(c.Labels, v1alpha1.FluentPVCNameLabelKey) }), false},
		"released (drained or abandoned)":   {claimed(func(c *corev1.PersistentVolumeClaim) { c.Finalizers = nil }), false},
		"being deleted but never let go of": {claimed(func(c *corev1.PersistentVolumeClaim) { c.DeletionTimestamp = &metav1.Time{Time: fixtures.Epoch} }), true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Claimed(tc.claim); got != tc.want {
				t.Errorf("Claimed = %v, want %v", got, tc.want)
			}
		})
	}
}
