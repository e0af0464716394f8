package v1alpha1_test

import (
	"os/exec"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

const (
	fluentPVCCRD        = "fluentpvcs.fluent-pvc-operator.tech.zozo.com"
	fluentPVCBindingCRD = "fluentpvcbindings.fluent-pvc-operator.tech.zozo.com"
	lastAppliedKey      = "kubectl.kubernetes.io/last-applied-configuration"
)

// builder makes the FluentPVC under test, named name.
type builder func(name string) client.Object

// typed is the config/samples FluentPVC changed by mutate.
func typed(mutate func(*v1alpha1.FluentPVC)) builder {
	return func(name string) client.Object {
		return fixtures.MakeFluentPVC(name).Mutate(mutate).Obj()
	}
}

// without is the config/samples FluentPVC without spec.<field>. It is built
// as a map, because the Go struct always serialises its non-pointer structs.
func without(field string) builder {
	return func(name string) client.Object {
		u := fromYAML(fixtures.SampleYAML)
		u.SetName(name)
		unstructured.RemoveNestedField(u.Object, "spec", field)
		return u
	}
}

// fromYAML reads a FluentPVC manifest as written, without the Go types.
func fromYAML(read func() ([]byte, error)) *unstructured.Unstructured {
	GinkgoHelper()
	raw, err := read()
	Expect(err).NotTo(HaveOccurred())
	u := &unstructured.Unstructured{}
	Expect(yaml.Unmarshal(raw, &u.Object)).To(Succeed())
	return u
}

func uniqueName(prefix string) string { return prefix + "-" + utilrand.String(6) }

// expectRejected creates obj and expects the API server to refuse it as
// invalid, naming wantPath, and to have stored nothing.
func expectRejected(obj client.Object, wantPath string) {
	GinkgoHelper()
	err := k8sClient.Create(ctx, obj)
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid error naming %s, got: %v", wantPath, err)
	Expect(err.Error()).To(ContainSubstring(wantPath+": "), "the error must name the offending field")
	err = k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), &v1alpha1.FluentPVC{})
	Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a rejected FluentPVC must not be stored, got: %v", err)
}

// expectCreated creates obj and deletes it when the spec ends.
func expectCreated(obj client.Object) {
	GinkgoHelper()
	Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	DeferCleanup(func() {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, obj))).To(Succeed())
		Eventually(func(g Gomega) {
			err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj)
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "got: %v", err)
		}).Should(Succeed())
	})
}

var _ = Describe("FluentPVC validation", func() {
	It("rejects fluent-pvc-operator's README sample, whose volume name SOME_SECRET is not a DNS-1123 label", func() {
		readme := fromYAML(fixtures.ReferenceSampleYAML)
		Expect(readme.GetName()).NotTo(BeEmpty())
		expectRejected(readme, "spec.commonVolumes[0].name")
	})

	It("accepts config/samples' FluentPVC, the README sample with the name fixed", func() {
		sample := fromYAML(fixtures.SampleYAML)
		vol, _, _ := unstructured.NestedSlice(sample.Object, "spec", "commonVolumes")
		Expect(vol).To(ConsistOf(HaveKeyWithValue("name", "some-secret")))
		expectCreated(sample)
	})

	It("accepts config/samples' FluentPVC with a pool of 3", func() {
		sample := fromYAML(fixtures.SampleYAML)
		sample.SetName(uniqueName("pool"))
		Expect(unstructured.SetNestedField(sample.Object, int64(3), "spec", "pool", "size")).To(Succeed())
		expectCreated(sample)

		got := &v1alpha1.FluentPVC{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(sample), got)).To(Succeed())
		Expect(got.Spec.Pool.Size).To(BeEquivalentTo(3))
	})

	It("rejects a name longer than the 63 characters a pod's label value can hold", func() {
		fpvc := fixtures.MakeFluentPVC(strings.Repeat("n", 64)).Obj()
		err := k8sClient.Create(ctx, fpvc)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring("metadata.name must be at most 63 characters"))
		expectCreated(fixtures.MakeFluentPVC(strings.Repeat("n", 63)).Obj())
	})

	DescribeTable("rejects a malformed FluentPVC, naming the field",
		func(build builder, wantPath string) {
			expectRejected(build(uniqueName("malformed")), wantPath)
		},
		Entry("pvcVolumeName not a DNS-1123 label", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCVolumeName = "Fluent_PVC"
		}), "spec.pvcVolumeName"),
		Entry("pvcVolumeName empty", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCVolumeName = ""
		}), "spec.pvcVolumeName"),
		Entry("pvcVolumeName longer than 63", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCVolumeName = strings.Repeat("a", 64)
		}), "spec.pvcVolumeName"),
		Entry("common volume name not a DNS-1123 label", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.CommonVolumes[0].Name = "SOME_SECRET"
		}), "spec.commonVolumes[0].name"),
		Entry("common volume mount name not a DNS-1123 label", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.CommonVolumeMounts[0].Name = "SOME_SECRET"
		}), "spec.commonVolumeMounts[0].name"),
		Entry("common volume mount path relative", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.CommonVolumeMounts[0].MountPath = "path/to/secret"
		}), "spec.commonVolumeMounts[0].mountPath"),
		Entry("common volume mount path with ':'", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.CommonVolumeMounts[0].MountPath = "/path/to:secret"
		}), "spec.commonVolumeMounts[0].mountPath"),
		Entry("pvcVolumeMountPath relative", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCVolumeMountPath = "mnt/fluent-pvc"
		}), "spec.pvcVolumeMountPath"),
		Entry("pvcVolumeMountPath with ':'", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCVolumeMountPath = "/mnt/fluent:pvc"
		}), "spec.pvcVolumeMountPath"),
		Entry("pool size -1", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.Pool.Size = -1
		}), "spec.pool.size"),
		Entry("pool size 1001", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.Pool.Size = 1001
		}), "spec.pool.size"),
		Entry("pool namespace not a DNS-1123 label", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.Pool.Namespaces = []string{"Bad_Namespace"}
		}), "spec.pool.namespaces[0]"),
		Entry("pool namespace listed twice", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.Pool.Namespaces = []string{"logs", "logs"}
		}), "spec.pool.namespaces[1]"),
		Entry("sidecar name not a DNS-1123 label", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.SidecarContainerTemplate.Name = "Side_Car"
		}), "spec.sidecarContainerTemplate.name"),
		Entry("sidecar name longer than 63", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.SidecarContainerTemplate.Name = strings.Repeat("s", 64)
		}), "spec.sidecarContainerTemplate.name"),
		Entry("pvcSpecTemplate missing", without("pvcSpecTemplate"), "spec.pvcSpecTemplate"),
		Entry("pvcFinalizerJobSpecTemplate missing", without("pvcFinalizerJobSpecTemplate"), "spec.pvcFinalizerJobSpecTemplate"),
		Entry("pvcVolumeName missing", without("pvcVolumeName"), "spec.pvcVolumeName"),
		Entry("pvcVolumeMountPath missing", without("pvcVolumeMountPath"), "spec.pvcVolumeMountPath"),
		Entry("sidecarContainerTemplate missing", without("sidecarContainerTemplate"), "spec.sidecarContainerTemplate"),
		Entry("PVC template without a storage request", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCSpecTemplate.Resources.Requests = nil
		}), "spec.pvcSpecTemplate.resources.requests"),
		Entry("PVC template without access modes", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCSpecTemplate.AccessModes = nil
		}), "spec.pvcSpecTemplate.accessModes"),
		Entry("finalizer Job template without containers", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCFinalizerJobSpecTemplate.Template.Spec.Containers = nil
		}), "spec.pvcFinalizerJobSpecTemplate.template.spec.containers"),
		Entry("finalizer Job template with an empty container list", func(name string) client.Object {
			u := fromYAML(fixtures.SampleYAML)
			u.SetName(name)
			Expect(unstructured.SetNestedSlice(u.Object, []any{}, "spec", "pvcFinalizerJobSpecTemplate", "template", "spec", "containers")).To(Succeed())
			return u
		}, "spec.pvcFinalizerJobSpecTemplate.template.spec"),
		Entry("finalizer Job template with restartPolicy Always", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCFinalizerJobSpecTemplate.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
		}), "spec.pvcFinalizerJobSpecTemplate.template.spec"),
		Entry("common volume named like pvcVolumeName", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.CommonVolumes[0].Name = f.Spec.PVCVolumeName
		}), "spec.commonVolumes"),
		Entry("two common volumes with one name", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.CommonVolumes = append(f.Spec.CommonVolumes, f.Spec.CommonVolumes[0])
		}), "spec.commonVolumes[1]"),
		Entry("two common envs with one name", typed(func(f *v1alpha1.FluentPVC) {
			f.Spec.CommonEnvs = append(f.Spec.CommonEnvs, corev1.EnvVar{Name: f.Spec.CommonEnvs[0].Name, Value: "/elsewhere"})
		}), "spec.commonEnvs[1]"),
	)
})

var _ = Describe("FluentPVC defaults", func() {
	It("stores pool.size 0 and deletePodIfSidecarContainerTerminationDetected true when they are omitted", func() {
		fpvc := fixtures.MakeFluentPVC(uniqueName("defaults")).Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.DeletePodIfSidecarContainerTerminationDetected = nil
			f.Spec.Pool = v1alpha1.PoolSpec{}
		}).Obj()
		expectCreated(fpvc)

		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("FluentPVC"))
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(fpvc), got)).To(Succeed())
		size, found, err := unstructured.NestedInt64(got.Object, "spec", "pool", "size")
		Expect(err).NotTo(HaveOccurred())
		Expect(found).To(BeTrue(), "spec.pool.size must be stored, got spec.pool %v", got.Object["spec"].(map[string]any)["pool"])
		Expect(size).To(BeZero())
		deletePod, found, err := unstructured.NestedBool(got.Object, "spec", "deletePodIfSidecarContainerTerminationDetected")
		Expect(err).NotTo(HaveOccurred())
		Expect(found).To(BeTrue(), "deletePodIfSidecarContainerTerminationDetected must be stored")
		Expect(deletePod).To(BeTrue())
	})

	It("keeps deletePodIfSidecarContainerTerminationDetected false when it is set", func() {
		fpvc := fixtures.MakeFluentPVC(uniqueName("keep-pods")).DeletePodOnSidecarFailure(false).Obj()
		expectCreated(fpvc)

		got := &v1alpha1.FluentPVC{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(fpvc), got)).To(Succeed())
		Expect(got.Spec.DeletePodIfSidecarContainerTerminationDetected).To(HaveValue(BeFalse()))
		Expect(got.Spec.DeletePodOnSidecarFailure()).To(BeFalse())
	})

	It("keeps the labels and annotations of the finalizer Job's pod template", func() {
		fpvc := fixtures.MakeFluentPVC(uniqueName("template-meta")).Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCFinalizerJobSpecTemplate.Template.Labels = map[string]string{"team": "logs"}
			f.Spec.PVCFinalizerJobSpecTemplate.Template.Annotations = map[string]string{"example.com/note": "kept"}
		}).Obj()
		expectCreated(fpvc)

		got := &v1alpha1.FluentPVC{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(fpvc), got)).To(Succeed())
		Expect(got.Spec.PVCFinalizerJobSpecTemplate.Template.Labels).To(HaveKeyWithValue("team", "logs"))
		Expect(got.Spec.PVCFinalizerJobSpecTemplate.Template.Annotations).To(HaveKeyWithValue("example.com/note", "kept"))
	})
})

var _ = Describe("CRD printer columns", func() {
	DescribeTable("are served for kubectl get",
		func(crdName string, want map[string]string) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			Expect(k8sClient.Get(ctx, client.ObjectKey{Name: crdName}, crd)).To(Succeed())
			Expect(crd.Spec.Versions).To(HaveLen(1))
			got := map[string]string{}
			for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
				got[c.Name] = c.JSONPath
			}
			for name, jsonPath := range want {
				Expect(got).To(HaveKeyWithValue(name, jsonPath), "printer column %s", name)
			}
		},
		Entry("FluentPVC", fluentPVCCRD, map[string]string{
			"POOL": ".spec.pool.size",
			"AGE":  ".metadata.creationTimestamp",
		}),
		Entry("FluentPVCBinding", fluentPVCBindingCRD, map[string]string{
			"PHASE":     ".status.phase",
			"FLUENTPVC": ".spec.fluentPVC.name",
			"POD":       ".spec.pod.name",
			"PVC":       ".spec.pvc.name",
			"AGE":       ".metadata.creationTimestamp",
		}),
	)
})

var _ = Describe("FluentPVCBinding", func() {
	It("is stored with its spec", func() {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "binding-"}}
		Expect(k8sClient.Create(ctx, ns)).To(Succeed())
		DeferCleanup(k8sClient.Delete, ctx, ns)

		binding := &v1alpha1.FluentPVCBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "app-0", Namespace: ns.Name},
			Spec: v1alpha1.FluentPVCBindingSpec{
				FluentPVC: v1alpha1.ObjectIdentity{Name: "fluent-pvc-sample", UID: "8c6f3a1e-0000-4000-8000-000000000001"},
				Pod:       v1alpha1.ObjectIdentity{Name: "app-0"},
				PVC:       v1alpha1.ObjectIdentity{Name: "fluent-pvc-app-0"},
			},
		}
		want := binding.Spec
		Expect(k8sClient.Create(ctx, binding)).To(Succeed())

		got := &v1alpha1.FluentPVCBinding{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(binding), got)).To(Succeed())
		Expect(got.Spec).To(Equal(want))
	})
})

var _ = Describe("CRD install with kubectl apply", func() {
	DescribeTable("succeeds client-side over the installed CRD, so the last-applied annotation fits",
		func(file, crdName string) {
			cmd := exec.Command(fixtures.Path("bin", "kubectl"), "apply",
				"-f", fixtures.Path("config", "crd", "bases", file), "--kubeconfig", kubeconfig)
			session, err := gexec.Start(cmd, GinkgoWriter, GinkgoWriter)
			Expect(err).NotTo(HaveOccurred())
			Eventually(session).Should(gexec.Exit(0),
				"kubectl apply -f %s failed: %s", file, session.Err.Contents())

			crd := &apiextensionsv1.CustomResourceDefinition{}
			Expect(k8sClient.Get(ctx, client.ObjectKey{Name: crdName}, crd)).To(Succeed())
			Expect(crd.Annotations).To(HaveKeyWithValue(lastAppliedKey, Not(BeEmpty())))
		},
		Entry("FluentPVC", "fluent-pvc-operator.tech.zozo.com_fluentpvcs.yaml", fluentPVCCRD),
		Entry("FluentPVCBinding", "fluent-pvc-operator.tech.zozo.com_fluentpvcbindings.yaml", fluentPVCBindingCRD),
	)
})
