package cluster_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestSmoke brings a kwok cluster up and checks what the e2e suite relies
// on: a WaitForFirstConsumer claim is provisioned in its pod's zone, pods
// run, Jobs complete, the e2e stages fail sidecars and Jobs, the operator
// runs and restarts, and Down leaves no process and no state.
// It runs only with E2E_CLUSTER=1.
func TestSmoke(t *testing.T) {
	requireEnv(t, "set E2E_CLUSTER=1 to bring up a kwok cluster", "E2E_CLUSTER")
	g := newG(t)
	ctx := t.Context()
	c := upCluster(t, g, cluster.Options{
		Name:             "smoke",
		ProvisionerDelay: time.Second,
		ExtraStages:      cluster.E2EStages(),
	})
	cs := c.Clientset
	ns := "smoke"
	createNamespace(ctx, g, cs, ns)

	t.Run("a claim is provisioned in its pod's zone", func(t *testing.T) {
		g := NewWithT(t)
		created := time.Now()
		createClaim(ctx, g, cs, ns, "data", cluster.StorageClassStandard)
		pod := fixtures.MakePod("app", ns).Mount("data", "/data").Obj()
		pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: claimVolume("data")}}
		_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())

		var volume string
		g.Eventually(func(g Gomega) {
			got, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.Status.Phase).To(Equal(corev1.ClaimBound))
			volume = got.Spec.VolumeName
		}).WithContext(ctx).WithTimeout(fixtures.LongTimeout).Should(Succeed())
		t.Logf("TIMING claim bound (provisioner delay 1s): %s", time.Since(created).Round(time.Millisecond))

		var node string
		g.Eventually(func(g Gomega) {
			got, err := cs.CoreV1().Pods(ns).Get(ctx, "app", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.Status.Phase).To(Equal(corev1.PodRunning))
			node = got.Spec.NodeName
		}).WithContext(ctx).Should(Succeed())
		t.Logf("TIMING pod Running: %s", time.Since(created).Round(time.Millisecond))

		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, volume, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pv.Spec.NodeAffinity.Required.NodeSelectorTerms).To(ConsistOf(corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{n.Labels[corev1.LabelTopologyZone]},
			}},
		}))
		g.Expect(pv.Annotations).To(HaveKeyWithValue("pv.kubernetes.io/provisioned-by", cluster.ProvisionerName))

		// Deleting the pod and claim releases the volume, which the
		// provisioner deletes.
		g.Expect(cs.CoreV1().Pods(ns).Delete(ctx, "app", metav1.DeleteOptions{})).To(Succeed())
		g.Expect(cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "data", metav1.DeleteOptions{})).To(Succeed())
		g.Eventually(func() error {
			_, err := cs.CoreV1().PersistentVolumes().Get(ctx, volume, metav1.GetOptions{})
			return err
		}).WithContext(ctx).Should(MatchError(ContainSubstring("not found")))
	})

	t.Run("a Job completes; a job-fail Job fails", func(t *testing.T) {
		g := NewWithT(t)
		job := func(name string, labels map[string]string) *batchv1.Job {
			return &batchv1.Job{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: batchv1.JobSpec{
					BackoffLimit: ptr.To[int32](0),
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: labels},
						Spec: corev1.PodSpec{
							RestartPolicy: corev1.RestartPolicyNever,
							Containers:    []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
						},
					},
				},
			}
		}
		created := time.Now()
		_, err := cs.BatchV1().Jobs(ns).Create(ctx, job("ok", nil), metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		_, err = cs.BatchV1().Jobs(ns).Create(ctx, job("bad", map[string]string{cluster.JobFailLabelKey: "true"}), metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		jobCondition := func(name string) func(g Gomega) []batchv1.JobConditionType {
			return func(g Gomega) []batchv1.JobConditionType {
				j, err := cs.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				var types []batchv1.JobConditionType
				for _, c := range j.Status.Conditions {
					if c.Status == corev1.ConditionTrue {
						types = append(types, c.Type)
					}
				}
				return types
			}
		}
		g.Eventually(jobCondition("ok")).WithContext(ctx).Should(ContainElement(batchv1.JobComplete))
		t.Logf("TIMING Job Complete: %s", time.Since(created).Round(time.Millisecond))
		g.Eventually(jobCondition("bad")).WithContext(ctx).Should(ContainElement(batchv1.JobFailed))
		t.Logf("TIMING job-fail Job Failed: %s", time.Since(created).Round(time.Millisecond))
	})

	t.Run("a bare pod with restartPolicy Never ends with the exit code it asks for", func(t *testing.T) {
		g := NewWithT(t)
		pod := fixtures.MakePod("exit-3", ns).Obj()
		pod.Annotations = map[string]string{cluster.ExitCodeAnnotationKey: "3"}
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
		_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(func(g Gomega) {
			got, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.Status.Phase).To(Equal(corev1.PodFailed))
			g.Expect(got.Status.ContainerStatuses).To(ConsistOf(HaveField("State.Terminated.ExitCode", Equal(int32(3)))))
		}).WithContext(ctx).Should(Succeed())
	})

	t.Run("a container that exits 1 is restarted by its pod's policy, OnFailure, until the Job's backoffLimit", func(t *testing.T) {
		g := NewWithT(t)
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "onfailure", Namespace: ns},
			Spec: batchv1.JobSpec{
				BackoffLimit: ptr.To[int32](2),
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{cluster.ExitCodeAnnotationKey: "1"}},
					Spec: corev1.PodSpec{
						RestartPolicy: corev1.RestartPolicyOnFailure,
						Containers:    []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
					},
				},
			},
		}
		_, err := cs.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(func(g Gomega) {
			pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=onfailure"})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pods.Items).NotTo(BeEmpty())
			s := pods.Items[0].Status.ContainerStatuses
			g.Expect(s).To(HaveLen(1))
			g.Expect(s[0].RestartCount).To(BeNumerically(">=", 1))
			g.Expect(s[0].LastTerminationState.Terminated).NotTo(BeNil())
			g.Expect(s[0].LastTerminationState.Terminated.ExitCode).To(Equal(int32(1)))
		}).WithContext(ctx).Should(Succeed())
		g.Eventually(func(g Gomega) {
			j, err := cs.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(j.Status.Conditions).To(ContainElement(And(HaveField("Type", batchv1.JobFailed), HaveField("Reason", batchv1.JobReasonBackoffLimitExceeded))))
		}).WithContext(ctx).Should(Succeed())
	})

	t.Run("a sidecar-fail pod's sidecar exits 1", func(t *testing.T) {
		g := NewWithT(t)
		pod := fixtures.MakePod("sidecar-fail", ns).Label(cluster.SidecarFailLabelKey, "true").
			Container(corev1.Container{Name: "sidecar", Image: "registry.k8s.io/pause:3.10"}).Obj()
		_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(func(g Gomega) {
			got, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.Status.Phase).To(Equal(corev1.PodRunning))
			states := map[string]corev1.ContainerState{}
			for _, s := range got.Status.ContainerStatuses {
				states[s.Name] = s.State
			}
			g.Expect(states["app"].Running).NotTo(BeNil())
			g.Expect(states["sidecar"].Terminated).NotTo(BeNil())
			g.Expect(states["sidecar"].Terminated.ExitCode).To(Equal(int32(1)))
		}).WithContext(ctx).Should(Succeed())
	})

	t.Run("a sidecar-fail pod's native sidecar exits 1 and is restarted", func(t *testing.T) {
		g := NewWithT(t)
		pod := fixtures.MakePod("native-sidecar-fail", ns).Label(cluster.SidecarFailLabelKey, "true").Obj()
		pod.Spec.InitContainers = []corev1.Container{{Name: "sidecar", Image: "registry.k8s.io/pause:3.10", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
		_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(func(g Gomega) {
			got, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.Status.Phase).To(Equal(corev1.PodRunning))
			g.Expect(got.Status.ContainerStatuses).To(ContainElement(And(HaveField("Name", "app"), HaveField("State.Running", Not(BeNil())))))
			g.Expect(got.Status.InitContainerStatuses).To(ContainElement(And(HaveField("Name", "sidecar"),
				HaveField("LastTerminationState.Terminated.ExitCode", Equal(int32(1))), HaveField("RestartCount", BeNumerically(">=", 1)))))
		}).WithContext(ctx).Should(Succeed())
	})

	t.Run("the operator runs, restarts and stops", func(t *testing.T) {
		g := NewWithT(t)
		started := time.Now()
		op, err := cluster.RunOperator(ctx, c.Cluster, cluster.OperatorOptions{Args: []string{"--zap-log-level=info"}})
		g.Expect(err).NotTo(HaveOccurred())
		t.Logf("TIMING operator ready (including a possible build): %s", time.Since(started).Round(time.Millisecond))
		g.Expect(httpGet(ctx, op.MetricsURL())).To(Equal(http.StatusOK))
		pid := op.PID()
		started = time.Now()
		g.Expect(op.Restart(ctx)).To(Succeed())
		t.Logf("TIMING operator restart: %s", time.Since(started).Round(time.Millisecond))
		g.Expect(op.PID()).NotTo(Or(BeZero(), Equal(pid)))
		g.Expect(httpGet(ctx, op.MetricsURL())).To(Equal(http.StatusOK))
		g.Expect(op.Stop()).To(Succeed())
		g.Expect(op.PID()).To(BeZero())
		// Down stops an operator that is left running.
		_, err = cluster.RunOperator(ctx, c.Cluster, cluster.OperatorOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	})

	t.Run("the deploy manifests pass a server-side dry run", func(t *testing.T) {
		out, err := c.DryRunDeployManifests(ctx)
		if err != nil && os.Getenv("KUSTOMIZE") == "" && strings.Contains(err.Error(), "requires go >=") {
			t.Skipf("the Makefile's kustomize needs a newer Go than this toolchain; set KUSTOMIZE to an older one: %v", err)
		}
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		t.Logf("%s", out)
	})

	c.down(g, "kube-apiserver", "provisioner", "operator")
}

func httpGet(ctx context.Context, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
