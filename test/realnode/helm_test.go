package realnode

import (
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
	"github.com/st-tech/fluent-pvc-operator/test/images"
)

// helm runs bin/helm (make helm) against the cluster, as the README's
// "Install with Helm" does.
func helm(args ...string) {
	GinkgoHelper()
	cmd := exec.CommandContext(ctx, cluster.RepoRoot()+"/bin/helm", args...)
	cmd.Dir = cluster.RepoRoot()
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kc.Kubeconfig)
	cmd.Stdout, cmd.Stderr = GinkgoWriter, GinkgoWriter
	By("helm " + strings.Join(args, " "))
	Expect(cmd.Run()).To(Succeed(), "helm %s", strings.Join(args, " "))
}

// helmInstall installs the chart with the image make images built.
func helmInstall(extra ...string) {
	GinkgoHelper()
	repo, tag, _ := strings.Cut(images.OperatorRef, ":")
	helm(append([]string{"install", "fluent-pvc-operator", "charts/fluent-pvc-operator",
		"--namespace", operatorNamespace, "--create-namespace",
		"--set", "image.repository=" + repo, "--set", "image.tag=" + tag,
		"--wait", "--timeout", "4m"}, extra...)...)
	operatorAvailable()
}

// operatorGone waits until no replica of the operator is left.
func operatorGone() {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		var l corev1.PodList
		g.Expect(k8s.List(ctx, &l, client.InNamespace(operatorNamespace), client.MatchingLabels{"control-plane": "controller-manager"})).To(Succeed())
		g.Expect(l.Items).To(BeEmpty())
	}).WithTimeout(longTimeout).Should(Succeed())
}

var _ = Describe("The operator installed with Helm", Ordered, func() {
	BeforeAll(func() {
		By("replacing the suite's make deploy with the chart")
		undeploy()
		operatorGone()
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: operatorNamespace}, &corev1.Namespace{}))
		}).WithTimeout(longTimeout).Should(BeTrue(), "make undeploy's namespace is gone")
		helmInstall()
		DeferCleanup(func() {
			helm("uninstall", "fluent-pvc-operator", "--namespace", operatorNamespace, "--wait")
			operatorGone()
			deploy()
		})
	})

	It("upgrades with claims in every phase, with no failed admission, then uninstalls and reinstalls, losing and repeating nothing", func() {
		ns := fixtures.NewNamespace(ctx, k8s, "helm", namespaceCleanup)
		rec := newRecorder(ns)
		fpvc := fixtures.CreateFluentPVC(ctx, k8s, shippingFluentPVC("helm-"+ns, ns, 2, 1).Obj(), fluentPVCCleanup)
		// A second FluentPVC whose drains fail until it is fixed.
		failing := fixtures.CreateFluentPVC(ctx, k8s, shippingFluentPVC("helm-failing-"+ns, ns, 0, 1).Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCFinalizerJobSpecTemplate.Template.Spec.Containers[0].Command = []string{"sh", "-c", "echo refusing to ship; exit 1"}
		}).Obj(), fluentPVCCleanup)

		By("claims in every phase: warm, InUse, Draining with a failing Job, and Orphaned")
		dep := createDeployment(ns, "app", fpvc.Name, 2)
		pods := runningPodsOf(ns, "app", 2)
		var names, claims []string
		for _, p := range pods {
			writing(ns, p.Name, 5)
			names = append(names, p.Name)
			claims = append(claims, fixtures.ClaimOf(&p))
		}
		failPod := labelledPod(ns, failing.Name)
		failPod.Labels["app"] = "failing"
		Expect(k8s.Create(ctx, failPod)).To(Succeed())
		failClaim := fixtures.ClaimOf(failPod)
		runningPodsOf(ns, "failing", 1)
		writing(ns, failPod.Name, 5)
		Expect(k8s.Delete(ctx, failPod)).To(Succeed())
		Eventually(func() int { return len(rec.of(failClaim).Jobs) }).Should(BeNumerically(">=", 1), "a drain of the failing FluentPVC ran")

		policy, binding := fixtures.RejectPodsPolicy(ns, "reject", "rejected by the e2e policy")
		Expect(k8s.Create(ctx, policy)).To(Succeed())
		Expect(k8s.Create(ctx, binding)).To(Succeed())
		DeferCleanup(func() {
			Expect(k8s.Delete(ctx, binding)).To(Succeed())
			Expect(k8s.Delete(ctx, policy)).To(Succeed())
		})
		Eventually(func() error {
			p := fixtures.MakePod("probe", ns).Label("reject", "yes").Obj()
			return k8s.Create(ctx, p, client.DryRunAll)
		}).Should(MatchError(ContainSubstring("rejected by the e2e policy")), "the policy is enforced")
		var orphan string
		Eventually(func(g Gomega) {
			p := labelledPod(ns, fpvc.Name)
			p.Labels["reject"] = "yes"
			err := k8s.Create(ctx, p)
			if err == nil {
				// Admitted before the policy took effect everywhere.
				g.Expect(k8s.Delete(ctx, p)).To(Succeed())
			}
			g.Expect(err).To(MatchError(ContainSubstring("rejected by the e2e policy")))
			var l v1alpha1.FluentPVCBindingList
			g.Expect(k8s.List(ctx, &l, client.InNamespace(ns))).To(Succeed())
			for _, b := range l.Items {
				if b.Spec.Pod.UID == "" && b.Status.Phase != v1alpha1.BindingPhaseInUse {
					orphan = b.Name
				}
			}
			g.Expect(orphan).NotTo(BeEmpty(), "an orphaned claim")
		}).Should(Succeed())

		By("helm upgrade to another flag value, counting admissions while the Deployment rolls")
		var attempted, failed atomic.Int64
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(done)
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				attempted.Add(1)
				if err := k8s.Create(ctx, labelledPod(ns, fpvc.Name), client.DryRunAll); err != nil {
					failed.Add(1)
					GinkgoWriter.Printf("admission failed during the upgrade: %v\n", err)
				}
			}
		}()
		repo, tag, _ := strings.Cut(images.OperatorRef, ":")
		helm("upgrade", "fluent-pvc-operator", "charts/fluent-pvc-operator", "--namespace", operatorNamespace,
			"--set", "image.repository="+repo, "--set", "image.tag="+tag, "--set", "operator.orphanGracePeriod=20s",
			// A grace period this short is unsafe on a busy cluster's API server.
			"--set", "operator.extraArgs={--allow-short-orphan-grace-period}",
			"--wait", "--timeout", "4m")
		operatorAvailable()
		close(stop)
		<-done
		AddReportEntry("admissions during the rolling upgrade", map[string]int64{"attempted": attempted.Load(), "failed": failed.Load()})
		GinkgoWriter.Printf("admissions during the rolling upgrade: %d attempted, %d failed\n", attempted.Load(), failed.Load())
		Expect(attempted.Load()).To(BeNumerically(">", 20))
		Expect(failed.Load()).To(BeZero(), "no pod admission failed while the Deployment rolled")

		By("after the upgrade: the orphan is reclaimed under the new grace period, the failing drain is fixed and drains")
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: orphan}, &v1alpha1.FluentPVCBinding{}))
		}).WithTimeout(longTimeout).Should(BeTrue(), "orphan %s reclaimed", orphan)
		kept := &corev1.PersistentVolumeClaim{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: failClaim}, kept)).To(Succeed())
		Expect(kept.DeletionTimestamp.IsZero()).To(BeTrue(), "the claim whose drains fail is kept")
		Eventually(func() error {
			f := &v1alpha1.FluentPVC{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(failing), f); err != nil {
				return err
			}
			f.Spec.PVCFinalizerJobSpecTemplate.Template.Spec.Containers[0].Command = shippingFluentPVC("x", ns, 0, 1).Obj().Spec.PVCFinalizerJobSpecTemplate.Template.Spec.Containers[0].Command
			return k8s.Update(ctx, f)
		}).Should(Succeed())
		fixtures.Drained(ctx, k8s, ns, failClaim, longTimeout)

		By("uninstalling with drains in flight, and installing again")
		scale(dep, 0)
		Eventually(func() int {
			n := 0
			for _, c := range claims {
				n += len(rec.of(c).Jobs)
			}
			return n
		}).Should(BeNumerically(">=", 1), "a drain is in flight")
		helm("uninstall", "fluent-pvc-operator", "--namespace", operatorNamespace, "--wait")
		operatorGone()
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(fpvc), &v1alpha1.FluentPVC{})).To(Succeed(), "FluentPVCs survive an uninstall")
		Expect(k8s.Get(ctx, client.ObjectKey{Name: "fluentpvcs.fluent-pvc-operator.tech.zozo.com"}, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"}})).To(Succeed(), "and so do the CRDs")
		helmInstall()

		for _, c := range claims {
			rec.drainedOnce(c)
			fixtures.Drained(ctx, k8s, ns, c, longTimeout)
		}
		expectShippedOnce(ns, append(names, failPod.Name), 3)
	})
})
