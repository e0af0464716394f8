package checkout_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/checkout"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

var _ = Describe("Checkout from a staged pool", func() {
	It("takes a PVC staged where the pod can run first, an unstaged one next, and one staged elsewhere only for a pod that does not pin itself", func() {
		ctx, cancel := context.WithCancel(context.Background())
		DeferCleanup(cancel)
		ns := newNamespace()
		fpvc := fixtures.MakeFluentPVC("staged-" + rand.String(5)).PoolSize(3).Obj()
		hash := pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate)
		suffix := rand.String(5)
		n1, n2, n3 := "n1-"+suffix, "n2-"+suffix, "n3-"+suffix
		for _, n := range []string{n1, n2, n3} {
			node := fixtures.MakeNode(n).Label(corev1.LabelHostname, n).Obj()
			Expect(k8sClient.Create(ctx, node)).To(Succeed())
			DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(context.Background(), node))).To(Succeed()) })
		}
		warm := func(name string) *corev1.PersistentVolumeClaim {
			c := claim.NewWarm(fpvc, ns, hash, "").Object
			c.Name = name
			c.Annotations = map[string]string{v1alpha1.NodeAffinityAnnotationKey: ""}
			Expect(k8sClient.Create(ctx, c)).To(Succeed())
			c.Status.Phase = corev1.ClaimBound
			Expect(k8sClient.Status().Update(ctx, c)).To(Succeed())
			return c
		}
		// A holder as the pool makes it, scheduled to node.
		stage := func(c *corev1.PersistentVolumeClaim, node string) {
			h := objects.HolderPod(fpvc.Name, c, node, "pause", "")
			h.Spec.NodeName = node
			Expect(k8sClient.Create(ctx, h)).To(Succeed())
		}
		here, there, plain := warm("here"), warm("there"), warm("plain")
		stage(here, n1)
		stage(there, n2)
		r := newReplica(ctx)
		Eventually(func(g Gomega) {
			var l corev1.PodList
			g.Expect(r.cache.List(ctx, &l, client.InNamespace(ns), client.MatchingFields{checkout.HolderIndex: fpvc.Name})).To(Succeed())
			g.Expect(l.Items).To(HaveLen(2))
			var warmList corev1.PersistentVolumeClaimList
			g.Expect(r.cache.List(ctx, &warmList, client.InNamespace(ns), client.MatchingFields{checkout.WarmIndex: fpvc.Name})).To(Succeed())
			g.Expect(warmList.Items).To(HaveLen(3))
			for _, c := range warmList.Items {
				g.Expect(c.Status.Phase).To(Equal(corev1.ClaimBound))
			}
			var nodes corev1.NodeList
			g.Expect(r.cache.List(ctx, &nodes)).To(Succeed())
			g.Expect(len(nodes.Items)).To(BeNumerically(">=", 3))
		}).Should(Succeed())
		// The API server taints new nodes not-ready, and no node controller
		// runs here to lift it: the pods tolerate it.
		tolerant := func(name string) *fixtures.PodWrapper {
			return fixtures.MakePod(name, ns).Toleration(corev1.Toleration{Operator: corev1.TolerationOpExists})
		}
		checkOut := func(pod *corev1.Pod) checkout.Checkedout {
			got, err := r.checkouter.Checkout(ctx, fpvc, pod, fixtures.Epoch)
			Expect(err).NotTo(HaveOccurred())
			return got
		}

		By("a pod that may run anywhere takes a staged PVC, and learns its node")
		got := checkOut(tolerant("a").Obj())
		Expect(got.PVC).NotTo(BeNil())
		Expect(got.PVC.Name).To(BeElementOf(here.Name, there.Name))
		Expect(got.Holder).To(Equal(objects.HolderName(got.PVC.Name)))
		Expect(got.StagedOn).To(BeElementOf(n1, n2))
		left := here
		if got.PVC.Name == here.Name {
			left = there
		}
		leftNode := map[string]string{here.Name: n1, there.Name: n2}[left.Name]

		By("a DaemonSet's pod on a node with no staged PVC takes the unstaged one, never one staged elsewhere")
		got = checkOut(tolerant("ds-1").PinnedTo(n3).Obj())
		Expect(got.PVC).NotTo(BeNil())
		Expect(got.PVC.Name).To(Equal(plain.Name))
		Expect(got.Holder).To(BeEmpty())
		got = checkOut(tolerant("ds-2").PinnedTo(n3).Obj())
		Expect(got.PVC).To(BeNil(), "only a PVC staged on another node is left: the pinned pod misses")

		By("a pod that cannot run on the staged node takes it, to be detached there; it is not steered")
		got = checkOut(tolerant("elsewhere").NodeSelector(corev1.LabelHostname, n3).Obj())
		Expect(got.PVC).NotTo(BeNil())
		Expect(got.PVC.Name).To(Equal(left.Name))
		Expect(got.StagedOn).To(BeEmpty(), "its holder is on %s, where the pod cannot run", leftNode)
	})
})
