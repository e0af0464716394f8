package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

var _ = Describe("Warm pool on a simulated cluster", func() {
	var (
		ns   string
		fpvc *v1alpha1.FluentPVC
	)

	warm := func(g Gomega) []corev1.PersistentVolumeClaim {
		var l corev1.PersistentVolumeClaimList
		g.Expect(k8s.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleWarm})).To(Succeed())
		var live []corev1.PersistentVolumeClaim
		for _, c := range l.Items {
			if c.DeletionTimestamp.IsZero() {
				live = append(live, c)
			}
		}
		return live
	}
	// full waits until the pool holds n Bound, zone-recorded warm PVCs made
	// from the current template, and returns them.
	full := func(n int) []corev1.PersistentVolumeClaim {
		var cs []corev1.PersistentVolumeClaim
		EventuallyWithOffset(1, func(g Gomega) {
			f := &v1alpha1.FluentPVC{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(fpvc), f)).To(Succeed())
			hash := pool.TemplateHash(&f.Spec.PVCSpecTemplate)
			cs = warm(g)
			g.Expect(cs).To(HaveLen(n))
			for _, c := range cs {
				g.Expect(c.Status.Phase).To(Equal(corev1.ClaimBound))
				g.Expect(c.Labels).To(HaveKeyWithValue(v1alpha1.TemplateHashLabelKey, hash))
				g.Expect(c.Annotations).To(HaveKey(v1alpha1.ZonesAnnotationKey))
			}
			g.Expect(f.Status.Warm).To(BeEquivalentTo(n))
		}).WithTimeout(longTimeout).Should(Succeed())
		return cs
	}
	binders := func(g Gomega) []string {
		var jobs batchv1.JobList
		g.Expect(k8s.List(ctx, &jobs, client.InNamespace(ns), client.MatchingLabels{v1alpha1.ComponentLabelKey: v1alpha1.ComponentBinder})).To(Succeed())
		var pods corev1.PodList
		g.Expect(k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{v1alpha1.ComponentLabelKey: v1alpha1.ComponentBinder})).To(Succeed())
		return append(fixtures.Names(jobs.Items), fixtures.Names(pods.Items)...)
	}
	setPool := func(change func(*v1alpha1.FluentPVC)) { updateFluentPVC(fpvc, change) }

	BeforeEach(func() {
		ns = fixtures.NewNamespace(ctx, k8s, "pool", namespaceCleanup)
		// The README sample's class is standard: WaitForFirstConsumer, 5 s per volume.
		fpvc = fixtures.CreateFluentPVC(ctx, k8s, e2eFluentPVC("pool-"+ns).PoolSize(6).Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.Pool.Namespaces = []string{ns}
		}).Obj(), fluentPVCCleanup)
	})

	It("binds warm PVCs by naming nodes spread over the zones, with no binder, and hands them to pods", func() {
		cs := full(6)
		Expect(binders(Default)).To(BeEmpty(), "no binder Job or pod")
		for _, c := range cs {
			Expect(c.Annotations).To(HaveKeyWithValue(v1alpha1.SelectedNodeAnnotationKey, HavePrefix("kwok-")))
		}
		perZone := map[string]int{}
		for _, c := range cs {
			perZone[c.Annotations[v1alpha1.ZonesAnnotationKey]]++
		}
		Expect(perZone).To(HaveLen(3), "warm PVCs in every zone: %v", perZone)
		for zone, n := range perZone {
			Expect(n).To(Equal(2), "zone %s: %v", zone, perZone)
		}

		pod := fixtures.MakePod("hit", ns).FluentPVC(fpvc.Name).Obj()
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		claim := fixtures.ClaimOf(pod)
		Expect(fixtures.Names(cs)).To(ContainElement(claim))
		running(ns, "hit")
		// The test's informer may lag behind the webhook's checkout.
		Eventually(func(g Gomega) {
			g.Expect(fixtures.GetPVC(ctx, g, k8s, ns, claim).Annotations).To(HaveKeyWithValue(v1alpha1.CheckoutAnnotationKey, v1alpha1.CheckoutHit))
		}).Should(Succeed())

		pinned := fixtures.MakePod("pinned", ns).FluentPVC(fpvc.Name).NodeSelector(pool.ZoneLabelKey, "zone-b").Obj()
		Expect(k8s.Create(ctx, pinned)).To(Succeed())
		Eventually(func(g Gomega) {
			pinnedClaim := fixtures.GetPVC(ctx, g, k8s, ns, fixtures.ClaimOf(pinned))
			g.Expect(pinnedClaim.Annotations).To(HaveKeyWithValue(v1alpha1.CheckoutAnnotationKey, v1alpha1.CheckoutHit))
			g.Expect(pinnedClaim.Annotations).To(HaveKeyWithValue(v1alpha1.ZonesAnnotationKey, "zone-b"))
		}).Should(Succeed())
		Expect(running(ns, "pinned").Spec.NodeName).To(HavePrefix("kwok-zone-b-"))

		// A warm PVC deleted by hand is replaced.
		remaining := full(6)
		Expect(k8s.Delete(ctx, &remaining[0])).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(fixtures.Names(warm(g))).NotTo(ContainElement(remaining[0].Name))
		}).Should(Succeed())
		full(6)

		Expect(k8s.Delete(ctx, pod)).To(Succeed())
		Expect(k8s.Delete(ctx, pinned)).To(Succeed())
		fixtures.Drained(ctx, k8s, ns, claim, longTimeout)
		fixtures.Drained(ctx, k8s, ns, fixtures.ClaimOf(pinned), longTimeout)
	})

	It("replaces every warm PVC when the template changes, and converges when scaled 6 → 1 → 0", func() {
		before := sets.New(fixtures.Names(full(6))...)
		setPool(func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCSpecTemplate.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
		})
		after := full(6)
		Expect(before.HasAny(fixtures.Names(after)...)).To(BeFalse(), "no warm PVC of the old template is kept")
		for _, c := range after {
			Expect(c.Spec.Resources.Requests.Storage().String()).To(Equal("2Gi"))
		}

		setPool(func(f *v1alpha1.FluentPVC) { f.Spec.Pool.Size = 1 })
		full(1)
		setPool(func(f *v1alpha1.FluentPVC) { f.Spec.Pool.Size = 0 })
		Eventually(warm).Should(BeEmpty())
		Eventually(binders).Should(BeEmpty())
	})

	It("returns an orphan claim to the pool, and deletes the warm PVCs with the FluentPVC", func() {
		cs := full(6)
		rejectAfterWebhook(ns)
		orphan := admitRejected(ns, fpvc.Name)
		Expect(fixtures.Names(cs)).To(ContainElement(orphan), "the rejected pod's claim came from the pool")
		// After the grace period the claim is warm again, not deleted.
		Eventually(func(g Gomega) {
			g.Expect(fixtures.Names(warm(g))).To(ContainElement(orphan))
			var l v1alpha1.FluentPVCBindingList
			g.Expect(k8s.List(ctx, &l, client.InNamespace(ns))).To(Succeed())
			g.Expect(l.Items).To(BeEmpty())
		}).Should(Succeed())

		Expect(k8s.Delete(ctx, fpvc)).To(Succeed())
		Eventually(warm).Should(BeEmpty())
	})
})
