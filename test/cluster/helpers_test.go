package cluster_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/csidriver"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// requireEnv skips t, saying how to run it, unless every one of vars is
// "1".
func requireEnv(t *testing.T, how string, vars ...string) {
	t.Helper()
	for _, v := range vars {
		if os.Getenv(v) != "1" {
			t.Skip(how)
		}
	}
}

// requireRealNode skips t, with the reason, where the machine cannot run
// the real node.
func requireRealNode(t *testing.T) {
	t.Helper()
	if why := cluster.RealNodeUnavailable(cluster.RepoRoot()); why != "" {
		t.Skip(why)
	}
}

// newG is t's Gomega, whose Eventually waits up to fixtures.LongTimeout
// and polls every fixtures.Interval.
func newG(t *testing.T) *WithT {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(fixtures.LongTimeout)
	g.SetDefaultEventuallyPollingInterval(fixtures.Interval)
	g.SetDefaultConsistentlyDuration(fixtures.ConsistentlyFor)
	g.SetDefaultConsistentlyPollingInterval(fixtures.Interval)
	return g
}

// testCluster is a cluster that a test brought up (upCluster).
type testCluster struct {
	*cluster.Cluster
	t      *testing.T
	downed bool
}

// upCluster brings a cluster up with opts, its progress in t's log, and
// takes it down when t ends unless the test did (down).
func upCluster(t *testing.T, g Gomega, opts cluster.Options) *testCluster {
	t.Helper()
	opts.Out = testWriter{t}
	start := time.Now()
	c, err := cluster.Up(t.Context(), opts)
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("TIMING cluster up: %s", time.Since(start).Round(time.Millisecond))
	tc := &testCluster{Cluster: c, t: t}
	t.Cleanup(func() {
		if !tc.downed {
			_ = c.Down()
		}
	})
	return tc
}

// down takes the cluster down and checks that it leaves nothing behind:
// the processes named in running (which must run before Down) and every
// other process of the cluster exit, and no mount, no bound unix socket
// and no state directory remain under its directories. Processes and
// mounts are polled, up to fixtures.Timeout: kwokctl's delete signals the
// control plane and returns, and an exited process waits to be reaped by
// PID 1.
func (c *testCluster) down(g Gomega, running ...string) {
	pids := c.processes()
	for _, name := range running {
		g.Expect(pids).To(HaveKey(name), "%s runs before Down", name)
	}
	dirs := []string{c.Dir, c.KwokctlDir()}
	start := time.Now()
	g.Expect(c.Down()).To(Succeed())
	c.downed = true
	c.t.Logf("TIMING cluster down: %s", time.Since(start).Round(time.Millisecond))
	g.Eventually(func() []string {
		var left []string
		for name, pid := range pids {
			if processRuns(pid) {
				left = append(left, name+" (PID "+strconv.Itoa(pid)+")")
			}
		}
		return left
	}).WithTimeout(fixtures.Timeout).Should(BeEmpty(), "processes of the cluster still run after Down")
	for _, dir := range dirs {
		g.Eventually(func() ([]string, error) { return mountsUnder(dir) }).WithTimeout(fixtures.Timeout).
			Should(BeEmpty(), "mounts under %s are left after Down", dir)
		g.Eventually(func() ([]string, error) { return socketsUnder(dir) }).WithTimeout(fixtures.Timeout).
			Should(BeEmpty(), "unix sockets under %s are still bound after Down", dir)
		_, err := os.Stat(dir)
		g.Expect(os.IsNotExist(err)).To(BeTrue(), "%s is left after Down: %v", dir, err)
	}
}

// processes are the cluster's processes by name: PIDs, and the real
// node's containerd and kubelet, whose PID files are under
// <Dir>/realnode.
func (c *testCluster) processes() map[string]int {
	pids := c.PIDs()
	files, _ := filepath.Glob(filepath.Join(c.Dir, "realnode", "*.pid"))
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(raw))); err == nil && processRuns(pid) {
			pids["realnode/"+strings.TrimSuffix(filepath.Base(f), ".pid")] = pid
		}
	}
	return pids
}

// processRuns says whether pid runs. A zombie does not: the processes
// outlive the kwokctl and CLI processes that started them, so their parent
// is PID 1, which reaps them when it pleases.
func processRuns(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// mountsUnder are the mount points at or under dir.
func mountsUnder(dir string) ([]string, error) { return csidriver.MountPointsUnder(dir) }

// socketsUnder are the paths of the unix sockets bound at or under dir,
// from /proc/net/unix: a socket that a live process still serves.
func socketsUnder(dir string) ([]string, error) {
	raw, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, line := range strings.Split(string(raw), "\n")[1:] {
		// The path, if the socket has one, is the eighth field.
		if f := strings.Fields(line); len(f) > 7 && under(f[7], dir) {
			paths = append(paths, f[7])
		}
	}
	return paths, nil
}

func under(path, dir string) bool { return path == dir || strings.HasPrefix(path, dir+"/") }

// createNamespace creates namespace ns.
func createNamespace(ctx context.Context, g Gomega, cs kubernetes.Interface, ns string) {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
}

// createClaim creates a 1Gi ReadWriteOnce claim of StorageClass class.
func createClaim(ctx context.Context, g Gomega, cs kubernetes.Interface, ns, name, class string) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(class),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	created, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	return created
}

// claimVolume is a volume of a pod: the claim name.
func claimVolume(name string) corev1.VolumeSource {
	return corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}
}

// realNodePod is a pod on the real node whose one container, from the
// test busybox image, runs script with volume at /data, once.
func realNodePod(name, ns, script string, volume corev1.VolumeSource) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector:                 map[string]string{cluster.NodeTypeLabelKey: cluster.RealNodeType},
			AutomountServiceAccountToken: ptr.To(false),
			RestartPolicy:                corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "c", Image: "fluent-pvc-operator.local/busybox:dev", ImagePullPolicy: corev1.PullNever,
				Command:      []string{"sh", "-c", script},
				VolumeMounts: []corev1.VolumeMount{{Name: "d", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "d", VolumeSource: volume}},
		},
	}
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
