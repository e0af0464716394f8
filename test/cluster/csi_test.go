package cluster_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestCSISmoke brings a kwok cluster up with CSI storage (StartCSI):
// test/csidriver behind the real external-provisioner and
// external-attacher. A WaitForFirstConsumer claim is provisioned by
// CreateVolume in its pod's zone, kube-controller-manager attaches it to
// the pod's node through a VolumeAttachment that the external-attacher
// marks attached, deleting the pod detaches it, and deleting the claim
// deletes the volume. Under faults: a driver killed while it attaches a
// volume attaches it once restarted, and a ReadWriteOnce volume attached
// to one node is refused to a second until the first lets it go. Down
// leaves no process, socket or mount. It runs only with CSI_CLUSTER=1 and
// bin/csi-provisioner and bin/csi-attacher (make csi-bins).
func TestCSISmoke(t *testing.T) {
	requireEnv(t, "set CSI_CLUSTER=1 (and run make csi-bins) to bring up a kwok cluster with CSI storage", "CSI_CLUSTER")
	g := newG(t)
	ctx := t.Context()
	c := upCluster(t, g, cluster.Options{Name: "csi", ProvisionerDelay: time.Second})
	// The attach delay leaves the kill below time to land while an attach
	// is in flight.
	startCSI(t, g, c, cluster.CSIOptions{CreateDelay: time.Second, AttachDelay: 2 * time.Second})
	cs := c.Clientset
	ns := "csi"
	createNamespace(ctx, g, cs, ns)

	t.Run("a claim is provisioned in its pod's zone, attached, detached and deleted", func(t *testing.T) {
		g := newG(t)
		pvc := createClaim(ctx, g, cs, ns, "disk", cluster.StorageClassCSI)
		pod := createClaimPod(ctx, g, cs, ns, "app", pvc.Name, "")
		pv, node := boundVolume(ctx, g, cs, pod)

		t.Log("the volume is the driver's, in the zone of the pod's node")
		g.Expect(pv.Spec.CSI).NotTo(BeNil())
		g.Expect(pv.Spec.CSI.Driver).To(Equal(cluster.CSIDriverName))
		g.Expect(pv.Spec.NodeAffinity.Required.NodeSelectorTerms).To(ContainElement(HaveField("MatchExpressions", ContainElement(And(
			HaveField("Key", cluster.CSITopologyKey), HaveField("Values", ConsistOf(node.Labels[corev1.LabelTopologyZone])))))))

		t.Log("kube-controller-manager attaches it to the pod's node, through the external-attacher")
		g.Eventually(attachedNodes(ctx, cs, pv.Name)).Should(Equal(map[string]bool{node.Name: true}))
		a, err := attachments(ctx, cs, pv.Name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(a).To(ConsistOf(HaveField("Spec.Attacher", cluster.CSIDriverName)))

		t.Log("deleting the pod detaches the volume; deleting the claim deletes it")
		deletePod(ctx, g, cs, pod)
		g.Eventually(attachedNodes(ctx, cs, pv.Name)).Should(BeEmpty(), "detached")
		g.Expect(cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, pvc.Name, metav1.DeleteOptions{})).To(Succeed())
		g.Eventually(func() bool {
			_, err := cs.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).Should(BeTrue(), "the volume deleted")
		_, err = os.Stat(filepath.Join(c.Dir, "csi", "data", pv.Spec.CSI.VolumeHandle))
		g.Expect(os.IsNotExist(err)).To(BeTrue(), "DeleteVolume removes the volume's directory: %v", err)
	})

	t.Run("a controller killed while it attaches a volume attaches it once restarted", func(t *testing.T) {
		g := newG(t)
		pvc := createClaim(ctx, g, cs, ns, "killed", cluster.StorageClassCSI)
		pod := createClaimPod(ctx, g, cs, ns, "killed", pvc.Name, "")
		pv, node := boundVolume(ctx, g, cs, pod)
		handle := pv.Spec.CSI.VolumeHandle

		t.Log("a VolumeAttachment waits for ControllerPublishVolume, which the driver has begun")
		g.Eventually(func(g Gomega) {
			g.Expect(attachedNodes(ctx, cs, pv.Name)()).To(Equal(map[string]bool{node.Name: false}))
			g.Expect(c.CSIAttachments()).To(HaveKeyWithValue(handle, map[string]string{node.Name: "Attaching"}))
		}).WithPolling(10 * time.Millisecond).Should(Succeed())
		pid, err := c.KillCSIController()
		g.Expect(err).NotTo(HaveOccurred())
		t.Logf("killed the driver's controller, PID %d", pid)
		g.Expect(attachedNodes(ctx, cs, pv.Name)()).To(Equal(map[string]bool{node.Name: false}), "the kill lands before the attach completes")
		g.Expect(c.CSIAttachments()).To(HaveKeyWithValue(handle, map[string]string{node.Name: "Attaching"}))

		t.Log("restarted on its state, it completes the attach that the external-attacher retries")
		g.Expect(c.RestartCSIController(ctx)).To(Succeed())
		g.Expect(c.PIDs()).To(HaveKeyWithValue("csi-driver", Not(Equal(pid))))
		g.Eventually(attachedNodes(ctx, cs, pv.Name)).Should(Equal(map[string]bool{node.Name: true}))
		g.Expect(c.CSIAttachments()).To(HaveKeyWithValue(handle, map[string]string{node.Name: "Attached"}), "one attachment")
	})

	t.Run("a ReadWriteOnce volume attached to a node is refused to a second one until its pod is deleted", func(t *testing.T) {
		g := newG(t)
		pvc := createClaim(ctx, g, cs, ns, "shared", cluster.StorageClassCSI)
		first := createClaimPod(ctx, g, cs, ns, "first", pvc.Name, "")
		pv, node := boundVolume(ctx, g, cs, first)
		handle := pv.Spec.CSI.VolumeHandle
		g.Eventually(attachedNodes(ctx, cs, pv.Name)).Should(Equal(map[string]bool{node.Name: true}))

		other := otherNodeInZone(ctx, g, cs, node)
		second := createClaimPod(ctx, g, cs, ns, "second", pvc.Name, other)
		t.Logf("the attach/detach controller refuses the volume to %s, the second pod's node", other)
		g.Eventually(func(g Gomega) {
			events, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
				FieldSelector: fields.OneTermEqualSelector("involvedObject.name", second.Name).String(),
			})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(events.Items).To(ContainElement(And(
				HaveField("Reason", "FailedAttachVolume"), HaveField("Message", ContainSubstring("Multi-Attach error")))))
		}).Should(Succeed())
		g.Consistently(attachedNodes(ctx, cs, pv.Name)).Should(WithTransform(attachedOnes, ConsistOf(node.Name)), "attached to the first node only")

		t.Log("the driver refuses it too, with the gRPC codes of a cloud's disk")
		ctrl := csi.NewControllerClient(dialCSI(t, g, c.CSIControllerSocket()))
		mountCap := &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}
		cases := map[string]struct {
			volume, node string
			wantCode     codes.Code
		}{
			"the volume to the second node": {volume: handle, node: other, wantCode: codes.FailedPrecondition},
			"an unknown volume":             {volume: "vol-unknown", node: other, wantCode: codes.NotFound},
		}
		for name, tc := range cases {
			t.Run(name, func(t *testing.T) {
				callCtx, cancel := context.WithTimeout(ctx, fixtures.Timeout)
				defer cancel()
				_, err := ctrl.ControllerPublishVolume(callCtx, &csi.ControllerPublishVolumeRequest{VolumeId: tc.volume, NodeId: tc.node, VolumeCapability: mountCap})
				NewWithT(t).Expect(status.Code(err)).To(Equal(tc.wantCode), "%v", err)
			})
		}

		t.Log("deleting the first pod detaches the volume, which then attaches to the second pod's node")
		deletePod(ctx, g, cs, first)
		g.Eventually(attachedNodes(ctx, cs, pv.Name)).Should(Equal(map[string]bool{other: true}))
		g.Expect(c.CSIAttachments()).To(HaveKeyWithValue(handle, map[string]string{other: "Attached"}))
	})

	c.down(g, "csi-driver", "csi-provisioner", "csi-attacher")
}

// TestCSIRealNode brings the real node up with CSI storage: the driver's
// node plugin registers with the real kubelet, which stages and publishes
// an attached volume for a real container; what the container writes
// lands in the volume's directory, and deleting the pod unpublishes,
// unstages and detaches it. Down leaves no process, socket or mount. It
// runs only with REAL_NODE=1 and CSI_CLUSTER=1 (after make real-node-bins
// images csi-bins).
func TestCSIRealNode(t *testing.T) {
	requireEnv(t, "set CSI_CLUSTER=1 and REAL_NODE=1 (after make real-node-bins images csi-bins) to bring up the real node with CSI storage",
		"CSI_CLUSTER", "REAL_NODE")
	requireRealNode(t)
	g := newG(t)
	ctx := t.Context()
	c := upCluster(t, g, cluster.Options{Name: "csi-real", RealNode: true})
	startCSI(t, g, c, cluster.CSIOptions{CreateDelay: time.Second, AttachDelay: time.Second, FormatDelay: time.Second})
	cs := c.Clientset

	t.Log("the kubelet registers the node plugin")
	g.Eventually(func(g Gomega) {
		n, err := cs.StorageV1().CSINodes().Get(ctx, cluster.RealNodeName, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.Spec.Drivers).To(ContainElement(HaveField("Name", cluster.CSIDriverName)))
	}).Should(Succeed())

	ns := "default"
	pvc := createClaim(ctx, g, cs, ns, "disk", cluster.StorageClassCSI)
	pod := realNodePod("writer", ns, "echo through the kubelet > /data/out", claimVolume(pvc.Name))
	_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	t.Log("the container writes through the kubelet's CSI mount into the volume")
	g.Eventually(func(g Gomega) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Status.Phase).To(Equal(corev1.PodSucceeded), "%+v", p.Status)
	}).Should(Succeed())
	claim, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, pvc.Name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, claim.Spec.VolumeName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	out, err := os.ReadFile(filepath.Join(c.Dir, "csi", "data", pv.Spec.CSI.VolumeHandle, "data", "out"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(out)).To(Equal("through the kubelet\n"))

	t.Log("deleting the pod unpublishes, unstages and detaches the volume")
	g.Expect(cs.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{})).To(Succeed())
	g.Eventually(func(g Gomega) {
		l, err := cs.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(l.Items).To(BeEmpty())
	}).Should(Succeed())

	c.down(g, "csi-driver", "csi-provisioner", "csi-attacher", "csi-node")
}

// startCSI gives c CSI storage (StartCSI), and skips t where the
// checkout is too deep for the real node's sockets.
func startCSI(t *testing.T, g Gomega, c *testCluster, o cluster.CSIOptions) {
	t.Helper()
	err := c.StartCSI(t.Context(), o)
	if errors.Is(err, cluster.ErrCSISocketPathTooLong) {
		t.Skipf("the checkout is too deep for the real node's CSI sockets: %v", err)
	}
	g.Expect(err).NotTo(HaveOccurred())
}

// createClaimPod creates a pod named name with the claim as a volume, on
// node if it is not empty (bypassing the scheduler) or where the
// scheduler puts it.
func createClaimPod(ctx context.Context, g Gomega, cs kubernetes.Interface, ns, name, claim, node string) *corev1.Pod {
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, fixtures.MakePod(name, ns).Claim(claim).NodeName(node).Obj(), metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	return pod
}

// deletePod deletes pod at once.
func deletePod(ctx context.Context, g Gomega, cs kubernetes.Interface, pod *corev1.Pod) {
	g.Expect(cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})).To(Succeed())
}

// boundVolume waits until pod is scheduled and its one claim bound, and
// returns the claim's volume and the pod's node.
func boundVolume(ctx context.Context, g Gomega, cs kubernetes.Interface, pod *corev1.Pod) (*corev1.PersistentVolume, *corev1.Node) {
	var pv *corev1.PersistentVolume
	var node *corev1.Node
	g.Eventually(func(g Gomega) {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Spec.NodeName).NotTo(BeEmpty(), "scheduled")
		node, err = cs.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		claim, err := cs.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(claim.Status.Phase).To(Equal(corev1.ClaimBound))
		pv, err = cs.CoreV1().PersistentVolumes().Get(ctx, claim.Spec.VolumeName, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pv.Spec.CSI).NotTo(BeNil(), "a CSI volume")
	}).Should(Succeed())
	return pv, node
}

// otherNodeInZone is a fake node in node's zone other than node.
func otherNodeInZone(ctx context.Context, g Gomega, cs kubernetes.Interface, node *corev1.Node) string {
	zone := node.Labels[corev1.LabelTopologyZone]
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: corev1.LabelTopologyZone + "=" + zone})
	g.Expect(err).NotTo(HaveOccurred())
	var others []string
	for _, n := range nodes.Items {
		if n.Name != node.Name && n.Name != cluster.RealNodeName {
			others = append(others, n.Name)
		}
	}
	g.Expect(others).NotTo(BeEmpty(), "a second node in zone %s", zone)
	return others[0]
}

// attachments are the VolumeAttachments of the volume pv.
func attachments(ctx context.Context, cs kubernetes.Interface, pv string) ([]storagev1.VolumeAttachment, error) {
	l, err := cs.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []storagev1.VolumeAttachment
	for _, a := range l.Items {
		if ptr.Deref(a.Spec.Source.PersistentVolumeName, "") == pv {
			out = append(out, a)
		}
	}
	return out, nil
}

// attachedNodes polls the VolumeAttachments of the volume pv: whether
// each names its node attached.
func attachedNodes(ctx context.Context, cs kubernetes.Interface, pv string) func() (map[string]bool, error) {
	return func() (map[string]bool, error) {
		l, err := attachments(ctx, cs, pv)
		if err != nil {
			return nil, err
		}
		nodes := map[string]bool{}
		for _, a := range l {
			nodes[a.Spec.NodeName] = a.Status.Attached
		}
		return nodes, nil
	}
}

// attachedOnes are the nodes of attachedNodes whose attachment is
// attached.
func attachedOnes(nodes map[string]bool) []string {
	var out []string
	for n, attached := range nodes {
		if attached {
			out = append(out, n)
		}
	}
	return out
}

// dialCSI is a gRPC client of the unix socket path, closed when t ends.
func dialCSI(t *testing.T, g Gomega, path string) *grpc.ClientConn {
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
