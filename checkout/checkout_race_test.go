package checkout_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/checkout"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// replica is one operator replica's view: its own cache and client, as two
// webhook replicas have.
type replica struct {
	cache      cache.Cache
	checkouter *checkout.Checkouter
}

func newReplica(ctx context.Context) replica {
	c, err := cache.New(cfg, cache.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	Expect(checkout.IndexWarm(ctx, c)).To(Succeed())
	// Start the PVC informer before the cache.
	_, err = c.GetInformer(ctx, &corev1.PersistentVolumeClaim{})
	Expect(err).NotTo(HaveOccurred())
	go func() {
		defer GinkgoRecover()
		Expect(c.Start(ctx)).To(Succeed())
	}()
	Expect(c.WaitForCacheSync(ctx)).To(BeTrue())
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return replica{cache: c, checkouter: checkout.NewCheckouter(c, cl, cl)}
}

var _ = Describe("Checkout", func() {
	const (
		rounds       = 200
		warmPerRound = 6
		// As many checkouts as warm PVCs: each must get one, however stale
		// the caches are while the others are being taken.
		checkoutsPerReplica = warmPerRound / 2
	)

	It(fmt.Sprintf("never hands one PVC to two pods, over %d rounds of two replicas racing", rounds), func() {
		ctx, cancel := context.WithCancel(context.Background())
		DeferCleanup(cancel)
		ns := newNamespace()
		fpvc := fixtures.MakeFluentPVC("race").PoolSize(warmPerRound).Obj()
		hash := pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate)
		replicas := []replica{newReplica(ctx), newReplica(ctx)}

		totalHits := 0
		for round := range rounds {
			// Fill the pool with Bound, warm PVCs and let both caches see them.
			var names []string
			for range warmPerRound {
				c := claim.NewWarm(fpvc, ns, hash, "").Object
				// As the pool records it once Bound: a volume usable anywhere.
				c.Annotations = map[string]string{v1alpha1.NodeAffinityAnnotationKey: ""}
				Expect(k8sClient.Create(ctx, c)).To(Succeed())
				c.Status.Phase = corev1.ClaimBound
				Expect(k8sClient.Status().Update(ctx, c)).To(Succeed())
				names = append(names, c.Name)
			}
			for _, r := range replicas {
				Eventually(func(g Gomega) {
					var l corev1.PersistentVolumeClaimList
					g.Expect(r.cache.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleWarm})).To(Succeed())
					bound := 0
					for _, c := range l.Items {
						if c.Status.Phase == corev1.ClaimBound {
							bound++
						}
					}
					g.Expect(bound).To(Equal(warmPerRound))
				}).Should(Succeed())
			}

			var (
				wg  sync.WaitGroup
				mu  sync.Mutex
				got []string
			)
			for _, r := range replicas {
				for range checkoutsPerReplica {
					wg.Go(func() {
						defer GinkgoRecover()
						c, err := r.checkouter.Checkout(ctx, fpvc, fixtures.MakePod("p", ns).Obj(), time.Now())
						Expect(err).NotTo(HaveOccurred())
						if c.PVC != nil {
							mu.Lock()
							got = append(got, c.PVC.Name)
							mu.Unlock()
						}
					})
				}
			}
			wg.Wait()

			Expect(sets.New(got...)).To(HaveLen(len(got)), "round %d: a PVC was handed out twice: %v", round, got)
			Expect(got).To(HaveLen(warmPerRound), "round %d: every checkout gets a warm PVC, stale caches or not", round)
			Expect(sets.New(names...).IsSuperset(sets.New(got...))).To(BeTrue())
			totalHits += len(got)

			// The round's PVCs are checked out or left over; clear them all.
			var l corev1.PersistentVolumeClaimList
			Expect(k8sClient.List(ctx, &l, client.InNamespace(ns))).To(Succeed())
			for _, c := range l.Items {
				claimed := c.Labels[v1alpha1.ClaimRoleLabelKey] == v1alpha1.ClaimRoleClaimed
				Expect(claimed).To(Equal(sets.New(got...).Has(c.Name)), "round %d: %s is claimed only if it was handed out", round, c.Name)
				c.Finalizers = nil
				Expect(client.IgnoreNotFound(k8sClient.Update(ctx, &c))).To(Succeed())
				Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, &c))).To(Succeed())
			}
		}
		AddReportEntry("checkout race", fmt.Sprintf("%d rounds, %d hits of %d warm PVCs, none shared", rounds, totalHits, rounds*warmPerRound))
	})
})
