package webhook_test

import (
	"context"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// The FluentPVC webhook judges a FluentPVC by what the API server says of
// the objects made from it (server-side dry runs in namespace default).
var _ = Describe("FluentPVC validation by dry run", func() {
	ctx := context.Background()
	drain := func(f *v1alpha1.FluentPVC) *corev1.Container {
		return &f.Spec.PVCFinalizerJobSpecTemplate.Template.Spec.Containers[0]
	}
	drainPod := func(f *v1alpha1.FluentPVC) *corev1.PodSpec { return &f.Spec.PVCFinalizerJobSpecTemplate.Template.Spec }
	sidecar := func(f *v1alpha1.FluentPVC) *corev1.Container { return &f.Spec.SidecarContainerTemplate }
	limitBelowRequest := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
	}
	// objectsIn names the PVCs, Jobs, pods and bindings in ns.
	objectsIn := func(g Gomega, ns string) []string {
		var out []string
		for kind, l := range map[string]client.ObjectList{
			"pvc": &corev1.PersistentVolumeClaimList{}, "job": &batchv1.JobList{},
			"pod": &corev1.PodList{}, "binding": &v1alpha1.FluentPVCBindingList{},
		} {
			g.Expect(k8sClient.List(ctx, l, client.InNamespace(ns))).To(Succeed())
			items, err := apimeta.ExtractList(l)
			g.Expect(err).NotTo(HaveOccurred())
			for _, o := range items {
				out = append(out, kind+"/"+o.(client.Object).GetName())
			}
		}
		return out
	}

	It("admits the sample, in both sidecar modes, and a fix of a refused one", func() {
		for _, mode := range []v1alpha1.SidecarMode{v1alpha1.SidecarModeNative, v1alpha1.SidecarModeContainer} {
			f := fixtures.MakeFluentPVC("valid-" + strings.ToLower(string(mode))).Mutate(func(f *v1alpha1.FluentPVC) { f.Spec.SidecarMode = mode }).Obj()
			Expect(k8sClient.Create(ctx, f)).To(Succeed())
			DeferCleanup(func() { Expect(k8sClient.Delete(context.Background(), f)).To(Succeed()) })
		}
		f := fixtures.MakeFluentPVC("fixed").Obj()
		Expect(k8sClient.Create(ctx, f)).To(Succeed())
		DeferCleanup(func() { Expect(k8sClient.Delete(context.Background(), f)).To(Succeed()) })
		broken := f.DeepCopy()
		drain(broken).Image = ""
		Expect(k8sClient.Update(ctx, broken)).To(MatchError(ContainSubstring("spec.pvcFinalizerJobSpecTemplate.template.spec.containers[0].image: Required value")), "an update is judged too")
	})

	DescribeTable("refuses a FluentPVC whose objects the API server would refuse, at its field, and creates nothing",
		func(mutate func(*v1alpha1.FluentPVC), wantField string) {
			f := fixtures.MakeFluentPVC("bad").Mutate(mutate).Obj()
			f.GenerateName, f.Name = "bad-", ""
			Expect(k8sClient.Create(ctx, f)).To(MatchError(ContainSubstring(wantField)), "the FluentPVC is refused at its field")
			Consistently(func(g Gomega) []string { return objectsIn(g, "default") }).WithTimeout(fixtures.ConsistentlyFor/4).Should(BeEmpty(), "the dry runs leave nothing")
		},
		// The finalizer Job.
		Entry("a drain container without an image", func(f *v1alpha1.FluentPVC) { drain(f).Image = "" },
			"spec.pvcFinalizerJobSpecTemplate.template.spec.containers[0].image: Required value"),
		Entry("a drain container whose limits are below its requests", func(f *v1alpha1.FluentPVC) { drain(f).Resources = limitBelowRequest },
			"spec.pvcFinalizerJobSpecTemplate.template.spec.containers[0].resources.requests"),
		Entry("a drain container named with capitals", func(f *v1alpha1.FluentPVC) { drain(f).Name = "Drain" },
			"spec.pvcFinalizerJobSpecTemplate.template.spec.containers[0].name"),
		Entry("a drain container port of 0", func(f *v1alpha1.FluentPVC) { drain(f).Ports = []corev1.ContainerPort{{ContainerPort: 0}} },
			"spec.pvcFinalizerJobSpecTemplate.template.spec.containers[0].ports[0].containerPort"),
		Entry("a drain mount of no volume", func(f *v1alpha1.FluentPVC) {
			drain(f).VolumeMounts = []corev1.VolumeMount{{Name: "missing", MountPath: "/missing"}}
		}, "spec.pvcFinalizerJobSpecTemplate.template.spec.containers[0].volumeMounts[0].name"),
		Entry("a drain container's unknown pull policy", func(f *v1alpha1.FluentPVC) { drain(f).ImagePullPolicy = "Sometimes" },
			"spec.pvcFinalizerJobSpecTemplate.template.spec.containers[0].imagePullPolicy"),
		Entry("a negative backoffLimit", func(f *v1alpha1.FluentPVC) { f.Spec.PVCFinalizerJobSpecTemplate.BackoffLimit = ptr.To[int32](-1) },
			"spec.pvcFinalizerJobSpecTemplate.backoffLimit"),
		Entry("a negative parallelism", func(f *v1alpha1.FluentPVC) { f.Spec.PVCFinalizerJobSpecTemplate.Parallelism = ptr.To[int32](-1) },
			"spec.pvcFinalizerJobSpecTemplate.parallelism"),
		Entry("negative completions", func(f *v1alpha1.FluentPVC) { f.Spec.PVCFinalizerJobSpecTemplate.Completions = ptr.To[int32](-1) },
			"spec.pvcFinalizerJobSpecTemplate.completions"),
		Entry("a negative runAsUser in the drain pod", func(f *v1alpha1.FluentPVC) {
			drainPod(f).SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](-1)}
		}, "spec.pvcFinalizerJobSpecTemplate.template.spec.securityContext.runAsUser"),
		Entry("two drain volumes of one name", func(f *v1alpha1.FluentPVC) {
			v := corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
			drainPod(f).Volumes = []corev1.Volume{v, v}
		}, "spec.pvcFinalizerJobSpecTemplate.template.spec.volumes[1]"),
		Entry("a drain volume named like pvcVolumeName", func(f *v1alpha1.FluentPVC) {
			drainPod(f).Volumes = []corev1.Volume{{Name: f.Spec.PVCVolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}, "spec.pvcVolumeName"),
		Entry("an unknown dnsPolicy", func(f *v1alpha1.FluentPVC) { drainPod(f).DNSPolicy = "Bogus" },
			"spec.pvcFinalizerJobSpecTemplate.template.spec.dnsPolicy"),
		Entry("a drain nodeSelector key with a space", func(f *v1alpha1.FluentPVC) { drainPod(f).NodeSelector = map[string]string{"bad key": "x"} },
			"spec.pvcFinalizerJobSpecTemplate.template.spec.nodeSelector"),
		Entry("a drain toleration's unknown operator", func(f *v1alpha1.FluentPVC) {
			drainPod(f).Tolerations = []corev1.Toleration{{Key: "k", Operator: "Bogus"}}
		}, "spec.pvcFinalizerJobSpecTemplate.template.spec.tolerations[0].operator"),
		Entry("a drain pod hostname with an underscore", func(f *v1alpha1.FluentPVC) { drainPod(f).Hostname = "not_a_name" },
			"spec.pvcFinalizerJobSpecTemplate.template.spec.hostname"),
		Entry("a negative CPU request in the drain container", func(f *v1alpha1.FluentPVC) {
			drain(f).Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-1")}}
		}, "spec.pvcFinalizerJobSpecTemplate.template.spec.containers[0].resources.requests[cpu]"),
		Entry("a drain priorityClassName with an underscore", func(f *v1alpha1.FluentPVC) { drainPod(f).PriorityClassName = "not_a_name" },
			"spec.pvcFinalizerJobSpecTemplate.template.spec.priorityClassName"),
		Entry("drain pods that carry the opt-in label, which the pod webhook would deny", func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCFinalizerJobSpecTemplate.Template.Labels = map[string]string{v1alpha1.FluentPVCNameLabelKey: f.Name}
		}, "spec.pvcFinalizerJobSpecTemplate.template.metadata.labels[fluent-pvc-operator.tech.zozo.com/fluent-pvc-name]"),
		// The sidecar.
		Entry("a sidecar without an image", func(f *v1alpha1.FluentPVC) { sidecar(f).Image = "" },
			"spec.sidecarContainerTemplate.image: Required value"),
		Entry("a sidecar whose limits are below its requests", func(f *v1alpha1.FluentPVC) { sidecar(f).Resources = limitBelowRequest },
			"spec.sidecarContainerTemplate.resources.requests"),
		Entry("a container-mode sidecar without an image", func(f *v1alpha1.FluentPVC) {
			f.Spec.SidecarMode = v1alpha1.SidecarModeContainer
			sidecar(f).Image = ""
		}, "spec.sidecarContainerTemplate.image: Required value"),
		Entry("a sidecar mounting something at pvcVolumeMountPath", func(f *v1alpha1.FluentPVC) {
			sidecar(f).VolumeMounts = []corev1.VolumeMount{{Name: "some-secret", MountPath: f.Spec.PVCVolumeMountPath}}
		}, "spec.pvcVolumeMountPath"),
		Entry("a sidecar mount of no volume", func(f *v1alpha1.FluentPVC) {
			sidecar(f).VolumeMounts = []corev1.VolumeMount{{Name: "missing", MountPath: "/missing"}}
		}, "spec.sidecarContainerTemplate.volumeMounts[0].name"),
		Entry("a sidecar port above 65535", func(f *v1alpha1.FluentPVC) { sidecar(f).Ports = []corev1.ContainerPort{{ContainerPort: 70000}} },
			"spec.sidecarContainerTemplate.ports[0].containerPort"),
		Entry("a sidecar's unknown pull policy", func(f *v1alpha1.FluentPVC) { sidecar(f).ImagePullPolicy = "Sometimes" },
			"spec.sidecarContainerTemplate.imagePullPolicy"),
		Entry("a sidecar probe without a handler", func(f *v1alpha1.FluentPVC) { sidecar(f).StartupProbe = &corev1.Probe{} },
			"spec.sidecarContainerTemplate.startupProbe"),
		Entry("a sidecar env with two sources", func(f *v1alpha1.FluentPVC) {
			sidecar(f).Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{
				FieldRef:        &corev1.ObjectFieldSelector{FieldPath: "metadata.name"},
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, Key: "k"},
			}}}
		}, "spec.sidecarContainerTemplate.env[0].valueFrom"),
		Entry("a negative runAsUser in the sidecar", func(f *v1alpha1.FluentPVC) {
			sidecar(f).SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](-1)}
		}, "spec.sidecarContainerTemplate.securityContext.runAsUser"),
		Entry("a sidecar preStop hook without a handler", func(f *v1alpha1.FluentPVC) {
			sidecar(f).Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{}}
		}, "spec.sidecarContainerTemplate.lifecycle.preStop"),
		// What every pod and Job gets.
		Entry("a common mount naming no volume", func(f *v1alpha1.FluentPVC) {
			f.Spec.CommonVolumeMounts = []corev1.VolumeMount{{Name: "missing", MountPath: "/missing"}}
		}, "spec.commonVolumeMounts[0].name"),
		Entry("a common volume of two kinds", func(f *v1alpha1.FluentPVC) {
			f.Spec.CommonVolumes[0].EmptyDir = &corev1.EmptyDirVolumeSource{}
		}, "spec.commonVolumes[0]"),
		Entry("a common configMap volume without a name", func(f *v1alpha1.FluentPVC) {
			f.Spec.CommonVolumes[0].VolumeSource = corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}
		}, "spec.commonVolumes[0].configMap.name"),
		Entry("a common env from an unknown field", func(f *v1alpha1.FluentPVC) {
			f.Spec.CommonEnvs = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.bogus"}}}}
		}, "spec.commonEnvs[0].valueFrom.fieldRef.fieldPath"),
		Entry("a common mount's subPath climbing out", func(f *v1alpha1.FluentPVC) { f.Spec.CommonVolumeMounts[0].SubPath = "../etc" },
			"spec.commonVolumeMounts"),
		Entry("a common mount at pvcVolumeMountPath", func(f *v1alpha1.FluentPVC) { f.Spec.CommonVolumeMounts[0].MountPath = f.Spec.PVCVolumeMountPath },
			"spec.commonVolumeMounts[0].mountPath"),
		Entry("a common hostPath volume of an unknown type", func(f *v1alpha1.FluentPVC) {
			f.Spec.CommonVolumes[0].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/log", Type: ptr.To(corev1.HostPathType("Bogus"))}}
		}, "spec.commonVolumes[0].hostPath.type"),
		// The claim.
		Entry("an unknown access mode", func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCSpecTemplate.AccessModes = []corev1.PersistentVolumeAccessMode{"ReadSometimes"}
		}, "spec.pvcSpecTemplate.accessModes"),
		Entry("a storage request of 0", func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCSpecTemplate.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("0")
		}, "spec.pvcSpecTemplate.resources[storage]"),
		Entry("an unknown volumeMode", func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCSpecTemplate.VolumeMode = ptr.To(corev1.PersistentVolumeMode("Bogus"))
		}, "spec.pvcSpecTemplate.volumeMode"),
		Entry("a dataSource without a name", func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCSpecTemplate.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim"}
		}, "spec.pvcSpecTemplate.dataSource.name"),
		Entry("a claim selector's unknown operator", func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCSpecTemplate.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Bogus"}}}
		}, "spec.pvcSpecTemplate.selector.matchExpressions[0].operator"),
	)
})
