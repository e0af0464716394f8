package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

var _ = Describe("A finalizer Job the API server refuses", func() {
	It("shows DrainJobRejected on the binding and a Warning Event, makes no Job, and drains once the FluentPVC is fixed", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "rejected", namespaceCleanup)
		broken := e2eFluentPVC("rejected-" + ns).Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCFinalizerJobSpecTemplate.Template.Spec.Containers[0].Image = ""
		}).Obj()
		By("being refused at apply by the FluentPVC webhook, which the local operator serves as the installed one does")
		Expect(k8s.Create(ctx, broken.DeepCopy())).To(MatchError(ContainSubstring("spec.pvcFinalizerJobSpecTemplate.template.spec.containers[0].image")))
		By("applying it while the FluentPVC webhook is away, as when the operator is down (its failure policy is Ignore)")
		webhooks := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: cluster.WebhookConfigurationName}, webhooks)).To(Succeed())
		Expect(k8s.Delete(ctx, webhooks)).To(Succeed())
		Eventually(func() error { return k8s.Create(ctx, broken.DeepCopy(), client.DryRunAll) }).Should(Succeed(), "the API server stops calling the webhook")
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, broken, fluentPVCCleanup)
		webhooks.ResourceVersion = ""
		Expect(k8s.Create(ctx, webhooks)).To(Succeed())
		pod := fixtures.MakePod("app", ns).FluentPVC(fpvc.Name).Obj()
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		claim := fixtures.ClaimOf(pod)
		running(ns, "app")
		Expect(k8s.Delete(ctx, pod)).To(Succeed())

		Eventually(func(g Gomega) {
			b := &v1alpha1.FluentPVCBinding{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: claim}, b)).To(Succeed())
			g.Expect(b.Status.Conditions).To(ContainElement(And(
				HaveField("Type", v1alpha1.BindingConditionDrainJobRejected), HaveField("Status", metav1.ConditionTrue),
				HaveField("Message", ContainSubstring("spec.template.spec.containers[0].image: Required value")))))
			events, err := kc.Clientset.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(events.Items).To(ContainElement(And(HaveField("Reason", v1alpha1.EventReasonDrainJobRejected),
				HaveField("Type", "Warning"), HaveField("Regarding.Name", claim))))
		}).Should(Succeed())
		var jobs batchv1.JobList
		Expect(k8s.List(ctx, &jobs, client.InNamespace(ns))).To(Succeed())
		Expect(jobs.Items).To(BeEmpty())
		Expect(fixtures.GetPVC(ctx, Default, k8s, ns, claim).DeletionTimestamp).To(BeNil(), "the claim is kept")

		updateFluentPVC(fpvc, func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCFinalizerJobSpecTemplate.Template.Spec.Containers[0].Image = "alpine:latest"
		})
		fixtures.Drained(ctx, k8s, ns, claim, longTimeout)
	})
})
