package webhook_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

var _ = Describe("Claim deletion", func() {
	var (
		ctx  context.Context
		ns   string
		fpvc *v1alpha1.FluentPVC
	)
	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace()
		fpvc = fixtures.MakeFluentPVC("claim-deletion").Obj()
	})
	create := func(w claim.Write) *corev1.PersistentVolumeClaim {
		Expect(claim.Execute(ctx, k8sClient, w)).To(Succeed())
		return w.Object
	}
	held := func() *corev1.PersistentVolumeClaim {
		return create(claim.NewClaimed(fpvc, ns, claim.Name(fpvc.Name), "h", v1alpha1.CheckoutMiss, claim.NewCheckoutID(), "", fixtures.Epoch))
	}

	It("refuses to delete a claim the operator holds, naming its binding and what to do instead", func() {
		c := held()
		err := k8sClient.Delete(ctx, c)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "deleting a held claim: %v", err)
		Expect(err).To(MatchError(And(ContainSubstring(ns+"/"+c.Name), ContainSubstring("Delete the pod that uses it"), ContainSubstring(v1alpha1.PVCProtectionFinalizer))))
		Expect(apierrors.IsForbidden(k8sClient.Delete(ctx, c, client.DryRunAll))).To(BeTrue(), "a dry run is refused alike")
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c)).To(Succeed())
		Expect(c.DeletionTimestamp.IsZero()).To(BeTrue())

		By("letting go of it first, as the refusal says")
		controllerutil.RemoveFinalizer(c, v1alpha1.PVCProtectionFinalizer)
		Expect(k8sClient.Update(ctx, c)).To(Succeed())
		Expect(k8sClient.Delete(ctx, c)).To(Succeed())
	})

	It("deletes a warm PVC and the claims of a namespace being deleted", func() {
		warm := create(claim.NewWarm(fpvc, ns, "h", ""))
		Expect(k8sClient.Delete(ctx, warm)).To(Succeed())

		c := held()
		namespace := &corev1.Namespace{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: ns}, namespace)).To(Succeed())
		Expect(k8sClient.Delete(ctx, namespace)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Delete(ctx, c, client.DryRunAll)).To(Succeed())
		}).WithTimeout(fixtures.Timeout).WithPolling(fixtures.Interval).Should(Succeed())
	})
})
