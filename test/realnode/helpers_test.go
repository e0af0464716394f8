package realnode

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
	"github.com/st-tech/fluent-pvc-operator/test/images"
)

const (
	claimVolume = "fluent-pvc"
	claimMount  = "/mnt/fluent-pvc"
	// A sidecar that, until it is told to stop, appends numbered lines
	// "<pod> <n>" to the claim's buffer and then the same line to the
	// host's record of what it wrote. TERM only sets a flag (a shell runs
	// a trap between any two commands), so both files always end with the
	// same line.
	writerScript = `stop=
trap 'stop=1' TERM
mkdir -p /e2e/written
me=$(hostname)
# A restarted sidecar goes on from the claim's last line.
i=$(cat ` + claimMount + `/buffer 2>/dev/null | wc -l)
while [ -z "$stop" ]; do
  i=$((i+1))
  echo "$me $i" >> ` + claimMount + `/buffer
  echo "$me $i" >> /e2e/written/$me
  sleep 0.1 & wait $!
done`
	// A drain Job that waits DRAIN_DELAY seconds, then ships the claim's
	// buffer to shipped/<its pod> on the host, atomically (a rename).
	drainScript = `set -e
sleep "${DRAIN_DELAY:-0}"
mkdir -p /e2e/shipped
out=/e2e/shipped/$(hostname)
if [ ! -f ` + claimMount + `/buffer ]; then echo "nothing to ship"; exit 0; fi
cp ` + claimMount + `/buffer "$out.tmp"
mv "$out.tmp" "$out"
echo "shipped $(wc -l < "$out") lines"`
)

// realFluentPVC is the README's FluentPVC with real containers: the
// writer sidecar, a drain Job that ships after drainDelay seconds and is
// not retried within itself, the host directory at /e2e, and a pool of
// poolSize warm PVCs in ns.
func realFluentPVC(name, ns string, poolSize int32, drainDelay int) *fixtures.FluentPVCWrapper {
	return fixtures.MakeFluentPVC(name).PoolSize(poolSize).Mutate(func(f *v1alpha1.FluentPVC) {
		f.Spec.Pool.Namespaces = []string{ns}
		f.Spec.PVCVolumeName = claimVolume
		f.Spec.PVCVolumeMountPath = claimMount
		sidecar := images.BusyboxContainer("writer", writerScript)
		f.Spec.SidecarContainerTemplate = sidecar
		drain := images.BusyboxContainer("drain", drainScript)
		drain.Env = []corev1.EnvVar{{Name: "DRAIN_DELAY", Value: fmt.Sprint(drainDelay)}}
		f.Spec.PVCFinalizerJobSpecTemplate.BackoffLimit = ptr.To[int32](0)
		f.Spec.PVCFinalizerJobSpecTemplate.Template.Spec.Containers = []corev1.Container{drain}
		f.Spec.CommonVolumes = []corev1.Volume{{Name: "e2e", VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: specDir(ns), Type: ptr.To(corev1.HostPathDirectoryOrCreate)},
		}}}
		f.Spec.CommonVolumeMounts = []corev1.VolumeMount{{Name: "e2e", MountPath: "/e2e"}}
	})
}

// labelledPod is a pod of FluentPVC fpvc with the app container.
func labelledPod(ns, fpvc string) *corev1.Pod {
	p := fixtures.MakePod("", ns).GenerateName("app-").FluentPVC(fpvc).Obj()
	p.Spec.Containers = []corev1.Container{images.IdleApp()}
	return p
}

// newNamespace creates a namespace for one spec and, when the spec ends,
// checks that nothing of the operator is left in it.
func newNamespace(prefix string) string {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	Expect(k8s.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			dumpOperatorLogs()
			return // keep the evidence
		}
		Eventually(func(g Gomega) {
			var pvcs corev1.PersistentVolumeClaimList
			g.Expect(k8s.List(ctx, &pvcs, client.InNamespace(ns.Name))).To(Succeed())
			g.Expect(pvcs.Items).To(BeEmpty(), "PVCs left in %s", ns.Name)
			var bs v1alpha1.FluentPVCBindingList
			g.Expect(k8s.List(ctx, &bs, client.InNamespace(ns.Name))).To(Succeed())
			g.Expect(bs.Items).To(BeEmpty(), "bindings left in %s", ns.Name)
		}).WithTimeout(longTimeout).Should(Succeed())
		Expect(k8s.Delete(ctx, ns)).To(Succeed())
	})
	return ns.Name
}

// createFluentPVC creates f and, when the spec ends, deletes it and waits
// until it is gone (its drains finished, its warm PVCs deleted).
func createFluentPVC(f *v1alpha1.FluentPVC) *v1alpha1.FluentPVC {
	GinkgoHelper()
	Expect(k8s.Create(ctx, f)).To(Succeed())
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			return
		}
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, f))).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(f), &v1alpha1.FluentPVC{}))
		}).WithTimeout(longTimeout).Should(BeTrue(), "FluentPVC %s is deleted", f.Name)
	})
	return f
}

// dumpOperatorLogs writes the operator replicas' logs to the spec's output.
func dumpOperatorLogs() {
	out, err := kc.Kubectl(ctx, nil, "-n", operatorNamespace, "logs", "-l", "control-plane=controller-manager", "--tail=200", "--prefix")
	GinkgoWriter.Printf("operator logs (err %v):\n%s\n", err, out)
}

func getPod(ns, name string) func(Gomega) *corev1.Pod {
	return func(g Gomega) *corev1.Pod {
		p := &corev1.Pod{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p)).To(Succeed())
		return p
	}
}

// runningOnRealNode waits until the pod is Running on the real node with
// every container ready, and returns it.
func runningOnRealNode(ns, name string) *corev1.Pod {
	GinkgoHelper()
	var pod *corev1.Pod
	Eventually(func(g Gomega) {
		pod = getPod(ns, name)(g)
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
		g.Expect(pod.Spec.NodeName).To(Equal("real-0"))
		for _, s := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
			g.Expect(s.Ready).To(BeTrue(), "container %s is ready", s.Name)
		}
	}).Should(Succeed())
	return pod
}

func claimOf(pod *corev1.Pod) string {
	GinkgoHelper()
	c := pod.Labels[v1alpha1.BindingNameLabelKey]
	Expect(c).NotTo(BeEmpty(), "pod %s has no claim", pod.Name)
	return c
}

// drained waits until claim ns/name and its binding are gone.
func drained(ns, name string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.PersistentVolumeClaim{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "PVC %s/%s is gone: %v", ns, name, err)
		err = k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &v1alpha1.FluentPVCBinding{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "binding %s/%s is gone: %v", ns, name, err)
	}).WithTimeout(longTimeout).Should(Succeed())
}

// readLines reads a file of the host directory, one element per line; a
// missing file has none.
func readLines(path string) []string {
	GinkgoHelper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = f.Close() }()
	var lines []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		lines = append(lines, s.Text())
	}
	Expect(s.Err()).NotTo(HaveOccurred())
	return lines
}

// specDir is the host directory the pods of namespace ns mount at /e2e.
func specDir(ns string) string { return filepath.Join(hostDir, ns) }

// written is what pod's sidecar wrote to its claim.
func written(ns, pod string) []string {
	return readLines(filepath.Join(specDir(ns), "written", pod))
}

// writing waits until pod's sidecar has written at least n lines.
func writing(ns, pod string, n int) {
	GinkgoHelper()
	Eventually(func() int { return len(written(ns, pod)) }).Should(BeNumerically(">=", n), "lines written by %s", pod)
}

// shipped is what the drain Jobs of namespace ns shipped: one file per
// Job pod that got to ship.
func shipped(ns string) (files int, lines []string) {
	GinkgoHelper()
	entries, err := os.ReadDir(filepath.Join(specDir(ns), "shipped"))
	if os.IsNotExist(err) {
		return 0, nil
	}
	Expect(err).NotTo(HaveOccurred())
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".tmp") {
			files++
			lines = append(lines, readLines(filepath.Join(specDir(ns), "shipped", e.Name()))...)
		}
	}
	return files, lines
}

// expectShippedOnce checks that the lines the pods wrote were shipped,
// each exactly once, in shipments files.
func expectShippedOnce(ns string, pods []string, shipments int) {
	GinkgoHelper()
	var want []string
	for _, p := range pods {
		w := written(ns, p)
		Expect(w).NotTo(BeEmpty(), "pod %s wrote nothing", p)
		want = append(want, w...)
	}
	files, got := shipped(ns)
	Expect(files).To(Equal(shipments), "files shipped")
	slices.Sort(want)
	slices.Sort(got)
	Expect(duplicates(got)).To(BeEmpty(), "lines shipped twice")
	Expect(got).To(HaveLen(len(want)), "lines shipped = lines written")
	Expect(got).To(Equal(want))
	GinkgoWriter.Printf("%d lines written by %d pods, shipped once each in %d files\n", len(want), len(pods), files)
}

func duplicates(sorted []string) []string {
	var d []string
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			d = append(d, sorted[i])
		}
	}
	return d
}

// claimHistory is what a recorder saw of one claim.
type claimHistory struct {
	// Jobs are the drain Jobs created for the claim, in order.
	Jobs []string
	// Completed is when the first of them succeeded (its Complete
	// condition), Deleted when the claim got its deletionTimestamp.
	Completed, Deleted time.Time
}

// recorder watches a namespace's Jobs and PVCs for a spec, from before
// its first pod, so that it sees every drain Job even when one is deleted
// soon after it ran.
type recorder struct {
	mu     sync.Mutex
	claims map[string]*claimHistory
	// exits are the exit codes seen per "<pod>/<container>"; podClaims the
	// claim each pod was given.
	exits     map[string][]int32
	podClaims map[string]string
}

func newRecorder(ns string) *recorder {
	GinkgoHelper()
	r := &recorder{claims: map[string]*claimHistory{}, exits: map[string][]int32{}, podClaims: map[string]string{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	_, err := f.Batch().V1().Jobs().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { r.job(o) },
		UpdateFunc: func(_, o any) { r.job(o) },
	})
	Expect(err).NotTo(HaveOccurred())
	_, err = f.Core().V1().PersistentVolumeClaims().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, o any) { r.claim(o) },
		DeleteFunc: func(o any) { r.claim(o) },
	})
	Expect(err).NotTo(HaveOccurred())
	_, err = f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { r.pod(o) },
		UpdateFunc: func(_, o any) { r.pod(o) },
	})
	Expect(err).NotTo(HaveOccurred())
	stop := make(chan struct{})
	DeferCleanup(func() { close(stop) })
	f.Start(stop)
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for typ, ok := range f.WaitForCacheSync(wctx.Done()) {
		Expect(ok).To(BeTrue(), "informer of %v synced", typ)
	}
	return r
}

func (r *recorder) history(claim string) *claimHistory {
	h := r.claims[claim]
	if h == nil {
		h = &claimHistory{}
		r.claims[claim] = h
	}
	return h
}

func (r *recorder) job(o any) {
	j, ok := o.(*batchv1.Job)
	if !ok {
		return
	}
	var claim string
	for _, v := range j.Spec.Template.Spec.Volumes {
		if v.Name == claimVolume && v.PersistentVolumeClaim != nil {
			claim = v.PersistentVolumeClaim.ClaimName
		}
	}
	if claim == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.history(claim)
	if !slices.Contains(h.Jobs, j.Name) {
		h.Jobs = append(h.Jobs, j.Name)
	}
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue && h.Completed.IsZero() {
			h.Completed = c.LastTransitionTime.Time
		}
	}
}

func (r *recorder) claim(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	c, ok := o.(*corev1.PersistentVolumeClaim)
	if !ok || c.DeletionTimestamp.IsZero() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if h := r.history(c.Name); h.Deleted.IsZero() {
		h.Deleted = c.DeletionTimestamp.Time
	}
}

func (r *recorder) pod(o any) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := p.Labels[v1alpha1.BindingNameLabelKey]; c != "" {
		r.podClaims[p.Name] = c
	}
	for _, s := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		for _, t := range []*corev1.ContainerStateTerminated{s.State.Terminated, s.LastTerminationState.Terminated} {
			key := p.Name + "/" + s.Name
			if t != nil && !slices.Contains(r.exits[key], t.ExitCode) {
				r.exits[key] = append(r.exits[key], t.ExitCode)
			}
		}
	}
}

// exitCodes are the distinct exit codes seen of a container of pod.
func (r *recorder) exitCodes(pod, container string) []int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.exits[pod+"/"+container])
}

// claimOfPod is the claim pod was seen with.
func (r *recorder) claimOfPod(pod string) string {
	GinkgoHelper()
	r.mu.Lock()
	defer r.mu.Unlock()
	Expect(r.podClaims).To(HaveKey(pod), "pod %s was seen with a claim", pod)
	return r.podClaims[pod]
}

// of returns a copy of what was seen of claim.
func (r *recorder) of(claim string) claimHistory {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := *r.history(claim)
	h.Jobs = slices.Clone(h.Jobs)
	return h
}

// drainedOnce checks that one drain Job ran for the claim, that it
// succeeded, and that the claim was deleted only after that (both times
// are the API server's, to the second).
func (r *recorder) drainedOnce(claim string) {
	GinkgoHelper()
	var h claimHistory
	Eventually(func(g Gomega) {
		h = r.of(claim)
		g.Expect(h.Completed.IsZero()).To(BeFalse(), "a drain Job of %s succeeded (seen: %+v)", claim, h)
		g.Expect(h.Deleted.IsZero()).To(BeFalse(), "claim %s was deleted", claim)
	}).WithTimeout(longTimeout).Should(Succeed())
	Expect(h.Jobs).To(HaveLen(1), "drain Jobs of claim %s", claim)
	Expect(h.Deleted).NotTo(BeTemporally("<", h.Completed), "claim %s deleted before its drain succeeded", claim)
}
