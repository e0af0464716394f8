package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// fluentPVCName is the FluentPVC most load pods opt into.
const fluentPVCName = "chaos"

// deploymentsPerNamespace run in each load namespace.
const deploymentsPerNamespace = 2

// tally counts what the driver did, for the results.
type tally struct {
	BarePods, LocalPods, StagedPods, SidecarFailPods, ReplicaKills, ReplicaRollouts, ReplicaExits, NamespacesDeleted, PoolChanges, TemplateChanges,
	BindingsStripped, LabelsRemoved, CopiesDenied, CopiesAdmitted, RecreationsDenied, NamespacesLeft, Scales, Errors atomic.Int64
	// The faults of faults.go.
	DebugCopiesDenied, DebugCopiesAdmitted, ClaimDeletesDenied, ClaimDeletesAdmitted, ClaimDeletingReported, ClaimsGivenUp,
	BindingRefusals, PodFinalizersStripped, BindingQuotas, DrainPodRefusals, NodesDeleted atomic.Int64
	// Faults on staging: holders killed, nodes with holders deleted.
	HoldersKilled, StagedNodesDeleted atomic.Int64
}

// driver runs the load and the faults.
type driver struct {
	m mode
	c client.Client
	// user is c as chaosUser.
	user client.Client
	kc   *cluster.Cluster
	log  io.Writer

	mu         sync.Mutex
	namespaces []string
	nsSeq      int
	faultSeq   int
	// bare are the bare pods alive, with when each is to be deleted.
	bare map[types.NamespacedName]time.Time
	// after tracks the recoveries that outlive their faults (later).
	after sync.WaitGroup
	// down are the nodes deleted and not yet made again, with their zones.
	down map[string]string

	t tally
}

func newDriver(m mode, c, user client.Client, kc *cluster.Cluster, log io.Writer) *driver {
	return &driver{m: m, c: c, user: user, kc: kc, log: log, bare: map[types.NamespacedName]time.Time{}, down: map[string]string{}}
}

func (d *driver) logf(format string, args ...any) {
	fmt.Fprintf(d.log, time.Now().Format("15:04:05.000")+" "+format+"\n", args...)
}

// fail counts and logs an unexpected error of an actor; faults make some
// errors normal (conflicts, objects gone), which are not counted.
func (d *driver) fail(what string, err error) {
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return
	}
	if strings.Contains(err.Error(), "being terminated") || strings.Contains(err.Error(), "is being deleted") || strings.Contains(err.Error(), refusalMessage) {
		return
	}
	d.t.Errors.Add(1)
	d.logf("error: %s: %v", what, err)
}

// fluentPVC is the load's FluentPVC: a pool of 4 of which each replica
// reserves 1 ahead of the pods, a sidecar that deletes its pod when it
// fails, and drain Jobs that fail one time in four (the flaky stages)
// without retries inside the Job.
func fluentPVC() *v1alpha1.FluentPVC {
	return loadFluentPVC(fixtures.MakeFluentPVC(fluentPVCName).PoolSize(4).Mutate(func(f *v1alpha1.FluentPVC) {
		f.Spec.Pool.ReserveAhead = ptr.To[int32](1)
	}))
}

// localFluentPVC is fluentPVC with node-local claims and a pool of 2.
func localFluentPVC() *v1alpha1.FluentPVC {
	return loadFluentPVC(fixtures.MakeFluentPVC(localFluentPVCName).PoolSize(2).StorageClass(localStorageClass))
}

// stagedFluentPVCName is the FluentPVC whose claims come from the CSI
// storage that attaches (cluster.StorageClassCSI): its pool, staging
// Auto, keeps each warm PVC attached to a node by a holder pod.
const stagedFluentPVCName = "chaos-staged"

// stagedFluentPVC is fluentPVC with claims from cluster.StorageClassCSI
// and a pool of 3, staged.
func stagedFluentPVC() *v1alpha1.FluentPVC {
	return loadFluentPVC(fixtures.MakeFluentPVC(stagedFluentPVCName).PoolSize(3).StorageClass(cluster.StorageClassCSI))
}

func loadFluentPVC(w *fixtures.FluentPVCWrapper) *v1alpha1.FluentPVC {
	return w.DeletePodOnSidecarFailure(true).
		Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.CommonVolumes, f.Spec.CommonVolumeMounts = nil, nil
			// The load namespaces' LimitRange gives the sidecar its
			// resources after the webhook injected it, as in most
			// multi-tenant clusters.
			f.Spec.SidecarContainerTemplate.Resources = corev1.ResourceRequirements{}
			f.Spec.PVCFinalizerJobSpecTemplate.BackoffLimit = ptr.To[int32](0)
			f.Spec.PVCFinalizerJobSpecTemplate.Template.Labels = map[string]string{flakyLabelKey: "true"}
		}).Obj()
}

// addNamespace creates the next load namespace and its Deployments.
func (d *driver) addNamespace(ctx context.Context) {
	d.mu.Lock()
	d.nsSeq++
	name := fmt.Sprintf("chaos-%d", d.nsSeq)
	d.mu.Unlock()
	if err := d.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		d.fail("creating namespace "+name, err)
		return
	}
	// Container defaults, which the API server applies after the mutating
	// webhooks: a webhook registered with reinvocationPolicy IfNeeded
	// would be called a second time for every labelled pod.
	d.fail("creating a LimitRange", d.c.Create(ctx, limitRange(name)))
	for i := range deploymentsPerNamespace {
		// The second Deployment's pods take staged claims.
		fpvc := fluentPVCName
		if i == 1 {
			fpvc = stagedFluentPVCName
		}
		labels := map[string]string{"app": fmt.Sprintf("app-%d", i), v1alpha1.FluentPVCNameLabelKey: fpvc}
		dep := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%d", i), Namespace: name},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](2),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": labels["app"]}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       fixtures.MakePod("", name).Obj().Spec,
				},
			},
		}
		d.fail("creating a Deployment", d.c.Create(ctx, dep))
	}
	d.mu.Lock()
	d.namespaces = append(d.namespaces, name)
	d.mu.Unlock()
}

// limitRange defaults the cpu and memory of the containers of namespace
// ns that set none.
func limitRange(ns string) *corev1.LimitRange {
	return &corev1.LimitRange{
		ObjectMeta: metav1.ObjectMeta{Name: "container-defaults", Namespace: ns},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
			Type:           corev1.LimitTypeContainer,
			Default:        corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			DefaultRequest: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
		}}},
	}
}

func (d *driver) randomNamespace() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.namespaces) == 0 {
		return ""
	}
	return d.namespaces[rand.N(len(d.namespaces))]
}

// every calls f at random times within interval until ctx ends.
func every(ctx context.Context, wg *sync.WaitGroup, interval [2]time.Duration, f func(context.Context)) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			wait := interval[0]
			if interval[1] > interval[0] {
				wait += rand.N(interval[1] - interval[0])
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			f(ctx)
		}
	}()
}

// createBarePod creates a labelled pod in a random namespace.
func (d *driver) createBarePod(ctx context.Context) {
	if ns := d.randomNamespace(); ns != "" {
		d.createBarePodIn(ctx, ns)
	}
}

// createBarePodIn creates a labelled pod in ns that lives for a random
// time, and returns it (nil on error); one in ten has a sidecar that
// fails, one in four opts into the FluentPVC of node-local claims and one
// in four into that of staged claims.
func (d *driver) createBarePodIn(ctx context.Context, ns string) *corev1.Pod {
	fpvc := fluentPVCName
	switch rand.N(4) {
	case 0:
		fpvc = localFluentPVCName
	case 1:
		fpvc = stagedFluentPVCName
	}
	w := fixtures.MakePod("", ns).GenerateName("bare-").FluentPVC(fpvc)
	sidecarFails := rand.N(10) == 0
	if sidecarFails {
		w = w.Label(cluster.SidecarFailLabelKey, "true")
	}
	pod := w.Obj()
	if err := d.c.Create(ctx, pod); err != nil {
		d.fail("creating a bare pod", err)
		return nil
	}
	d.t.BarePods.Add(1)
	switch fpvc {
	case localFluentPVCName:
		d.t.LocalPods.Add(1)
	case stagedFluentPVCName:
		d.t.StagedPods.Add(1)
	}
	if sidecarFails {
		d.t.SidecarFailPods.Add(1)
	}
	d.mu.Lock()
	d.bare[client.ObjectKeyFromObject(pod)] = time.Now().Add(between(d.m.BarePodLife))
	d.mu.Unlock()
	return pod
}

// reapBarePods deletes the bare pods whose time is up.
func (d *driver) reapBarePods(ctx context.Context) {
	now := time.Now()
	var due []types.NamespacedName
	d.mu.Lock()
	for k, at := range d.bare {
		if now.After(at) {
			due = append(due, k)
			delete(d.bare, k)
		}
	}
	d.mu.Unlock()
	for _, k := range due {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}
		d.fail("deleting a bare pod", client.IgnoreNotFound(d.c.Delete(ctx, pod)))
	}
}

// scale sets a random Deployment's replicas to 0-6.
func (d *driver) scale(ctx context.Context) {
	ns := d.randomNamespace()
	if ns == "" {
		return
	}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("app-%d", rand.N(deploymentsPerNamespace))}}
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, rand.N(7))
	if err := d.c.Patch(ctx, dep, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		d.fail("scaling a Deployment", err)
		return
	}
	d.t.Scales.Add(1)
}

// deleteNamespace deletes a random load namespace with its pods running
// and puts a new one in its place.
func (d *driver) deleteNamespace(ctx context.Context) {
	d.mu.Lock()
	if len(d.namespaces) == 0 {
		d.mu.Unlock()
		return
	}
	i := rand.N(len(d.namespaces))
	ns := d.namespaces[i]
	d.namespaces = append(d.namespaces[:i], d.namespaces[i+1:]...)
	for k := range d.bare {
		if k.Namespace == ns {
			delete(d.bare, k)
		}
	}
	d.mu.Unlock()
	if err := d.c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		d.fail("deleting namespace "+ns, err)
	} else {
		d.t.NamespacesDeleted.Add(1)
		d.logf("deleted namespace %s with its pods running", ns)
	}
	d.addNamespace(ctx)
}

// changeFluentPVC changes the pool size (and how many warm PVCs each
// replica reserves ahead) or a template at random, of the
// FluentPVC most pods use or, one time in three, of the staged one (whose
// warm PVCs then go with their holders).
func (d *driver) changeFluentPVC(ctx context.Context) {
	name := fluentPVCName
	if rand.N(3) == 0 {
		name = stagedFluentPVCName
	}
	f := &v1alpha1.FluentPVC{}
	if err := d.c.Get(ctx, client.ObjectKey{Name: name}, f); err != nil {
		d.fail("reading the FluentPVC", err)
		return
	}
	patch := client.MergeFrom(f.DeepCopy())
	template := rand.N(3) == 0
	if template {
		size := "1Gi"
		if f.Spec.PVCSpecTemplate.Resources.Requests.Storage().String() == "1Gi" {
			size = "2Gi"
		}
		f.Spec.PVCSpecTemplate.Resources.Requests[corev1.ResourceStorage] = resource.MustParse(size)
	} else {
		f.Spec.Pool.Size = int32(rand.N(7))
		f.Spec.Pool.ReserveAhead = ptr.To(int32(rand.N(3)))
	}
	if err := d.c.Patch(ctx, f, patch); err != nil {
		d.fail("changing the FluentPVC", err)
		return
	}
	if template {
		d.t.TemplateChanges.Add(1)
	} else {
		d.t.PoolChanges.Add(1)
	}
}

// stripBinding removes a binding's finalizers and deletes it, preferring
// one whose claim is in use or draining: the operator must make it again
// and still drain the claim.
func (d *driver) stripBinding(ctx context.Context) {
	var l v1alpha1.FluentPVCBindingList
	if err := d.c.List(ctx, &l); err != nil {
		d.fail("listing bindings", err)
		return
	}
	var pick []v1alpha1.FluentPVCBinding
	for _, b := range l.Items {
		// In use: no phase yet (or InUse, from an earlier version), its pod recorded.
		inUse := b.Spec.Pod.UID != "" && (b.Status.Phase == "" || b.Status.Phase == v1alpha1.BindingPhaseInUse)
		if b.Status.Phase == v1alpha1.BindingPhaseDraining || inUse {
			pick = append(pick, b)
		}
	}
	if len(pick) == 0 {
		pick = l.Items
	}
	if len(pick) == 0 {
		return
	}
	b := pick[rand.N(len(pick))]
	if err := d.c.Patch(ctx, &b, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		d.fail("stripping a binding's finalizers", err)
		return
	}
	if err := d.c.Delete(ctx, &b); client.IgnoreNotFound(err) != nil {
		d.fail("deleting a binding", err)
		return
	}
	d.t.BindingsStripped.Add(1)
	d.logf("stripped and deleted binding %s/%s (%s)", b.Namespace, b.Name, b.Status.Phase)
}

// runningLabelled is a random Running pod that carries the opt-in label and
// a claim, or nil.
func (d *driver) runningLabelled(ctx context.Context, bareOnly bool) *corev1.Pod {
	var l corev1.PodList
	if err := d.c.List(ctx, &l, client.HasLabels{v1alpha1.FluentPVCNameLabelKey, v1alpha1.BindingNameLabelKey}); err != nil {
		d.fail("listing pods", err)
		return nil
	}
	var pick []*corev1.Pod
	for i := range l.Items {
		p := &l.Items[i]
		if p.Status.Phase != corev1.PodRunning || !p.DeletionTimestamp.IsZero() || !strings.HasPrefix(p.Namespace, "chaos-") {
			continue
		}
		if bareOnly && !strings.HasPrefix(p.Name, "bare-") {
			continue
		}
		pick = append(pick, p)
	}
	if len(pick) == 0 {
		return nil
	}
	return pick[rand.N(len(pick))]
}

// removeLabel removes the opt-in label from a running bare pod, which then
// drops out of the operator's cache while it still uses its claim.
func (d *driver) removeLabel(ctx context.Context) {
	pod := d.runningLabelled(ctx, true)
	if pod == nil {
		return
	}
	patch := fmt.Sprintf(`[{"op":"test","path":"/metadata/uid","value":%q},{"op":"remove","path":"/metadata/labels/%s"}]`,
		pod.UID, strings.ReplaceAll(v1alpha1.FluentPVCNameLabelKey, "/", "~1"))
	if err := d.c.Patch(ctx, pod, client.RawPatch(types.JSONPatchType, []byte(patch))); err != nil {
		d.fail("removing a pod's opt-in label", err)
		return
	}
	d.t.LabelsRemoved.Add(1)
}

// recreatePod deletes a running bare pod and creates its live manifest
// again under the same name, claim volume included, as `kubectl replace
// --force` does; or, one time in two, creates a copy of it under its
// generateName while it runs. The webhook must deny both.
func (d *driver) recreatePod(ctx context.Context) {
	pod := d.runningLabelled(ctx, true)
	if pod == nil {
		return
	}
	cp := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pod.Namespace, Name: pod.Name,
			Labels: pod.Labels, Annotations: pod.Annotations, Finalizers: pod.Finalizers,
		},
		Spec: *pod.Spec.DeepCopy(),
	}
	if rand.N(2) == 0 {
		cp.Name, cp.GenerateName = "", pod.GenerateName
	} else {
		if err := d.c.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID}); err != nil {
			d.fail("deleting a pod to create it again", err)
			return
		}
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
			return apierrors.IsNotFound(d.c.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})), nil
		})
		if err != nil {
			return // still terminating (its sidecar's finalizer, say): not tried
		}
	}
	err := d.c.Create(ctx, cp)
	switch {
	case err == nil:
		d.t.CopiesAdmitted.Add(1)
		d.logf("a re-creation of pod %s/%s (as %s) was admitted", pod.Namespace, pod.Name, cp.Name)
		d.mu.Lock()
		d.bare[client.ObjectKeyFromObject(cp)] = time.Now().Add(10 * time.Second)
		d.mu.Unlock()
	case denied(err):
		d.t.RecreationsDenied.Add(1)
	default:
		d.fail("creating a pod again", err)
	}
}

// leavePool lists, for a window, all but one of the load namespaces in
// the main FluentPVC's spec.pool.namespaces, then lists none again (it
// learns them from admissions): the namespace left out leaves the pool,
// reservations included, while its pods keep coming (and miss).
func (d *driver) leavePool(ctx context.Context) {
	d.mu.Lock()
	keep := slices.Clone(d.namespaces)
	d.mu.Unlock()
	if len(keep) < 2 {
		return
	}
	left := rand.N(len(keep))
	out := keep[left]
	keep = slices.Delete(keep, left, left+1)
	set := func(ctx context.Context, namespaces []string) error {
		raw, err := json.Marshal(map[string]any{"spec": map[string]any{"pool": map[string]any{"namespaces": namespaces}}})
		if err != nil {
			return err
		}
		return d.c.Patch(ctx, &v1alpha1.FluentPVC{ObjectMeta: metav1.ObjectMeta{Name: fluentPVCName}}, client.RawPatch(types.MergePatchType, raw))
	}
	if err := set(ctx, keep); err != nil {
		d.fail("listing the pool's namespaces", err)
		return
	}
	d.t.NamespacesLeft.Add(1)
	d.logf("namespace %s left the pool of %s", out, fluentPVCName)
	// The window is cut short when the load stops.
	pause(ctx, between(d.m.Window))
	d.fail("listing no pool namespace again", set(context.WithoutCancel(ctx), nil))
	d.logf("the pool of %s learns its namespaces again", fluentPVCName)
}

// copyPod creates a pod from a running pod's manifest, claim volume and
// finalizer included, as `kubectl get -o yaml | kubectl create` would.
// The webhook must deny it.
func (d *driver) copyPod(ctx context.Context) {
	pod := d.runningLabelled(ctx, false)
	if pod == nil {
		return
	}
	cp := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pod.Namespace, Name: pod.Name + "-copy",
			Labels: pod.Labels, Annotations: pod.Annotations, Finalizers: pod.Finalizers,
		},
		Spec: *pod.Spec.DeepCopy(),
	}
	err := d.c.Create(ctx, cp)
	switch {
	case err == nil:
		d.t.CopiesAdmitted.Add(1)
		d.logf("a copy of pod %s/%s was admitted", pod.Namespace, pod.Name)
		d.mu.Lock()
		d.bare[client.ObjectKeyFromObject(cp)] = time.Now().Add(10 * time.Second)
		d.mu.Unlock()
	case denied(err):
		d.t.CopiesDenied.Add(1)
	default:
		d.fail("creating a copied pod", err)
	}
}
