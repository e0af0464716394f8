// Package objects builds the Kubernetes objects that a FluentPVC makes
// besides its claims, which package claim owns: the pod mutation and the
// finalizer (drain) Job. It is a leaf: it imports only the API types and
// Kubernetes libraries, and nothing here talks to the API server.
package objects

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// PodInjected reports whether pod already carries the claim of a FluentPVC with
// spec: the binding label and a volume pvcVolumeName that mounts that claim.
// Such a pod is left as it is, which makes admission idempotent.
func PodInjected(pod *corev1.Pod, spec *v1alpha1.FluentPVCSpec) bool {
	claim := pod.Labels[v1alpha1.BindingNameLabelKey]
	if claim == "" {
		return false
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == spec.PVCVolumeName {
			return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim
		}
	}
	return false
}

// PodConflicts lists what in pod would clash with what a FluentPVC with spec
// injects. Each error names the pod's field, so the user knows what to rename.
func PodConflicts(pod *corev1.Pod, spec *v1alpha1.FluentPVCSpec) field.ErrorList {
	var errs field.ErrorList
	podSpec := field.NewPath("spec")

	common := map[string]bool{}
	for _, v := range spec.CommonVolumes {
		common[v.Name] = true
	}
	for i, v := range pod.Spec.Volumes {
		p := podSpec.Child("volumes").Index(i).Child("name")
		switch {
		case v.Name == spec.PVCVolumeName:
			errs = append(errs, clash(p, v.Name, "pvcVolumeName"))
		case common[v.Name]:
			errs = append(errs, clash(p, v.Name, "commonVolumes"))
		}
	}

	mountPaths := map[string]string{spec.PVCVolumeMountPath: "pvcVolumeMountPath"}
	for _, m := range spec.CommonVolumeMounts {
		mountPaths[m.MountPath] = "commonVolumeMounts"
	}
	checkContainers := func(kind string, cs []corev1.Container) {
		for i, c := range cs {
			p := podSpec.Child(kind).Index(i)
			if c.Name == spec.SidecarContainerTemplate.Name {
				errs = append(errs, clash(p.Child("name"), c.Name, "sidecarContainerTemplate.name"))
			}
			if kind != "containers" {
				continue
			}
			for j, m := range c.VolumeMounts {
				if origin, ok := mountPaths[m.MountPath]; ok {
					errs = append(errs, clash(p.Child("volumeMounts").Index(j).Child("mountPath"), m.MountPath, origin))
				}
			}
		}
	}
	checkContainers("initContainers", pod.Spec.InitContainers)
	checkContainers("containers", pod.Spec.Containers)
	return errs
}

func clash(p *field.Path, value, fluentPVCField string) *field.Error {
	return field.Invalid(p, value, fmt.Sprintf("clashes with the FluentPVC's %s; rename one of them", fluentPVCField))
}

// InjectPod mutates pod to use claim claimName of a FluentPVC with spec: the binding
// label, the claim and common volumes, the
// mounts and envs in every regular container, and the sidecar with them:
// last of initContainers with restartPolicy Always (sidecarMode Native) or
// last of containers (Container), its name recorded in an annotation. Call
// it only on a pod for which PodConflicts is empty and PodInjected is false.
func InjectPod(pod *corev1.Pod, spec *v1alpha1.FluentPVCSpec, claimName string) {
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[v1alpha1.BindingNameLabelKey] = claimName

	pod.Spec.Volumes = append(pod.Spec.Volumes, ClaimVolume(spec.PVCVolumeName, claimName))
	pod.Spec.Volumes = append(pod.Spec.Volumes, deepCopyVolumes(spec.CommonVolumes)...)

	for i := range pod.Spec.Containers {
		injectContainer(&pod.Spec.Containers[i], spec)
	}
	sidecar := *spec.SidecarContainerTemplate.DeepCopy()
	injectContainer(&sidecar, spec)
	mountServiceAccountToken(pod, &sidecar)
	if spec.NativeSidecar() {
		sidecar.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, sidecar)
	} else {
		pod.Spec.Containers = append(pod.Spec.Containers, sidecar)
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[v1alpha1.SidecarAnnotationKey] = sidecar.Name
}

// serviceAccountTokenVolumePrefix and serviceAccountTokenMountPath are the
// ServiceAccount admission plugin's: the name of the projected token volume
// it gives a pod (with a random suffix) and where it mounts it.
const (
	serviceAccountTokenVolumePrefix = "kube-api-access-"
	serviceAccountTokenMountPath    = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// mountServiceAccountToken gives the sidecar c the mount of pod's service
// account token that the API server's ServiceAccount admission plugin
// gives every container of a pod that has the token volume (the plugin ran
// before the webhooks and made it), unless c mounts something there
// already, as the plugin does. The plugin runs again once a webhook has
// changed the pod, and would add the mount then: the pod it admits is the
// same, but a change made after the webhook makes the API server call the
// webhook a second time (reinvocationPolicy IfNeeded), a round trip on
// every labelled pod's admission.
func mountServiceAccountToken(pod *corev1.Pod, c *corev1.Container) {
	for _, m := range c.VolumeMounts {
		if m.MountPath == serviceAccountTokenMountPath {
			return
		}
	}
	for _, v := range pod.Spec.Volumes {
		if strings.HasPrefix(v.Name, serviceAccountTokenVolumePrefix) {
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, ReadOnly: true, MountPath: serviceAccountTokenMountPath})
			return
		}
	}
}

// PodSidecar is the name of the sidecar the webhook added to pod, recorded
// at admission; fallback (the FluentPVC's current template) for a pod
// admitted by an earlier version.
func PodSidecar(pod *corev1.Pod, fallback string) string {
	if name := pod.Annotations[v1alpha1.SidecarAnnotationKey]; name != "" {
		return name
	}
	return fallback
}

// injectPodSpec gives a pod spec (a finalizer Job's) the claim, the common volumes,
// and the mounts and envs in every regular container.
func injectPodSpec(ps *corev1.PodSpec, spec *v1alpha1.FluentPVCSpec, claimName string) {
	ps.Volumes = append(ps.Volumes, ClaimVolume(spec.PVCVolumeName, claimName))
	ps.Volumes = append(ps.Volumes, deepCopyVolumes(spec.CommonVolumes)...)
	for i := range ps.Containers {
		injectContainer(&ps.Containers[i], spec)
	}
}

// injectContainer adds the claim mount, the common mounts and the common envs to c.
// A common env replaces c's env of the same name, so no name appears twice.
func injectContainer(c *corev1.Container, spec *v1alpha1.FluentPVCSpec) {
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: spec.PVCVolumeName, MountPath: spec.PVCVolumeMountPath})
	for _, m := range spec.CommonVolumeMounts {
		c.VolumeMounts = append(c.VolumeMounts, *m.DeepCopy())
	}
	for _, e := range spec.CommonEnvs {
		c.Env = upsertEnv(c.Env, *e.DeepCopy())
	}
}

func upsertEnv(envs []corev1.EnvVar, e corev1.EnvVar) []corev1.EnvVar {
	out := envs[:0:0]
	replaced := false
	for _, have := range envs {
		if have.Name != e.Name {
			out = append(out, have)
			continue
		}
		if !replaced {
			out = append(out, e)
			replaced = true
		}
	}
	if !replaced {
		out = append(out, e)
	}
	return out
}

func deepCopyVolumes(vs []corev1.Volume) []corev1.Volume {
	out := make([]corev1.Volume, 0, len(vs))
	for _, v := range vs {
		out = append(out, *v.DeepCopy())
	}
	return out
}

// ClaimVolume is the pod volume named name that mounts claim claimName.
func ClaimVolume(name, claimName string) corev1.Volume {
	return corev1.Volume{
		Name: name,
		VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName},
		},
	}
}
