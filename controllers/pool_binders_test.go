package controllers_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/controllers"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

var _ = Describe("Binder Jobs (--pool-bind-mode=binder-job)", func() {
	var (
		ctx  context.Context
		ns   string
		fpvc *v1alpha1.FluentPVC
	)

	BeforeEach(func() {
		ctx = context.Background()
		// Setup copies the options: the suite's default is back for the
		// next spec once the operator has started.
		mode := testOptions.PoolBindMode
		testOptions.PoolBindMode = controllers.PoolBindBinderJob
		_, stop := startOperator()
		testOptions.PoolBindMode = mode
		DeferCleanup(stop)
		ns = newNamespace()
		sc := &storagev1.StorageClass{
			ObjectMeta:        metav1.ObjectMeta{Name: "binders-" + ns},
			Provisioner:       "example.com/none",
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
		}
		Expect(k8sClient.Create(ctx, sc)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(context.Background(), sc))).To(Succeed()) })
		fpvc = fixtures.MakeFluentPVC("binders-" + ns).PoolSize(2).StorageClass(sc.Name).Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.Pool.Namespaces = []string{ns}
		}).Obj()
		Expect(k8sClient.Create(ctx, fpvc)).To(Succeed())
	})

	It("warns on the FluentPVC, naming the warm PVC and quoting the scheduler, for a binder that cannot be scheduled", func() {
		var jobs []batchv1.Job
		Eventually(func(g Gomega) {
			var l batchv1.JobList
			g.Expect(k8sClient.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{v1alpha1.ComponentLabelKey: v1alpha1.ComponentBinder})).To(Succeed())
			g.Expect(l.Items).To(HaveLen(2))
			jobs = l.Items
		}).Should(Succeed())
		stuck, placed := jobs[0], jobs[1]
		stuckClaim := ns + "/" + stuck.Labels[v1alpha1.WarmClaimLabelKey]
		placedClaim := ns + "/" + placed.Labels[v1alpha1.WarmClaimLabelKey]

		// There is no Job controller or scheduler here: the spec makes the
		// binders' pods and writes what the scheduler would. The pods carry
		// no FluentPVC label, so the operator's cache never sees them.
		binderPod := func(j batchv1.Job) *corev1.Pod {
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: j.Name + "-x", Labels: j.Spec.Template.Labels,
					OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(&j, batchv1.SchemeGroupVersion.WithKind("Job"))}},
				Spec: *j.Spec.Template.Spec.DeepCopy(),
			}
			Expect(p.Labels).NotTo(HaveKey(v1alpha1.FluentPVCNameLabelKey))
			return p
		}
		const reason = "0/6 nodes are available: 6 node(s) had untolerated taint {dedicated: gpu}. preemption: 0/6 nodes are available: 6 Preemption is not helpful for scheduling."
		pod := binderPod(stuck)
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		updatePodStatus(ctx, pod, func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: reason}}
		})
		pod = binderPod(placed)
		pod.Spec.NodeName = ns + "-somewhere"
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		updatePodStatus(ctx, pod, func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
		})

		// The binders are read once they have waited a while (10 s).
		warnings := func(g Gomega) []eventsv1.Event {
			var l eventsv1.EventList
			g.Expect(k8sClient.List(ctx, &l)).To(Succeed())
			var out []eventsv1.Event
			for _, e := range l.Items {
				if e.Regarding.Name == fpvc.Name && e.Reason == v1alpha1.EventReasonBinderUnschedulable {
					out = append(out, e)
				}
			}
			return out
		}
		Eventually(func(g Gomega) {
			ws := warnings(g)
			g.Expect(ws).To(ContainElement(And(
				HaveField("Type", corev1.EventTypeWarning),
				HaveField("Note", And(ContainSubstring(stuckClaim), HaveSuffix(reason))),
			)))
			g.Expect(ws).NotTo(ContainElement(HaveField("Note", ContainSubstring(placedClaim))), "the placed binder is not warned about")
		}).WithTimeout(fixtures.LongTimeout).Should(Succeed())
	})
})
