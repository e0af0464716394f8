package controllers_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

var _ = Describe("Claim lifecycle", func() {
	var (
		ctx  context.Context
		ns   string
		fpvc *v1alpha1.FluentPVC
		mgr  manager.Manager
		stop func()
	)

	BeforeEach(func() {
		ctx = context.Background()
		mgr, stop = startOperator()
		DeferCleanup(func() { stop() })
		ns = newNamespace()
		fpvc = fixtures.MakeFluentPVC("lc-" + ns).Obj()
		Expect(k8sClient.Create(ctx, fpvc)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(fpvc), fpvc)).To(Succeed())
			g.Expect(fpvc.Finalizers).To(ContainElement(v1alpha1.FluentPVCProtectionFinalizer))
			// The webhook reads FluentPVCs from the cache.
			g.Expect(mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(fpvc), &v1alpha1.FluentPVC{})).To(Succeed())
		}).Should(Succeed())
	})

	binding := func(name string) func(Gomega) *v1alpha1.FluentPVCBinding {
		return func(g Gomega) *v1alpha1.FluentPVCBinding {
			b := &v1alpha1.FluentPVCBinding{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, b)).To(Succeed())
			return b
		}
	}
	phaseOf := func(name string) func() v1alpha1.FluentPVCBindingPhase {
		return func() v1alpha1.FluentPVCBindingPhase {
			b := &v1alpha1.FluentPVCBinding{}
			if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, b); err != nil {
				return v1alpha1.FluentPVCBindingPhase("error: " + err.Error())
			}
			return b.Status.Phase
		}
	}
	jobs := func() []batchv1.Job {
		var l batchv1.JobList
		Expect(k8sClient.List(ctx, &l, client.InNamespace(ns))).To(Succeed())
		return l.Items
	}
	gone := func(obj client.Object) func() bool {
		return func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj))
		}
	}
	// bindingEnded is true once the binding of claim name is gone.
	bindingEnded := func(name string) func() bool {
		return func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &v1alpha1.FluentPVCBinding{}))
		}
	}
	// claimReleased is true once the operator let go of the claim: its
	// finalizer is removed and it is deleted. (envtest has no controller to
	// remove Kubernetes' own kubernetes.io/pvc-protection finalizer.)
	claimReleased := func(name string) func(Gomega) {
		return func(g Gomega) {
			pvc := &corev1.PersistentVolumeClaim{}
			err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pvc)
			if apierrors.IsNotFound(err) {
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pvc.Finalizers).NotTo(ContainElement(v1alpha1.PVCProtectionFinalizer))
			g.Expect(pvc.DeletionTimestamp).NotTo(BeNil())
		}
	}
	claimHeld := func(name string) {
		pvc := &corev1.PersistentVolumeClaim{}
		ExpectWithOffset(1, k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pvc)).To(Succeed())
		ExpectWithOffset(1, pvc.DeletionTimestamp).To(BeNil())
		ExpectWithOffset(1, pvc.Finalizers).To(ContainElement(v1alpha1.PVCProtectionFinalizer))
	}
	// admit creates a labelled pod and waits until it is InUse.
	admit := func(name string) (*corev1.Pod, string) {
		pod := fixtures.MakePod(name, ns).FluentPVC(fpvc.Name).Obj()
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		claimName := pod.Labels[v1alpha1.BindingNameLabelKey]
		Expect(claimName).NotTo(BeEmpty())
		Eventually(func(g Gomega) {
			// In use: the binding records the pod and writes no status,
			// and the claim records the pod too.
			b := binding(claimName)(g)
			g.Expect(b.Spec.Pod.UID).To(Equal(pod.UID))
			g.Expect(b.Status.Phase).To(BeEmpty())
			pvc := &corev1.PersistentVolumeClaim{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: claimName}, pvc)).To(Succeed())
			used, _ := claim.PodOf(pvc)
			g.Expect(used.UID).To(Equal(pod.UID), "the claim records the pod")
			p := &corev1.Pod{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), p)).To(Succeed())
			g.Expect(p.Finalizers).NotTo(ContainElement(v1alpha1.PodProtectionFinalizer), "released once recorded")
			pod = p
		}).Should(Succeed())
		return pod, claimName
	}
	// drainJob waits for the binding's attempt-th finalizer Job.
	drainJob := func(claim string, attempt int32) *batchv1.Job {
		job := &batchv1.Job{}
		Eventually(func() error {
			return k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: objects.DrainJobName(claim, attempt)}, job)
		}).WithTimeout(fixtures.LongTimeout).Should(Succeed())
		return job
	}
	eventReasons := func(regarding string) []string {
		var l eventsv1.EventList
		Expect(k8sClient.List(ctx, &l, client.InNamespace(ns))).To(Succeed())
		var reasons []string
		for _, e := range l.Items {
			if e.Regarding.Name == regarding {
				reasons = append(reasons, e.Reason)
			}
		}
		return reasons
	}

	// abandoned waits until claim is released undrained, with a Warning
	// event on the FluentPVC that names it.
	abandoned := func(claim string) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			pvc := &corev1.PersistentVolumeClaim{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: claim}, pvc)).To(Succeed())
			g.Expect(pvc.Finalizers).NotTo(ContainElement(v1alpha1.PVCProtectionFinalizer))
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			var l eventsv1.EventList
			g.Expect(k8sClient.List(ctx, &l)).To(Succeed())
			var warnings []string
			for _, e := range l.Items {
				if e.Regarding.Name == fpvc.Name && e.Reason == v1alpha1.EventReasonAbandoned {
					warnings = append(warnings, e.Note)
				}
			}
			g.Expect(warnings).To(ContainElement(ContainSubstring("claim " + claim + " was released without draining")))
		}).Should(Succeed())
	}

	It("drains the claim with one Job after the pod is deleted, then deletes the claim and the binding", func() {
		pod, claim := admit("app")

		Expect(k8sClient.Delete(ctx, pod)).To(Succeed())
		Eventually(gone(pod)).Should(BeTrue())
		Eventually(phaseOf(claim)).Should(Equal(v1alpha1.BindingPhaseDraining))
		job := drainJob(claim, 1)
		Consistently(jobs).Should(HaveLen(1))

		ps := job.Spec.Template.Spec
		Expect(ps.Volumes).To(ContainElement(objects.ClaimVolume("fluent-pvc", claim)))
		Expect(ps.Containers[0].VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "fluent-pvc", MountPath: "/mnt/fluent-pvc"}))
		Expect(ps.Containers[0].Env).To(ContainElement(corev1.EnvVar{Name: "FLUENT_PVC_MOUNT_DIR", Value: "/mnt/fluent-pvc"}))
		Expect(metav1.IsControlledBy(job, binding(claim)(Default))).To(BeTrue())
		claimHeld(claim)

		completeJob(ctx, job)
		Eventually(claimReleased(claim)).Should(Succeed())
		Eventually(bindingEnded(claim)).Should(BeTrue())
	})

	It("keeps draining off while a pod whose opt-in label was removed still runs, and drains once it is gone", func() {
		// The cache holds only labelled pods: removing the label must not
		// make a running pod look gone and start its drain.
		pod, claim := admit("app")
		patch := client.MergeFrom(pod.DeepCopy())
		delete(pod.Labels, v1alpha1.FluentPVCNameLabelKey)
		Expect(k8sClient.Patch(ctx, pod, patch)).To(Succeed())

		Consistently(jobs).Should(BeEmpty())
		Expect(phaseOf(claim)()).To(BeEmpty(), "still in use")
		claimHeld(claim)

		Expect(k8sClient.Delete(ctx, pod)).To(Succeed())
		Eventually(gone(pod)).Should(BeTrue())
		drainJob(claim, 1)
		// The Job is created before the binding's status is written.
		Eventually(phaseOf(claim)).Should(Equal(v1alpha1.BindingPhaseDraining))
	})

	It("makes the binding of an admitted pod's claim, and makes it again if it is lost by hand", func() {
		pod, claim := admit("app")
		b := binding(claim)(Default)
		Expect(b.Spec.Pod).To(Equal(v1alpha1.ObjectIdentity{Name: "app", UID: pod.UID}))
		Expect(b.Spec.FluentPVC).To(Equal(v1alpha1.ObjectIdentity{Name: fpvc.Name, UID: fpvc.UID}))
		Expect(b.Spec.PVC.Name).To(Equal(claim))
		Expect(b.Annotations).To(HaveKeyWithValue(v1alpha1.CheckoutAnnotationKey, v1alpha1.CheckoutMiss))

		// Someone strips the finalizer and deletes the binding: the claim,
		// still holding data, gets a new one and the pod is recorded again.
		lost := b.UID
		b.Finalizers = nil
		Expect(k8sClient.Update(ctx, b)).To(Succeed())
		Expect(k8sClient.Delete(ctx, b)).To(Succeed())
		Eventually(func(g Gomega) {
			again := binding(claim)(g)
			g.Expect(again.UID).NotTo(Equal(lost))
			g.Expect(again.Spec.Pod.UID).To(Equal(pod.UID))
			g.Expect(again.Status.Phase).To(BeEmpty(), "in use")
		}).Should(Succeed())
		claimHeld(claim)
	})

	It("drains, never reclaims undrained, a used claim whose binding was lost after its pod was gone", func() {
		// The remade binding records no pod: the claim, which records its
		// pod, must not count as an orphan once the grace period passed,
		// nor be deleted undrained with the pod's data on it.
		pod, claim := admit("app")
		stop()
		b := binding(claim)(Default)
		b.Finalizers = nil
		Expect(k8sClient.Update(ctx, b)).To(Succeed())
		Expect(k8sClient.Delete(ctx, b)).To(Succeed())
		Expect(k8sClient.Delete(ctx, pod)).To(Succeed())
		Eventually(gone(pod)).Should(BeTrue())
		Eventually(gone(b)).Should(BeTrue())

		mgr, stop = startOperator()
		job := drainJob(claim, 1)
		Expect(binding(claim)(Default).Spec.Pod).To(Equal(v1alpha1.ObjectIdentity{Name: "app", UID: pod.UID}))
		claimHeld(claim)
		completeJob(ctx, job)
		Eventually(claimReleased(claim)).Should(Succeed())
	})

	It("drains a claim whose history is unknown: no pod recorded on it and none left", func() {
		// A claim left by an earlier version, without the record of its
		// pod, and whose binding is lost: no proof that no pod used it.
		name := claim.Name(fpvc.Name)
		c := claim.NewClaimed(fpvc, ns, name, pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate), v1alpha1.CheckoutMiss, claim.NewCheckoutID(), "", time.Now().Add(-time.Hour)).Object
		delete(c.Annotations, v1alpha1.UsedByPodAnnotationKey)
		Expect(k8sClient.Create(ctx, c)).To(Succeed())

		job := drainJob(name, 1)
		claimHeld(name)
		completeJob(ctx, job)
		Eventually(claimReleased(name)).Should(Succeed())
	})

	It("drains the claim of a pod that Succeeded while its object is still there", func() {
		pod, claim := admit("done")
		updatePodStatus(ctx, pod, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })

		job := drainJob(claim, 1)
		Eventually(phaseOf(claim)).Should(Equal(v1alpha1.BindingPhaseDraining))
		completeJob(ctx, job)
		Eventually(claimReleased(claim)).Should(Succeed())
		Eventually(bindingEnded(claim)).Should(BeTrue())
	})

	It("keeps the claim when a Job fails, retries after a backoff, and deletes it after a later success", func() {
		pod, claim := admit("flaky")
		Expect(k8sClient.Delete(ctx, pod)).To(Succeed())

		first := drainJob(claim, 1)
		failJob(ctx, first)
		Eventually(func() []string { return eventReasons(claim) }).Should(ContainElement(v1alpha1.EventReasonDrainFailed))
		claimHeld(claim)

		second := drainJob(claim, 2)
		var b *v1alpha1.FluentPVCBinding
		Eventually(func(g Gomega) {
			b = binding(claim)(g)
			g.Expect(b.Status.DrainAttempts).To(BeEquivalentTo(2))
			g.Expect(b.Status.LastDrainFailureTime).NotTo(BeNil())
		}).Should(Succeed())
		Expect(second.CreationTimestamp.Sub(b.Status.LastDrainFailureTime.Time)).To(BeNumerically(">=", testOptions.DrainBackoffBase),
			"the retry waits for the backoff")
		Eventually(gone(first)).Should(BeTrue(), "the failed Job is replaced")
		claimHeld(claim)

		completeJob(ctx, second)
		Eventually(claimReleased(claim)).Should(Succeed())
		Eventually(bindingEnded(claim)).Should(BeTrue())
	})

	DescribeTable("acts on a terminated sidecar",
		func(deleteFlag bool, setStatus func(*corev1.Pod), wantDeleted bool) {
			if !deleteFlag {
				updateFluentPVC(ctx, fpvc, func(f *v1alpha1.FluentPVC) {
					f.Spec.DeletePodIfSidecarContainerTerminationDetected = new(bool)
				})
				Eventually(func(g Gomega) {
					f := &v1alpha1.FluentPVC{}
					g.Expect(mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(fpvc), f)).To(Succeed())
					g.Expect(f.Spec.DeletePodOnSidecarFailure()).To(BeFalse())
				}).Should(Succeed())
			}
			pod, claim := admit("sidecar")
			updatePodStatus(ctx, pod, setStatus)
			if wantDeleted {
				Eventually(gone(pod)).Should(BeTrue())
				Eventually(func() []string { return eventReasons(pod.Name) }).Should(ContainElement(v1alpha1.EventReasonSidecarFailed))
				Eventually(func() []string { return eventReasons(claim) }).Should(ContainElement(v1alpha1.EventReasonSidecarFailed))
			} else {
				Consistently(gone(pod)).Should(BeFalse())
			}
		},
		Entry("exit 1: the pod is deleted", true, sidecarTerminated(1, false), true),
		Entry("exit 0: the pod stays", true, sidecarTerminated(0, false), false),
		Entry("exit 1 with the flag false: the pod stays", false, sidecarTerminated(1, false), false),
		Entry("exit 1 only in lastState after a restart: the pod is deleted", true, sidecarTerminated(1, true), true),
		Entry("an evicted pod whose sidecar was killed: the pod stays, with its status", true, evicted, false),
	)

	It("shows a refused finalizer Job on the binding and the FluentPVC, keeps the claim, and drains within 30 s once the FluentPVC is fixed", func() {
		// A policy the FluentPVC cannot know of refuses its Jobs here.
		const refused = "example.com/refused:1"
		policy, policyBinding := fixtures.RejectJobsPolicy(ns, refused, "drain image refused by policy")
		Expect(k8sClient.Create(ctx, policy)).To(Succeed())
		Expect(k8sClient.Create(ctx, policyBinding)).To(Succeed())
		DeferCleanup(func() {
			Expect(k8sClient.Delete(context.Background(), policyBinding)).To(Succeed())
			Expect(k8sClient.Delete(context.Background(), policy)).To(Succeed())
		})
		updateFluentPVC(ctx, fpvc, func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCFinalizerJobSpecTemplate.Template.Spec.Containers[0].Image = refused
		})
		Eventually(func() error {
			probe := &v1alpha1.FluentPVCBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"}}
			probe.Spec.PVC.Name = "probe"
			job := objects.DrainJob(fpvc, probe, 1)
			job.OwnerReferences = nil
			return k8sClient.Create(ctx, job, client.DryRunAll)
		}).Should(MatchError(ContainSubstring("drain image refused by policy")))

		pod, claim := admit("refused")
		Expect(k8sClient.Delete(ctx, pod)).To(Succeed())
		Eventually(func(g Gomega) {
			b := binding(claim)(g)
			c := meta(b.Status.Conditions, v1alpha1.BindingConditionDrainJobRejected)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Message).To(ContainSubstring("drain image refused by policy"))
		}).Should(Succeed())
		Eventually(func() []string { return eventReasons(claim) }).Should(ContainElement(v1alpha1.EventReasonDrainJobRejected))
		Eventually(func(g Gomega) {
			var l eventsv1.EventList
			g.Expect(k8sClient.List(ctx, &l)).To(Succeed())
			g.Expect(l.Items).To(ContainElement(And(HaveField("Regarding.Name", fpvc.Name), HaveField("Reason", v1alpha1.EventReasonDrainJobRejected))))
		}).Should(Succeed())
		Expect(jobs()).To(BeEmpty())
		claimHeld(claim)

		fixed := time.Now()
		updateFluentPVC(ctx, fpvc, func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCFinalizerJobSpecTemplate.Template.Spec.Containers[0].Image = "example.com/drain:1"
		})
		job := drainJob(claim, 1)
		Expect(job.CreationTimestamp.Sub(fixed)).To(BeNumerically("<", 30*time.Second))
		Eventually(func(g Gomega) {
			g.Expect(binding(claim)(g).Status.Conditions).NotTo(ContainElement(HaveField("Type", v1alpha1.BindingConditionDrainJobRejected)))
		}).Should(Succeed())
		completeJob(ctx, job)
		Eventually(claimReleased(claim)).Should(Succeed())
	})

	// podsSince is a resourceVersion the API server reached, as the
	// webhook records it on a claim it hands out.
	podsSince := func() string {
		var l corev1.PersistentVolumeClaimList
		Expect(k8sClient.List(ctx, &l, client.InNamespace(ns))).To(Succeed())
		return l.ResourceVersion
	}

	It("reclaims an orphan claim without a Job once its grace period has passed", func() {
		// What the webhook leaves when a later admission step rejects the
		// pod: a claim, whose binding the operator makes.
		name := claim.Name(fpvc.Name)
		b := &v1alpha1.FluentPVCBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		Expect(k8sClient.Create(ctx, claim.NewClaimed(fpvc, ns, name, pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate), v1alpha1.CheckoutMiss, claim.NewCheckoutID(), podsSince(), time.Now()).Object)).To(Succeed())

		Eventually(phaseOf(name)).Should(Equal(v1alpha1.BindingPhasePending))
		claimHeld(name)
		Eventually(claimReleased(name)).WithTimeout(fixtures.LongTimeout).Should(Succeed())
		Eventually(bindingEnded(b.Name)).Should(BeTrue())
		Expect(jobs()).To(BeEmpty(), "a claim no pod used is not drained")
	})

	It("waits for a reservation's end before reclaiming the claim of a replica that reserved it and went away", func() {
		// What a webhook replica leaves that reserved a claim ahead of any
		// pod and stopped without giving it back.
		name := claim.Name(fpvc.Name)
		c := claim.NewClaimed(fpvc, ns, name, pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate), v1alpha1.CheckoutHit, claim.NewCheckoutID(), podsSince(), time.Now()).Object
		c.Annotations[v1alpha1.ReservedByAnnotationKey] = "gone-replica"
		c.Annotations[v1alpha1.ReservedUntilAnnotationKey] = time.Now().Add(3 * time.Second).UTC().Format(time.RFC3339Nano)
		Expect(k8sClient.Create(ctx, c)).To(Succeed())

		By("while the reservation runs, the replica may still hand the claim out: no binding")
		Consistently(bindingEnded(name)).WithTimeout(2 * time.Second).Should(BeTrue())
		claimHeld(name)

		By("after it, no pod came: reclaimed without a Job, its binding recording no admission time")
		Eventually(func(g Gomega) {
			g.Expect(binding(name)(g).Annotations).NotTo(HaveKey(v1alpha1.AdmittedAtAnnotationKey))
		}).WithTimeout(fixtures.LongTimeout).Should(Succeed())
		Eventually(claimReleased(name)).WithTimeout(fixtures.LongTimeout).Should(Succeed())
		Eventually(bindingEnded(name)).Should(BeTrue())
		Expect(jobs()).To(BeEmpty(), "a claim no pod used is not drained")
	})

	It("drains, never reclaims, a claim whose pod was created and deleted while its binding could not be made", func() {
		By("a policy refuses bindings in the namespace while pods are still admitted")
		allowBindings := fixtures.RefuseBindings(ctx, k8sClient, ns)
		pod := fixtures.MakePod("unrecorded", ns).FluentPVC(fpvc.Name).Obj()
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		name := pod.Labels[v1alpha1.BindingNameLabelKey]
		Eventually(func() []string { return eventReasons(name) }).Should(ContainElement(v1alpha1.EventReasonBindingRejected))

		By("the pod is deleted before any binding could record it: it leaves no record")
		Expect(pod.Finalizers).To(BeEmpty(), "the webhook gives pods no finalizer")
		Expect(k8sClient.Delete(ctx, pod)).To(Succeed())
		Eventually(gone(pod)).Should(BeTrue())
		allowBindings()

		By("past the grace period, no pod mounts the claim, but one was created with it: it is drained")
		job := drainJob(name, 1)
		claimHeld(name)
		// The Job is created before the binding's status is written.
		Eventually(func(g Gomega) {
			g.Expect(binding(name)(g).Status.Conditions).To(ContainElement(And(
				HaveField("Type", v1alpha1.BindingConditionPodReady), HaveField("Message", ContainSubstring("pod unrecorded")))))
		}).Should(Succeed())
		completeJob(ctx, job)
		Eventually(claimReleased(name)).Should(Succeed())
	})

	It("lets a deleted FluentPVC go only after its drains finish, denying new pods meanwhile", func() {
		pod, claim := admit("last")
		Expect(k8sClient.Delete(ctx, pod)).To(Succeed())
		job := drainJob(claim, 1)

		Expect(k8sClient.Delete(ctx, fpvc)).To(Succeed())
		Eventually(func(g Gomega) {
			f := &v1alpha1.FluentPVC{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(fpvc), f)).To(Succeed())
			g.Expect(meta(f.Status.Conditions, v1alpha1.FluentPVCConditionReady)).To(HaveField("Reason", v1alpha1.FluentPVCReadyReasonDeleting))
		}).Should(Succeed())
		Eventually(func() error {
			return k8sClient.Create(ctx, fixtures.MakePod("late", ns).FluentPVC(fpvc.Name).Obj())
		}).Should(MatchError(ContainSubstring("is being deleted")))
		Consistently(gone(fpvc)).Should(BeFalse())

		completeJob(ctx, job)
		Eventually(gone(fpvc)).Should(BeTrue())
		Eventually(claimReleased(claim)).Should(Succeed())
	})

	It("lets go of a claim whose FluentPVC's finalizer was stripped, once the timeout passes, keeping the PVC", func() {
		pod, claim := admit("stripped")
		Expect(k8sClient.Delete(ctx, pod)).To(Succeed())
		drainJob(claim, 1)
		// The FluentPVC is removed by force: its finalizer stripped by hand.
		updateFluentPVC(ctx, fpvc, func(f *v1alpha1.FluentPVC) { f.Finalizers = nil })
		Expect(k8sClient.Delete(ctx, fpvc)).To(Succeed())
		Eventually(gone(fpvc)).Should(BeTrue())
		// The running Job needs no template; a retry does.
		failJob(ctx, drainJob(claim, 1))

		Eventually(func() []string { return eventReasons(claim) }).Should(ContainElement(v1alpha1.EventReasonFluentPVCMissing))
		Eventually(func(g Gomega) {
			pvc := &corev1.PersistentVolumeClaim{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: claim}, pvc)).To(Succeed())
			g.Expect(pvc.Finalizers).NotTo(ContainElement(v1alpha1.PVCProtectionFinalizer))
			g.Expect(pvc.DeletionTimestamp).To(BeNil(), "the undrained claim is kept for the user")
		}).WithTimeout(fixtures.LongTimeout).Should(Succeed())
		Eventually(bindingEnded(claim)).Should(BeTrue())
		Eventually(func() []string { return eventReasons(claim) }).Should(ContainElement(v1alpha1.EventReasonReleasedUndrained))
	})

	It("finishes a drain after a restart with exactly one Job", func() {
		pod, claim := admit("restart")
		Expect(k8sClient.Delete(ctx, pod)).To(Succeed())
		drainJob(claim, 1)
		Eventually(phaseOf(claim)).Should(Equal(v1alpha1.BindingPhaseDraining))

		stop()
		mgr, stop = startOperator()
		Consistently(jobs).Should(HaveLen(1))

		completeJob(ctx, drainJob(claim, 1))
		Eventually(claimReleased(claim)).Should(Succeed())
		Eventually(bindingEnded(claim)).Should(BeTrue())
		Expect(jobs()).To(HaveLen(1))
		Expect(jobs()[0].Name).To(Equal(objects.DrainJobName(claim, 1)))
	})

	It("does not block a namespace being deleted: the claim is released undrained, with a warning", func() {
		_, claim := admit("doomed")
		Expect(k8sClient.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		// envtest has no namespace controller: delete the binding as it would.
		Expect(k8sClient.Delete(ctx, &v1alpha1.FluentPVCBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claim}})).To(Succeed())

		Eventually(bindingEnded(claim)).Should(BeTrue())
		abandoned(claim)
		Expect(jobs()).To(BeEmpty())

	})

	It("releases a claim whose namespace began terminating before its binding was made", func() {
		// The webhook admitted a pod and the namespace was deleted before the
		// operator (stopped here) made the binding: it can no longer be made.
		stop()
		name := claim.Name(fpvc.Name)
		Expect(k8sClient.Create(ctx, claim.NewClaimed(fpvc, ns, name, pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate), v1alpha1.CheckoutHit, claim.NewCheckoutID(), "", time.Now()).Object)).To(Succeed())
		Expect(k8sClient.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		// envtest has no namespace controller: delete the claim as it would.
		Expect(k8sClient.Delete(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
		mgr, stop = startOperator()

		abandoned(name)

		Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &v1alpha1.FluentPVCBinding{}))).To(BeTrue())
	})

	It("caches only the pods that opt in", func() {
		for i := range 300 {
			Expect(k8sClient.Create(ctx, fixtures.MakePod(fmt.Sprintf("plain-%d", i), ns).Obj())).To(Succeed())
		}
		for i := range 3 {
			admit(fmt.Sprintf("labelled-%d", i))
		}
		var all corev1.PodList
		Expect(k8sClient.List(ctx, &all, client.InNamespace(ns))).To(Succeed())
		Expect(all.Items).To(HaveLen(303))

		Eventually(func(g Gomega) {
			var cached corev1.PodList
			g.Expect(mgr.GetCache().List(ctx, &cached, client.InNamespace(ns))).To(Succeed())
			g.Expect(cached.Items).To(HaveLen(3))
			for _, p := range cached.Items {
				g.Expect(p.Labels).To(HaveKey(v1alpha1.FluentPVCNameLabelKey))
				g.Expect(p.ManagedFields).To(BeEmpty())
			}
		}).Should(Succeed())
	})
})

func meta(conds []metav1.Condition, t string) metav1.Condition {
	for _, c := range conds {
		if c.Type == t {
			return c
		}
	}
	return metav1.Condition{}
}
