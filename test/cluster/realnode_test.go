package cluster_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestRealNodeSmoke brings a cluster up with the real node and checks that
// a real container from the test busybox image runs there on the bridge,
// writes to a volume, reports its real exit code and logs, and that Down
// leaves no process, mount, bridge or iptables chain behind.
// It runs only with REAL_NODE=1, and says why it skips where the machine
// cannot run a real node.
func TestRealNodeSmoke(t *testing.T) {
	if os.Getenv("REAL_NODE") != "1" {
		t.Skip("set REAL_NODE=1 (after make real-node-bins images) to bring up a real node")
	}
	if why := cluster.RealNodeUnavailable(cluster.RepoRoot()); why != "" {
		t.Skip(why)
	}
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(fixtures.LongTimeout)
	g.SetDefaultEventuallyPollingInterval(fixtures.Interval)
	ctx := t.Context()
	c, err := cluster.Up(ctx, cluster.Options{Name: "realnode-smoke", RealNode: true, Out: testWriter{t}})
	g.Expect(err).NotTo(HaveOccurred())
	downed := false
	t.Cleanup(func() {
		if !downed {
			_ = c.Down()
		}
	})

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bb", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeSelector:                 map[string]string{cluster.NodeTypeLabelKey: cluster.RealNodeType},
			AutomountServiceAccountToken: ptr.To(false),
			RestartPolicy:                corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "c", Image: "fluent-pvc-operator.local/busybox:dev", ImagePullPolicy: corev1.PullNever,
				Command:      []string{"sh", "-c", "for i in $(seq 1 5); do echo line $i >> /data/out; done; wc -l < /data/out; exit 3"},
				VolumeMounts: []corev1.VolumeMount{{Name: "d", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	_, err = c.Clientset.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		p, err := c.Clientset.CoreV1().Pods("default").Get(ctx, "bb", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Spec.NodeName).To(Equal(cluster.RealNodeName))
		g.Expect(p.Status.PodIP).To(HavePrefix("10.244.77."))
		g.Expect(p.Status.ContainerStatuses).To(HaveLen(1))
		term := p.Status.ContainerStatuses[0].State.Terminated
		g.Expect(term).NotTo(BeNil())
		g.Expect(term.ExitCode).To(BeEquivalentTo(3))
	}).Should(Succeed())
	logs, err := c.Clientset.CoreV1().Pods("default").GetLogs("bb", &corev1.PodLogOptions{}).DoRaw(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.TrimSpace(string(logs))).To(Equal("5"))

	netnsBefore, _ := filepath.Glob("/var/run/netns/cni-*")
	dir := c.Dir
	g.Expect(c.Down()).To(Succeed())
	downed = true
	mounts, err := os.ReadFile("/proc/mounts")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(mounts)).NotTo(ContainSubstring(dir), "a mount under the cluster's state is left")
	_, err = os.Stat(filepath.Join("/sys/class/net", "fpvc0"))
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "the bridge is left")
	out, err := exec.Command("iptables", "-S").Output()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bytes.Contains(out, []byte("KUBE-FIREWALL"))).To(BeFalse(), "the kubelet's iptables chains are left")
	g.Expect(c.PIDs()).To(BeEmpty())
	netnsAfter, _ := filepath.Glob("/var/run/netns/cni-*")
	g.Expect(len(netnsAfter)).To(BeNumerically("<=", len(netnsBefore)-1), "the pod's network namespace is left: %v", netnsAfter)
}
