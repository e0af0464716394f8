package controllers_test

import (
	"context"
	"slices"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

var _ = Describe("Warm pool", func() {
	var (
		ctx  context.Context
		ns   string
		fpvc *v1alpha1.FluentPVC
	)

	warmClaims := func(g Gomega) []corev1.PersistentVolumeClaim {
		var l corev1.PersistentVolumeClaimList
		g.Expect(k8sClient.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleWarm})).To(Succeed())
		var live []corev1.PersistentVolumeClaim
		for _, c := range l.Items {
			if c.DeletionTimestamp.IsZero() {
				live = append(live, c)
			}
		}
		return live
	}
	// bindAll plays the PV controller: every unbound pool PVC gets a PV in
	// zone-a and goes Bound.
	bindAll := func() {
		Eventually(func(g Gomega) {
			for _, c := range warmClaims(g) {
				if c.Status.Phase == corev1.ClaimBound {
					continue
				}
				bindClaim(ctx, g, &c, "zone-a")
			}
		}).Should(Succeed())
	}
	// poolFull waits until the pool has n warm, Bound PVCs with zones recorded.
	poolFull := func(n int) {
		Eventually(func(g Gomega) {
			bindAll()
			cs := warmClaims(g)
			g.Expect(cs).To(HaveLen(n))
			for _, c := range cs {
				g.Expect(c.Status.Phase).To(Equal(corev1.ClaimBound))
				g.Expect(c.Annotations).To(HaveKey(v1alpha1.ZonesAnnotationKey))
			}
			f := &v1alpha1.FluentPVC{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(fpvc), f)).To(Succeed())
			g.Expect(f.Status.Warm).To(BeEquivalentTo(n))
		}).WithTimeout(fixtures.LongTimeout).Should(Succeed())
	}

	BeforeEach(func() {
		ctx = context.Background()
		_, stop := startOperator()
		DeferCleanup(stop)
		ns = newNamespace()
		fpvc = fixtures.MakeFluentPVC("pool-" + ns).PoolSize(3).Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.Pool.Namespaces = []string{ns}
		}).Obj()
		Expect(k8sClient.Create(ctx, fpvc)).To(Succeed())
	})

	It("keeps three warm PVCs, hands one to a pod and refills", func() {
		poolFull(3)
		Eventually(func(g Gomega) {
			f := &v1alpha1.FluentPVC{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(fpvc), f)).To(Succeed())
			g.Expect(meta(f.Status.Conditions, v1alpha1.FluentPVCConditionPoolReady)).To(HaveField("Reason", v1alpha1.PoolReadyReasonFull))
		}).Should(Succeed())
		warmNames := sets.New[string]()
		for _, c := range warmClaims(Default) {
			warmNames.Insert(c.Name)
		}

		pod := fixtures.MakePod("hit", ns).FluentPVC(fpvc.Name).Obj()
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		claim := pod.Labels[v1alpha1.BindingNameLabelKey]
		Expect(warmNames.Has(claim)).To(BeTrue(), "the pod got one of the warm PVCs")

		pvc := &corev1.PersistentVolumeClaim{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: claim}, pvc)).To(Succeed())
		Expect(pvc.Annotations).To(HaveKeyWithValue(v1alpha1.CheckoutAnnotationKey, v1alpha1.CheckoutHit))
		Expect(pvc.Labels).To(HaveKeyWithValue(v1alpha1.ClaimRoleLabelKey, v1alpha1.ClaimRoleClaimed))
		Expect(pvc.Finalizers).To(ContainElement(v1alpha1.PVCProtectionFinalizer))
		// The operator makes the binding from the claim, shortly after.
		Eventually(func(g Gomega) {
			b := &v1alpha1.FluentPVCBinding{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: claim}, b)).To(Succeed())
			g.Expect(b.Annotations).To(HaveKeyWithValue(v1alpha1.CheckoutAnnotationKey, v1alpha1.CheckoutHit))
		}).Should(Succeed())

		poolFull(3)
		Expect(warmClaims(Default)).NotTo(ContainElement(HaveField("Name", claim)))
	})

	It("gives five concurrent pods against a pool of three three hits and two misses, all distinct", func() {
		poolFull(3)
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			claims []string
		)
		for range 5 {
			wg.Go(func() {
				defer GinkgoRecover()
				pod := fixtures.MakePod("", ns).GenerateName("burst-").FluentPVC(fpvc.Name).Obj()
				Expect(k8sClient.Create(ctx, pod)).To(Succeed())
				mu.Lock()
				claims = append(claims, pod.Labels[v1alpha1.BindingNameLabelKey])
				mu.Unlock()
			})
		}
		wg.Wait()
		Expect(sets.New(claims...)).To(HaveLen(5))
		results := map[string]int{}
		for _, name := range claims {
			pvc := &corev1.PersistentVolumeClaim{}
			Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pvc)).To(Succeed())
			results[pvc.Annotations[v1alpha1.CheckoutAnnotationKey]]++
		}
		Expect(results).To(Equal(map[string]int{v1alpha1.CheckoutHit: 3, v1alpha1.CheckoutMiss: 2}))
	})

	It("replaces every warm PVC when the template changes, and empties the pool when scaled to 0", func() {
		poolFull(3)
		updateFluentPVC(ctx, fpvc, func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCSpecTemplate.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
		})
		newHash := pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate)
		Eventually(func(g Gomega) {
			bindAll()
			cs := warmClaims(g)
			g.Expect(cs).To(HaveLen(3))
			for _, c := range cs {
				g.Expect(c.Labels).To(HaveKeyWithValue(v1alpha1.TemplateHashLabelKey, newHash))
				g.Expect(c.Spec.Resources.Requests.Storage().String()).To(Equal("2Gi"))
			}
		}).WithTimeout(fixtures.LongTimeout).Should(Succeed())

		updateFluentPVC(ctx, fpvc, func(f *v1alpha1.FluentPVC) { f.Spec.Pool.Size = 0 })
		Eventually(warmClaims).Should(BeEmpty())
	})

	It("returns an orphan claim made from the current template to the pool", func() {
		poolFull(3)
		// A pod rejected after the webhook: its claim was checked out (the
		// operator makes its binding), then no pod appeared.
		c := warmClaims(Default)[0]
		checkout, err := claim.Checkout(&c, metav1.Now().Time, claim.NewCheckoutID())
		Expect(err).NotTo(HaveOccurred())
		Expect(claim.Execute(ctx, k8sClient, checkout)).To(Succeed())
		b := &v1alpha1.FluentPVCBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.Name}}
		Eventually(func() error { return k8sClient.Get(ctx, client.ObjectKeyFromObject(b), b) }).Should(Succeed())

		Eventually(func(g Gomega) {
			pvc := &corev1.PersistentVolumeClaim{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: c.Name}, pvc)).To(Succeed())
			g.Expect(pvc.Labels).To(HaveKeyWithValue(v1alpha1.ClaimRoleLabelKey, v1alpha1.ClaimRoleWarm))
			g.Expect(pvc.Finalizers).NotTo(ContainElement(v1alpha1.PVCProtectionFinalizer))
			g.Expect(pvc.DeletionTimestamp).To(BeNil())
		}).WithTimeout(fixtures.LongTimeout).Should(Succeed())
		Eventually(func() bool {
			return k8sClient.Get(ctx, client.ObjectKeyFromObject(b), b) != nil
		}).Should(BeTrue())
		poolFull(3)
	})

	It("learns pool namespaces from admitted pods when none are listed", func() {
		learning := fixtures.MakeFluentPVC("learn-" + ns).PoolSize(2).Obj()
		Expect(k8sClient.Create(ctx, learning)).To(Succeed())
		DeferCleanup(func() { Expect(k8sClient.Delete(context.Background(), learning)).To(Succeed()) })
		Eventually(func(g Gomega) {
			f := &v1alpha1.FluentPVC{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(learning), f)).To(Succeed())
			g.Expect(meta(f.Status.Conditions, v1alpha1.FluentPVCConditionPoolReady)).To(HaveField("Reason", v1alpha1.PoolReadyReasonNoNamespaces))
		}).Should(Succeed())

		pod := fixtures.MakePod("first", ns).FluentPVC(learning.Name).Obj()
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		Eventually(func(g Gomega) {
			var l corev1.PersistentVolumeClaimList
			g.Expect(k8sClient.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{
				v1alpha1.FluentPVCNameLabelKey: learning.Name, v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleWarm,
			})).To(Succeed())
			g.Expect(l.Items).To(HaveLen(2))
			f := &v1alpha1.FluentPVC{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(learning), f)).To(Succeed())
			g.Expect(f.Status.Pool).To(ConsistOf(HaveField("Namespace", ns)))
			g.Expect(f.Status.Pool[0].LastAdmissionTime).NotTo(BeNil())
		}).Should(Succeed())
	})

	// wffcClass creates a WaitForFirstConsumer StorageClass for the spec.
	wffcClass := func() *storagev1.StorageClass {
		sc := &storagev1.StorageClass{
			ObjectMeta:        metav1.ObjectMeta{Name: "wffc-" + ns},
			Provisioner:       "example.com/none",
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
		}
		Expect(k8sClient.Create(ctx, sc)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(context.Background(), sc))).To(Succeed()) })
		return sc
	}
	// node creates node ns-name in zone, Ready or not, with taints.
	node := func(name, zone string, ready bool, taints ...corev1.Taint) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name, Labels: map[string]string{pool.ZoneLabelKey: zone}},
			Spec: corev1.NodeSpec{Taints: taints}}
		Expect(k8sClient.Create(ctx, n)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(context.Background(), n))).To(Succeed()) })
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		Expect(k8sClient.Status().Update(ctx, n)).To(Succeed())
		// The API server taints a new node not-ready; with no node
		// lifecycle controller here, the spec lifts it by hand.
		n.Spec.Taints = taints
		Expect(k8sClient.Update(ctx, n)).To(Succeed())
		return n
	}

	It("names a Ready, untainted node on each warm PVC of a WaitForFirstConsumer class, spread over zones, and names another when one is given back", func() {
		sc := wffcClass()
		node("a", "zone-a", true)
		node("b", "zone-b", true)
		node("c", "zone-c", true)
		node("c-tainted", "zone-c", true, corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule})
		node("d-not-ready", "zone-d", false)
		eligible := map[string]string{ns + "-a": "zone-a", ns + "-b": "zone-b", ns + "-c": "zone-c"}

		updateFluentPVC(ctx, fpvc, func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCSpecTemplate.StorageClassName = &sc.Name
			f.Spec.Pool.Size = 6
		})
		hash := pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate)
		named := func(g Gomega) []corev1.PersistentVolumeClaim {
			var out []corev1.PersistentVolumeClaim
			for _, c := range warmClaims(g) {
				if c.Labels[v1alpha1.TemplateHashLabelKey] == hash {
					out = append(out, c)
				}
			}
			return out
		}
		Eventually(func(g Gomega) {
			cs := named(g)
			g.Expect(cs).To(HaveLen(6))
			perZone := map[string]int{}
			for _, c := range cs {
				n := c.Annotations[v1alpha1.SelectedNodeAnnotationKey]
				g.Expect(eligible).To(HaveKey(n), "PVC %s names node %q", c.Name, n)
				perZone[eligible[n]]++
			}
			g.Expect(perZone).To(Equal(map[string]int{"zone-a": 2, "zone-b": 2, "zone-c": 2}))
		}).Should(Succeed())
		// A reconcile that ran before the cache showed the nodes Ready may
		// have made binders; the one after it deletes them.
		Eventually(func(g Gomega) {
			var jobs batchv1.JobList
			g.Expect(k8sClient.List(ctx, &jobs, client.InNamespace(ns))).To(Succeed())
			g.Expect(jobs.Items).To(BeEmpty(), "no binder Job")
		}).Should(Succeed())

		// A provisioner that cannot use the node removes it; the pool names
		// another, and again when the named node is deleted.
		given := named(Default)[0]
		delete(given.Annotations, v1alpha1.SelectedNodeAnnotationKey)
		Expect(k8sClient.Update(ctx, &given)).To(Succeed())
		Eventually(func(g Gomega) {
			c := &corev1.PersistentVolumeClaim{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(&given), c)).To(Succeed())
			g.Expect(eligible).To(HaveKey(c.Annotations[v1alpha1.SelectedNodeAnnotationKey]))
		}).Should(Succeed())
	})

	It("binds warm PVCs through binder Jobs, with a warning, while no node qualifies, and names a node once one does", func() {
		sc := wffcClass()
		tainted := node("only", "zone-a", true, corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule})
		updateFluentPVC(ctx, fpvc, func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCSpecTemplate.StorageClassName = &sc.Name
			f.Spec.Pool.Size = 2
		})
		binderJobs := func(g Gomega) []batchv1.Job {
			var l batchv1.JobList
			g.Expect(k8sClient.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{v1alpha1.ComponentLabelKey: v1alpha1.ComponentBinder})).To(Succeed())
			return l.Items
		}
		Eventually(binderJobs).Should(HaveLen(2))
		Eventually(func(g Gomega) {
			var l eventsv1.EventList
			g.Expect(k8sClient.List(ctx, &l)).To(Succeed())
			g.Expect(l.Items).To(ContainElement(And(HaveField("Regarding.Name", fpvc.Name), HaveField("Reason", v1alpha1.EventReasonNoNodeToSelect))))
		}).Should(Succeed())

		// The node is untainted: the binders, not yet placed, give way.
		tainted.Spec.Taints = nil
		Expect(k8sClient.Update(ctx, tainted)).To(Succeed())
		Eventually(func(g Gomega) {
			cs := warmClaims(g)
			named := 0
			for _, c := range cs {
				if c.Labels[v1alpha1.TemplateHashLabelKey] == pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate) {
					g.Expect(c.Annotations).To(HaveKeyWithValue(v1alpha1.SelectedNodeAnnotationKey, tainted.Name))
					named++
				}
			}
			g.Expect(named).To(Equal(2))
			g.Expect(binderJobs(g)).To(BeEmpty())
		}).Should(Succeed())
	})

	It("records each warm PVC's volume node affinity, and replaces a warm PVC that no node can use any more", func() {
		// A zone of this spec's own, on one node; another node keeps the
		// node list from being empty once that one goes.
		zone := "only-" + ns
		node("keep", "zone-a", true)
		local := node("local", zone, true)
		updateFluentPVC(ctx, fpvc, func(f *v1alpha1.FluentPVC) { f.Spec.Pool.Size = 1 })
		var first corev1.PersistentVolumeClaim
		Eventually(func(g Gomega) {
			cs := warmClaims(g)
			g.Expect(cs).To(HaveLen(1))
			first = cs[0]
			bindClaim(ctx, g, &first, zone)
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			c := &corev1.PersistentVolumeClaim{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(&first), c)).To(Succeed())
			pv := &corev1.PersistentVolume{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: c.Spec.VolumeName}, pv)).To(Succeed())
			g.Expect(c.Annotations).To(HaveKeyWithValue(v1alpha1.NodeAffinityAnnotationKey, pool.VolumeAffinity(pv)))
			g.Expect(c.Annotations[v1alpha1.NodeAffinityAnnotationKey]).To(ContainSubstring(zone))
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(&first), &corev1.PersistentVolumeClaim{})).To(Succeed())
		}).WithTimeout(fixtures.ConsistentlyFor).Should(Succeed(), "kept while its node exists")

		Expect(k8sClient.Delete(ctx, local)).To(Succeed())
		Eventually(func(g Gomega) {
			cs := warmClaims(g)
			g.Expect(cs).To(HaveLen(1))
			g.Expect(cs[0].UID).NotTo(Equal(first.UID), "replaced")
		}).Should(Succeed())
	})

	It("skips a listed pool namespace that does not exist, says so in PoolReady, and fills it once it exists", func() {
		later := ns + "-later"
		updateFluentPVC(ctx, fpvc, func(f *v1alpha1.FluentPVC) { f.Spec.Pool.Namespaces = []string{ns, later} })
		Eventually(func(g Gomega) {
			f := &v1alpha1.FluentPVC{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(fpvc), f)).To(Succeed())
			g.Expect(meta(f.Status.Conditions, v1alpha1.FluentPVCConditionPoolReady)).To(And(
				HaveField("Reason", v1alpha1.PoolReadyReasonNamespaceNotFound), HaveField("Message", ContainSubstring(later))))
			g.Expect(warmClaims(g)).To(HaveLen(3), "the existing namespace is filled meanwhile")
		}).Should(Succeed())

		Expect(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: later}})).To(Succeed())
		DeferCleanup(func() {
			Expect(k8sClient.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: later}})).To(Succeed())
		})
		Eventually(func(g Gomega) {
			var l corev1.PersistentVolumeClaimList
			g.Expect(k8sClient.List(ctx, &l, client.InNamespace(later), client.MatchingLabels{v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleWarm})).To(Succeed())
			g.Expect(l.Items).To(HaveLen(3))
			f := &v1alpha1.FluentPVC{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(fpvc), f)).To(Succeed())
			g.Expect(meta(f.Status.Conditions, v1alpha1.FluentPVCConditionPoolReady).Reason).NotTo(Equal(v1alpha1.PoolReadyReasonNamespaceNotFound))
		}).Should(Succeed())
	})

	It("hands a pod only a warm PVC it can use, and moves the pool to the node where its miss landed", func() {
		sc := wffcClass()
		// Node-local volumes: each node is a zone of its own.
		zoneOf := map[string]string{ns + "-x": "x-" + ns, ns + "-y": "y-" + ns}
		node("x", zoneOf[ns+"-x"], true)
		node("y", zoneOf[ns+"-y"], true)
		updateFluentPVC(ctx, fpvc, func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCSpecTemplate.StorageClassName = &sc.Name
			f.Spec.Pool.Size = 1
		})
		hash := pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate)
		// currentWarm are the warm PVCs of the class's template.
		currentWarm := func(g Gomega) []corev1.PersistentVolumeClaim {
			var out []corev1.PersistentVolumeClaim
			for _, c := range warmClaims(g) {
				if c.Labels[v1alpha1.TemplateHashLabelKey] == hash {
					out = append(out, c)
				}
			}
			return out
		}
		var spare corev1.PersistentVolumeClaim
		Eventually(func(g Gomega) {
			current := currentWarm(g)
			g.Expect(current).To(HaveLen(1))
			spare = current[0]
			named := spare.Annotations[v1alpha1.SelectedNodeAnnotationKey]
			g.Expect(zoneOf).To(HaveKey(named))
			bindClaim(ctx, g, &spare, zoneOf[named])
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			c := &corev1.PersistentVolumeClaim{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(&spare), c)).To(Succeed())
			g.Expect(c.Annotations).To(HaveKey(v1alpha1.NodeAffinityAnnotationKey))
		}).Should(Succeed())
		other := ns + "-x"
		if spare.Annotations[v1alpha1.SelectedNodeAnnotationKey] == other {
			other = ns + "-y"
		}

		// A pod that can only run on the other node misses...
		pod := fixtures.MakePod("pinned", ns).FluentPVC(fpvc.Name).NodeSelector(pool.ZoneLabelKey, zoneOf[other]).Obj()
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		claim := &corev1.PersistentVolumeClaim{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: pod.Labels[v1alpha1.BindingNameLabelKey]}, claim)).To(Succeed())
		Expect(claim.Annotations).To(HaveKeyWithValue(v1alpha1.CheckoutAnnotationKey, v1alpha1.CheckoutMiss), "the warm PVC's volume is on the other node")
		// ...and the scheduler names that node on its claim (which the
		// operator may be writing too: it records the pod there).
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
			claim.Annotations[v1alpha1.SelectedNodeAnnotationKey] = other
			g.Expect(k8sClient.Update(ctx, claim)).To(Succeed())
		}).Should(Succeed())

		// The warm PVC serving no pod is replaced by one on the miss's
		// node, once it has settled: the new one is made first...
		var moved corev1.PersistentVolumeClaim
		Eventually(func(g Gomega) {
			current := currentWarm(g)
			g.Expect(current).To(HaveLen(2))
			g.Expect(current).To(ContainElement(HaveField("UID", spare.UID)), "the spare is still warm")
			i := slices.IndexFunc(current, func(c corev1.PersistentVolumeClaim) bool { return c.UID != spare.UID })
			moved = current[i]
			g.Expect(moved.Annotations).To(HaveKeyWithValue(v1alpha1.SelectedNodeAnnotationKey, other))
		}).WithTimeout(pool.SpareSettle + fixtures.LongTimeout).Should(Succeed())
		// ...the spare stays warm, for pods to take, while it provisions...
		Consistently(func(g Gomega) {
			g.Expect(currentWarm(g)).To(ContainElement(HaveField("UID", spare.UID)))
		}).Should(Succeed())
		// ...and goes once it is Bound.
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(&moved), &moved)).To(Succeed())
			bindClaim(ctx, g, &moved, zoneOf[other])
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			current := currentWarm(g)
			g.Expect(current).To(HaveLen(1))
			g.Expect(current[0].UID).To(Equal(moved.UID))
		}).Should(Succeed())
	})

	It("warns on the FluentPVC, quoting the scheduler, when a binder cannot be scheduled", func() {
		sc := wffcClass()
		node("only", "zone-a", true, corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule})
		updateFluentPVC(ctx, fpvc, func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCSpecTemplate.StorageClassName = &sc.Name
			f.Spec.Pool.Size = 1
		})
		var job batchv1.Job
		Eventually(func(g Gomega) {
			var l batchv1.JobList
			g.Expect(k8sClient.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{v1alpha1.ComponentLabelKey: v1alpha1.ComponentBinder})).To(Succeed())
			g.Expect(l.Items).To(HaveLen(1))
			job = l.Items[0]
		}).Should(Succeed())
		// There is no Job controller or scheduler here: the spec makes the
		// binder's pod and writes what the scheduler would.
		const reason = "0/1 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}."
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: job.Name + "-x", Labels: job.Spec.Template.Labels,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(&job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
			Spec: job.Spec.Template.Spec,
		}
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		updatePodStatus(ctx, pod, func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: reason}}
		})
		Eventually(func(g Gomega) {
			var l eventsv1.EventList
			g.Expect(k8sClient.List(ctx, &l)).To(Succeed())
			g.Expect(l.Items).To(ContainElement(And(HaveField("Regarding.Name", fpvc.Name), HaveField("Reason", v1alpha1.EventReasonBinderUnschedulable),
				HaveField("Note", And(ContainSubstring(job.Labels[v1alpha1.WarmClaimLabelKey]), ContainSubstring(reason))))))
		}).WithTimeout(fixtures.LongTimeout).Should(Succeed())
	})

	It("deletes the warm PVCs with the FluentPVC", func() {
		poolFull(3)
		Expect(k8sClient.Delete(ctx, fpvc)).To(Succeed())
		Eventually(warmClaims).Should(BeEmpty())
		Eventually(func() bool {
			return k8sClient.Get(ctx, client.ObjectKeyFromObject(fpvc), &v1alpha1.FluentPVC{}) != nil
		}).Should(BeTrue())
	})
})
