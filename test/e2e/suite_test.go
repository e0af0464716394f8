// Package e2e runs the operator as a local process against a whole simulated
// cluster (test/cluster: kube-apiserver, kube-controller-manager with the PV,
// Job and garbage collectors, kube-scheduler, kwok nodes in three zones, and a
// test provisioner with a 5 s delay), and checks what a user sees.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// Waits on the simulated cluster; they include the provisioner's delay.
const (
	timeout     = 2 * time.Minute
	longTimeout = 4 * time.Minute
	interval    = 200 * time.Millisecond
	stillFor    = 5 * time.Second
	// Short timers of the operator, so that retries and orphans resolve
	// within a spec.
	orphanGracePeriod = 10 * time.Second
	// strandedAttachmentTimeout is how long a staged warm PVC's volume
	// stays attached to a deleted node before the pool replaces the PVC.
	strandedAttachmentTimeout = 5 * time.Second
)

var (
	kc *cluster.Cluster
	op *cluster.Operator
	// k8s reads through informers (a cache) and writes straight to the API.
	k8s      client.Client
	informer cache.Cache
	scheme   = runtime.NewScheme()
	ctx      = context.Background()
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	fixtures.SetDefaults(timeout, interval, stillFor)
	// The suite's informers log through controller-runtime; errors go to
	// the spec's output, and nothing warns that no logger was set.
	cluster.SetCommandLogger(GinkgoWriter)
	RunSpecs(t, "End-to-end suite on a simulated cluster")
}

// anySpecFailed is true once a spec failed.
var anySpecFailed bool

var _ = ReportAfterEach(func(r SpecReport) {
	if r.Failed() {
		anySpecFailed = true
	}
})

var _ = BeforeSuite(func() {
	Expect(fixtures.AddToScheme(scheme)).To(Succeed())

	var err error
	kc, err = cluster.Up(ctx, cluster.Options{Name: "e2e", ExtraStages: cluster.E2EStages(), Out: GinkgoWriter})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		if os.Getenv("E2E_KEEP_CLUSTER") == "" {
			Expect(kc.Down()).To(Succeed())
		}
	})

	// CSI storage beside the hostPath provisioner, for the specs that need
	// attachment and topology as a cloud disk has them (StorageClassCSI).
	Expect(kc.StartCSI(ctx, cluster.CSIOptions{CreateDelay: time.Second, AttachDelay: time.Second})).To(Succeed())

	out, err := kc.DryRunDeployManifests(ctx)
	Expect(err).NotTo(HaveOccurred(), "config/default must be valid against the API server")
	GinkgoWriter.Printf("server-side dry run of config/default:\n%s\n", out)

	// The operator runs with only the RBAC of config/default. E2E_OPERATOR_ARGS
	// adds flags, e.g. --webhook-bind-address=bad to show that the suite fails
	// without the webhook.
	// With a leader elected, as in a cluster: the monitoring spec reads
	// the leader's metric.
	op, err = cluster.RunOperator(ctx, kc, cluster.OperatorOptions{AsServiceAccount: true, Args: append([]string{
		"--leader-elect=true", "--namespace=" + cluster.OperatorNamespace,
		"--orphan-grace-period=" + orphanGracePeriod.String(),
		"--allow-short-orphan-grace-period",
		"--drain-backoff-base=2s",
		"--stranded-attachment-timeout=" + strandedAttachmentTimeout.String(),
	}, strings.Fields(os.Getenv("E2E_OPERATOR_ARGS"))...)})
	Expect(err).NotTo(HaveOccurred())
	// The cluster's directory, and the log with it, goes with the cluster:
	// a copy outside it is kept when a spec failed, or on request.
	DeferCleanup(func() {
		if !anySpecFailed && os.Getenv("E2E_OPERATOR_LOG") == "" {
			return
		}
		log, err := os.ReadFile(op.LogPath)
		Expect(err).NotTo(HaveOccurred())
		kept := filepath.Join(os.TempDir(), fmt.Sprintf("fluent-pvc-e2e-operator-%d.log", time.Now().Unix()))
		Expect(os.WriteFile(kept, log, 0o644)).To(Succeed())
		GinkgoWriter.Printf("operator log: %s\n", kept)
	})

	informer, err = cache.New(kc.Config, cache.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	cacheCtx, cancel := context.WithCancel(ctx)
	DeferCleanup(cancel)
	// Start the informers the specs read through before the cache.
	for _, obj := range []client.Object{&corev1.Pod{}, &corev1.PersistentVolumeClaim{}, &corev1.PersistentVolume{},
		&batchv1.Job{}, &v1alpha1.FluentPVCBinding{}, &v1alpha1.FluentPVC{}} {
		_, err := informer.GetInformer(cacheCtx, obj)
		Expect(err).NotTo(HaveOccurred())
	}
	go func() {
		defer GinkgoRecover()
		Expect(informer.Start(cacheCtx)).To(Succeed())
	}()
	Expect(informer.WaitForCacheSync(cacheCtx)).To(BeTrue())
	k8s, err = client.New(kc.Config, client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: informer}})
	Expect(err).NotTo(HaveOccurred())
})

// What a spec leaves when it ends: its namespace is deleted once the
// operator removed every claim, Job and binding it made there (kept, as
// evidence, when the spec failed); its FluentPVCs are deleted and waited
// for.
var (
	namespaceCleanup = &fixtures.Cleanup{DeferCleanup: DeferCleanup, Failed: specFailed, KeepOnFailure: true,
		Empty: []client.ObjectList{&corev1.PersistentVolumeClaimList{}, &batchv1.JobList{}, &v1alpha1.FluentPVCBindingList{}}}
	fluentPVCCleanup = &fixtures.Cleanup{DeferCleanup: DeferCleanup, Timeout: timeout}
)

func specFailed() bool { return CurrentSpecReport().Failed() }

// e2eFluentPVC is the sample FluentPVC named name, with a finalizer Job that
// fails fast when its pod fails.
func e2eFluentPVC(name string) *fixtures.FluentPVCWrapper {
	return fixtures.MakeFluentPVC(name).Mutate(func(f *v1alpha1.FluentPVC) {
		f.Spec.PVCFinalizerJobSpecTemplate.BackoffLimit = new(int32)
	})
}

// running waits until pod ns/name is Running and returns it.
func running(ns, name string) *corev1.Pod {
	GinkgoHelper()
	var pod *corev1.Pod
	Eventually(func(g Gomega) {
		pod = fixtures.GetPod(ctx, g, k8s, ns, name)
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
	}).Should(Succeed())
	return pod
}

// podsOf lists the pods of ns with label app=app.
func podsOf(g Gomega, ns, app string) []corev1.Pod {
	var l corev1.PodList
	g.Expect(k8s.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{"app": app})).To(Succeed())
	return l.Items
}

// kubectl runs bin/kubectl against the cluster.
func kubectl(args ...string) {
	GinkgoHelper()
	_, err := kc.Kubectl(ctx, nil, args...)
	Expect(err).NotTo(HaveOccurred())
}
