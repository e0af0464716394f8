package e2e

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

var _ = Describe("A warm pool staged on nodes, on CSI storage that attaches", func() {
	It("keeps each warm PVC attached to a node by a holder, steers hits there, moves the volume for a pod that node cannot take, stages again the PVCs of a deleted node, and replaces one whose volume stays attached to a deleted node", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "staged", namespaceCleanup)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, e2eFluentPVC("staged-"+ns).PoolSize(3).StorageClass(cluster.StorageClassCSI).Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.Pool.Namespaces = []string{ns}
		}).Obj(), fluentPVCCleanup)

		By("every warm PVC has a Running holder on a node, where its volume is attached")
		staged := stagedPool(ns, fpvc.Name, 3)

		By("three hits at once each go to the node their PVC is staged on; the holders step away and the volumes stay attached there")
		var hits []*corev1.Pod
		for i := range 3 {
			p := fixtures.MakePod(fmt.Sprintf("hit-%d", i), ns).FluentPVC(fpvc.Name).Obj()
			Expect(k8s.Create(ctx, p)).To(Succeed())
			hits = append(hits, p)
		}
		type attached struct{ pv, node string }
		var vas []attached
		for _, p := range hits {
			claim := fixtures.ClaimOf(p)
			Expect(staged).To(HaveKey(claim), "a pod that can run anywhere takes a staged PVC")
			node := staged[claim]
			Expect(running(ns, p.Name).Spec.NodeName).To(Equal(node), "pod %s goes where its volume is staged", p.Name)
			Eventually(func(g Gomega) {
				g.Expect(holderGone(ns, claim)).To(BeTrue())
			}).Should(Succeed())
			vas = append(vas, attached{pv: pvOf(Default, fixtures.GetPVC(ctx, Default, k8s, ns, claim)).Name, node: node})
		}
		uids := map[string]types.UID{}
		for _, a := range vas {
			l := attachmentsOf(Default, a.pv)
			Expect(l).To(ConsistOf(And(HaveField("Spec.NodeName", a.node), HaveField("Status.Attached", true))))
			uids[a.pv] = l[0].UID
		}
		Consistently(func(g Gomega) {
			for _, a := range vas {
				g.Expect(attachmentsOf(g, a.pv)).To(ConsistOf(And(HaveField("UID", uids[a.pv]), HaveField("Status.Attached", true))),
					"the volume of %s was never detached", a.pv)
			}
		}).WithTimeout(stillFor).Should(Succeed())

		By("a pod the staged nodes cannot take runs on another node; the volume moves there")
		staged = stagedPool(ns, fpvc.Name, 3)
		elsewhere := nodeOutside(staged)
		moved := fixtures.MakePod("moved", ns).FluentPVC(fpvc.Name).NodeSelector(corev1.LabelHostname, elsewhere.Name).Obj()
		Expect(k8s.Create(ctx, moved)).To(Succeed())
		movedClaim := fixtures.ClaimOf(moved)
		Expect(running(ns, "moved").Spec.NodeName).To(Equal(elsewhere.Name), "the pod is not held Pending by the operator")
		movedPV := pvOf(Default, fixtures.GetPVC(ctx, Default, k8s, ns, movedClaim))
		Eventually(func(g Gomega) {
			g.Expect(holderGone(ns, movedClaim)).To(BeTrue())
			g.Expect(attachmentsOf(g, movedPV.Name)).To(ConsistOf(And(HaveField("Spec.NodeName", elsewhere.Name), HaveField("Status.Attached", true))))
		}).WithTimeout(longTimeout).Should(Succeed())

		By("deleting a node with staged PVCs: its holders go, and the PVCs are staged again on nodes that exist")
		staged = stagedPool(ns, fpvc.Name, 3)
		var victim string
		for _, n := range staged {
			victim = n
		}
		restoreNode(victim)
		Expect(k8s.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: victim}})).To(Succeed())
		Eventually(func(g Gomega) {
			for c, n := range stagedPoolOnce(g, ns, fpvc.Name, 3) {
				g.Expect(n).NotTo(Equal(victim), "warm PVC %s is staged on the deleted node", c)
			}
		}).WithTimeout(longTimeout).Should(Succeed())

		By("a warm PVC whose volume stays attached to a node that is gone is replaced, and the pool staged again")
		staged = stagedPool(ns, fpvc.Name, 3)
		var strandedClaim string
		for c := range staged {
			strandedClaim = c
		}
		stranded := fixtures.GetPVC(ctx, Default, k8s, ns, strandedClaim)
		strandedPV := pvOf(Default, stranded).Name
		// As the attach/detach controller leaves it when it cannot detach:
		// attached to a node that no longer exists. The finalizer keeps it.
		va := &storagev1.VolumeAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: "stranded-" + strandedPV, Finalizers: []string{"e2e.fluent-pvc-operator.tech.zozo.com/keep"}},
			Spec: storagev1.VolumeAttachmentSpec{Attacher: cluster.CSIDriverName, NodeName: "kwok-gone",
				Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &strandedPV}},
		}
		Expect(k8s.Create(ctx, va)).To(Succeed())
		DeferCleanup(func() {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, va))).To(Succeed())
			Expect(client.IgnoreNotFound(k8s.Patch(ctx, va, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))))).To(Succeed())
		})
		Eventually(func(g Gomega) {
			c := &corev1.PersistentVolumeClaim{}
			err := k8s.Get(ctx, client.ObjectKeyFromObject(stranded), c)
			g.Expect(apierrors.IsNotFound(err) || err == nil && (c.UID != stranded.UID || c.DeletionTimestamp != nil)).To(BeTrue(), "warm PVC %s is replaced (err %v)", strandedClaim, err)
			events, err := kc.Clientset.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(events.Items).To(ContainElement(And(HaveField("Reason", v1alpha1.EventReasonWarmPVCStranded), HaveField("Type", "Warning"),
				HaveField("Regarding.Name", fpvc.Name), HaveField("Note", ContainSubstring(ns+"/"+strandedClaim+" (on node kwok-gone)")))))
		}).WithTimeout(longTimeout).Should(Succeed())
		for c := range stagedPool(ns, fpvc.Name, 3) {
			Expect(c).NotTo(Equal(strandedClaim))
		}

		By("the hits are drained by their Jobs")
		for _, p := range append(hits, moved) {
			Expect(k8s.Delete(ctx, p)).To(Succeed())
		}
		for _, p := range append(hits, moved) {
			fixtures.Drained(ctx, k8s, ns, fixtures.ClaimOf(p), longTimeout)
		}
	})
})

// stagedPool waits until ns holds n warm PVCs of fpvc, each with a
// Running holder whose volume is attached on the holder's node, and the
// FluentPVC's status says so; it returns each PVC's node.
func stagedPool(ns, fpvc string, n int) map[string]string {
	GinkgoHelper()
	var out map[string]string
	Eventually(func(g Gomega) { out = stagedPoolOnce(g, ns, fpvc, n) }).WithTimeout(longTimeout).Should(Succeed())
	return out
}

func stagedPoolOnce(g Gomega, ns, fpvc string, n int) map[string]string {
	// The pool's PVCs: warm, or reserved ahead of their pods by a replica.
	var all, l corev1.PersistentVolumeClaimList
	g.Expect(k8s.List(ctx, &all, client.InNamespace(ns))).To(Succeed())
	for _, c := range all.Items {
		if _, _, reserved := claim.Reservation(&c); reserved || claim.StateOf(&c) == claim.Warm {
			l.Items = append(l.Items, c)
		}
	}
	g.Expect(l.Items).To(HaveLen(n))
	out := map[string]string{}
	for i := range l.Items {
		c := &l.Items[i]
		h := &corev1.Pod{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: objects.HolderName(c.Name)}, h)).To(Succeed(), "the holder of %s", c.Name)
		g.Expect(h.Status.Phase).To(Equal(corev1.PodRunning))
		g.Expect(h.DeletionTimestamp).To(BeNil())
		g.Expect(objects.HolderOf(h)).To(Equal(c.Name))
		node := &corev1.Node{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: h.Spec.NodeName}, node)).To(Succeed(), "holder %s runs on a node that exists", h.Name)
		g.Expect(attachmentsOf(g, pvOf(g, c).Name)).To(ConsistOf(And(HaveField("Spec.NodeName", h.Spec.NodeName), HaveField("Status.Attached", true))))
		out[c.Name] = h.Spec.NodeName
	}
	f := &v1alpha1.FluentPVC{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: fpvc}, f)).To(Succeed())
	g.Expect(f.Status.Pool).To(ContainElement(And(HaveField("Namespace", ns), HaveField("Staged", int32(n)))))
	return out
}

// holderGone is true once the holder of claim is gone, read live.
func holderGone(ns, claim string) bool {
	_, err := kc.Clientset.CoreV1().Pods(ns).Get(ctx, objects.HolderName(claim), metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// nodeOutside is a schedulable node, in the zone of some staged PVC,
// that holds none of them.
func nodeOutside(staged map[string]string) *corev1.Node {
	GinkgoHelper()
	zones := map[string]bool{}
	used := map[string]bool{}
	for _, n := range staged {
		node := &corev1.Node{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: n}, node)).To(Succeed())
		zones[node.Labels[corev1.LabelTopologyZone]] = true
		used[n] = true
	}
	var l corev1.NodeList
	Expect(k8s.List(ctx, &l)).To(Succeed())
	for i := range l.Items {
		n := &l.Items[i]
		if !used[n.Name] && zones[n.Labels[corev1.LabelTopologyZone]] && !n.Spec.Unschedulable && len(n.Spec.Taints) == 0 {
			return n
		}
	}
	Fail("no node outside the staged ones in their zones")
	return nil
}

// restoreNode makes fake node name again, with its CSINode, when the spec
// ends: the other specs share the cluster's nodes.
func restoreNode(name string) {
	GinkgoHelper()
	node := &corev1.Node{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
	zone := node.Labels[corev1.LabelTopologyZone]
	DeferCleanup(func() {
		Eventually(func(g Gomega) {
			_, err := kc.Clientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "node %s is gone before it is made again", name)
			_, err = kc.Clientset.StorageV1().CSINodes().Get(ctx, name, metav1.GetOptions{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "its CSINode is collected")
		}).WithTimeout(longTimeout).Should(Succeed())
		var i int
		for j := range 16 {
			if cluster.NodeName(zone, j) == name {
				i = j
			}
		}
		Expect(kc.CreateNodes(ctx, cluster.NodeSet{Zones: []string{zone}, PerZone: 1, First: i})).To(Succeed())
		Expect(kc.RegisterCSINode(ctx, name)).To(Succeed())
		Eventually(func(g Gomega) {
			n, err := kc.Clientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(n.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.NodeReady), HaveField("Status", corev1.ConditionTrue))))
		}).Should(Succeed())
	})
}
