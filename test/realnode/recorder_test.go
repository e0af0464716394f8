package realnode

import (
	"context"
	"slices"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

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
	startInformers(f)
	return r
}

// startInformers starts f's informers until the spec ends, and waits
// until they have synced.
func startInformers(f informers.SharedInformerFactory) {
	GinkgoHelper()
	stop := make(chan struct{})
	DeferCleanup(func() { close(stop) })
	f.Start(stop)
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for typ, ok := range f.WaitForCacheSync(wctx.Done()) {
		Expect(ok).To(BeTrue(), "informer of %v synced", typ)
	}
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
