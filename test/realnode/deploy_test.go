package realnode

import (
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
	"github.com/st-tech/fluent-pvc-operator/test/images"
)

var _ = Describe("The operator as deployed by make deploy, with real containers", func() {
	It("ships every line a sidecar wrote, exactly once, when its pod is deleted mid-stream", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "lost", namespaceCleanup)
		rec := newRecorder(ns)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, shippingFluentPVC("lost-"+ns, ns, 1, 0).Obj(), fluentPVCCleanup)
		dep := createDeployment(ns, "app", fpvc.Name, 1)

		first := runningPodsOf(ns, "app", 1)[0]
		writing(ns, first.Name, 20)
		By("deleting the app pod mid-stream: " + first.Name)
		Expect(k8s.Delete(ctx, &first)).To(Succeed())
		var second corev1.Pod
		Eventually(func(g Gomega) {
			pods := runningPods(g, ns, "app")
			g.Expect(pods).To(HaveLen(1))
			g.Expect(pods[0].Name).NotTo(Equal(first.Name))
			second = pods[0]
		}).Should(Succeed())
		writing(ns, second.Name, 20)
		scale(dep, 0)

		for _, p := range []corev1.Pod{first, second} {
			claim := fixtures.ClaimOf(&p)
			rec.drainedOnce(claim)
			fixtures.Drained(ctx, k8s, ns, claim, longTimeout)
		}
		expectShippedOnce(ns, []string{first.Name, second.Name}, 2)
	})

	It("deletes a pod whose sidecar really exits 1, and drains its claim", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "sidecar", namespaceCleanup)
		rec := newRecorder(ns)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, shippingFluentPVC("sidecar-"+ns, ns, 0, 0).DeletePodOnSidecarFailure(true).Mutate(func(f *v1alpha1.FluentPVC) {
			// One line, then a real failure; a restart before the pod is
			// deleted adds the next line.
			f.Spec.SidecarContainerTemplate.Command = []string{"sh", "-c", `mkdir -p /e2e/written; me=$(hostname)
n=$(( $(cat ` + claimMount + `/buffer 2>/dev/null | wc -l) + 1 ))
echo "$me $n" >> ` + claimMount + `/buffer; echo "$me $n" >> /e2e/written/$me; sleep 3; exit 1`}
		}).Obj(), fluentPVCCleanup)
		pod := labelledPod(ns, fpvc.Name)
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		Eventually(func(g Gomega) {
			p := &corev1.Pod{}
			err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), p)
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "pod %s is deleted: %v", pod.Name, err)
		}).WithTimeout(timeout).Should(Succeed())
		Expect(rec.exitCodes(pod.Name, "writer")).To(ContainElement(int32(1)), "the sidecar's real exit code")
		Expect(rec.exitCodes(pod.Name, "app")).NotTo(ContainElement(int32(1)))

		claim := pod.Labels[v1alpha1.BindingNameLabelKey]
		if claim == "" {
			claim = rec.claimOfPod(pod.Name)
		}
		rec.drainedOnce(claim)
		fixtures.Drained(ctx, k8s, ns, claim, longTimeout)
		expectShippedOnce(ns, []string{pod.Name}, 1)
	})

	It("completes a labelled Job of 3 pods, its native sidecars stopped by the kubelet, and ships every line once", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "job", namespaceCleanup)
		rec := newRecorder(ns)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, shippingFluentPVC("job-"+ns, ns, 0, 0).Obj(), fluentPVCCleanup)
		pod := labelledPod(ns, fpvc.Name)
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
		// The app works for two seconds while the sidecar writes, then exits 0.
		pod.Spec.Containers = []corev1.Container{images.BusyboxContainer("app", "sleep 2")}
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "batch"},
			Spec: batchv1.JobSpec{
				Completions: ptr.To[int32](3), Parallelism: ptr.To[int32](3), BackoffLimit: ptr.To[int32](0),
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: pod.Labels}, Spec: pod.Spec},
			},
		}
		Expect(k8s.Create(ctx, job)).To(Succeed())
		Eventually(func(g Gomega) {
			j := &batchv1.Job{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(job), j)).To(Succeed())
			g.Expect(j.Status.Succeeded).To(BeEquivalentTo(3))
		}).Should(Succeed(), "the Job completes")

		var pods corev1.PodList
		Expect(k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"batch.kubernetes.io/job-name": job.Name})).To(Succeed())
		Expect(pods.Items).To(HaveLen(3))
		var names, claims []string
		for _, p := range pods.Items {
			Expect(p.Status.Phase).To(Equal(corev1.PodSucceeded))
			names = append(names, p.Name)
			claim := fixtures.ClaimOf(&p)
			claims = append(claims, claim)
			rec.drainedOnce(claim)
		}
		expectShippedOnce(ns, names, 3)
		// Kubernetes keeps a claim while a pod that mounts it exists, even a
		// finished one: the claims go with the Job's pods.
		Expect(k8s.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
		for _, c := range claims {
			fixtures.Drained(ctx, k8s, ns, c, longTimeout)
		}
	})

	It("drains exactly once when the leader is deleted and SIGKILLed mid-drain", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "leader", namespaceCleanup)
		rec := newRecorder(ns)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, shippingFluentPVC("leader-"+ns, ns, 0, 10).Obj(), fluentPVCCleanup)
		pod := labelledPod(ns, fpvc.Name)
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		pod = runningOnRealNode(ns, pod.Name)
		claim := fixtures.ClaimOf(pod)
		writing(ns, pod.Name, 10)
		Expect(k8s.Delete(ctx, pod)).To(Succeed())

		By("waiting for the drain Job's pod to run")
		Eventually(func(g Gomega) {
			h := rec.of(claim)
			g.Expect(h.Jobs).To(HaveLen(1))
			var pods corev1.PodList
			g.Expect(k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"batch.kubernetes.io/job-name": h.Jobs[0]})).To(Succeed())
			g.Expect(pods.Items).To(HaveLen(1))
			g.Expect(pods.Items[0].Status.Phase).To(Equal(corev1.PodRunning))
		}).Should(Succeed())

		leader := leaderPod()
		By("deleting the leader " + leader.Name + " and killing its container")
		Expect(leader.Status.ContainerStatuses).To(HaveLen(1))
		Expect(k8s.Delete(ctx, leader)).To(Succeed())
		Expect(kc.KillContainer(ctx, leader.Status.ContainerStatuses[0].ContainerID)).To(Succeed())
		Eventually(func() string { return leaderPod().Name }).WithTimeout(timeout).ShouldNot(Equal(leader.Name))

		rec.drainedOnce(claim)
		fixtures.Drained(ctx, k8s, ns, claim, longTimeout)
		expectShippedOnce(ns, []string{pod.Name}, 1)
		operatorAvailable()
	})

	It("hands a warm claim, Bound on the real node, to a pod that starts at once", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "warm", namespaceCleanup)
		rec := newRecorder(ns)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, shippingFluentPVC("warm-"+ns, ns, 2, 0).Obj(), fluentPVCCleanup)
		var warm []string
		Eventually(func(g Gomega) {
			l := pooled(g, ns, fpvc.Name)
			g.Expect(l).To(HaveLen(2))
			warm = nil
			for _, c := range l {
				g.Expect(c.Status.Phase).To(Equal(corev1.ClaimBound))
				// Handed out only once the pool recorded where its volume is.
				g.Expect(c.Annotations).To(HaveKey(v1alpha1.NodeAffinityAnnotationKey))
				warm = append(warm, c.Name)
			}
			if csiUnavailable != "" {
				return
			}
			// The driver attaches, so the pool stages both on the real node. Until
			// a PVC's holder is created, a checkout passes it over (its holder's
			// admission may have read it warm), and the pod would miss.
			f := &v1alpha1.FluentPVC{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: fpvc.Name}, f)).To(Succeed())
			g.Expect(f.Status.Pool).To(ContainElement(And(HaveField("Namespace", ns), HaveField("Staged", int32(2)))),
				"status.pool of %s: both warm PVCs staged (a holder Running on the real node, which needs room for two more attachments)", f.Name)
		}).WithTimeout(longTimeout).Should(Succeed())

		start := time.Now()
		pod := labelledPod(ns, fpvc.Name)
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		pod = runningOnRealNode(ns, pod.Name)
		took := time.Since(start)
		claim := fixtures.ClaimOf(pod)
		Expect(warm).To(ContainElement(claim), "the pod's claim came from the pool")
		GinkgoWriter.Printf("pod %s Running with every container Ready on %s within %s of its create call (polled every %s), with warm claim %s\n",
			pod.Name, pod.Spec.NodeName, took.Round(time.Millisecond), interval, claim)

		By("reading the sidecar's lines from the claim's volume on this host")
		pvc := &corev1.PersistentVolumeClaim{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: claim}, pvc)).To(Succeed())
		Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound))
		pv := &corev1.PersistentVolume{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv)).To(Succeed())
		writing(ns, pod.Name, 5)
		Eventually(func() []string { return readLines(volumeDir(pv) + "/buffer") }).Should(ContainElement(pod.Name + " 5"))

		Expect(k8s.Delete(ctx, pod)).To(Succeed())
		rec.drainedOnce(claim)
		fixtures.Drained(ctx, k8s, ns, claim, longTimeout)
		expectShippedOnce(ns, []string{pod.Name}, 1)
	})

	It("leaves nothing orphaned when it is uninstalled and reinstalled with claims in flight", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "reinstall", namespaceCleanup)
		rec := newRecorder(ns)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, shippingFluentPVC("reinstall-"+ns, ns, 1, 5).Obj(), fluentPVCCleanup)
		dep := createDeployment(ns, "app", fpvc.Name, 3)
		pods := runningPodsOf(ns, "app", 3)
		var names, claims []string
		for _, p := range pods {
			writing(ns, p.Name, 10)
			names = append(names, p.Name)
			claims = append(claims, fixtures.ClaimOf(&p))
		}

		By("scaling to one replica, so that two drains start")
		scale(dep, 1)
		Eventually(func() int {
			n := 0
			for _, c := range claims {
				n += len(rec.of(c).Jobs)
			}
			return n
		}).Should(BeNumerically(">=", 1), "a drain is in flight")
		undeploy()
		By("scaling to zero while the operator is not installed")
		scale(dep, 0)
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(fpvc), &v1alpha1.FluentPVC{})).To(Succeed(), "the FluentPVC stays")
		deploy()

		for _, c := range claims {
			rec.drainedOnce(c)
			fixtures.Drained(ctx, k8s, ns, c, longTimeout)
		}
		Eventually(func(g Gomega) {
			var l corev1.PodList
			g.Expect(k8s.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{"app": "app"})).To(Succeed())
			g.Expect(l.Items).To(BeEmpty())
		}).Should(Succeed())
		expectShippedOnce(ns, names, 3)
	})
})

// createDeployment creates a Deployment of FluentPVC fpvc's app pods,
// labelled app=name, as the README's example does.
func createDeployment(ns, name, fpvc string, replicas int32) *appsv1.Deployment {
	GinkgoHelper()
	template := labelledPod(ns, fpvc)
	template.Labels["app"] = name
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: template.Labels}, Spec: template.Spec},
		},
	}
	Expect(k8s.Create(ctx, d)).To(Succeed())
	return d
}

func scale(d *appsv1.Deployment, replicas int32) {
	GinkgoHelper()
	By(fmt.Sprintf("scaling %s to %d", d.Name, replicas))
	Expect(k8s.Patch(ctx, d, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)))).To(Succeed())
}

// labelledPod is a pod of FluentPVC fpvc with the app container.
func labelledPod(ns, fpvc string) *corev1.Pod {
	p := fixtures.MakePod("", ns).GenerateName("app-").FluentPVC(fpvc).Obj()
	p.Spec.Containers = []corev1.Container{images.IdleApp()}
	return p
}

// runningOnRealNode waits until the pod is Running on the real node with
// every container ready, and returns it.
func runningOnRealNode(ns, name string) *corev1.Pod {
	GinkgoHelper()
	var pod *corev1.Pod
	Eventually(func(g Gomega) {
		pod = fixtures.GetPod(ctx, g, k8s, ns, name)
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
		g.Expect(pod.Spec.NodeName).To(Equal("real-0"))
		for _, s := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
			g.Expect(s.Ready).To(BeTrue(), "container %s is ready", s.Name)
		}
	}).Should(Succeed())
	return pod
}

// runningPods are the pods labelled app=app that run on the real node,
// not being deleted, with every container ready.
func runningPods(g Gomega, ns, app string) []corev1.Pod {
	var l corev1.PodList
	g.Expect(k8s.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{"app": app})).To(Succeed())
	var out []corev1.Pod
	for _, p := range l.Items {
		if !p.DeletionTimestamp.IsZero() || p.Status.Phase != corev1.PodRunning {
			continue
		}
		ready := true
		for _, s := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
			ready = ready && s.Ready
		}
		if ready {
			g.Expect(p.Spec.NodeName).To(Equal("real-0"))
			out = append(out, p)
		}
	}
	return out
}

// runningPodsOf waits until n pods labelled app=app run.
func runningPodsOf(ns, app string, n int) []corev1.Pod {
	GinkgoHelper()
	var pods []corev1.Pod
	Eventually(func(g Gomega) {
		pods = runningPods(g, ns, app)
		g.Expect(pods).To(HaveLen(n))
	}).Should(Succeed())
	return pods
}

// leaderPod is the operator replica that holds the leader-election Lease.
func leaderPod() *corev1.Pod {
	GinkgoHelper()
	var pod *corev1.Pod
	Eventually(func(g Gomega) {
		lease := &coordinationv1.Lease{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: "fluent-pvc-operator.tech.zozo.com"}, lease)).To(Succeed())
		g.Expect(lease.Spec.HolderIdentity).NotTo(BeNil())
		// controller-runtime's identity is <hostname>_<uuid>.
		name, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
		pod = fixtures.GetPod(ctx, g, k8s, operatorNamespace, name)
	}).Should(Succeed())
	return pod
}

// operatorAvailable waits until both operator replicas are available.
func operatorAvailable() {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		d := &appsv1.Deployment{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: "fluent-pvc-operator-controller-manager"}, d)).To(Succeed())
		g.Expect(d.Status.AvailableReplicas).To(BeEquivalentTo(2))
	}).Should(Succeed())
}
