package cluster_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestCSISmoke brings a kwok cluster up with CSI storage (StartCSI):
// test/csidriver behind the real external-provisioner and
// external-attacher. A WaitForFirstConsumer claim is provisioned by
// CreateVolume in its pod's zone, kube-controller-manager attaches it to
// the pod's node through a VolumeAttachment that the external-attacher
// marks attached, deleting the pod detaches it, deleting the claim deletes
// the volume, and Down leaves no process. It runs only with CSI_CLUSTER=1
// and bin/csi-provisioner and bin/csi-attacher (make csi-bins).
func TestCSISmoke(t *testing.T) {
	if os.Getenv("CSI_CLUSTER") != "1" {
		t.Skip("set CSI_CLUSTER=1 (and run make csi-bins) to bring up a kwok cluster with CSI storage")
	}
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(fixtures.LongTimeout)
	g.SetDefaultEventuallyPollingInterval(fixtures.Interval)
	ctx := t.Context()

	c, err := cluster.Up(ctx, cluster.Options{Name: "csi", ProvisionerDelay: time.Second, Out: testWriter{t}})
	g.Expect(err).NotTo(HaveOccurred())
	downed := false
	t.Cleanup(func() {
		if !downed {
			_ = c.Down()
		}
	})
	g.Expect(c.StartCSI(ctx, cluster.CSIOptions{CreateDelay: time.Second, AttachDelay: time.Second})).To(Succeed())
	cs := c.Clientset
	ns := "csi"
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "disk", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(cluster.StorageClassCSI),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	_, err = cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	pod := fixtures.MakePod("app", ns).Claim(pvc.Name).Obj()
	_, err = cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	var pv *corev1.PersistentVolume
	var node *corev1.Node
	g.Eventually(func(g Gomega) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Spec.NodeName).NotTo(BeEmpty(), "scheduled")
		node, err = cs.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		claim, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, pvc.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(claim.Status.Phase).To(Equal(corev1.ClaimBound))
		pv, err = cs.CoreV1().PersistentVolumes().Get(ctx, claim.Spec.VolumeName, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}).Should(Succeed())

	By := func(what string) { t.Log(what) }
	By("the volume is the driver's, in the zone of the pod's node")
	g.Expect(pv.Spec.CSI).NotTo(BeNil())
	g.Expect(pv.Spec.CSI.Driver).To(Equal(cluster.CSIDriverName))
	g.Expect(pv.Spec.NodeAffinity.Required.NodeSelectorTerms).To(ContainElement(HaveField("MatchExpressions", ContainElement(And(
		HaveField("Key", cluster.CSITopologyKey), HaveField("Values", ConsistOf(node.Labels[corev1.LabelTopologyZone])))))))

	By("kube-controller-manager attaches it to the pod's node, through the external-attacher")
	attachment := func() (*storagev1.VolumeAttachment, error) {
		l, err := cs.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for i := range l.Items {
			if a := &l.Items[i]; ptr.Deref(a.Spec.Source.PersistentVolumeName, "") == pv.Name {
				return a, nil
			}
		}
		return nil, nil
	}
	g.Eventually(func(g Gomega) {
		a, err := attachment()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(a).NotTo(BeNil(), "a VolumeAttachment of %s", pv.Name)
		g.Expect(a.Spec.Attacher).To(Equal(cluster.CSIDriverName))
		g.Expect(a.Spec.NodeName).To(Equal(node.Name))
		g.Expect(a.Status.Attached).To(BeTrue(), "attached: %+v", a.Status)
	}).Should(Succeed())

	By("deleting the pod detaches the volume; deleting the claim deletes it")
	g.Expect(cs.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})).To(Succeed())
	g.Eventually(func(g Gomega) {
		a, err := attachment()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(a).To(BeNil(), "detached")
	}).Should(Succeed())
	g.Expect(cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, pvc.Name, metav1.DeleteOptions{})).To(Succeed())
	g.Eventually(func() bool {
		_, err := cs.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}).Should(BeTrue(), "the volume deleted")
	_, err = os.Stat(filepath.Join(c.Dir, "csi", "data", pv.Spec.CSI.VolumeHandle))
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "DeleteVolume removes the volume's directory: %v", err)

	By("Down stops the driver and the sidecars")
	pids := c.PIDs()
	for _, name := range []string{"csi-driver", "csi-provisioner", "csi-attacher"} {
		g.Expect(pids).To(HaveKey(name))
	}
	g.Expect(c.Down()).To(Succeed())
	downed = true
	for name, pid := range pids {
		// kwokctl's delete signals the control plane and returns.
		g.Eventually(func() bool { return running(pid) }).WithTimeout(fixtures.Timeout).Should(BeFalse(), "%s (PID %d) still runs after Down", name, pid)
	}
}

// TestCSIRealNode brings the real node up with CSI storage: the driver's
// node plugin registers with the real kubelet, which stages and publishes
// an attached volume for a real container; what the container writes
// lands in the volume's directory, and deleting the pod unpublishes,
// unstages and detaches it. It runs only with REAL_NODE=1 and
// CSI_CLUSTER=1 (after make real-node-bins images csi-bins).
func TestCSIRealNode(t *testing.T) {
	if os.Getenv("CSI_CLUSTER") != "1" || os.Getenv("REAL_NODE") != "1" {
		t.Skip("set CSI_CLUSTER=1 and REAL_NODE=1 (after make real-node-bins images csi-bins) to bring up the real node with CSI storage")
	}
	if why := cluster.RealNodeUnavailable(cluster.RepoRoot()); why != "" {
		t.Skip(why)
	}
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(fixtures.LongTimeout)
	g.SetDefaultEventuallyPollingInterval(fixtures.Interval)
	ctx := t.Context()

	c, err := cluster.Up(ctx, cluster.Options{Name: "csi-real", RealNode: true, Out: testWriter{t}})
	g.Expect(err).NotTo(HaveOccurred())
	downed := false
	t.Cleanup(func() {
		if !downed {
			_ = c.Down()
		}
	})
	err = c.StartCSI(ctx, cluster.CSIOptions{CreateDelay: time.Second, AttachDelay: time.Second, FormatDelay: time.Second})
	if errors.Is(err, cluster.ErrCSISocketPathTooLong) {
		t.Skipf("the checkout is too deep for the real node's CSI sockets: %v", err)
	}
	g.Expect(err).NotTo(HaveOccurred())
	cs := c.Clientset

	By := func(what string) { t.Log(what) }
	By("the kubelet registers the node plugin")
	g.Eventually(func(g Gomega) {
		n, err := cs.StorageV1().CSINodes().Get(ctx, cluster.RealNodeName, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.Spec.Drivers).To(ContainElement(HaveField("Name", cluster.CSIDriverName)))
	}).Should(Succeed())

	ns := "default"
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "disk", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(cluster.StorageClassCSI),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	_, err = cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "writer", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector:                 map[string]string{cluster.NodeTypeLabelKey: cluster.RealNodeType},
			AutomountServiceAccountToken: ptr.To(false),
			RestartPolicy:                corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "c", Image: "fluent-pvc-operator.local/busybox:dev", ImagePullPolicy: corev1.PullNever,
				Command:      []string{"sh", "-c", "echo through the kubelet > /data/out"},
				VolumeMounts: []corev1.VolumeMount{{Name: "d", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name}}}},
		},
	}
	_, err = cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	By("the container writes through the kubelet's CSI mount into the volume")
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

	By("deleting the pod unpublishes, unstages and detaches the volume")
	g.Expect(cs.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{})).To(Succeed())
	g.Eventually(func(g Gomega) {
		l, err := cs.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(l.Items).To(BeEmpty())
	}).Should(Succeed())

	pids := c.PIDs()
	g.Expect(pids).To(HaveKey("csi-node"))
	g.Expect(c.Down()).To(Succeed())
	downed = true
	for name, pid := range pids {
		// kwokctl's delete signals the control plane and returns.
		g.Eventually(func() bool { return running(pid) }).WithTimeout(fixtures.Timeout).Should(BeFalse(), "%s (PID %d) still runs after Down", name, pid)
	}
}
