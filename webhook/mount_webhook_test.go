package webhook_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

var _ = Describe("Mounting a claim", func() {
	var (
		ctx  context.Context
		ns   string
		fpvc *v1alpha1.FluentPVC
	)
	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace()
		fpvc = fixtures.MakeFluentPVC("mounts").Obj()
	})
	create := func(w claim.Write) *corev1.PersistentVolumeClaim {
		GinkgoHelper()
		Expect(claim.Execute(ctx, k8sClient, w)).To(Succeed())
		return w.Object
	}
	// mount creates, as a dry run, a pod that mounts pvc and carries labels.
	mount := func(pvc string, labels ...string) error {
		p := fixtures.MakePod("debug", ns).Claim(pvc).Obj()
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		for i := 0; i+1 < len(labels); i += 2 {
			p.Labels[labels[i]] = labels[i+1]
		}
		return k8sClient.Create(ctx, p, client.DryRunAll)
	}
	refused := func(pvc string, want string, labels ...string) {
		GinkgoHelper()
		Eventually(func() error { return mount(pvc, labels...) }).
			WithTimeout(fixtures.Timeout).WithPolling(fixtures.Interval).
			Should(And(Satisfy(apierrors.IsForbidden), MatchError(ContainSubstring(want))))
	}

	It("lets the operator's own holder mount a warm PVC read-only, and refuses a holder made by anyone else, one that would write, one of an earlier request, and one of a PVC handed out", func() {
		warm := create(claim.NewWarm(fpvc, ns, "h", ""))
		request := func(at time.Time) {
			GinkgoHelper()
			w, err := claim.RequestHolder(warm, at)
			Expect(err).NotTo(HaveOccurred())
			warm = create(w)
		}
		request(time.Now())
		holder := objects.HolderPod(fpvc.Name, warm, "n1", "pause", "")
		Eventually(func() error { return k8sClient.Create(ctx, holder.DeepCopy(), client.DryRunAll) }).
			WithTimeout(fixtures.Timeout).WithPolling(fixtures.Interval).Should(Succeed())

		By("the same holder, created by another user")
		other := rest.CopyConfig(cfg)
		other.Impersonate = rest.ImpersonationConfig{UserName: "someone", Groups: []string{"system:masters"}}
		someone, err := client.New(other, client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		// Without the opt-in label, so that the pod webhook leaves it be.
		forged := holder.DeepCopy()
		delete(forged.Labels, v1alpha1.FluentPVCNameLabelKey)
		Expect(someone.Create(ctx, forged, client.DryRunAll)).To(And(Satisfy(apierrors.IsForbidden), MatchError(ContainSubstring("is a warm PVC"))))
		Expect(k8sClient.Create(ctx, forged.DeepCopy(), client.DryRunAll)).To(Succeed(), "the operator's own, without the opt-in label")

		By("a holder that would write")
		writing := holder.DeepCopy()
		writing.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly = false
		Expect(k8sClient.Create(ctx, writing, client.DryRunAll)).To(And(Satisfy(apierrors.IsForbidden), MatchError(ContainSubstring("is a warm PVC"))))

		By("a holder of an earlier request, which the PVC no longer records")
		request(time.Now().Add(time.Millisecond))
		Expect(k8sClient.Create(ctx, holder.DeepCopy(), client.DryRunAll)).To(And(Satisfy(apierrors.IsForbidden), MatchError(ContainSubstring("does not carry a holder request"))))

		By("a holder of a PVC just handed out, which the cache may not show yet")
		holder = objects.HolderPod(fpvc.Name, warm, "n1", "pause", "")
		w, err := claim.Checkout(warm, fixtures.Epoch, claim.NewCheckoutID())
		Expect(err).NotTo(HaveOccurred())
		create(w)
		Expect(k8sClient.Create(ctx, holder.DeepCopy(), client.DryRunAll)).To(And(Satisfy(apierrors.IsForbidden), MatchError(ContainSubstring("no other pod may mount it"))))
	})

	It("refuses an unlabelled pod that mounts a claim handed to another pod, whether that pod is recorded yet or not", func() {
		c := create(claim.NewClaimed(fpvc, ns, claim.Name(fpvc.Name), "h", v1alpha1.CheckoutMiss, claim.NewCheckoutID(), "", fixtures.Epoch))
		refused(c.Name, "is the claim of the pod being admitted with it")

		w, err := claim.RecordPod(c, v1alpha1.ObjectIdentity{Name: "app", UID: "app-uid"})
		Expect(err).NotTo(HaveOccurred())
		c = create(w)
		refused(c.Name, "PVC "+c.Name+" is the claim of pod app")

		By("a pod that carries a drain pod's labels may not mount it")
		drainLabels := []string{v1alpha1.ComponentLabelKey, v1alpha1.ComponentDrain, v1alpha1.BindingNameLabelKey, c.Name}
		refused(c.Name, "PVC "+c.Name+" is the claim of pod app", drainLabels...)

		By("a pod of its drain Job may mount it")
		b := claim.Binding(c, fpvc.UID)
		b.UID = "binding-uid" // the Job's controller; envtest runs no garbage collector
		job := objects.DrainJob(fpvc, b, 1)
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		drain := fixtures.MakePod(job.Name+"-x", ns).Claim(c.Name).Obj()
		drain.Labels = job.Spec.Template.Labels
		drain.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}
		Expect(k8sClient.Create(ctx, drain, client.DryRunAll)).To(Succeed())

		By("once let go of, a person may mount it to read its data")
		controllerutil.RemoveFinalizer(c, v1alpha1.PVCProtectionFinalizer)
		Expect(k8sClient.Update(ctx, c)).To(Succeed())
		Eventually(func() error { return mount(c.Name) }).WithTimeout(fixtures.Timeout).WithPolling(fixtures.Interval).Should(Succeed())
	})

	It("refuses a pod that names a warm PVC, and lets other PVCs and pods without PVCs be", func() {
		warm := create(claim.NewWarm(fpvc, ns, "h", ""))
		refused(warm.Name, "is a warm PVC of FluentPVC \"mounts\"")

		other := &corev1.PersistentVolumeClaim{}
		other.Namespace, other.Name = ns, "data"
		other.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
		other.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
		Expect(k8sClient.Create(ctx, other)).To(Succeed())
		Expect(mount(other.Name)).To(Succeed())
		Expect(k8sClient.Create(ctx, fixtures.MakePod("plain", ns).Obj(), client.DryRunAll)).To(Succeed())
	})
})
