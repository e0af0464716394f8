package realnode

import (
	"os"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

var _ = Describe("A warm pool staged on the real node", func() {
	BeforeEach(requireCSI)

	It("starts a hit on its staged volume without staging it again, lets the holder go, and drains what the pod wrote", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "staged", namespaceCleanup)
		rec := newRecorder(ns)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, shippingFluentPVC("staged-"+ns, ns, 1, 0).Obj(), fluentPVCCleanup)

		By("the warm PVC's holder runs on the real node, which attached and staged the volume once")
		var warm string
		var pv *corev1.PersistentVolume
		Eventually(func(g Gomega) {
			l := pooled(g, ns, fpvc.Name)
			g.Expect(l).To(HaveLen(1))
			warm = l[0].Name
			h := &corev1.Pod{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: objects.HolderName(warm)}, h)).To(Succeed())
			g.Expect(h.Spec.NodeName).To(Equal(cluster.RealNodeName))
			g.Expect(h.Status.Phase).To(Equal(corev1.PodRunning))
			pv = boundPVOf(g, ns, warm)
			g.Expect(attachments(pv.Name)).To(ConsistOf(And(HaveField("Spec.NodeName", cluster.RealNodeName), HaveField("Status.Attached", true))))
			g.Expect(stagings(pv.Spec.CSI.VolumeHandle)).To(Equal(1))
		}).WithTimeout(longTimeout).Should(Succeed())
		va := attachments(pv.Name)[0]

		By("a pod takes it and runs without a second stage; the holder leaves and the volume stays attached")
		pod := labelledPod(ns, fpvc.Name)
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		Expect(fixtures.ClaimOf(pod)).To(Equal(warm))
		pod = runningOnRealNode(ns, pod.Name)
		Eventually(func(g Gomega) {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: objects.HolderName(warm)}, &corev1.Pod{})
			g.Expect(err).To(Satisfy(isNotFound), "the holder is gone")
		}).Should(Succeed())
		writing(ns, pod.Name, 3)
		Expect(stagings(pv.Spec.CSI.VolumeHandle)).To(Equal(1), "the pod found its volume staged")
		Expect(attachments(pv.Name)).To(ConsistOf(And(HaveField("UID", va.UID), HaveField("Status.Attached", true))), "the volume was never detached")

		By("the pod's data is drained by its finalizer Job")
		Expect(k8s.Delete(ctx, pod)).To(Succeed())
		rec.drainedOnce(warm)
		fixtures.Drained(ctx, k8s, ns, warm, longTimeout)
		expectShippedOnce(ns, []string{pod.Name}, 1)
	})
})

// stagings counts the node plugin's NodeStageVolume calls for volume
// handle, from its log.
func stagings(handle string) int {
	GinkgoHelper()
	b, err := os.ReadFile(kc.CSINodeLog())
	Expect(err).NotTo(HaveOccurred())
	n := 0
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.Contains(line, "\tstaging volume\t") && strings.Contains(line, `"volume": "`+handle+`"`) {
			n++
		}
	}
	return n
}

// pooled are the PVCs of FluentPVC fpvc's pool in ns: warm, or reserved
// ahead of their pods by a replica (the chart's --reserve-ahead=share
// reserves a staged pool once a holder stages it).
func pooled(g Gomega, ns, fpvc string) []corev1.PersistentVolumeClaim {
	var all corev1.PersistentVolumeClaimList
	g.Expect(k8s.List(ctx, &all, client.InNamespace(ns), client.MatchingLabels{v1alpha1.FluentPVCNameLabelKey: fpvc})).To(Succeed())
	var out []corev1.PersistentVolumeClaim
	for _, c := range all.Items {
		if _, _, reserved := claim.Reservation(&c); reserved || claim.StateOf(&c) == claim.Warm {
			out = append(out, c)
		}
	}
	return out
}
