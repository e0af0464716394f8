package realnode

import (
	"slices"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/csidriver"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

var _ = Describe("Claims on CSI storage that must be attached, as a cloud disk's", func() {
	BeforeEach(requireCSI)

	It("drains what a pod wrote through the kubelet's CSI mount, then detaches the volume and deletes it once", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "csi", namespaceCleanup)
		rec := newRecorder(ns)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, shippingFluentPVC("csi-"+ns, ns, 0, 0).Obj(), fluentPVCCleanup)
		pod := labelledPod(ns, fpvc.Name)
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		pod = runningOnRealNode(ns, pod.Name)
		claim := fixtures.ClaimOf(pod)

		By("the claim's volume is the driver's, attached to the real node")
		pv := boundPV(ns, claim)
		Expect(pv.Spec.CSI).NotTo(BeNil(), "PV %s is a CSI volume", pv.Name)
		Expect(pv.Spec.CSI.Driver).To(Equal(cluster.CSIDriverName))
		Expect(attachments(pv.Name)).To(ConsistOf(HaveField("Spec.NodeName", cluster.RealNodeName)))

		By("what the sidecar writes lands in the driver's volume")
		writing(ns, pod.Name, 5)
		Eventually(func() []string { return readLines(volumeDir(pv) + "/buffer") }).Should(ContainElement(pod.Name + " 5"))

		Expect(k8s.Delete(ctx, pod)).To(Succeed())
		rec.drainedOnce(claim)
		fixtures.Drained(ctx, k8s, ns, claim, longTimeout)
		expectShippedOnce(ns, []string{pod.Name}, 1)

		By("the drained claim's volume is detached, then deleted once")
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pv), &corev1.PersistentVolume{})).To(Satisfy(isNotFound), "PV %s is gone", pv.Name)
			g.Expect(attachments(pv.Name)).To(BeEmpty())
			g.Expect(volumeDir(pv)).NotTo(BeADirectory())
		}).WithTimeout(longTimeout).Should(Succeed())
		deletes, err := csidriver.ReadDeletes(kc.CSIStateDir())
		Expect(err).NotTo(HaveOccurred())
		Expect(deletes).To(HaveKeyWithValue(pv.Spec.CSI.VolumeHandle, HaveField("Deletions", 1)))
		GinkgoWriter.Printf("volume %s: %d DeleteVolume calls, %d deletion\n", pv.Spec.CSI.VolumeHandle, deletes[pv.Spec.CSI.VolumeHandle].Calls, deletes[pv.Spec.CSI.VolumeHandle].Deletions)
	})

	It("drains, on the real node, a claim attached to another node once it is detached there, refusing the second attachment meanwhile", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "moved", namespaceCleanup)
		rec := newRecorder(ns)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, shippingFluentPVC("moved-"+ns, ns, 0, 0).Obj(), fluentPVCCleanup)
		vas := newAttachmentRecorder()

		By("a pod on a simulated node of the real node's zone attaches the claim there")
		other := cluster.NodeName(cluster.DefaultZones[0], 0)
		pod := labelledPod(ns, fpvc.Name)
		pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: other}
		pod.Spec.Tolerations = []corev1.Toleration{{Key: cluster.FakeNodeTaintKey, Operator: corev1.TolerationOpExists}}
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		claim := fixtures.ClaimOf(pod)
		var pv *corev1.PersistentVolume
		Eventually(func(g Gomega) {
			pv = boundPVOf(g, ns, claim)
			g.Expect(attachments(pv.Name)).To(ConsistOf(And(HaveField("Spec.NodeName", other), HaveField("Status.Attached", true))))
		}).WithTimeout(longTimeout).Should(Succeed())

		By("deleting the pod: its drain Job runs on the real node")
		Expect(k8s.Delete(ctx, pod)).To(Succeed())
		Eventually(func(g Gomega) {
			var events corev1.EventList
			g.Expect(k8s.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
			g.Expect(events.Items).To(ContainElement(And(
				HaveField("InvolvedObject.Kind", "Pod"),
				HaveField("Reason", "FailedAttachVolume"),
				HaveField("Message", ContainSubstring("Multi-Attach")))), "the attach/detach controller refuses the drain pod's attachment while the volume is attached to %s", other)
		}).WithTimeout(longTimeout).Should(Succeed())
		rec.drainedOnce(claim)
		fixtures.Drained(ctx, k8s, ns, claim, longTimeout)

		By("the real node's attachment began only after the other node's had ended")
		Expect(vas.createdAfterDeleted(pv.Name, cluster.RealNodeName, other)).To(BeTrue(), "attachments of %s: %v", pv.Name, vas.log(pv.Name))
	})
})

// isNotFound is apierrors.IsNotFound for Satisfy.
func isNotFound(err error) bool { return client.IgnoreNotFound(err) == nil && err != nil }

// boundPV waits until claim is Bound and returns its PV.
func boundPV(ns, claim string) *corev1.PersistentVolume {
	GinkgoHelper()
	var pv *corev1.PersistentVolume
	Eventually(func(g Gomega) { pv = boundPVOf(g, ns, claim) }).WithTimeout(longTimeout).Should(Succeed())
	return pv
}

// boundPVOf is the PV of claim, which must be Bound.
func boundPVOf(g Gomega, ns, claim string) *corev1.PersistentVolume {
	pvc := &corev1.PersistentVolumeClaim{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: claim}, pvc)).To(Succeed())
	g.Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound))
	pv := &corev1.PersistentVolume{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv)).To(Succeed())
	return pv
}

// volumeDir is the directory of this host that holds PV pv's data: its
// host path, or the CSI driver's directory of the volume.
func volumeDir(pv *corev1.PersistentVolume) string {
	GinkgoHelper()
	switch {
	case pv.Spec.HostPath != nil:
		return pv.Spec.HostPath.Path
	case pv.Spec.CSI != nil:
		return csidriver.VolumeData(kc.CSIDataDir(), pv.Spec.CSI.VolumeHandle)
	}
	Fail("PV " + pv.Name + " is neither a hostPath nor a CSI volume")
	return ""
}

// attachments are the VolumeAttachments of PV pv.
func attachments(pv string) []storagev1.VolumeAttachment {
	GinkgoHelper()
	var l storagev1.VolumeAttachmentList
	Expect(k8s.List(ctx, &l)).To(Succeed())
	return slices.DeleteFunc(l.Items, func(va storagev1.VolumeAttachment) bool {
		return va.Spec.Source.PersistentVolumeName == nil || *va.Spec.Source.PersistentVolumeName != pv
	})
}

// attachmentEvent is a VolumeAttachment seen created or deleted.
type attachmentEvent struct {
	PV, Node string
	Deleted  bool
}

// attachmentRecorder records, in order, the VolumeAttachments created and
// deleted from its start, as the API server's watch tells them.
type attachmentRecorder struct {
	mu     sync.Mutex
	events []attachmentEvent
}

func newAttachmentRecorder() *attachmentRecorder {
	GinkgoHelper()
	r := &attachmentRecorder{}
	record := func(deleted bool) func(any) {
		return func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			va, ok := o.(*storagev1.VolumeAttachment)
			if !ok || va.Spec.Source.PersistentVolumeName == nil {
				return
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			r.events = append(r.events, attachmentEvent{PV: *va.Spec.Source.PersistentVolumeName, Node: va.Spec.NodeName, Deleted: deleted})
		}
	}
	f := informers.NewSharedInformerFactory(cs, 0)
	_, err := f.Storage().V1().VolumeAttachments().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: record(false), DeleteFunc: record(true),
	})
	Expect(err).NotTo(HaveOccurred())
	startInformers(f)
	return r
}

// log is what the recorder saw of PV pv.
func (r *attachmentRecorder) log(pv string) []attachmentEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(r.events), func(e attachmentEvent) bool { return e.PV != pv })
}

// createdAfterDeleted says whether PV pv's attachment to node was created
// only after its attachment to before had been deleted, both seen.
func (r *attachmentRecorder) createdAfterDeleted(pv, node, before string) bool {
	log := r.log(pv)
	gone := slices.Index(log, attachmentEvent{PV: pv, Node: before, Deleted: true})
	made := slices.Index(log, attachmentEvent{PV: pv, Node: node})
	return gone >= 0 && made > gone && slices.Index(log, attachmentEvent{PV: pv, Node: before}) >= 0
}
