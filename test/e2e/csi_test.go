package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/csidriver"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

var _ = Describe("A warm pool on CSI storage, behind the real external-provisioner and external-attacher", func() {
	It("with staging off, provisions each warm PVC in the zone of the node the pool names, attaches it only to the pod it is handed to, and deletes its volume once after the drain", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "csi", namespaceCleanup)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, e2eFluentPVC("csi-"+ns).PoolSize(3).StorageClass(cluster.StorageClassCSI).Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.Pool.Namespaces = []string{ns}
			// Without staging, as before it: the pool holds nothing attached.
			f.Spec.Pool.Staging = v1alpha1.PoolStagingDisabled
		}).Obj(), fluentPVCCleanup)

		By("every warm PVC's volume is in the zone of its selected node, and attached nowhere")
		zones := map[string]bool{}
		Eventually(func(g Gomega) {
			var l corev1.PersistentVolumeClaimList
			g.Expect(k8s.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleWarm})).To(Succeed())
			g.Expect(l.Items).To(HaveLen(3))
			clear(zones)
			for _, c := range l.Items {
				g.Expect(c.Status.Phase).To(Equal(corev1.ClaimBound))
				// Until the operator records its volume's placement, a warm PVC
				// is no candidate for a checkout: a pod created then would miss.
				g.Expect(c.Annotations).To(HaveKey(v1alpha1.NodeAffinityAnnotationKey), "warm PVC %s has its placement recorded", c.Name)
				node := &corev1.Node{}
				g.Expect(k8s.Get(ctx, client.ObjectKey{Name: c.Annotations[v1alpha1.SelectedNodeAnnotationKey]}, node)).To(Succeed())
				zone := node.Labels[corev1.LabelTopologyZone]
				pv := pvOf(g, &c)
				g.Expect(pv.Spec.CSI).NotTo(BeNil())
				g.Expect(pv.Spec.CSI.Driver).To(Equal(cluster.CSIDriverName))
				g.Expect(pv.Spec.NodeAffinity).NotTo(BeNil())
				g.Expect(pv.Spec.NodeAffinity.Required.NodeSelectorTerms).To(ConsistOf(HaveField("MatchExpressions", ConsistOf(And(
					HaveField("Key", cluster.CSITopologyKey), HaveField("Values", ConsistOf(zone)))))),
					"warm PVC %s, selected node %s of zone %s", c.Name, node.Name, zone)
				g.Expect(attachmentsOf(g, pv.Name)).To(BeEmpty(), "a warm PVC's volume is attached nowhere")
				g.Expect(holderGone(ns, c.Name)).To(BeTrue(), "no holder stages it")
				zones[zone] = true
			}
		}).WithTimeout(longTimeout).Should(Succeed())
		Expect(zones).To(HaveLen(3), "the pool spreads over the zones")

		By("a hit is attached to its pod's node")
		pod := fixtures.MakePod("hit", ns).FluentPVC(fpvc.Name).Obj()
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		claim := fixtures.ClaimOf(pod)
		// The test's informer may lag behind the webhook's checkout.
		var pvc *corev1.PersistentVolumeClaim
		Eventually(func(g Gomega) {
			pvc = fixtures.GetPVC(ctx, g, k8s, ns, claim)
			g.Expect(pvc.Annotations).To(HaveKeyWithValue(v1alpha1.CheckoutAnnotationKey, v1alpha1.CheckoutHit))
		}).Should(Succeed())
		node := running(ns, "hit").Spec.NodeName
		var pv *corev1.PersistentVolume
		Eventually(func(g Gomega) {
			pv = pvOf(g, pvc)
			g.Expect(attachmentsOf(g, pv.Name)).To(ConsistOf(And(HaveField("Spec.NodeName", node), HaveField("Status.Attached", true))))
		}).WithTimeout(longTimeout).Should(Succeed())

		By("once drained, the claim's volume is detached, then deleted once")
		Expect(k8s.Delete(ctx, pod)).To(Succeed())
		fixtures.Drained(ctx, k8s, ns, claim, longTimeout)
		Eventually(func(g Gomega) {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(pv), &corev1.PersistentVolume{})
			g.Expect(client.IgnoreNotFound(err)).To(Succeed())
			g.Expect(err).To(HaveOccurred(), "PV %s is gone", pv.Name)
			g.Expect(attachmentsOf(g, pv.Name)).To(BeEmpty())
		}).WithTimeout(longTimeout).Should(Succeed())
		deletes, err := csidriver.ReadDeletes(kc.CSIStateDir())
		Expect(err).NotTo(HaveOccurred())
		Expect(deletes).To(HaveKeyWithValue(pv.Spec.CSI.VolumeHandle, HaveField("Deletions", 1)))
		GinkgoWriter.Printf("volume %s: %d DeleteVolume calls, %d deletion\n", pv.Spec.CSI.VolumeHandle, deletes[pv.Spec.CSI.VolumeHandle].Calls, deletes[pv.Spec.CSI.VolumeHandle].Deletions)
	})
})

// pvOf is the PV that claim c is bound to.
func pvOf(g Gomega, c *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	g.Expect(c.Spec.VolumeName).NotTo(BeEmpty())
	pv := &corev1.PersistentVolume{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: c.Spec.VolumeName}, pv)).To(Succeed())
	return pv
}

// attachmentsOf are the VolumeAttachments of PV pv, listed live.
func attachmentsOf(g Gomega, pv string) []storagev1.VolumeAttachment {
	l, err := kc.Clientset.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	var out []storagev1.VolumeAttachment
	for _, va := range l.Items {
		if va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pv {
			out = append(out, va)
		}
	}
	return out
}
