package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/st-tech/fluent-pvc-operator/test/csidriver"
	"github.com/st-tech/fluent-pvc-operator/test/provisioner/hostpath"
)

// The real node (Options.RealNode): a kubelet with containerd, runc and a
// bridge CNI, joined beside kwok's fake nodes, which kwok alone manages
// (NodeTypeLabelKey=kwok). Its state lives in <Dir>/realnode.
const (
	// RealNodeName is the kubelet's node.
	RealNodeName = "real-0"
	// RealNodeType is the real node's NodeTypeLabelKey value.
	RealNodeType = "real"
	// FakeNodeTaintKey taints kwok's nodes (value "fake", NoSchedule) in a
	// cluster with the real node, so that pods run on the real node unless
	// they tolerate it: the operator's Deployment as a user deploys it, and
	// every workload, whose containers only a real node runs.
	FakeNodeTaintKey = "kwok.x-k8s.io/node"
	// realBridge and realSubnet are the node's pod network.
	realBridge = "fpvc0"
	realSubnet = "10.244.77.0/24"
	cniBinDir  = "/usr/lib/cni"
	// realPauseImage is containerd's sandbox image (test/images.PauseRef).
	realPauseImage = "fluent-pvc-operator.local/pause:dev"
	// kubernetesServiceIP is the kubernetes Service's ClusterIP (the first
	// of kube-apiserver's default service range).
	kubernetesServiceIP = "10.0.0.1"
	// realNATChain holds the real node's one Service rule (realServiceNAT).
	realNATChain = "FPVC-REAL-SERVICES"
)

// RealNodeUnavailable says in one line why the host cannot run the
// real node, or "" when it can: root, bin/kubelet, Debian's containerd,
// runc and CNI plugins (hack/real-node-deps.sh), and bin/images.tar
// (make images).
func RealNodeUnavailable(repoRoot string) string {
	if os.Geteuid() != 0 {
		return "the real node needs root"
	}
	var missing []string
	for _, p := range []string{filepath.Join(repoRoot, "bin", "kubelet"), filepath.Join(repoRoot, "bin", "images.tar"), filepath.Join(cniBinDir, "bridge")} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	for _, cmd := range []string{"containerd", "runc", "ctr", "iptables", "ip"} {
		if _, err := exec.LookPath(cmd); err != nil {
			missing = append(missing, cmd)
		}
	}
	if len(missing) > 0 {
		return "the real node needs " + strings.Join(missing, ", ") + " (make real-node-bins images)"
	}
	return ""
}

func (c *Cluster) realDir(elem ...string) string {
	return filepath.Join(append([]string{c.Dir, "realnode"}, elem...)...)
}

func (c *Cluster) containerdSocket() string { return c.realDir("containerd", "containerd.sock") }

// hostIP is the host's first non-loopback IPv4 address: the kubelet
// refuses a loopback node IP.
func hostIP() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil && !strings.HasPrefix(ipn.IP.String(), "10.244.77.") {
			return ipn.IP.String(), nil
		}
	}
	return "", errors.New("no non-loopback IPv4 address for the kubelet's node IP")
}

// startRealNode starts containerd and the kubelet, loads the test images,
// and waits for the node to be Ready.
func (c *Cluster) startRealNode(ctx context.Context, zone string) error {
	if why := RealNodeUnavailable(c.RepoRoot); why != "" {
		return errors.New(why)
	}
	// One real node per machine: its bridge, kubelet ports and NAT chain
	// are the host's.
	if _, err := net.InterfaceByName(realBridge); err == nil {
		return fmt.Errorf("another real node is running here (its bridge %s exists): bring its cluster down first", realBridge)
	}
	for _, d := range []string{"containerd/root", "containerd/state", "cni/net.d", "cni/ipam", "kubelet/root", "pod-logs"} {
		if err := os.MkdirAll(c.realDir(d), 0o755); err != nil {
			return err
		}
	}
	containerdConfig := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # The sandbox denies a negative oom_score_adj (no CAP_SYS_RESOURCE).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, c.realDir("containerd", "root"), c.realDir("containerd", "state"), c.containerdSocket(), realPauseImage, cniBinDir, c.realDir("cni", "net.d"))
	conflist := fmt.Sprintf(`{"cniVersion":"0.4.0","name":"fpvc-real","plugins":[{"type":"bridge","bridge":%q,"isGateway":true,"ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":%q}]],"routes":[{"dst":"0.0.0.0/0"}],"dataDir":%q}},{"type":"portmap","capabilities":{"portMappings":true}}]}`,
		realBridge, realSubnet, c.realDir("cni", "ipam"))
	ip, err := hostIP()
	if err != nil {
		return err
	}
	kubeletConfig := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The host has cgroup v1.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
readOnlyPort: 0
healthzPort: 0
containerRuntimeEndpoint: unix://%s
podLogsDir: %q
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
`, c.containerdSocket(), c.realDir("pod-logs"))
	for path, content := range map[string]string{
		c.realDir("containerd", "config.toml"):        containerdConfig,
		c.realDir("cni", "net.d", "10-fpvc.conflist"): conflist,
		c.realDir("kubelet", "config.yaml"):           kubeletConfig,
	} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	containerd, err := exec.LookPath("containerd")
	if err != nil {
		return err
	}
	if _, err := startBackground(containerd, []string{"--config", c.realDir("containerd", "config.toml")}, c.realDir("containerd.log"), c.realDir("containerd.pid")); err != nil {
		return err
	}
	if err := wait.PollUntilContextCancel(ctx, poll, true, func(context.Context) (bool, error) {
		_, err := os.Stat(c.containerdSocket())
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("waiting for containerd's socket: %w", err)
	}
	if out, err := c.ctr(ctx, "images", "import", filepath.Join(c.RepoRoot, "bin", "images.tar")); err != nil {
		return fmt.Errorf("importing the test images: %w\n%s", err, out)
	}
	if err := c.realServiceNAT(ctx, ip); err != nil {
		return err
	}
	if _, err := startBackground(c.bin("kubelet"), []string{
		"--config", c.realDir("kubelet", "config.yaml"),
		"--kubeconfig", c.Kubeconfig,
		"--root-dir", c.realDir("kubelet", "root"),
		"--hostname-override", RealNodeName,
		"--node-ip", ip,
		"--node-labels", fmt.Sprintf("%s=%s,%s=%s", corev1.LabelTopologyZone, zone, NodeTypeLabelKey, RealNodeType),
	}, c.realDir("kubelet.log"), c.realDir("kubelet.pid")); err != nil {
		return err
	}
	err = wait.PollUntilContextCancel(ctx, poll, true, func(ctx context.Context) (bool, error) {
		n, err := c.Clientset.CoreV1().Nodes().Get(ctx, RealNodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for node %s to be Ready (log %s): %w", RealNodeName, c.realDir("kubelet.log"), err)
	}
	return nil
}

// ctr runs containerd's ctr on the real node's containerd, in the
// namespace the kubelet uses.
func (c *Cluster) ctr(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"-a", c.containerdSocket(), "-n", "k8s.io"}, args...)...)
	return cmd.CombinedOutput()
}

// downRealNode undoes startRealNode: the kubelet, every container and shim,
// containerd, the mounts under the node's state, the bridge, and the
// iptables chains the kubelet made. Safe when nothing runs.
func (c *Cluster) downRealNode() error {
	if _, err := os.Stat(c.realDir()); err != nil {
		return nil
	}
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kubelet := processFromPIDFile(c.realDir("kubelet.pid"), c.bin("kubelet"))
	if kubelet != nil && c.Clientset != nil {
		// The kubelet stops its pods' sandboxes, which removes their network
		// namespaces, only while it runs: delete its pods first.
		c.deleteRealNodePods(ctx)
	}
	if kubelet != nil {
		errs = append(errs, kubelet.stop(20*time.Second))
	}
	var netns []string
	if containerd, err := exec.LookPath("containerd"); err == nil {
		if p := processFromPIDFile(c.realDir("containerd.pid"), containerd); p != nil {
			netns = c.sandboxNetns(ctx)
			if out, err := c.ctr(ctx, "tasks", "ls", "-q"); err == nil {
				for _, id := range strings.Fields(string(out)) {
					_, _ = c.ctr(ctx, "tasks", "kill", "-s", "SIGKILL", id)
					_, _ = c.ctr(ctx, "tasks", "delete", "-f", id)
				}
			}
			if out, err := c.ctr(ctx, "containers", "ls", "-q"); err == nil {
				for _, id := range strings.Fields(string(out)) {
					_, _ = c.ctr(ctx, "containers", "rm", id)
				}
			}
			errs = append(errs, p.stop(20*time.Second))
		}
	}
	c.killShims()
	errs = append(errs, unmountUnder(c.realDir()))
	for _, ns := range netns {
		// A sandbox left running keeps its namespace bind-mounted there.
		if err := syscall.Unmount(ns, syscall.MNT_DETACH); err == nil || errors.Is(err, syscall.EINVAL) {
			_ = os.Remove(ns)
		}
	}
	if _, err := net.InterfaceByName(realBridge); err == nil {
		if out, err := exec.Command("ip", "link", "del", realBridge).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("deleting link %s: %w: %s", realBridge, err, out))
		}
	}
	errs = append(errs, removeKubeletChains(), removeRealNAT())
	// The volumes the real node's pods wrote: only a real node makes them,
	// and one real node runs at a time.
	errs = append(errs, os.RemoveAll(hostpath.HostPathRoot))
	return errors.Join(errs...)
}

// realServiceNAT does for the real node's pods what kube-proxy would do for
// the one Service they use, which this cluster does not run: connections
// from the pod network to the kubernetes Service (443) go to the API
// server's advertised endpoint, read from the Service's EndpointSlice.
func (c *Cluster) realServiceNAT(ctx context.Context, hostIP string) error {
	var endpoint string
	if err := wait.PollUntilContextCancel(ctx, poll, true, func(ctx context.Context) (bool, error) {
		slices, err := c.Clientset.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kubernetes"})
		if err != nil {
			return false, nil
		}
		for _, s := range slices.Items {
			if len(s.Ports) == 1 && s.Ports[0].Port != nil && len(s.Endpoints) > 0 && len(s.Endpoints[0].Addresses) > 0 {
				endpoint = net.JoinHostPort(s.Endpoints[0].Addresses[0], fmt.Sprint(*s.Ports[0].Port))
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return fmt.Errorf("reading the kubernetes Service's endpoint: %w", err)
	}
	if h, _, _ := net.SplitHostPort(endpoint); h != hostIP {
		return fmt.Errorf("the API server advertises %s, not this host's %s", endpoint, hostIP)
	}
	_ = removeRealNAT()
	for _, args := range [][]string{
		{"-t", "nat", "-N", realNATChain},
		{"-t", "nat", "-A", realNATChain, "-d", kubernetesServiceIP + "/32", "-p", "tcp", "--dport", "443", "-j", "DNAT", "--to-destination", endpoint},
		{"-t", "nat", "-A", "PREROUTING", "-s", realSubnet, "-j", realNATChain},
	} {
		if out, err := exec.CommandContext(ctx, "iptables", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// removeRealNAT undoes realServiceNAT; nothing to do when it is not there.
func removeRealNAT() error {
	if exec.Command("iptables", "-t", "nat", "-S", realNATChain).Run() != nil {
		return nil
	}
	// Delete every jump to the chain (a crashed run may have added two).
	deleteJump := func() error {
		return exec.Command("iptables", "-t", "nat", "-D", "PREROUTING", "-s", realSubnet, "-j", realNATChain).Run()
	}
	for deleteJump() == nil {
	}
	_ = exec.Command("iptables", "-t", "nat", "-F", realNATChain).Run()
	if out, err := exec.Command("iptables", "-t", "nat", "-X", realNATChain).CombinedOutput(); err != nil {
		return fmt.Errorf("deleting chain nat/%s: %w: %s", realNATChain, err, out)
	}
	return nil
}

// deleteRealNodePods deletes the real node's pods at once and waits, up to
// 30 s, for the kubelet to have stopped them.
func (c *Cluster) deleteRealNodePods(ctx context.Context) {
	sel := metav1.ListOptions{FieldSelector: "spec.nodeName=" + RealNodeName}
	pods, err := c.Clientset.CoreV1().Pods("").List(ctx, sel)
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		_ = c.Clientset.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_ = wait.PollUntilContextCancel(wctx, poll, true, func(ctx context.Context) (bool, error) {
		l, err := c.Clientset.CoreV1().Pods("").List(ctx, sel)
		return err == nil && len(l.Items) == 0, nil
	})
}

// sandboxNetns are the network namespaces (bind mounts under
// /var/run/netns) of the containers containerd still has, read from their
// specs.
func (c *Cluster) sandboxNetns(ctx context.Context) []string {
	out, err := c.ctr(ctx, "containers", "ls", "-q")
	if err != nil {
		return nil
	}
	var paths []string
	for _, id := range strings.Fields(string(out)) {
		info, err := c.ctr(ctx, "containers", "info", id)
		if err != nil {
			continue
		}
		var spec struct {
			Spec struct {
				Linux struct {
					Namespaces []struct{ Type, Path string } `json:"namespaces"`
				} `json:"linux"`
			} `json:"Spec"`
		}
		if json.Unmarshal(info, &spec) != nil {
			continue
		}
		for _, ns := range spec.Spec.Linux.Namespaces {
			if ns.Type == "network" && strings.HasPrefix(ns.Path, "/var/run/netns/") && !slices.Contains(paths, ns.Path) {
				paths = append(paths, ns.Path)
			}
		}
	}
	return paths
}

// killShims ends the containerd shims serving this node's containerd, which
// outlive it (they are found by its socket in their command line).
func (c *Cluster) killShims() {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	sock := []byte(c.containerdSocket())
	for _, f := range procs {
		raw, err := os.ReadFile(f)
		if err != nil || !bytes.Contains(raw, []byte("containerd-shim")) || !bytes.Contains(raw, sock) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(filepath.Base(filepath.Dir(f)), "%d", &pid); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// unmountUnder unmounts every mount point under dir, deepest first.
func unmountUnder(dir string) error {
	points, err := csidriver.MountPointsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, 0); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// kubeletChains are the iptables chains the kubelet makes.
var kubeletChains = []string{"KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"}

// removeKubeletChains removes the iptables chains the kubelet creates
// (KUBE-FIREWALL, KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT) and the jumps
// to them.
func removeKubeletChains() error {
	var errs []error
	for _, table := range []string{"filter", "nat", "mangle"} {
		out, err := exec.Command("iptables", "-t", table, "-S").Output()
		if err != nil {
			continue
		}
		var chains []string
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) == 2 && f[0] == "-N" && slices.Contains(kubeletChains, f[1]):
				chains = append(chains, f[1])
			case len(f) >= 4 && f[0] == "-A" && !strings.HasPrefix(f[1], "KUBE-") && f[len(f)-2] == "-j" && slices.Contains(kubeletChains, f[len(f)-1]):
				args := append([]string{"-t", table, "-D"}, f[1:]...)
				if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, out))
				}
			}
		}
		for _, ch := range chains {
			_ = exec.Command("iptables", "-t", table, "-F", ch).Run()
		}
		for _, ch := range chains {
			if out, err := exec.Command("iptables", "-t", table, "-X", ch).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("deleting chain %s/%s: %w: %s", table, ch, err, out))
			}
		}
	}
	return errors.Join(errs...)
}

// KillContainer sends SIGKILL to a container of the real node, named by a
// pod's containerStatuses[].containerID ("containerd://<id>"), as the
// kernel's OOM killer or a crash would end it.
func (c *Cluster) KillContainer(ctx context.Context, containerID string) error {
	id, ok := strings.CutPrefix(containerID, "containerd://")
	if !ok || id == "" {
		return fmt.Errorf("not a containerd container ID: %q", containerID)
	}
	if out, err := c.ctr(ctx, "tasks", "kill", "-s", "SIGKILL", id); err != nil {
		return fmt.Errorf("killing container %s: %w: %s", id, err, out)
	}
	return nil
}
