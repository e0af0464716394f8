package objects_test

import (
	"github.com/st-tech/fluent-pvc-operator/apis/objects"

	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/google/go-cmp/cmp"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

func TestPodConflicts(t *testing.T) {
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
			for _, e := range objects.PodConflicts(tc.pod, &fpvc.Spec) {
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

func TestInjectPod(t *testing.T) {
	fpvc := fixtures.MakeFluentPVC("f").Obj() // commonEnvs FLUENT_PVC_MOUNT_DIR=/mnt/fluent-pvc
	setup := corev1.Container{Name: "setup", Image: "busybox"}
	cases := map[string]struct {
		pod      *corev1.Pod
		wantEnvs map[string][]corev1.EnvVar // per container, init containers included
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
		"keeps the pod's init containers as they are, and first": {
			pod: func() *corev1.Pod {
				p := fixtures.MakePod("p", "ns").Obj()
				p.Spec.InitContainers = []corev1.Container{setup}
				return p
			}(),
			wantEnvs: map[string][]corev1.EnvVar{
				"app":     {{Name: "FLUENT_PVC_MOUNT_DIR", Value: "/mnt/fluent-pvc"}},
				"sidecar": {{Name: "FLUENT_PVC_MOUNT_DIR", Value: "/mnt/fluent-pvc"}},
				"setup":   nil,
			},
		},
	}
	wantMounts := []corev1.VolumeMount{{Name: "fluent-pvc", MountPath: "/mnt/fluent-pvc"}, {Name: "some-secret", MountPath: "/path/to/secret"}}
	for _, mode := range []v1alpha1.SidecarMode{"", v1alpha1.SidecarModeNative, v1alpha1.SidecarModeContainer} {
		spec := fpvc.Spec.DeepCopy()
		spec.SidecarMode = mode
		for name, tc := range cases {
			t.Run(fmt.Sprintf("%s/mode %q", name, mode), func(t *testing.T) {
				pod := tc.pod.DeepCopy()
				objects.InjectPod(pod, spec, "claim-1")

				if got := pod.Labels[v1alpha1.BindingNameLabelKey]; got != "claim-1" {
					t.Errorf("binding label = %q, want claim-1", got)
				}
				if got := pod.Annotations[v1alpha1.SidecarAnnotationKey]; got != "sidecar" {
					t.Errorf("sidecar annotation = %q, want sidecar", got)
				}
				if len(pod.Finalizers) != 0 {
					t.Errorf("finalizers = %v, want none: the binding records the pod", pod.Finalizers)
				}
				wantVolumes := []corev1.Volume{objects.ClaimVolume("fluent-pvc", "claim-1"), fpvc.Spec.CommonVolumes[0]}
				if diff := cmp.Diff(wantVolumes, pod.Spec.Volumes); diff != "" {
					t.Errorf("volumes (-want +got):\n%s", diff)
				}

				// Where the sidecar went: last of initContainers, restarted
				// always, or last of containers.
				inits := tc.pod.Spec.InitContainers
				containers := []string{"app"}
				if mode == v1alpha1.SidecarModeContainer {
					containers = append(containers, "sidecar")
				} else {
					sidecar := *fpvc.Spec.SidecarContainerTemplate.DeepCopy()
					sidecar.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
					inits = append(slices.Clone(inits), sidecar)
				}
				gotInit := map[string]*corev1.ContainerRestartPolicy{}
				var initNames []string
				for _, c := range pod.Spec.InitContainers {
					initNames = append(initNames, c.Name)
					gotInit[c.Name] = c.RestartPolicy
				}
				var wantInitNames []string
				for _, c := range inits {
					wantInitNames = append(wantInitNames, c.Name)
					if diff := cmp.Diff(c.RestartPolicy, gotInit[c.Name]); diff != "" {
						t.Errorf("init container %s restartPolicy (-want +got):\n%s", c.Name, diff)
					}
				}
				if diff := cmp.Diff(wantInitNames, initNames); diff != "" {
					t.Errorf("init containers (-want +got):\n%s", diff)
				}
				var containerNames []string
				for _, c := range pod.Spec.Containers {
					containerNames = append(containerNames, c.Name)
				}
				if diff := cmp.Diff(containers, containerNames); diff != "" {
					t.Errorf("containers (-want +got):\n%s", diff)
				}

				gotEnvs := map[string][]corev1.EnvVar{}
				for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
					gotEnvs[c.Name] = c.Env
					want := wantMounts
					if c.Name == setup.Name {
						want = nil // a regular init container gets nothing
					}
					if diff := cmp.Diff(want, c.VolumeMounts); diff != "" {
						t.Errorf("container %s mounts (-want +got):\n%s", c.Name, diff)
					}
				}
				if diff := cmp.Diff(tc.wantEnvs, gotEnvs); diff != "" {
					t.Errorf("envs (-want +got):\n%s", diff)
				}
				if !objects.PodInjected(pod, spec) {
					t.Errorf("PodInjected is false after Pod")
				}
				if objects.PodInjected(tc.pod, spec) {
					t.Errorf("PodInjected is true before Pod")
				}
				if errs := objects.PodConflicts(tc.pod, spec); len(errs) > 0 {
					t.Errorf("unexpected conflicts: %v", errs)
				}
			})
		}
	}
}

func TestPodSidecar(t *testing.T) {
	cases := map[string]struct {
		annotations map[string]string
		want        string
	}{
		"recorded at admission":          {annotations: map[string]string{v1alpha1.SidecarAnnotationKey: "shipper"}, want: "shipper"},
		"admitted by an earlier version": {want: "sidecar"},
		"an empty record is no record":   {annotations: map[string]string{v1alpha1.SidecarAnnotationKey: ""}, want: "sidecar"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annotations}}
			if got := objects.PodSidecar(pod, "sidecar"); got != tc.want {
				t.Errorf("PodSidecar = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestInjectPodServiceAccountToken: the sidecar gets the service account
// token mount that the API server's ServiceAccount admission plugin would
// add when it runs again after the webhook, and only then, so that the
// plugin changes nothing and the webhook is not called a second time.
func TestInjectPodServiceAccountToken(t *testing.T) {
	token := corev1.VolumeMount{Name: "kube-api-access-abcde", ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}
	withToken := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: token.Name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}})
		for i := range p.Spec.Containers {
			p.Spec.Containers[i].VolumeMounts = append(p.Spec.Containers[i].VolumeMounts, token)
		}
		return p
	}
	own := corev1.VolumeMount{Name: "own-token", MountPath: token.MountPath}
	cases := map[string]struct {
		pod     *corev1.Pod
		sidecar []corev1.VolumeMount // the sidecar template's own mounts
		want    *corev1.VolumeMount
	}{
		"the plugin gave the pod its token volume":  {pod: withToken(fixtures.MakePod("p", "ns").Obj()), want: &token},
		"no token volume (automount off)":           {pod: fixtures.MakePod("p", "ns").Obj()},
		"the sidecar mounts something there itself": {pod: withToken(fixtures.MakePod("p", "ns").Obj()), sidecar: []corev1.VolumeMount{own}, want: &own},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			spec := fixtures.MakeFluentPVC("f").Obj().Spec
			spec.SidecarContainerTemplate.VolumeMounts = tc.sidecar
			pod := tc.pod.DeepCopy()
			objects.InjectPod(pod, &spec, "claim-1")
			var got *corev1.VolumeMount
			for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
				if c.Name != spec.SidecarContainerTemplate.Name {
					continue
				}
				for i := range c.VolumeMounts {
					if c.VolumeMounts[i].MountPath == token.MountPath {
						got = &c.VolumeMounts[i]
					}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("the sidecar's mount at %s (-want +got):\n%s", token.MountPath, diff)
			}
		})
	}
}
