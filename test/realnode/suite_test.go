// Package realnode deploys the operator the way a user does (make deploy:
// config/default's Deployment with two replicas, leader election and its
// own certificates, from the image make images builds) on a cluster with a
// real kubelet node (test/cluster's Options.RealNode), and checks with real
// busybox containers that what a sidecar writes to its claim is drained
// exactly once.
//
// It runs with REAL_NODE=1 (make test-e2e-real) and skips, saying why,
// where the machine cannot run a real node.
package realnode

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
	"github.com/st-tech/fluent-pvc-operator/test/images"
)

// Waits on the real node; they include the storage's delays (csiOptions).
const (
	timeout     = 2 * time.Minute
	longTimeout = 4 * time.Minute
	interval    = 250 * time.Millisecond
	stillFor    = 5 * time.Second
	// operatorNamespace is where config/default puts the operator.
	operatorNamespace = "fluent-pvc-operator-system"
)

var (
	kc *cluster.Cluster
	cs kubernetes.Interface
	// k8s reads and writes straight to the API server: no cache.
	k8s    client.Client
	scheme = runtime.NewScheme()
	ctx    = context.Background()
	// hostDir is a directory of this host that every pod of the specs
	// mounts at /e2e: sidecars record there what they wrote
	// (written/<pod>), drain Jobs what they shipped (shipped/<job pod>).
	hostDir string
)

func TestE2EReal(t *testing.T) {
	RegisterFailHandler(Fail)
	fixtures.SetDefaults(timeout, interval, stillFor)
	cluster.SetCommandLogger(GinkgoWriter)
	RunSpecs(t, "End-to-end suite on the real node")
}

var _ = BeforeSuite(func() {
	if os.Getenv("REAL_NODE") != "1" {
		Skip("set REAL_NODE=1 (make test-e2e-real) to run the real-node suite")
	}
	if why := cluster.RealNodeUnavailable(cluster.RepoRoot()); why != "" {
		Skip("real-node suite skipped: " + why)
	}
	Expect(fixtures.AddToScheme(scheme)).To(Succeed())

	var err error
	kc, err = cluster.Up(ctx, cluster.Options{Name: "e2e-real", RealNode: true, Out: GinkgoWriter})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		if os.Getenv("E2E_KEEP_CLUSTER") == "" {
			Expect(kc.Down()).To(Succeed())
		}
	})
	cs = kc.Clientset
	k8s, err = client.New(kc.Config, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	hostDir = kc.Dir + "/e2e"
	Expect(os.MkdirAll(hostDir, 0o755)).To(Succeed())
	startCSI()

	deploy()
})

// csiOptions are the delays of the suite's CSI driver: a cloud disk's
// order (attach slower than create or format), short enough for a suite.
// The attach delay is also the detach's, the window in which a volume
// still attached to one node is refused to another.
var csiOptions = cluster.CSIOptions{CreateDelay: time.Second, AttachDelay: 3 * time.Second, FormatDelay: time.Second}

// csiUnavailable says why the suite's storage is the hostPath test
// provisioner's rather than the CSI driver's, "" when it is the driver's.
var csiUnavailable string

// storageClass is the class of every spec's claims (shippingFluentPVC):
// the CSI driver's, else the hostPath provisioner's.
var storageClass = cluster.StorageClassCSI

// startCSI starts the CSI driver, behind the real external-provisioner and
// external-attacher, so that every spec's claims are attached, staged and
// published by the kubelet as a cloud disk's are. Where the checkout is
// too deep for the driver's registration socket, the specs' claims are
// the hostPath provisioner's and the CSI specs skip, saying why.
func startCSI() {
	GinkgoHelper()
	err := kc.StartCSI(ctx, csiOptions)
	if errors.Is(err, cluster.ErrCSISocketPathTooLong) {
		csiUnavailable, storageClass = err.Error(), cluster.StorageClassStandard
		GinkgoWriter.Printf("the suite's storage is the hostPath provisioner's: %s\n", csiUnavailable)
		return
	}
	Expect(err).NotTo(HaveOccurred())
}

// requireCSI skips a spec that needs the CSI driver where it does not run.
func requireCSI() {
	if csiUnavailable != "" {
		Skip("the CSI driver does not run here: " + csiUnavailable)
	}
}

// runMake runs a target of the repository's Makefile against the cluster, as
// the README's "Deploying to a cluster" does.
func runMake(args ...string) {
	GinkgoHelper()
	cmd := exec.CommandContext(ctx, "make", append([]string{"--no-print-directory"}, args...)...)
	cmd.Dir = cluster.RepoRoot()
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kc.Kubeconfig)
	cmd.Stdout, cmd.Stderr = GinkgoWriter, GinkgoWriter
	By("make " + strings.Join(args, " "))
	Expect(cmd.Run()).To(Succeed(), "make %s", strings.Join(args, " "))
}

// deploy is the README's "Deploying to a cluster" with the image that
// make images built, which the real node's containerd already has.
func deploy() {
	GinkgoHelper()
	runMake("deploy", "IMG="+images.OperatorRef)
}

// undeploy removes the operator and keeps its CRDs and their objects.
func undeploy() {
	GinkgoHelper()
	runMake("undeploy")
}

// What a spec leaves when it ends: its namespace is deleted once the
// operator removed every claim and binding it made there, its FluentPVCs
// are deleted and waited for. When the spec failed both are kept, as
// evidence, and the operator's logs are printed.
var (
	namespaceCleanup = &fixtures.Cleanup{DeferCleanup: DeferCleanup, Failed: specFailed, KeepOnFailure: true, OnFailure: dumpOperatorLogs,
		Timeout: longTimeout, Empty: []client.ObjectList{&corev1.PersistentVolumeClaimList{}, &v1alpha1.FluentPVCBindingList{}}}
	fluentPVCCleanup = &fixtures.Cleanup{DeferCleanup: DeferCleanup, Failed: specFailed, KeepOnFailure: true, Timeout: longTimeout}
)

func specFailed() bool { return CurrentSpecReport().Failed() }

// dumpOperatorLogs writes the operator replicas' logs to the spec's output.
func dumpOperatorLogs() {
	out, err := kc.Kubectl(ctx, nil, "-n", operatorNamespace, "logs", "-l", "control-plane=controller-manager", "--tail=200", "--prefix")
	GinkgoWriter.Printf("operator logs (err %v):\n%s\n", err, out)
}
