package controllers_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

var _ = Describe("Which namespaces a pool learns", func() {
	ctx := context.Background()
	BeforeEach(func() {
		_, stop := startOperator()
		DeferCleanup(stop)
	})
	labelledNamespace := func(labels map[string]string) string {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "learn-", Labels: labels}}
		Expect(k8sClient.Create(ctx, ns)).To(Succeed())
		return ns.Name
	}
	warmIn := func(g Gomega, f *v1alpha1.FluentPVC, ns string) []corev1.PersistentVolumeClaim {
		var l corev1.PersistentVolumeClaimList
		g.Expect(k8sClient.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{
			v1alpha1.FluentPVCNameLabelKey: f.Name, v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleWarm,
		})).To(Succeed())
		// Deleted ones stay while Kubernetes' pvc-protection finalizer,
		// which no controller removes here, holds them.
		var live []corev1.PersistentVolumeClaim
		for _, c := range l.Items {
			if c.DeletionTimestamp.IsZero() {
				live = append(live, c)
			}
		}
		return live
	}
	status := func(g Gomega, f *v1alpha1.FluentPVC) v1alpha1.FluentPVCStatus {
		got := &v1alpha1.FluentPVC{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(f), got)).To(Succeed())
		return got.Status
	}
	create := func(f *v1alpha1.FluentPVC) *v1alpha1.FluentPVC {
		Expect(k8sClient.Create(ctx, f)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(context.Background(), f))).To(Succeed()) })
		return f
	}

	It("never learns a namespace its namespaceSelector leaves out", func() {
		selected := labelledNamespace(map[string]string{"logs": "shipped"})
		other := labelledNamespace(nil)
		f := create(fixtures.MakeFluentPVC("selective-" + selected).PoolSize(2).Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"logs": "shipped"}}
		}).Obj())
		Eventually(func() error {
			return k8sClient.Create(ctx, fixtures.MakePod("in", selected).FluentPVC(f.Name).Obj())
		}).Should(Succeed())
		Expect(k8sClient.Create(ctx, fixtures.MakePod("out", other).FluentPVC(f.Name).Obj())).NotTo(Succeed())

		Eventually(func(g Gomega) {
			g.Expect(warmIn(g, f, selected)).To(HaveLen(2))
			g.Expect(status(g, f).Pool).To(ConsistOf(HaveField("Namespace", selected)))
		}).Should(Succeed())
		Consistently(func(g Gomega) { g.Expect(warmIn(g, f, other)).To(BeEmpty()) }).Should(Succeed())

		// Left out by a changed selector, the namespace loses its pool.
		updateFluentPVC(ctx, f, func(f *v1alpha1.FluentPVC) {
			f.Spec.NamespaceSelector.MatchLabels = map[string]string{"logs": "elsewhere"}
		})
		Eventually(func(g Gomega) {
			g.Expect(warmIn(g, f, selected)).To(BeEmpty())
			g.Expect(status(g, f).Pool).To(BeEmpty())
		}).Should(Succeed())
	})

	It("keeps pools in at most maxNamespaces learned namespaces, the most recently active, and says which it leaves out", func() {
		first, second := labelledNamespace(nil), labelledNamespace(nil)
		f := create(fixtures.MakeFluentPVC("capped-" + first).PoolSize(1).Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.Pool.MaxNamespaces = 1
		}).Obj())
		Eventually(func() error {
			return k8sClient.Create(ctx, fixtures.MakePod("a", first).FluentPVC(f.Name).Obj())
		}).Should(Succeed())
		Eventually(func(g Gomega) { g.Expect(warmIn(g, f, first)).To(HaveLen(1)) }).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(meta(status(g, f).Conditions, v1alpha1.FluentPVCConditionNamespaceLimitReached).Reason).To(Equal(v1alpha1.NamespaceLimitReasonBelow))
		}).Should(Succeed())

		Expect(k8sClient.Create(ctx, fixtures.MakePod("b", second).FluentPVC(f.Name).Obj())).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(warmIn(g, f, second)).To(HaveLen(1))
			g.Expect(warmIn(g, f, first)).To(BeEmpty())
			c := meta(status(g, f).Conditions, v1alpha1.FluentPVCConditionNamespaceLimitReached)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Message).To(ContainSubstring(first))
		}).WithTimeout(fixtures.LongTimeout).Should(Succeed())
	})
})
