package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/st-tech/fluent-pvc-operator/test/csidriver"
)

// The CSI storage of a cluster (StartCSI).
const (
	// CSIDriverName is test/csidriver's name, the provisioner of
	// StorageClassCSI.
	CSIDriverName = csidriver.DefaultName
	// CSITopologyKey is the driver's zone key, which StartCSI labels every
	// node with.
	CSITopologyKey = csidriver.DefaultTopologyKey
	// StorageClassCSI is the WaitForFirstConsumer class of the CSI driver.
	StorageClassCSI = "csi-disk"
)

// ErrCSISocketPathTooLong is StartCSI's error when the real node's
// kubelet root dir (under the repository's checkout) is too deep for the
// node plugin's registration socket: a unix socket's path has at most
// 107 bytes.
var ErrCSISocketPathTooLong = errors.New("the CSI registration socket's path is too long for a unix socket")

// csiRegistrationSocket is the node plugin's registration socket's name:
// short, to leave room for the kubelet root dir.
const csiRegistrationSocket = "csi.sock"

// CSIOptions are the delays of test/csidriver, like a cloud disk's.
type CSIOptions struct {
	CreateDelay, AttachDelay, FormatDelay time.Duration
}

// csiProcesses are the processes StartCSI starts, by PID file name under
// <Dir>: the driver's controller, the kubernetes-csi sidecars in front of
// it, and the driver's node plugin of the real node, if the cluster has one.
var csiProcesses = []string{"csi-driver", "csi-provisioner", "csi-attacher", "csi-node"}

func (c *Cluster) csiDir() string { return filepath.Join(c.Dir, "csi") }

// CSIControllerSocket is the unix socket of the driver's controller, which
// its sidecars call.
func (c *Cluster) CSIControllerSocket() string { return filepath.Join(c.csiDir(), "controller.sock") }

// StartCSI gives the cluster CSI storage as a cloud gives it:
// test/csidriver's controller behind the real external-provisioner and
// external-attacher (bin/, `make csi-bins`), a CSIDriver that requires
// attachment, so that kube-controller-manager's attach/detach controller
// makes VolumeAttachments, CSINode objects for the fake nodes (which run
// no node plugin; kwok does not wait for attachment before a pod runs),
// and StorageClassCSI. On a cluster with the real node, the driver's node
// plugin runs too and registers with that node's kubelet, which stages
// and publishes volumes through it. The processes' arguments are kept
// under <Dir>/csi for RestartCSIController; Down stops the processes by
// their PIDs.
func (c *Cluster) StartCSI(ctx context.Context, o CSIOptions) error {
	for _, name := range []string{"csi-provisioner", "csi-attacher"} {
		if _, err := os.Stat(c.bin(name)); err != nil {
			return fmt.Errorf("bin/%s is missing: run make csi-bins", name)
		}
	}
	driverBin := c.bin("csidriver")
	if _, err := ensureBuilt(ctx, c.RepoRoot, driverBin, "./test/csidriver/cmd/csidriver", filepath.Join(c.RepoRoot, "test", "csidriver")); err != nil {
		return err
	}
	nodes, err := c.Clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var known []string
	zones := map[string]bool{}
	realZone := ""
	for _, n := range nodes.Items {
		zone := n.Labels[corev1.LabelTopologyZone]
		zones[zone] = true
		if n.Name == RealNodeName {
			// Its kubelet registers the node plugin itself.
			realZone = zone
			continue
		}
		known = append(known, n.Name+"="+zone)
		if err := c.csiNode(ctx, &n, zone); err != nil {
			return err
		}
	}
	var zoneList []string
	for z := range zones {
		zoneList = append(zoneList, z)
	}
	if err := c.csiObjects(ctx); err != nil {
		return err
	}
	dir := c.csiDir()
	for _, d := range []string{"data", "state"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	sock := c.CSIControllerSocket()
	procs := []csiProcess{{
		Name: "csi-driver", Socket: sock,
		Args: []string{"--controller-socket", sock, "--data-dir", filepath.Join(dir, "data"), "--state-dir", filepath.Join(dir, "state"),
			"--zones", strings.Join(zoneList, ","), "--known-nodes", strings.Join(known, ","),
			"--create-delay", o.CreateDelay.String(), "--attach-delay", o.AttachDelay.String(), "--format-delay", o.FormatDelay.String()},
	}, {
		Name: "csi-provisioner",
		Args: []string{"--csi-address", sock, "--kubeconfig", c.Kubeconfig, "--extra-create-metadata",
			"--timeout", (o.CreateDelay + 10*time.Second).String()},
	}, {
		Name: "csi-attacher",
		Args: []string{"--csi-address", sock, "--kubeconfig", c.Kubeconfig, "--timeout", (o.AttachDelay + 10*time.Second).String()},
	}}
	if realZone != "" {
		// The node plugin of the real node, which registers with its
		// kubelet (plugins_registry) and bind-mounts volumes for its pods.
		regDir := c.realDir("kubelet", "root", "plugins_registry")
		if p := filepath.Join(regDir, csiRegistrationSocket); len(p) > csidriver.MaxSocketPath {
			return fmt.Errorf("%w: %s is %d bytes, over %d", ErrCSISocketPathTooLong, p, len(p), csidriver.MaxSocketPath)
		}
		nodeSock := filepath.Join(dir, "node.sock")
		procs = append(procs, csiProcess{
			Name: "csi-node", Socket: nodeSock,
			Args: []string{"--node-socket", nodeSock, "--node-id", RealNodeName, "--zone", realZone,
				"--registration-dir", regDir, "--registration-socket", csiRegistrationSocket,
				"--data-dir", filepath.Join(dir, "data"), "--state-dir", filepath.Join(dir, "state"), "--format-delay", o.FormatDelay.String()},
		})
	}
	if err := c.writeCSIProcesses(procs); err != nil {
		return err
	}
	for _, p := range procs {
		if err := c.startCSIProcess(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// csiProcess is a process of StartCSI: its name (csiProcesses) and
// arguments, which a restart (RestartCSIController) reuses, and the
// socket it serves, if any.
type csiProcess struct {
	Name   string   `json:"name"`
	Args   []string `json:"args"`
	Socket string   `json:"socket,omitempty"`
}

// csiProcessesFile holds StartCSI's processes, as JSON.
func (c *Cluster) csiProcessesFile() string { return filepath.Join(c.csiDir(), "processes.json") }

func (c *Cluster) writeCSIProcesses(procs []csiProcess) error {
	raw, err := json.MarshalIndent(procs, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(c.csiProcessesFile(), raw, 0o644)
}

func (c *Cluster) readCSIProcesses() ([]csiProcess, error) {
	raw, err := os.ReadFile(c.csiProcessesFile())
	if err != nil {
		return nil, fmt.Errorf("the cluster's CSI processes (StartCSI): %w", err)
	}
	var procs []csiProcess
	if err := json.Unmarshal(raw, &procs); err != nil {
		return nil, fmt.Errorf("reading %s: %w", c.csiProcessesFile(), err)
	}
	return procs, nil
}

// csiBin is the executable of the CSI process name: bin/csidriver for the
// driver's controller and node plugin, bin/<name> for a sidecar.
func (c *Cluster) csiBin(name string) string {
	if name == "csi-driver" || name == "csi-node" {
		return c.bin("csidriver")
	}
	return c.bin(name)
}

func (c *Cluster) csiPIDFile(name string) string { return filepath.Join(c.Dir, name+".pid") }

func (c *Cluster) csiLog(name string) string { return filepath.Join(c.Dir, name+".log") }

// startCSIProcess starts p, appending to its log, and waits until it
// serves its socket.
func (c *Cluster) startCSIProcess(ctx context.Context, p csiProcess) error {
	proc, err := startBackground(c.csiBin(p.Name), p.Args, c.csiLog(p.Name), c.csiPIDFile(p.Name))
	if err != nil {
		return err
	}
	if p.Socket == "" {
		return nil
	}
	if err := waitListening(ctx, proc, p.Socket); err != nil {
		return fmt.Errorf("%s did not serve %s (see %s): %w", p.Name, p.Socket, c.csiLog(p.Name), err)
	}
	return nil
}

// controllerManagedAttachDetach is the annotation by which a node leaves
// its volumes' attachment to kube-controller-manager.
const controllerManagedAttachDetach = "volumes.kubernetes.io/controller-managed-attach-detach"

// csiNode labels node n with the driver's topology key, annotates it as a
// kubelet would for the attach/detach controller, and gives it the CSINode
// that a node plugin's registration would make.
func (c *Cluster) csiNode(ctx context.Context, n *corev1.Node, zone string) error {
	// The attach/detach controller attaches volumes only to nodes that say,
	// as a kubelet does by default, that it manages their attachments.
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q},"annotations":{%q:"true"}}}`, CSITopologyKey, zone, controllerManagedAttachDetach)
	if _, err := c.Clientset.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("labelling node %s: %w", n.Name, err)
	}
	csiNode := &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{
			Name: CSIDriverName, NodeID: n.Name, TopologyKeys: []string{CSITopologyKey},
		}}},
	}
	if _, err := c.Clientset.StorageV1().CSINodes().Create(ctx, csiNode, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the CSINode of %s: %w", n.Name, err)
	}
	return nil
}

// csiObjects creates the CSIDriver and StorageClassCSI.
func (c *Cluster) csiObjects(ctx context.Context) error {
	driver := &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: CSIDriverName},
		Spec:       storagev1.CSIDriverSpec{AttachRequired: ptr.To(true), PodInfoOnMount: ptr.To(false)},
	}
	if _, err := c.Clientset.StorageV1().CSIDrivers().Create(ctx, driver, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating CSIDriver %s: %w", CSIDriverName, err)
	}
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: StorageClassCSI},
		Provisioner:       CSIDriverName,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
	}
	if _, err := c.Clientset.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating StorageClass %s: %w", StorageClassCSI, err)
	}
	return nil
}

// stopCSI stops what StartCSI started, sidecars first.
func (c *Cluster) stopCSI() []error {
	var errs []error
	for i := len(csiProcesses) - 1; i >= 0; i-- {
		name := csiProcesses[i]
		if p := processFromPIDFile(c.csiPIDFile(name), c.csiBin(name)); p != nil {
			errs = append(errs, p.stop(10*time.Second))
		}
	}
	return errs
}

// waitListening waits, up to 30 s, until a connection to the unix socket
// path succeeds: a socket file alone may be one that a killed process
// left. It fails at once if p exits.
func waitListening(ctx context.Context, p *process, path string) error {
	return wait.PollUntilContextTimeout(ctx, poll, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if !p.alive() {
			return false, fmt.Errorf("PID %d exited", p.pid)
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", path)
		if err != nil {
			return false, nil
		}
		_ = conn.Close()
		return true, nil
	})
}

// RegisterCSINode does for fake node name, created after StartCSI, what
// StartCSI did for the nodes it found: the driver's topology label and
// CSINode. Its zone must be one the driver knew at its start.
func (c *Cluster) RegisterCSINode(ctx context.Context, name string) error {
	n, err := c.Clientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return c.csiNode(ctx, n, n.Labels[corev1.LabelTopologyZone])
}

// CSINodeLog is the node plugin's log on a cluster with the real node: it
// logs each NodeStageVolume ("staging volume", "staged volume") and
// NodePublishVolume ("published volume") with the volume's ID.
func (c *Cluster) CSINodeLog() string { return filepath.Join(c.Dir, "csi-node.log") }
