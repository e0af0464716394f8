package e2e

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// Jobs and CronJobs. The cluster's stages end a Job's pod as a kubelet
// would: its app containers exit, a Container-mode sidecar runs on, and
// the pod finishes once no regular container runs.
var _ = Describe("Run-to-completion workloads on a simulated cluster", func() {
	It("completes a labelled Job of 3 pods with native sidecars, and drains each pod's claim exactly once", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "job", namespaceCleanup)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, e2eFluentPVC("job-"+ns).Obj(), fluentPVCCleanup)
		jobs := countJobs(ns)
		job := labelledJob(ns, "batch", fpvc.Name)
		Expect(k8s.Create(ctx, job)).To(Succeed())

		Eventually(jobConditions(ns, job.Name)).Should(ContainElement(batchv1.JobComplete))
		claims := jobClaims(ns, job.Name, 3)
		for _, c := range claims {
			released(ns, c)
		}
		Consistently(func() []string { return drainJobs(jobs.names()) }).Should(ConsistOf(
			claims[0]+"-drain-1", claims[1]+"-drain-1", claims[2]+"-drain-1"), "one drain Job per claim")
		// Kubernetes keeps a claim while a pod that mounts it exists, even a
		// finished one: the claims go with the Job's pods.
		Expect(k8s.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
		for _, c := range claims {
			fixtures.Drained(ctx, k8s, ns, c, longTimeout)
		}
	})

	It("never completes the same Job in Container mode: its sidecar keeps the pods running", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "job-container", namespaceCleanup)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, e2eFluentPVC("job-container-"+ns).Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.SidecarMode = v1alpha1.SidecarModeContainer
		}).Obj(), fluentPVCCleanup)
		job := labelledJob(ns, "batch", fpvc.Name)
		Expect(k8s.Create(ctx, job)).To(Succeed())
		claims := jobClaims(ns, job.Name, 3)
		Consistently(jobConditions(ns, job.Name)).WithTimeout(time.Minute).ShouldNot(ContainElement(batchv1.JobComplete))
		for _, c := range claims {
			Expect(fixtures.GetPVC(ctx, Default, k8s, ns, c)).NotTo(BeNil(), "the claim is held while its pod runs")
		}
		By("deleting the Job, whose pods are then drained")
		Expect(k8s.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
		for _, c := range claims {
			fixtures.Drained(ctx, k8s, ns, c, longTimeout)
		}
	})

	It("gives each run of a CronJob a warm claim, and every run completes", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "cron", namespaceCleanup)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, e2eFluentPVC("cron-"+ns).PoolSize(2).Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.Pool.Namespaces = []string{ns}
		}).Obj(), fluentPVCCleanup)
		Eventually(func(g Gomega) {
			f := &v1alpha1.FluentPVC{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(fpvc), f)).To(Succeed())
			g.Expect(f.Status.Warm).To(BeEquivalentTo(2))
		}).WithTimeout(longTimeout).Should(Succeed())

		job := labelledJob(ns, "", fpvc.Name)
		cron := &batchv1.CronJob{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "every-minute"},
			Spec: batchv1.CronJobSpec{
				Schedule:                   "* * * * *",
				ConcurrencyPolicy:          batchv1.ForbidConcurrent,
				SuccessfulJobsHistoryLimit: ptr.To[int32](2),
				JobTemplate:                batchv1.JobTemplateSpec{Spec: job.Spec},
			},
		}
		cron.Spec.JobTemplate.Spec.Completions = ptr.To[int32](1)
		cron.Spec.JobTemplate.Spec.Parallelism = ptr.To[int32](1)
		Expect(k8s.Create(ctx, cron)).To(Succeed())

		// Every claim is recorded when its pod is admitted: hit or miss.
		checkouts := map[string]string{}
		Eventually(func(g Gomega) {
			var l batchv1.JobList
			g.Expect(k8s.List(ctx, &l, client.InNamespace(ns))).To(Succeed())
			complete := 0
			for _, j := range l.Items {
				if strings.HasPrefix(j.Name, cron.Name+"-") && hasCondition(j, batchv1.JobComplete) {
					complete++
				}
			}
			var bs v1alpha1.FluentPVCBindingList
			g.Expect(k8s.List(ctx, &bs, client.InNamespace(ns))).To(Succeed())
			for _, b := range bs.Items {
				checkouts[b.Name] = b.Annotations[v1alpha1.CheckoutAnnotationKey]
			}
			g.Expect(complete).To(BeNumerically(">=", 2), "runs complete")
		}).WithTimeout(3 * time.Minute).Should(Succeed())
		Expect(len(checkouts)).To(BeNumerically(">=", 2))
		for claim, how := range checkouts {
			Expect(how).To(Equal(v1alpha1.CheckoutHit), "claim %s of a run came from the pool", claim)
			released(ns, claim)
		}
		Expect(k8s.Delete(ctx, cron, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
		for claim := range checkouts {
			fixtures.Drained(ctx, k8s, ns, claim, longTimeout)
		}
	})
})

var _ = Describe("Sidecar failures with native sidecars", func() {
	It("deletes no pod and counts no failure for a pod evicted or deleted", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "evicted", namespaceCleanup)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, e2eFluentPVC("evicted-"+ns).Obj(), fluentPVCCleanup)
		deploy := deployment(ns, "steady", fpvc.Name, 2, nil)
		Expect(k8s.Create(ctx, deploy)).To(Succeed())
		var pods []corev1.Pod
		Eventually(func(g Gomega) {
			pods = podsOf(g, ns, "steady")
			g.Expect(pods).To(HaveLen(2))
			for _, p := range pods {
				g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
			}
		}).Should(Succeed())
		evictedPod, deletedPod := pods[0], pods[1]

		By("evicting " + evictedPod.Name + " as a kubelet does: Failed, every container killed")
		killed := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}}
		Eventually(func() error {
			p := &corev1.Pod{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(&evictedPod), p); err != nil {
				return err
			}
			p.Status.Phase = corev1.PodFailed
			p.Status.Reason = "Evicted"
			for i := range p.Status.InitContainerStatuses {
				p.Status.InitContainerStatuses[i].State = killed
			}
			for i := range p.Status.ContainerStatuses {
				p.Status.ContainerStatuses[i].State = killed
			}
			return k8s.Status().Update(ctx, p)
		}).Should(Succeed())
		By("deleting " + deletedPod.Name)
		Expect(k8s.Delete(ctx, &deletedPod)).To(Succeed())

		released(ns, fixtures.ClaimOf(&evictedPod))
		fixtures.Drained(ctx, k8s, ns, fixtures.ClaimOf(&deletedPod), longTimeout)
		Consistently(func(g Gomega) {
			p := &corev1.Pod{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(&evictedPod), p)).To(Succeed(), "the evicted pod keeps its status")
			g.Expect(p.Status.Reason).To(Equal("Evicted"))
		}).Should(Succeed())
		var l corev1.EventList
		Expect(k8s.List(ctx, &l, client.InNamespace(ns))).To(Succeed())
		for _, e := range l.Items {
			Expect(e.Reason).NotTo(Equal(v1alpha1.EventReasonSidecarFailed), "event on %s: %s", e.InvolvedObject.Name, e.Message)
		}
		Expect(sidecarDeletions(fpvc.Name)).To(BeZero())

		Expect(k8s.Delete(ctx, deploy, client.PropagationPolicy(metav1.DeletePropagationForeground))).To(Succeed())
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, &evictedPod))).To(Succeed())
		fixtures.Drained(ctx, k8s, ns, fixtures.ClaimOf(&evictedPod), longTimeout)
	})
})

// sidecarDeletions is the operator's count of pods of FluentPVC fpvc deleted
// for a failed sidecar (0 when it has counted none).
func sidecarDeletions(fpvc string) float64 {
	GinkgoHelper()
	resp, err := http.Get(op.MetricsURL())
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	prefix := `fluentpvc_sidecar_failure_pod_deletions_total{fluentpvc="` + fpvc + `"} `
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			Expect(err).NotTo(HaveOccurred())
			return f
		}
	}
	return 0
}

// labelledJob is a Job of 3 pods at once (completions and parallelism 3)
// that opt into fluentPVC; with an empty name, only its spec is used.
func labelledJob(ns, name, fluentPVC string) *batchv1.Job {
	pod := fixtures.MakePod("", ns).FluentPVC(fluentPVC).Obj()
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: batchv1.JobSpec{
			Completions:  ptr.To[int32](3),
			Parallelism:  ptr.To[int32](3),
			BackoffLimit: ptr.To[int32](0),
			Template:     corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: pod.Labels}, Spec: pod.Spec},
		},
	}
}

func hasCondition(j batchv1.Job, t batchv1.JobConditionType) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// jobConditions are the true conditions of Job ns/name.
func jobConditions(ns, name string) func(Gomega) []batchv1.JobConditionType {
	return func(g Gomega) []batchv1.JobConditionType {
		j := &batchv1.Job{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, j)).To(Succeed())
		var types []batchv1.JobConditionType
		for _, c := range j.Status.Conditions {
			if c.Status == corev1.ConditionTrue {
				types = append(types, c.Type)
			}
		}
		return types
	}
}

// jobClaims waits until Job ns/name has n pods with claims, and returns
// the claims.
func jobClaims(ns, name string, n int) []string {
	GinkgoHelper()
	var claims []string
	Eventually(func(g Gomega) {
		var pods corev1.PodList
		g.Expect(k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"batch.kubernetes.io/job-name": name})).To(Succeed())
		claims = nil
		for _, p := range pods.Items {
			if c := p.Labels[v1alpha1.BindingNameLabelKey]; c != "" {
				claims = append(claims, c)
			}
		}
		g.Expect(claims).To(HaveLen(n))
	}).Should(Succeed())
	return claims
}

// released waits until claim ns/name was drained: its binding is gone and
// the claim is being deleted (it goes once no pod mounts it).
func released(ns, name string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &v1alpha1.FluentPVCBinding{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "binding %s/%s is gone: %v", ns, name, err)
		c := &corev1.PersistentVolumeClaim{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, c); !apierrors.IsNotFound(err) {
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(c.DeletionTimestamp).NotTo(BeNil(), "claim %s/%s is being deleted", ns, name)
			g.Expect(c.Finalizers).NotTo(ContainElement(v1alpha1.PVCProtectionFinalizer))
		}
	}).WithTimeout(longTimeout).Should(Succeed())
}

// drainJobs are the drain Jobs among names.
func drainJobs(names []string) []string {
	var out []string
	for _, n := range names {
		if strings.Contains(n, "-drain-") {
			out = append(out, n)
		}
	}
	return out
}
