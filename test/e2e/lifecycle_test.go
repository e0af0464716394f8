package e2e

import (
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	claimpkg "github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

var _ = Describe("Claims on a simulated cluster", func() {
	It("runs fluent-pvc-operator's README flow unchanged", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "readme", namespaceCleanup)
		// The sample from config/samples, applied as its README says.
		kubectl("apply", "-f", fixtures.Path("config", "samples", "fluent-pvc-operator_v1alpha1_fluentpvc.yaml"))
		DeferCleanup(func() {
			kubectl("delete", "--ignore-not-found", "-f", fixtures.Path("config", "samples", "fluent-pvc-operator_v1alpha1_fluentpvc.yaml"))
		})

		kubectl("run", "-n", ns, "--image=alpine:latest", "--labels", v1alpha1.FluentPVCNameLabelKey+"=fluent-pvc-sample",
			"sample-pod", "--", "sh", "-c", "for i in $(seq 1 60); do sleep 1; echo $i; done")
		pod := running(ns, "sample-pod")
		// The sample names no sidecarMode: a native sidecar.
		Expect(pod.Spec.InitContainers).To(ContainElement(And(HaveField("Name", "sidecar"),
			HaveField("RestartPolicy", HaveValue(Equal(corev1.ContainerRestartPolicyAlways))))))
		claim := fixtures.ClaimOf(pod)
		Eventually(func(g Gomega) {
			g.Expect(fixtures.GetPVC(ctx, g, k8s, ns, claim).Status.Phase).To(Equal(corev1.ClaimBound))
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			b := &v1alpha1.FluentPVCBinding{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: claim}, b)).To(Succeed())
			// In use: the binding records the pod and writes no status.
			g.Expect(b.Spec.Pod.UID).To(Equal(pod.UID))
			g.Expect(b.Status.Phase).To(BeEmpty())
		}).Should(Succeed())

		jobs := countJobs(ns)
		kubectl("delete", "pod", "-n", ns, "sample-pod", "--wait=false")
		// The finalizer Job runs and completes (kwok completes Job pods);
		// the informer sees it even if it is gone a moment later with its
		// binding.
		Eventually(jobs.succeededNames).Should(ConsistOf(claim + "-drain-1"))
		fixtures.Drained(ctx, k8s, ns, claim, longTimeout)
	})

	It("gives a Deployment of 10 replicas 10 claims, and drains all 10 after scaling to 0", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "deploy", namespaceCleanup)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, e2eFluentPVC("deploy-"+ns).Obj(), fluentPVCCleanup)
		deploy := deployment(ns, "web", fpvc.Name, 10, nil)
		Expect(k8s.Create(ctx, deploy)).To(Succeed())

		var claims []string
		Eventually(func(g Gomega) {
			pods := podsOf(g, ns, "web")
			g.Expect(pods).To(HaveLen(10))
			claims = nil
			for _, p := range pods {
				g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
				claims = append(claims, p.Labels[v1alpha1.BindingNameLabelKey])
			}
		}).WithTimeout(longTimeout).Should(Succeed())
		Expect(sets.New(claims...)).To(HaveLen(10))

		Eventually(func() error {
			d := &appsv1.Deployment{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(deploy), d); err != nil {
				return err
			}
			d.Spec.Replicas = ptr.To[int32](0)
			return k8s.Update(ctx, d)
		}).Should(Succeed())
		for _, c := range claims {
			fixtures.Drained(ctx, k8s, ns, c, longTimeout)
		}
		Expect(k8s.Delete(ctx, deploy)).To(Succeed())
	})

	It("deletes a pod whose native sidecar fails; its replacement gets a new claim and the old one is drained", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "sidecar", namespaceCleanup)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, e2eFluentPVC("sidecar-"+ns).Obj(), fluentPVCCleanup)
		deploy := deployment(ns, "flaky", fpvc.Name, 1, map[string]string{cluster.SidecarFailLabelKey: "true"})
		Expect(k8s.Create(ctx, deploy)).To(Succeed())

		var first corev1.Pod
		Eventually(func(g Gomega) {
			pods := podsOf(g, ns, "flaky")
			g.Expect(pods).NotTo(BeEmpty())
			first = pods[0]
		}).Should(Succeed())
		firstClaim := fixtures.ClaimOf(&first)

		// kwok terminates the sidecar with exit code 1; the operator deletes
		// the pod; the ReplicaSet makes another with another claim.
		Eventually(func(g Gomega) {
			var replacement []string
			for _, p := range podsOf(g, ns, "flaky") {
				if p.UID != first.UID {
					replacement = append(replacement, p.Labels[v1alpha1.BindingNameLabelKey])
				}
			}
			g.Expect(replacement).NotTo(BeEmpty())
			g.Expect(replacement).NotTo(ContainElement(firstClaim))
		}).Should(Succeed())
		Eventually(func(g Gomega) []string {
			var l corev1.EventList
			g.Expect(k8s.List(ctx, &l, client.InNamespace(ns))).To(Succeed())
			var reasons []string
			for _, e := range l.Items {
				if e.InvolvedObject.Name == first.Name {
					reasons = append(reasons, e.Reason)
				}
			}
			return reasons
		}).Should(ContainElement(v1alpha1.EventReasonSidecarFailed))
		Expect(sidecarDeletions(fpvc.Name)).To(BeNumerically(">=", 1))
		fixtures.Drained(ctx, k8s, ns, firstClaim, longTimeout)

		Expect(k8s.Delete(ctx, deploy, client.PropagationPolicy(metav1.DeletePropagationForeground))).To(Succeed())
	})

	It("keeps the claim while its finalizer Job fails, and drains it once the failure is removed", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "jobfail", namespaceCleanup)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, e2eFluentPVC("jobfail-"+ns).Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCFinalizerJobSpecTemplate.Template.Labels = map[string]string{cluster.JobFailLabelKey: "true"}
		}).Obj(), fluentPVCCleanup)
		pod := fixtures.MakePod("app", ns).FluentPVC(fpvc.Name).Obj()
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		claim := fixtures.ClaimOf(pod)
		running(ns, "app")
		Expect(k8s.Delete(ctx, pod)).To(Succeed())

		Eventually(func(g Gomega) {
			b := &v1alpha1.FluentPVCBinding{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: claim}, b)).To(Succeed())
			g.Expect(b.Status.DrainAttempts).To(BeNumerically(">=", 2))
			pvc := fixtures.GetPVC(ctx, g, k8s, ns, claim)
			g.Expect(pvc.DeletionTimestamp).To(BeNil())
		}).Should(Succeed())

		updateFluentPVC(fpvc, func(f *v1alpha1.FluentPVC) { f.Spec.PVCFinalizerJobSpecTemplate.Template.Labels = nil })
		fixtures.Drained(ctx, k8s, ns, claim, longTimeout)
	})

	It("reclaims the claim of a pod rejected after the webhook", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "orphan", namespaceCleanup)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, e2eFluentPVC("orphan-"+ns).Obj(), fluentPVCCleanup)
		rejectAfterWebhook(ns)
		fixtures.Drained(ctx, k8s, ns, admitRejected(ns, fpvc.Name), longTimeout)
	})

	It("finishes a drain with exactly one successful Job across an operator restart", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "restart", namespaceCleanup)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, e2eFluentPVC("restart-"+ns).Obj(), fluentPVCCleanup)
		jobs := countJobs(ns)

		pod := fixtures.MakePod("app", ns).FluentPVC(fpvc.Name).Obj()
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		claim := fixtures.ClaimOf(pod)
		running(ns, "app")
		Expect(k8s.Delete(ctx, pod)).To(Succeed())
		Eventually(func() []string { return jobs.names() }).ShouldNot(BeEmpty())

		Expect(op.Stop()).To(Succeed())
		Expect(op.Restart(ctx)).To(Succeed())
		fixtures.Drained(ctx, k8s, ns, claim, longTimeout)
		Consistently(func() []string { return jobs.names() }).Should(Equal([]string{claim + "-drain-1"}))
	})

	It("lets a namespace whose claims are reserved ahead of their pods go while the operator is down", func() {
		// The namespace goes in the spec: no cleanup deletes it again.
		ns := fixtures.NewNamespace(ctx, k8s, "reserved", nil)
		fixtures.CreateFluentPVC(ctx, k8s, e2eFluentPVC("reserved-"+ns).PoolSize(3).Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.Pool.Namespaces = []string{ns}
			f.Spec.Pool.ReserveAhead = ptr.To[int32](3)
		}).Obj(), fluentPVCCleanup)
		Eventually(func(g Gomega) {
			var l corev1.PersistentVolumeClaimList
			g.Expect(k8s.List(ctx, &l, client.InNamespace(ns))).To(Succeed())
			reserved := 0
			for i := range l.Items {
				if _, _, ok := claimpkg.Reservation(&l.Items[i]); ok {
					reserved++
				}
			}
			g.Expect(reserved).To(Equal(3))
		}).WithTimeout(longTimeout).Should(Succeed())

		// Killed, the operator gives nothing back; its webhooks stay
		// registered, and fail.
		Expect(op.Kill()).To(Succeed())
		DeferCleanup(func() { Expect(op.Restart(ctx)).To(Succeed()) })
		Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		Eventually(func() error {
			return k8s.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
		}).WithTimeout(time.Minute).Should(Satisfy(apierrors.IsNotFound))
	})
})

// deployment is a Deployment of replicas pods labelled app=name that opt into
// fluentPVC, with extra pod labels.
func deployment(ns, name, fluentPVC string, replicas int32, extra map[string]string) *appsv1.Deployment {
	labels := map[string]string{"app": name, v1alpha1.FluentPVCNameLabelKey: fluentPVC}
	for k, v := range extra {
		labels[k] = v
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       fixtures.MakePod("", ns).Obj().Spec,
			},
		},
	}
}

// rejectAfterWebhook installs a ValidatingAdmissionPolicy that rejects pods
// labelled reject=yes in ns, after the mutating webhook ran, and waits until
// the API server enforces it.
func rejectAfterWebhook(ns string) {
	policy, binding := fixtures.RejectPodsPolicy(ns, "reject", "rejected by the e2e policy")
	Expect(k8s.Create(ctx, policy)).To(Succeed())
	Expect(k8s.Create(ctx, binding)).To(Succeed())
	DeferCleanup(func() {
		Expect(k8s.Delete(ctx, binding)).To(Succeed())
		Expect(k8s.Delete(ctx, policy)).To(Succeed())
	})
	Eventually(func() error {
		return k8s.Create(ctx, fixtures.MakePod("probe", ns).Label("reject", "yes").Obj(), client.DryRunAll)
	}).Should(MatchError(ContainSubstring("rejected by the e2e policy")))
}

// admitRejected creates a labelled pod that rejectAfterWebhook's policy
// rejects after the webhook handed it a claim, and returns that claim's
// binding, the orphan record.
func admitRejected(ns, fluentPVC string) string {
	err := k8s.Create(ctx, fixtures.MakePod("rejected", ns).FluentPVC(fluentPVC).Label("reject", "yes").Obj())
	ExpectWithOffset(1, err).To(MatchError(ContainSubstring("rejected by the e2e policy")))
	var orphan string
	EventuallyWithOffset(1, func(g Gomega) {
		var l v1alpha1.FluentPVCBindingList
		g.Expect(k8s.List(ctx, &l, client.InNamespace(ns))).To(Succeed())
		g.Expect(l.Items).To(HaveLen(1))
		orphan = l.Items[0].Name
	}).Should(Succeed())
	return orphan
}

// updateFluentPVC applies change to the latest FluentPVC and waits until the
// specs' informer has the new generation.
func updateFluentPVC(fpvc *v1alpha1.FluentPVC, change func(*v1alpha1.FluentPVC)) {
	var written *v1alpha1.FluentPVC
	EventuallyWithOffset(1, func() error {
		f := &v1alpha1.FluentPVC{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(fpvc), f); err != nil {
			return err
		}
		change(f)
		written = f
		return k8s.Update(ctx, f)
	}).Should(Succeed())
	EventuallyWithOffset(1, func(g Gomega) {
		f := &v1alpha1.FluentPVC{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(fpvc), f)).To(Succeed())
		g.Expect(f.Generation).To(BeNumerically(">=", written.Generation))
	}).Should(Succeed())
}

// jobCounter records the name of every Job created in a namespace, seen by
// an informer, so that a spec can tell how many were ever made.
type jobCounter struct {
	mu        sync.Mutex
	seen      sets.Set[string]
	succeeded sets.Set[string]
}

// succeededNames are the Jobs seen with a succeeded pod.
func (c *jobCounter) succeededNames() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return sets.List(c.succeeded)
}

func (c *jobCounter) names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return sets.List(c.seen)
}

func countJobs(ns string) *jobCounter {
	c := &jobCounter{seen: sets.New[string](), succeeded: sets.New[string]()}
	inf, err := informer.GetInformer(ctx, &batchv1.Job{})
	Expect(err).NotTo(HaveOccurred())
	see := func(obj any) {
		if j, ok := obj.(*batchv1.Job); ok && j.Namespace == ns {
			c.mu.Lock()
			c.seen.Insert(j.Name)
			if j.Status.Succeeded > 0 {
				c.succeeded.Insert(j.Name)
			}
			c.mu.Unlock()
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, obj any) { see(obj) }})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(inf.RemoveEventHandler(reg)).To(Succeed()) })
	return c
}
