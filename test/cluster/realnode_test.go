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

	"github.com/st-tech/fluent-pvc-operator/test/cluster"
)

// TestRealNodeSmoke brings a cluster up with the real node and checks that
// a real container from the test busybox image runs there on the bridge,
// writes to a volume, reports its real exit code and logs, and that Down
// leaves no process, mount, bridge or iptables chain behind.
// It runs only with REAL_NODE=1, and says why it skips where the machine
// cannot run a real node.
func TestRealNodeSmoke(t *testing.T) {
	requireEnv(t, "set REAL_NODE=1 (after make real-node-bins images) to bring up a real node", "REAL_NODE")
	requireRealNode(t)
	g := newG(t)
	ctx := t.Context()
	c := upCluster(t, g, cluster.Options{Name: "realnode-smoke", RealNode: true})

	pod := realNodePod("bb", "default", "for i in $(seq 1 5); do echo line $i >> /data/out; done; wc -l < /data/out; exit 3",
		corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}})
	_, err := c.Clientset.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
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
	c.down(g, "kube-apiserver", "realnode/kubelet", "realnode/containerd")
	_, err = os.Stat(filepath.Join("/sys/class/net", "fpvc0"))
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "the bridge is left")
	out, err := exec.Command("iptables", "-S").Output()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bytes.Contains(out, []byte("KUBE-FIREWALL"))).To(BeFalse(), "the kubelet's iptables chains are left")
	netnsAfter, _ := filepath.Glob("/var/run/netns/cni-*")
	g.Expect(len(netnsAfter)).To(BeNumerically("<=", len(netnsBefore)-1), "the pod's network namespace is left: %v", netnsAfter)
}
