package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/checkout"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
	"github.com/st-tech/fluent-pvc-operator/test/images"
	"github.com/st-tech/fluent-pvc-operator/webhook"
)

// Labels and names of the objects the bench makes.
const (
	// measureLabelKey marks the pods whose start-up the bench observes; the
	// bench's pod informer sees only them.
	measureLabelKey = "bench.fluent-pvc-operator/measure"
	// unscheduledScheduler is a scheduler that does not exist: pods that
	// name it stay Pending without the scheduler or kwok ever touching them.
	unscheduledScheduler = "bench-no-scheduler"
	// webhookName is our webhook's name in the API server's metrics.
	webhookName = "pod.fluent-pvc-operator.tech.zozo.com"
	// timeouts of the waits on the cluster.
	podTimeout   = 3 * time.Minute
	drainTimeout = 4 * time.Minute
	poll         = 100 * time.Millisecond
)

// env is the cluster, the operator and the bench's clients and informers.
type env struct {
	cfg config
	out io.Writer // progress
	// real is the real-node tier: pods run busybox on cluster.RealNodeName.
	real bool
	// csi is the CSI tier (real is set too): claims on
	// cluster.StorageClassCSI, attached, staged and published by
	// test/csidriver; the bench also watches VolumeAttachments.
	csi bool
	// kwokCSI says that the simulated tier has CSI storage too, started
	// for the admission phase's staged levels (startStagedPools); e.csi
	// stays false: only their pools are on it.
	kwokCSI bool
	kc      *cluster.Cluster
	op      *cluster.Operator
	// cl writes (and reads uncached) without a client-side rate limit.
	cl client.Client
	// cache holds the measured pods, FluentPVCs, bindings and PVCs.
	cache   cache.Cache
	running *runningTracker
	pvcs    *pvcTimeline
	// attachments are the VolumeAttachments' times (CSI tier only).
	attachments *attachTimeline
}

// storageClass is the class of the tier's claims: StorageClassCSI on the
// CSI tier, else StorageClassStandard (the test provisioner).
func (e *env) storageClass() string {
	if e.csi {
		return cluster.StorageClassCSI
	}
	return cluster.StorageClassStandard
}

func (e *env) progress(format string, args ...any) {
	tier := ""
	switch {
	case e.csi:
		tier = " CSI"
	case e.real:
		tier = " real node"
	}
	fmt.Fprintf(e.out, "bench %s%s: "+format+"\n", append([]any{time.Now().Format("15:04:05"), tier}, args...)...)
}

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = fixtures.AddToScheme(s)
	return s
}

// unlimited is cfg without a client-side rate limit (QPS < 0 disables the
// token bucket), for creating thousands of pods quickly.
func unlimited(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = -1, 0
	return c
}

// startInformers starts the bench's cache and event handlers.
func (e *env) startInformers(ctx context.Context) error {
	scheme := newScheme()
	measured := labels.SelectorFromSet(labels.Set{measureLabelKey: "true"})
	c, err := cache.New(e.kc.Config, cache.Options{
		Scheme:           scheme,
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Label: measured},
		},
	})
	if err != nil {
		return err
	}
	e.cache = c
	e.running = newRunningTracker()
	podInf, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return err
	}
	if _, err := podInf.AddEventHandler(e.running.handler()); err != nil {
		return err
	}
	if _, err := c.GetInformer(ctx, &v1alpha1.FluentPVC{}); err != nil {
		return err
	}
	if _, err := c.GetInformer(ctx, &v1alpha1.FluentPVCBinding{}); err != nil {
		return err
	}
	e.pvcs = newPVCTimeline()
	pvcInf, err := c.GetInformer(ctx, &corev1.PersistentVolumeClaim{})
	if err != nil {
		return err
	}
	if _, err := pvcInf.AddEventHandler(e.pvcs.handler()); err != nil {
		return err
	}
	e.attachments = newAttachTimeline()
	if e.csi {
		vaInf, err := c.GetInformer(ctx, &storagev1.VolumeAttachment{})
		if err != nil {
			return err
		}
		if _, err := vaInf.AddEventHandler(e.attachments.handler()); err != nil {
			return err
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return errors.New("the bench's informers did not sync")
	}
	cl, err := client.New(unlimited(e.kc.Config), client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	e.cl = cl
	return nil
}

// runningTracker records, from pod informer events, the first time each
// measured pod was seen bound to a node and the first time it was seen in
// phase Running, by UID: a later pod of the same name is another pod.
type runningTracker struct {
	mu      sync.Mutex
	bound   map[types.UID]time.Time
	at      map[types.UID]time.Time
	waiters map[types.UID][]chan struct{}
}

func newRunningTracker() *runningTracker {
	return &runningTracker{bound: map[types.UID]time.Time{}, at: map[types.UID]time.Time{}, waiters: map[types.UID][]chan struct{}{}}
}

func (t *runningTracker) observe(obj any) {
	now := time.Now()
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return
	}
	key := pod.UID
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, seen := t.bound[key]; !seen {
		t.bound[key] = now
	}
	if pod.Status.Phase != corev1.PodRunning {
		return
	}
	if _, seen := t.at[key]; seen {
		return
	}
	t.at[key] = now
	for _, ch := range t.waiters[key] {
		close(ch)
	}
	delete(t.waiters, key)
}

func (t *runningTracker) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.observe(obj) },
		UpdateFunc: func(_, obj any) { t.observe(obj) },
	}
}

// await returns when pod, as its create call returned it, was first seen
// bound and Running.
func (t *runningTracker) await(ctx context.Context, pod *corev1.Pod) (bound, running time.Time, err error) {
	key := pod.UID
	t.mu.Lock()
	if at, ok := t.at[key]; ok {
		defer t.mu.Unlock()
		return t.bound[key], at, nil
	}
	ch := make(chan struct{})
	t.waiters[key] = append(t.waiters[key], ch)
	t.mu.Unlock()
	select {
	case <-ch:
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.bound[key], t.at[key], nil
	case <-ctx.Done():
		return time.Time{}, time.Time{}, fmt.Errorf("pod %s was not Running: %w", pod.Namespace+"/"+pod.Name, ctx.Err())
	}
}

// waitPoolWarm waits until the pool of FluentPVC name is full (want warm
// PVCs) in every namespace of nss, as the bench's own PVC cache shows it:
// warm PVCs that are Bound, not being deleted, and carry the placement the
// pool records once they are (a checkout's candidates from then). The
// FluentPVC's status is not read: the operator writes its counts at most
// every few seconds, so it may still show a pool full that a checkout
// emptied moments ago.
func (e *env) waitPoolWarm(ctx context.Context, name string, want int32, nss ...string) error {
	// A pool the operator reserves from (spec.pool.reserveAhead, or its
	// --reserve-ahead; the bench runs one replica) is full once that many
	// are reserved; one that stages its warm PVCs reserves only those
	// staged, which the wait does not ask for.
	f := &v1alpha1.FluentPVC{}
	if err := e.cl.Get(ctx, client.ObjectKey{Name: name}, f); err != nil {
		return fmt.Errorf("reading FluentPVC %s: %w", name, err)
	}
	reserveWant := int32(pool.Limit(f, operatorReserve(e.cfg.OperatorArgs), 1))
	if reserveWant > 0 {
		if staged, err := checkout.Stages(ctx, e.cl, f); err != nil || staged {
			reserveWant = 0
		}
	}
	err := wait.PollUntilContextTimeout(ctx, poll, drainTimeout, true, func(ctx context.Context) (bool, error) {
		for _, ns := range nss {
			var pvcs corev1.PersistentVolumeClaimList
			if err := e.cache.List(ctx, &pvcs, client.InNamespace(ns), client.MatchingLabels{
				v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleWarm, v1alpha1.FluentPVCNameLabelKey: name,
			}); err != nil {
				return false, err
			}
			// Claims reserved ahead of their pods are the pool's too.
			var claimed corev1.PersistentVolumeClaimList
			if err := e.cache.List(ctx, &claimed, client.InNamespace(ns), client.MatchingLabels{
				v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleClaimed, v1alpha1.FluentPVCNameLabelKey: name,
			}); err != nil {
				return false, err
			}
			var n, reserved int32
			for _, c := range append(pvcs.Items, claimed.Items...) {
				_, placed := c.Annotations[v1alpha1.NodeAffinityAnnotationKey]
				if !placed || c.Status.Phase != corev1.ClaimBound || c.DeletionTimestamp != nil {
					continue
				}
				if _, _, ok := claim.Reservation(&c); ok {
					reserved++
				} else if claim.StateOf(&c) != claim.Warm {
					continue
				}
				n++
			}
			if n < want || reserved < min(want, reserveWant) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the pool of FluentPVC %s did not reach %d warm PVCs in %v: %w", name, want, nss, err)
	}
	return nil
}

func (e *env) createNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := e.cl.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	// Pods need the namespace's default ServiceAccount.
	return wait.PollUntilContextTimeout(ctx, poll, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := e.cl.Get(ctx, client.ObjectKey{Namespace: name, Name: "default"}, &corev1.ServiceAccount{})
		return err == nil, nil
	})
}

// deleteNamespace deletes a namespace and, if wait, waits until it is gone.
func (e *env) deleteNamespace(ctx context.Context, name string, waitGone bool) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := e.cl.Delete(ctx, ns); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting namespace %s: %w", name, err)
	}
	if !waitGone {
		return nil
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, drainTimeout, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(e.cl.Get(ctx, client.ObjectKeyFromObject(ns), &corev1.Namespace{})), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for namespace %s to be gone: %w", name, err)
	}
	return nil
}

// deletePodsAndDrain deletes the pods of ns and waits until the measured
// ones are gone and every claim and binding of the operator in ns is
// drained and deleted.
func (e *env) deletePodsAndDrain(ctx context.Context, ns string) error {
	if err := e.cl.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("deleting the pods of %s: %w", ns, err)
	}
	var state string
	lastReport := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, drainTimeout, true, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := e.cache.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return false, err
		}
		var bindings v1alpha1.FluentPVCBindingList
		if err := e.cache.List(ctx, &bindings, client.InNamespace(ns)); err != nil {
			return false, err
		}
		var claims corev1.PersistentVolumeClaimList
		if err := e.cache.List(ctx, &claims, client.InNamespace(ns), client.MatchingLabels{v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleClaimed}); err != nil {
			return false, err
		}
		// A claim the operator deleted counts as drained: what is left
		// is the PVC protection finalizer, which kube-controller-manager
		// removes on its own schedule (with backoff, up to tens of
		// seconds), without the operator.
		live, terminating := 0, 0
		for _, c := range claims.Items {
			if _, _, reserved := claim.Reservation(&c); reserved && c.DeletionTimestamp == nil {
				// The pool's stock, reserved ahead of the next pods; one
				// handed out to a pod deleted since gets its binding, which
				// the settling after the drain waits for.
				continue
			}
			if c.DeletionTimestamp == nil {
				live++
			} else {
				terminating++
			}
		}
		state = fmt.Sprintf("%d pods, %d bindings, %d claimed PVCs left (%d more being deleted)", len(pods.Items), len(bindings.Items), live, terminating)
		if time.Since(lastReport) > 5*time.Second {
			lastReport = time.Now()
			var phases []string
			for _, b := range bindings.Items {
				phases = append(phases, b.Name+"="+string(b.Status.Phase))
			}
			e.progress("draining %s: %s %v", ns, state, phases)
		}
		return len(pods.Items) == 0 && len(bindings.Items) == 0 && live == 0, nil
	})
	if err != nil {
		return fmt.Errorf("draining %s: %w (%s)", ns, err, state)
	}
	return nil
}

// waitNoPVCs waits until namespaces nss hold no PVC that is not being
// deleted. A deleted PVC may stay a while longer, held by the PVC protection
// finalizer that kube-controller-manager removes on its own schedule (with
// backoff, up to tens of seconds); that is no work of the operator's.
func (e *env) waitNoPVCs(ctx context.Context, nss ...string) error {
	left := 0
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, drainTimeout, true, func(ctx context.Context) (bool, error) {
		left = 0
		for _, ns := range nss {
			var pvcs corev1.PersistentVolumeClaimList
			if err := e.cache.List(ctx, &pvcs, client.InNamespace(ns)); err != nil {
				return false, err
			}
			for _, c := range pvcs.Items {
				if c.DeletionTimestamp == nil {
					left++
				}
			}
		}
		return left == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the PVCs of %v to be gone (%d left): %w", nss, left, err)
	}
	return nil
}

// createFluentPVC creates the tier's FluentPVC named name (see
// e.fluentPVC) with a pool of size in namespaces.
func (e *env) createFluentPVC(ctx context.Context, name string, size int32, namespaces ...string) error {
	if err := e.cl.Create(ctx, e.fluentPVC(name, size, namespaces...)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating FluentPVC %s: %w", name, err)
	}
	return nil
}

// fluentPVC is the tier's FluentPVC named name on the tier's storage class
// (e.storageClass; cluster.StorageClassCSI for the admission phase's staged
// levels), with a pool of size in namespaces (not staged if it is
// fpvcUnstaged): on kwok, config/samples' with small requests, and the
// pools of d and the cost phase reserving -reserve-ahead when it is set;
// on the real node, with busybox for the sidecar and the finalizer Job,
// which start there. The pools of the admission phase's hit levels and of
// the nodes phase reserve none (spec.pool.reserveAhead: 0): they measure
// the checkout that writes. Every other pool leaves reservations to the
// operator's --reserve-ahead.
func (e *env) fluentPVC(name string, size int32, namespaces ...string) *v1alpha1.FluentPVC {
	class := e.storageClass()
	if name == fpvcAdmissionStaged {
		class = cluster.StorageClassCSI
	}
	f := fixtures.MakeFluentPVC(name).StorageClass(class).PoolSize(size).Mutate(func(f *v1alpha1.FluentPVC) {
		f.Spec.Pool.Namespaces = namespaces
		if name == fpvcUnstaged {
			f.Spec.Pool.Staging = v1alpha1.PoolStagingDisabled
		}
	})
	switch {
	case name == fpvcAdmission || name == fpvcNodes:
		f.Mutate(func(f *v1alpha1.FluentPVC) { f.Spec.Pool.ReserveAhead = ptr.To[int32](0) })
	case !e.real && e.cfg.ReserveAhead > 0 && (name == fpvcHit || name == fpvcCost):
		f.Mutate(func(f *v1alpha1.FluentPVC) { f.Spec.Pool.ReserveAhead = ptr.To(int32(e.cfg.ReserveAhead)) })
	}
	if e.real {
		return f.RealContainers(realMountPath, images.BusyboxContainer("sidecar", realSidecarScript), images.BusyboxContainer("drain", realDrainScript)).Obj()
	}
	return f.Mutate(func(f *v1alpha1.FluentPVC) {
		// The sample's sidecar and finalizer Job ask for a whole CPU each:
		// 192 of them fill the cluster's 6 nodes of 32 CPUs, and the burst's
		// 200 pods would leave neither room for the last 8 nor for the
		// binder pods that refill the pool.
		f.Spec.SidecarContainerTemplate.Resources = smallResources
		for i := range f.Spec.PVCFinalizerJobSpecTemplate.Template.Spec.Containers {
			f.Spec.PVCFinalizerJobSpecTemplate.Template.Spec.Containers[i].Resources = smallResources
		}
	}).Obj()
}

// smallResources are the requests of the bench's sidecars, finalizer Jobs
// and real-node containers.
var smallResources = corev1.ResourceRequirements{Requests: corev1.ResourceList{
	corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi"),
}}

// prefillPools creates, ahead of their phases, the warm pools of the cost,
// burst and admission phases, so that they fill while sequential b and c
// wait on the provisioner instead of each phase waiting for its own.
func (e *env) prefillPools(ctx context.Context) error {
	pools := []struct {
		fpvc string
		size int
		nss  []string
	}{
		{fpvcCost, e.cfg.CostPods, []string{costNamespace(webhook.CheckoutHit)}},
		{fpvcBurst, e.cfg.BurstPool, []string{burstNamespace}},
		{fpvcAdmission, e.cfg.AdmissionPods, admissionHitNamespaces(e.cfg.Levels)},
	}
	for _, p := range pools {
		for _, ns := range p.nss {
			if err := e.createNamespace(ctx, ns); err != nil {
				return err
			}
		}
		if err := e.createFluentPVC(ctx, p.fpvc, int32(p.size), p.nss...); err != nil {
			return err
		}
	}
	return nil
}

// dropPoolNamespace removes ns from FluentPVC name's pool namespaces, so
// that the pool stops refilling there.
func (e *env) dropPoolNamespace(ctx context.Context, name, ns string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var f v1alpha1.FluentPVC
		if err := e.cl.Get(ctx, client.ObjectKey{Name: name}, &f); err != nil {
			return err
		}
		f.Spec.Pool.Namespaces = slices.DeleteFunc(f.Spec.Pool.Namespaces, func(s string) bool { return s == ns })
		return e.cl.Update(ctx, &f)
	})
}

// deleteFluentPVC deletes FluentPVC name and waits until it is gone.
func (e *env) deleteFluentPVC(ctx context.Context, name string) error {
	f := &v1alpha1.FluentPVC{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := e.cl.Delete(ctx, f); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting FluentPVC %s: %w", name, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, drainTimeout, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(e.cl.Get(ctx, client.ObjectKeyFromObject(f), &v1alpha1.FluentPVC{})), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for FluentPVC %s to be gone: %w", name, err)
	}
	return nil
}

// Pods of the modes.

func plainPod(ns, name string) *corev1.Pod {
	return fixtures.MakePod(name, ns).Label(measureLabelKey, "true").Obj()
}

// ephemeralVolume is the name of ephemeralPod's volume; its claim is
// named <pod>-<volume>.
const ephemeralVolume = "data"

// ephemeralPod has a generic ephemeral volume on StorageClass class.
func ephemeralPod(ns, name, class string) *corev1.Pod {
	p := fixtures.MakePod(name, ns).Label(measureLabelKey, "true").Mount(ephemeralVolume, "/data").Obj()
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: ephemeralVolume, VolumeSource: corev1.VolumeSource{
		Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: ptr.To(class),
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}},
	}})
	return p
}

// fluentPod opts into FluentPVC fpvc.
func fluentPod(ns, name, fpvc string) *corev1.Pod {
	return fixtures.MakePod(name, ns).Label(measureLabelKey, "true").FluentPVC(fpvc).Obj()
}

// unscheduled makes p stay Pending: no scheduler picks it up, so neither
// the scheduler nor kwok spends time on it. It is not measured.
func unscheduled(p *corev1.Pod) *corev1.Pod {
	p.Spec.SchedulerName = unscheduledScheduler
	delete(p.Labels, measureLabelKey)
	return p
}

// createPods creates pods with workers concurrent creates, and returns the
// duration of each create call and when the last one returned.
func (e *env) createPods(ctx context.Context, pods []*corev1.Pod, workers int) ([]time.Duration, time.Time, error) {
	durations := make([]time.Duration, len(pods))
	errs := make([]error, len(pods))
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(1, min(workers, len(pods))) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				start := time.Now()
				errs[i] = e.cl.Create(ctx, pods[i])
				durations[i] = time.Since(start)
			}
		}()
	}
	for i := range pods {
		next <- i
	}
	close(next)
	wg.Wait()
	return durations, time.Now(), errors.Join(errs...)
}

// operatorScrape reads the operator's metrics.
func (e *env) operatorScrape(ctx context.Context) (scrape, error) {
	return scrapeURL(ctx, e.op.MetricsURL())
}

// settle waits until the operator's workqueues have been empty for two
// scrapes in a row, half a second apart, so that its follow-up writes are done.
func (e *env) settle(ctx context.Context) error {
	empty := 0
	var depth float64
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := e.operatorScrape(ctx)
		if err != nil {
			empty = 0
			return false, nil
		}
		depth = s.sum("workqueue_depth", nil)
		if depth == 0 {
			empty++
		} else {
			empty = 0
		}
		return empty >= 2, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the operator's workqueues to empty (depth %v): %w", depth, err)
	}
	return nil
}

func fluentPVCRef(name string) *v1alpha1.FluentPVC {
	return &v1alpha1.FluentPVC{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// operatorReserve is the stock's target of an operator run with args (its
// last --reserve-ahead): a number of claims or pool.ReserveShare; 0 when
// the args do not set it (the binary's default).
func operatorReserve(args []string) int {
	target := 0
	for _, a := range args {
		v, ok := strings.CutPrefix(a, "--reserve-ahead=")
		if !ok {
			continue
		}
		if v == "share" {
			target = pool.ReserveShare
		} else if n, err := strconv.Atoi(v); err == nil {
			target = n
		}
	}
	return target
}
