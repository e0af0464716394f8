package controllers

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/checkout"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/expectations"
	"github.com/st-tech/fluent-pvc-operator/pool"
)

// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=get
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=csinodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=csidrivers,verbs=get;list;watch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=volumeattachments,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete

// poolParallelism bounds the concurrent API calls of one pool reconcile.
const poolParallelism = 16

// PoolReconciler keeps a FluentPVC's warm pool: it observes the pool's
// PVCs, binders and nodes once, plans each namespace with package pool,
// and executes the plan. FluentPVCReconciler runs it in each of its
// reconciles and writes what it reports into the FluentPVC's status, so
// that the status has one writer and is written once per reconcile.
type PoolReconciler struct {
	client.Client
	// apiReader reads PVs and binder pods, which are not cached.
	apiReader client.Reader
	clock     clock.PassiveClock
	opts      Options
	// expect are the warm PVCs created and not yet seen in the cache.
	// Without them, a reconcile that runs before the cache catches up
	// counts the pool short and creates the same PVCs again.
	expect expectations.Expectations[createdWarm, pool.Expected]
	// strandings times the warm PVCs' attachments to nodes that are gone.
	strandings pool.Strandings
	// affinities parses the warm PVCs' volume affinities.
	affinities *pool.Affinities
}

// NewPoolReconciler returns a PoolReconciler that reads through c (cached)
// and apiReader (live), and takes the binder image, the pool bind mode and
// the idle namespace TTL from opts.
func NewPoolReconciler(c client.Client, apiReader client.Reader, clk clock.PassiveClock, opts Options) *PoolReconciler {
	if opts.StrandedAttachmentTimeout <= 0 {
		opts.StrandedAttachmentTimeout = pool.StrandedAfter
	}
	return &PoolReconciler{Client: c, apiReader: apiReader, clock: clk, opts: opts, affinities: pool.NewAffinities()}
}

// Reconcile brings every pool namespace of f to spec.pool.size warm PVCs,
// empties the namespaces that no longer hold a pool, and reports the pool
// for f's status. bindings are f's bindings (for the last admission in
// each namespace). An error from reading the pool comes with observed
// false; one from executing the plan comes with the rest of the report.
func (r *PoolReconciler) Reconcile(ctx context.Context, f *v1alpha1.FluentPVC, bindings []v1alpha1.FluentPVCBinding) (poolResult, error) {
	o, err := r.observePool(ctx, f, bindings)
	if err != nil {
		return poolResult{}, err
	}
	pp := planPool(f, o, r.clock.Now(), r.opts)
	strandedDeleted, poolErr := r.applyPool(ctx, f, o, pp)
	res := pp.result
	res.observed, res.emptied = true, o.emptied()
	for _, msg := range rejectedHolders(poolErr) {
		res.warnings = append(res.warnings, poolWarning{reason: v1alpha1.EventReasonHolderRejected, message: msg + ": the warm PVC is handed out unstaged until a holder can be made"})
	}
	if o.noNodeToSelect != "" {
		res.warnings = append(res.warnings, poolWarning{reason: v1alpha1.EventReasonNoNodeToSelect, message: o.noNodeToSelect})
	}
	// Told for the deletes that were made: one that lost a race to a
	// checkout left a claim, which is not replaced.
	if len(strandedDeleted) > 0 {
		res.warnings = append(res.warnings, poolWarning{reason: v1alpha1.EventReasonWarmPVCStranded, message: strandedMessage(strandedDeleted, o.stranded, o.warm, r.opts.StrandedAttachmentTimeout)})
	}
	binderWarnings, binderRecheck, err := r.unschedulableBinders(ctx, f, o)
	if err != nil {
		// Best effort: why binders wait is worth telling, not worth the
		// status write; the recheck comes with the next event or requeue.
		ctrl.LoggerFrom(ctx).Error(err, "reading binder pods", "fluentPVC", klog.KObj(f))
	}
	for _, w := range binderWarnings {
		res.warnings = append(res.warnings, poolWarning{reason: v1alpha1.EventReasonBinderUnschedulable, message: w})
	}
	sooner(&res.requeueAfter, binderRecheck)
	return res, poolErr
}

// sooner sets *d, a requeue delay (0: none), to after when after is
// positive and sooner.
func sooner(d *time.Duration, after time.Duration) {
	if after > 0 && (*d == 0 || after < *d) {
		*d = after
	}
}

// Forget drops what r remembers of FluentPVC name, once it is gone.
func (r *PoolReconciler) Forget(name string) {
	r.expect.Forget(func(k createdWarm) bool { return k.fluentPVC == name })
}

// poolObserved is a FluentPVC's pool as read from the cache. Its objects are
// the cache's own (listed without copies): never modify them, copy first.
type poolObserved struct {
	warm    []corev1.PersistentVolumeClaim
	binders []batchv1.Job
	// waitForFirstConsumer is the binding mode of the template's class.
	waitForFirstConsumer bool
	// selectNodes is true when warm PVCs get a node named instead of a
	// binder: --pool-bind-mode=select-node and at least one eligible node.
	selectNodes bool
	// eligible are the nodes new warm PVCs may name, nodeZones the zone
	// of every node (for the zones of pending PVCs), nodes every node (the
	// cache's; for whether a volume can still be used anywhere).
	eligible  []pool.Node
	nodeZones map[string]string
	nodes     map[string]*corev1.Node
	// affinities parses the warm PVCs' volume affinities (nil: each time).
	affinities *pool.Affinities
	// claimed are the pool's claims handed to pods, in select-node mode:
	// where they are is where new warm PVCs are wanted (FollowDemand).
	claimed []corev1.PersistentVolumeClaim
	// unseen are the warm PVCs created by earlier reconciles that the
	// cache did not show yet, by namespace.
	unseen map[string][]pool.Expected
	// stranded are the warm PVCs' volumes attached, for
	// Options.StrandedAttachmentTimeout or longer, to a node proved gone:
	// volume name to node name. strandedRecheck is when the next one is due.
	stranded        map[string]string
	strandedRecheck time.Duration
	// reserved counts, by namespace, the claims of the current template
	// reserved ahead of their pods whose reservations are not over
	// (pool.Input.Reserved); reservedRecheck is when the first ends.
	reserved        map[string]int
	reservedRecheck time.Duration
	// lastAdmission is the newest admission per namespace, from the status
	// and the current bindings.
	lastAdmission map[string]time.Time
	// noNodeToSelect is the warning to send when the class waits for a
	// first consumer but no node qualifies to be named; "" otherwise.
	noNodeToSelect string
	// namespaces are the labels of every namespace that exists, by name
	// (the cache's metadata).
	namespaces map[string]map[string]string
	// terminating are the namespaces being deleted: nothing is created
	// there, which the API server would refuse.
	terminating map[string]bool
	// staging is pool.StagingOn for the pool; holders are its holder
	// pods; room is, per node a holder may go to (and only those),
	// pool.NodeRoom.
	staging bool
	holders []corev1.Pod
	room    map[string]int
}

// emptied is true once every warm PVC and binder is gone or being deleted.
func (o poolObserved) emptied() bool {
	for _, c := range o.warm {
		if c.DeletionTimestamp.IsZero() {
			return false
		}
	}
	for _, j := range o.binders {
		if j.DeletionTimestamp.IsZero() {
			return false
		}
	}
	return true
}

// poolResult is what reconcilePool reports for the status.
type poolResult struct {
	namespaces []v1alpha1.PoolNamespaceStatus
	// missing are pool namespaces that do not exist: nothing is created
	// there until they do.
	missing []string
	// capped are learned namespaces spec.pool.maxNamespaces leaves out.
	capped       []string
	requeueAfter time.Duration
	// unreachable are warm PVCs replaced because no node can use their
	// volume, stranded those whose volume stays attached to a node that
	// is gone, moved those a replacement is made for to follow demand
	// ("namespace/name"), for the log and the metric.
	unreachable, stranded, moved []string
	// observed is true once the pool was read; emptied is true when every
	// warm PVC and binder is gone or being deleted.
	observed, emptied bool
	// warnings are told on the FluentPVC once its status is written.
	warnings []poolWarning
}

// poolWarning is a Warning Event for the FluentPVC.
type poolWarning struct {
	reason, message string
}

// createdWarm is a warm PVC that a FluentPVC's pool created.
type createdWarm struct {
	fluentPVC string
	key       client.ObjectKey
}

// unseen are the warm PVCs of FluentPVC name that the pool created and the
// cache does not show yet, by namespace.
func (r *PoolReconciler) unseen(ctx context.Context, name string) map[string][]pool.Expected {
	now := r.clock.Now()
	var created []pool.Expected
	r.expect.Pending(now, func(k createdWarm, x pool.Expected) {
		if k.fluentPVC == name {
			created = append(created, x)
		}
	})
	out := map[string][]pool.Expected{}
	for _, x := range created {
		var pvc corev1.PersistentVolumeClaim
		if err := r.Get(ctx, x.Key, &pvc); err != nil {
			pvc.ResourceVersion = ""
		}
		if r.expect.Stale(createdWarm{name, x.Key}, pvc.ResourceVersion, now) {
			out[x.Key.Namespace] = append(out[x.Key.Namespace], x)
		}
	}
	return out
}

func (r *PoolReconciler) observePool(ctx context.Context, f *v1alpha1.FluentPVC, bindings []v1alpha1.FluentPVCBinding) (poolObserved, error) {
	// Read before the list, so that a PVC reaching the cache in between is
	// in both (and counted once) rather than in neither (and created twice).
	o := poolObserved{lastAdmission: map[string]time.Time{}, unseen: r.unseen(ctx, f.Name), affinities: r.affinities}
	var pvcs corev1.PersistentVolumeClaimList
	if err := r.List(ctx, &pvcs, client.MatchingLabels{v1alpha1.FluentPVCNameLabelKey: f.Name, v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleWarm}, client.UnsafeDisableDeepCopy); err != nil {
		return o, fmt.Errorf("listing warm PVCs: %w", err)
	}
	o.warm = pvcs.Items
	var jobs batchv1.JobList
	if err := r.List(ctx, &jobs, client.MatchingLabels{v1alpha1.FluentPVCNameLabelKey: f.Name, v1alpha1.ComponentLabelKey: v1alpha1.ComponentBinder}, client.UnsafeDisableDeepCopy); err != nil {
		return o, fmt.Errorf("listing binder Jobs: %w", err)
	}
	o.binders = jobs.Items

	var namespaces metav1.PartialObjectMetadataList
	namespaces.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := r.List(ctx, &namespaces, client.UnsafeDisableDeepCopy); err != nil {
		return o, fmt.Errorf("listing namespaces: %w", err)
	}
	o.namespaces = make(map[string]map[string]string, len(namespaces.Items))
	for _, ns := range namespaces.Items {
		o.namespaces[ns.Name] = ns.Labels
		if !ns.DeletionTimestamp.IsZero() {
			if o.terminating == nil {
				o.terminating = map[string]bool{}
			}
			o.terminating[ns.Name] = true
		}
	}

	for _, ns := range f.Status.Pool {
		if ns.LastAdmissionTime != nil {
			o.lastAdmission[ns.Namespace] = ns.LastAdmissionTime.Time
		}
	}
	for _, b := range bindings {
		if t := admissionTime(&b); t.After(o.lastAdmission[b.Namespace]) {
			o.lastAdmission[b.Namespace] = t
		}
	}

	if f.Spec.Pool.Size == 0 {
		return o, nil
	}
	sc, err := r.storageClass(ctx, f.Spec.PVCSpecTemplate.StorageClassName)
	if err != nil {
		return o, err
	}
	o.waitForFirstConsumer = sc != nil && sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer
	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return o, fmt.Errorf("listing nodes: %w", err)
	}
	o.nodeZones = make(map[string]string, len(nodes.Items))
	o.nodes = make(map[string]*corev1.Node, len(nodes.Items))
	for i := range nodes.Items {
		n := &nodes.Items[i]
		o.nodeZones[n.Name] = n.Labels[pool.ZoneLabelKey]
		o.nodes[n.Name] = n
	}
	var csiNodes storagev1.CSINodeList
	if err := r.List(ctx, &csiNodes, client.UnsafeDisableDeepCopy); err != nil {
		return o, fmt.Errorf("listing CSINodes: %w", err)
	}
	var vas storagev1.VolumeAttachmentList
	if err := r.List(ctx, &vas, client.UnsafeDisableDeepCopy); err != nil {
		return o, fmt.Errorf("listing VolumeAttachments: %w", err)
	}
	r.observeStranded(ctx, nodes.Items, vas.Items, &o)
	if err := r.observeStaging(ctx, f, sc, nodes.Items, csiNodes.Items, vas.Items, &o); err != nil {
		return o, err
	}
	if o.waitForFirstConsumer && r.opts.PoolBindMode != PoolBindBinderJob {
		o.eligible = pool.EligibleNodes(nodes.Items, sc, csiNodes.Items)
		// With no node to name, binders let the scheduler find one (or wait).
		o.selectNodes = len(o.eligible) > 0
		if !o.selectNodes {
			o.noNodeToSelect = fmt.Sprintf("none of %d nodes is Ready, untainted and allowed by StorageClass %s: warm PVCs are bound through binder Jobs until one is", len(nodes.Items), sc.Name)
		}
	}
	placing := o.selectNodes || o.staging
	var claimed corev1.PersistentVolumeClaimList
	if err := r.List(ctx, &claimed, client.MatchingLabels{v1alpha1.FluentPVCNameLabelKey: f.Name, v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleClaimed}, client.UnsafeDisableDeepCopy); err != nil {
		return o, fmt.Errorf("listing claims: %w", err)
	}
	if placing {
		o.claimed = claimed.Items
	}
	if err := r.observeReserved(ctx, f, claimed.Items, &o); err != nil {
		return o, err
	}
	return o, nil
}

// observeReserved counts the claims among claimed (f's) that are reserved
// ahead of their pods, under a Lease the cache shows live or until an end
// they name (reservedStock).
func (r *PoolReconciler) observeReserved(ctx context.Context, f *v1alpha1.FluentPVC, claimed []corev1.PersistentVolumeClaim, o *poolObserved) error {
	now := r.clock.Now()
	ends, err := r.holderEnds(ctx, claimed, now)
	if err != nil {
		return err
	}
	o.reserved, o.reservedRecheck = reservedStock(claimed, pool.TemplateHash(&f.Spec.PVCSpecTemplate), now, ends)
	return nil
}

// reservedStock counts, by namespace, the claims among claimed (a
// FluentPVC's claims) made from the template of hash hash, not being
// deleted, that are reserved ahead of their pods and whose reservations
// are not over at now; and how long until the first of them ends (0:
// none). A reservation ends with its holder's Lease (ends, by holder; a
// holder missing there is gone), or at the end it names, counted as
// claim.MaxReservation at most.
func reservedStock(claimed []corev1.PersistentVolumeClaim, hash string, now time.Time, ends map[string]time.Time) (map[string]int, time.Duration) {
	var out map[string]int
	var first time.Duration
	for i := range claimed {
		c := &claimed[i]
		by, until, ok := claim.Reservation(c)
		if until.IsZero() {
			until = ends[by]
		}
		left := min(until.Sub(now), claim.MaxReservation)
		if !ok || left <= 0 || c.Labels[v1alpha1.TemplateHashLabelKey] != hash || !c.DeletionTimestamp.IsZero() {
			continue
		}
		if out == nil {
			out = map[string]int{}
		}
		out[c.Namespace]++
		if first == 0 || left < first {
			first = left
		}
	}
	return out, first
}

// holderEnds is when the Lease of each reservation holder among claimed
// is over, as cached at now (checkout.HolderEnd); a holder whose Lease is
// gone is missing.
func (r *PoolReconciler) holderEnds(ctx context.Context, claimed []corev1.PersistentVolumeClaim, now time.Time) (map[string]time.Time, error) {
	ends, asked := map[string]time.Time{}, map[string]bool{}
	for i := range claimed {
		by, until, ok := claim.Reservation(&claimed[i])
		if !ok || !until.IsZero() || asked[by] {
			continue
		}
		asked[by] = true
		end, found, err := checkout.HolderEnd(ctx, r, by, now)
		if err != nil {
			return nil, err
		}
		if found {
			ends[by] = end
		}
	}
	return ends, nil
}

// storageClass is class name, or the default class when name is nil; nil
// when there is none (or name is "", static binding).
func (r *PoolReconciler) storageClass(ctx context.Context, name *string) (*storagev1.StorageClass, error) {
	return checkout.StorageClassOf(ctx, r, name)
}

// poolPlan is what one pool reconcile does, decided by planPool.
type poolPlan struct {
	hash string
	// namespaces are the plans of the namespaces that hold a pool or
	// still hold warm PVCs or binders.
	namespaces []namespacePlan
	// replaced says why a warm PVC is replaced ("namespace/name"), for the
	// metric.
	replaced map[string]string
	// result is what the plan reports for the status.
	result poolResult
}

// keyLog collects keys ("namespace/name") from ops running in parallel.
type keyLog struct {
	mu   sync.Mutex
	keys []string
}

func (l *keyLog) add(key string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys = append(l.keys, key)
}

// sorted are the keys collected, sorted.
func (l *keyLog) sorted() []string {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(slices.Values(l.keys))
}

// namespacePlan is one namespace's part of a poolPlan.
type namespacePlan struct {
	namespace string
	plan      pool.Plan
	// kept is true for a namespace that holds a pool; false for one whose
	// warm PVCs and binders are removed.
	kept bool
	// size is the number of warm PVCs it keeps.
	size int32
	// preferred are the nodes new warm PVCs are named for first.
	preferred []string
	// stage is where warm PVCs get holders, and which holders go.
	stage pool.StagePlan
}

// planPool decides, from what was observed at now, how to bring every
// pool namespace of f to spec.pool.size warm PVCs and to empty the
// namespaces that no longer hold a pool. It reads nothing and writes
// nothing.
func planPool(f *v1alpha1.FluentPVC, o poolObserved, now time.Time, opts Options) poolPlan {
	pp := poolPlan{hash: pool.TemplateHash(&f.Spec.PVCSpecTemplate), replaced: map[string]string{}}
	res := &pp.result
	size := f.Spec.Pool.Size
	var keep []string
	if size > 0 && f.DeletionTimestamp.IsZero() {
		keep, res.requeueAfter, res.capped = pool.Namespaces(f.Spec.Pool.Namespaces, o.lastAdmission, now, opts.PoolIdleNamespaceTTL, learning(f, o.namespaces))
	}
	ix := indexPool(o)
	sooner(&res.requeueAfter, o.strandedRecheck)
	sooner(&res.requeueAfter, o.reservedRecheck)
	for _, ns := range ix.namespaces(keep) {
		kept := slices.Contains(keep, ns)
		if _, exists := o.namespaces[ns]; kept && !exists {
			// A listed one is reported; a learned one was deleted
			// since its last admission and is forgotten in time.
			if slices.Contains(f.Spec.Pool.Namespaces, ns) {
				res.missing = append(res.missing, ns)
			}
			continue
		}
		var nsSize int32
		if kept && !o.terminating[ns] {
			nsSize = size
		}
		planNamespace(o, ix, ns, kept, nsSize, now, &pp)
	}
	return pp
}

// poolIndex is what planPool reads of the observed state by namespace
// and by node, grouped once for all namespaces.
type poolIndex struct {
	// warm, binders and claimed are each namespace's warm PVCs, the warm
	// PVCs its binder Jobs are for, and its claimed PVCs.
	warm    map[string][]corev1.PersistentVolumeClaim
	binders map[string][]string
	claimed map[string][]corev1.PersistentVolumeClaim
	// staged is the number of each namespace's staged warm PVCs.
	staged map[string]int
	nodes  pool.Nodes
	// eligible reports whether new warm PVCs may be named for a node.
	eligible func(node string) bool
}

// indexPool groups what was observed, o, for planPool.
func indexPool(o poolObserved) poolIndex {
	ix := poolIndex{
		warm:    map[string][]corev1.PersistentVolumeClaim{},
		binders: map[string][]string{},
		claimed: map[string][]corev1.PersistentVolumeClaim{},
		nodes:   pool.Nodes{SelectNodes: o.selectNodes, Zones: o.nodeZones, ByName: o.nodes, Stranded: o.stranded},
	}
	for _, c := range o.warm {
		ix.warm[c.Namespace] = append(ix.warm[c.Namespace], c)
	}
	for _, j := range o.binders {
		ix.binders[j.Namespace] = append(ix.binders[j.Namespace], j.Labels[v1alpha1.WarmClaimLabelKey])
	}
	for _, c := range o.claimed {
		ix.claimed[c.Namespace] = append(ix.claimed[c.Namespace], c)
	}
	_, ix.staged = stagedPerNode(o)
	eligibleNames := make(map[string]bool, len(o.eligible))
	for _, n := range o.eligible {
		eligibleNames[n.Name] = true
	}
	ix.eligible = func(node string) bool { return eligibleNames[node] }
	return ix
}

// namespaces are the namespaces a pool reconcile plans, sorted: those
// that keep a pool and those that still hold warm PVCs or binders, which
// are emptied.
func (ix poolIndex) namespaces(keep []string) []string {
	namespaces := slices.Clone(keep)
	for ns := range ix.warm {
		namespaces = append(namespaces, ns)
	}
	for ns := range ix.binders {
		namespaces = append(namespaces, ns)
	}
	slices.Sort(namespaces)
	return slices.Compact(namespaces)
}

// planNamespace adds to pp the plan of namespace ns, which keeps size
// warm PVCs (0 empties it), and, for a namespace that keeps a pool, its
// status. A kept namespace in select-node mode follows its demand
// (pool.FollowDemand): new warm PVCs go first to the nodes where its pods
// use claims and no warm PVC covers them.
func planNamespace(o poolObserved, ix poolIndex, ns string, kept bool, size int32, now time.Time, pp *poolPlan) {
	res := &pp.result
	in := pool.Input{Size: size, Hash: pp.hash, WaitForFirstConsumer: o.waitForFirstConsumer, SelectNodes: o.selectNodes, Binders: ix.binders[ns], Reserved: o.reserved[ns]}
	adapted := pool.Adapt(ix.warm[ns], o.unseen[ns], pp.hash, ix.nodes, o.affinities)
	in.Claims = adapted.Claims
	for _, name := range adapted.Unreachable {
		res.unreachable = append(res.unreachable, ns+"/"+name)
		pp.replaced[ns+"/"+name] = pool.ReplacedUnreachable
	}
	for _, name := range adapted.Stranded {
		res.stranded = append(res.stranded, ns+"/"+name)
		pp.replaced[ns+"/"+name] = pool.ReplacedStranded
	}
	var preferred []string
	if o.selectNodes && kept {
		fd := pool.FollowDemand(pool.Demand(ix.claimed[ns]), adapted.Places, ix.eligible, now)
		preferred, in.Uncovered = fd.Uncovered, len(fd.Uncovered)
		for i := range in.Claims {
			in.Claims[i].Spare = slices.Contains(fd.Spare, in.Claims[i].Name)
			in.Claims[i].Move = slices.Contains(fd.Move, in.Claims[i].Name)
		}
		sooner(&res.requeueAfter, fd.RequeueAfter)
	}
	p := pool.PlanNamespace(in)
	for _, name := range p.Moved {
		res.moved = append(res.moved, ns+"/"+name)
	}
	sin, pending := stageInput(o, ns, pp.hash, p.Delete, pool.Demand(ix.claimed[ns]), now)
	stage := pool.PlanStaging(sin)
	if stage.Unstaged > 0 || pending > 0 {
		sooner(&res.requeueAfter, unwatchedRecheck)
	}
	pp.namespaces = append(pp.namespaces, namespacePlan{namespace: ns, plan: p, kept: kept, size: in.Size, preferred: preferred, stage: stage})
	if kept {
		res.namespaces = append(res.namespaces, namespaceStatus(o, ns, in, p, ix.staged[ns]))
	}
}

// namespaceStatus is the status of pool namespace ns, planned as p from
// in, with staged warm PVCs staged.
func namespaceStatus(o poolObserved, ns string, in pool.Input, p pool.Plan, staged int) v1alpha1.PoolNamespaceStatus {
	// Reserved claims are warm PVCs ready for a pod, held by a webhook
	// replica.
	st := v1alpha1.PoolNamespaceStatus{Namespace: ns, Warm: p.Warm + int32(in.Reserved), Reserved: int32(in.Reserved), Provisioning: p.Provisioning + int32(p.Create), Staged: int32(staged)}
	if t, ok := o.lastAdmission[ns]; ok {
		// Whole seconds, as a status time reads back: a fraction
		// (from the admitted-at annotation) would make every
		// reconcile's status differ from the stored one.
		st.LastAdmissionTime = &metav1.Time{Time: t.Truncate(time.Second)}
	}
	return st
}

// applyPool carries out pool plan pp for f, all namespaces at once, and
// keeps the warm-PVC gauge current. It returns the stranded warm PVCs it
// deleted ("namespace/name", sorted).
func (r *PoolReconciler) applyPool(ctx context.Context, f *v1alpha1.FluentPVC, o poolObserved, pp poolPlan) ([]string, error) {
	strandedDeleted := &keyLog{}
	log := ctrl.LoggerFrom(ctx).WithValues("fluentPVC", klog.KObj(f))
	claims := map[string]map[string]*corev1.PersistentVolumeClaim{}
	for i := range o.warm {
		c := &o.warm[i]
		if claims[c.Namespace] == nil {
			claims[c.Namespace] = map[string]*corev1.PersistentVolumeClaim{}
		}
		claims[c.Namespace][c.Name] = c
	}
	var ops []func() error
	for _, np := range pp.namespaces {
		p := np.plan
		if p.Create > 0 || len(p.Delete) > 0 {
			log.V(1).Info("resizing pool", "namespace", np.namespace,
				"warm", p.Warm, "provisioning", p.Provisioning, "create", p.Create, "delete", p.Delete, "preferredNodes", np.preferred)
		}
		ops = append(ops, r.poolOps(ctx, f, np, pp, o, claims[np.namespace], strandedDeleted)...)
		ops = append(ops, r.stagingOps(ctx, f, np, claims[np.namespace], o)...)
		if len(np.stage.Create) > 0 || len(np.stage.Delete) > 0 {
			log.V(1).Info("staging warm PVCs", "namespace", np.namespace, "create", np.stage.Create, "delete", np.stage.Delete)
		}
		if np.kept {
			poolWarm.WithLabelValues(f.Name, np.namespace).Set(float64(p.Warm))
			poolTarget.WithLabelValues(f.Name, np.namespace).Set(float64(np.size))
		} else {
			poolWarm.DeleteLabelValues(f.Name, np.namespace)
			poolTarget.DeleteLabelValues(f.Name, np.namespace)
		}
	}
	perNode, _ := stagedPerNode(o)
	poolStaged.DeletePartialMatch(map[string]string{"fluentpvc": f.Name})
	for node, n := range perNode {
		poolStaged.WithLabelValues(f.Name, node).Set(float64(n))
	}
	if len(pp.result.unreachable) > 0 || len(pp.result.stranded) > 0 || len(pp.result.moved) > 0 {
		log.Info("replacing warm PVCs", "unreachable", pp.result.unreachable, "stranded", pp.result.stranded, "servingNoPods", pp.result.moved)
	}
	if err := runParallel(ops, poolParallelism); err != nil {
		return strandedDeleted.sorted(), err
	}
	// A moving warm PVC is counted once its replacement is made: it is
	// deleted later, as surplus, once that one is Bound.
	poolReplaced.WithLabelValues(f.Name, pool.ReplacedDemand).Add(float64(len(pp.result.moved)))
	return strandedDeleted.sorted(), nil
}

// learning is what limits the namespaces f's pool learns: its
// namespaceSelector, on the labels of the namespaces that exist, and its
// cap.
func learning(f *v1alpha1.FluentPVC, namespaces map[string]map[string]string) pool.Learning {
	l := pool.Learning{Max: int(f.Spec.Pool.MaxNamespaces)}
	if sel := f.Spec.NamespaceSelector; sel != nil && len(sel.MatchLabels)+len(sel.MatchExpressions) > 0 {
		l.Selected = func(ns string) bool {
			labels, exists := namespaces[ns]
			if !exists {
				return false // gone, or unknown: no pool there
			}
			ok, err := objects.NamespaceSelected(sel, labels)
			return err == nil && ok
		}
	}
	return l
}

// poolOps turns one namespace's plan into API calls that can run in
// parallel; claims are the namespace's warm PVCs as observed, by name.
// strandedDeleted collects the stranded warm PVCs deleted.
func (r *PoolReconciler) poolOps(ctx context.Context, f *v1alpha1.FluentPVC, np namespacePlan, pp poolPlan, o poolObserved, claims map[string]*corev1.PersistentVolumeClaim, strandedDeleted *keyLog) []func() error {
	p := np.plan
	var nodes []string
	if o.selectNodes {
		nodes = pool.SpreadNodes(o.eligible, p.PerZone, p.Create+len(p.SelectNode), np.preferred, rand.IntN)
	}
	deleteWarm := r.warmDeleter(ctx, f, np.namespace, claims, pp.replaced, strandedDeleted)
	ops := r.createWarmOps(ctx, f, np, pp.hash, nodes, o.nodeZones, deleteWarm)
	ops = append(ops, r.selectNodeOps(ctx, np, nodes, claims)...)
	for _, name := range p.Delete {
		if claims[name] != nil {
			ops = append(ops, func() error { return deleteWarm(name) })
		}
	}
	ops = append(ops, r.binderOps(ctx, f, np, claims)...)
	for _, name := range p.Record {
		c := claims[name]
		if c == nil {
			continue
		}
		ops = append(ops, func() error { return r.recordAffinity(ctx, f, c) })
	}
	return ops
}

// warmDeleter returns the deletion of a warm PVC of namespace ns by name.
// One deleted as replaced counts in the metric, and a stranded one is
// collected in strandedDeleted; one not in claims is left alone: created
// but not in the cache yet, it is deleted once it is.
func (r *PoolReconciler) warmDeleter(ctx context.Context, f *v1alpha1.FluentPVC, ns string, claims map[string]*corev1.PersistentVolumeClaim, replaced map[string]string, strandedDeleted *keyLog) func(name string) error {
	return func(name string) error {
		c := claims[name]
		if c == nil {
			return nil
		}
		w, err := claim.DeleteWarm(c)
		if err == nil {
			err = claim.Execute(ctx, r.Client, w)
		}
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting warm PVC %s/%s: %w", ns, name, err)
		}
		if reason, ok := replaced[ns+"/"+name]; ok && err == nil {
			poolReplaced.WithLabelValues(f.Name, reason).Inc()
			if reason == pool.ReplacedStranded {
				strandedDeleted.add(ns + "/" + name)
			}
		}
		return nil
	}
}

// createWarmOps are the creations of np's new warm PVCs, of template
// hash, each named for the node of nodes at its index (none past its
// end). A create refused (a quota with no room for one more PVC, say)
// would hold a move back for good: the moving claims are then deleted
// first, with deleteWarm, to make room for their replacements at the
// next try.
func (r *PoolReconciler) createWarmOps(ctx context.Context, f *v1alpha1.FluentPVC, np namespacePlan, hash string, nodes []string, zones map[string]string, deleteWarm func(name string) error) []func() error {
	ns, p := np.namespace, np.plan
	var ops []func() error
	var makeRoom sync.Once
	for i := range p.Create {
		ops = append(ops, func() error {
			zone, node := "", ""
			if i < len(nodes) {
				node = nodes[i]
				zone = zones[node]
			}
			w := claim.NewWarm(f, ns, hash, node)
			err := claim.Execute(ctx, r.Client, w)
			if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				// The namespace is going away: its pool goes with it.
				return nil
			}
			if apierrors.IsForbidden(err) && len(p.Moved) > 0 {
				makeRoom.Do(func() {
					for _, name := range p.Moved {
						err = errors.Join(err, deleteWarm(name))
					}
				})
			}
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating warm PVC in %s: %w", ns, err)
			}
			now := r.clock.Now()
			key := client.ObjectKeyFromObject(w.Object)
			r.expect.Expect(createdWarm{f.Name, key}, "", pool.Expected{Key: key, Zone: zone, Node: node, At: now}, now)
			return nil
		})
	}
	return ops
}

// selectNodeOps name a node for np's warm PVCs that have none yet: the
// nodes of nodes after those of the new warm PVCs, in order. A claim not
// in claims, or left without a node, is skipped.
func (r *PoolReconciler) selectNodeOps(ctx context.Context, np namespacePlan, nodes []string, claims map[string]*corev1.PersistentVolumeClaim) []func() error {
	ns, p := np.namespace, np.plan
	var ops []func() error
	for i, name := range p.SelectNode {
		c := claims[name]
		if c == nil || p.Create+i >= len(nodes) {
			continue
		}
		node := nodes[p.Create+i]
		ops = append(ops, func() error {
			w, err := claim.SelectNode(c, node)
			if err == nil {
				err = claim.Execute(ctx, r.Client, w)
			}
			if client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
				return fmt.Errorf("naming node %s on warm PVC %s/%s: %w", node, ns, name, err)
			}
			return nil
		})
	}
	return ops
}

// binderOps create the binder Jobs np asks for, of the warm PVCs in
// claims, then delete those it no longer needs.
func (r *PoolReconciler) binderOps(ctx context.Context, f *v1alpha1.FluentPVC, np namespacePlan, claims map[string]*corev1.PersistentVolumeClaim) []func() error {
	ns, p := np.namespace, np.plan
	var ops []func() error
	for _, name := range p.CreateBinders {
		c := claims[name]
		if c == nil {
			continue
		}
		ops = append(ops, func() error {
			if err := r.Create(ctx, pool.BinderJob(f, c, r.opts.BinderImage)); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating the binder of %s/%s: %w", ns, name, err)
			}
			return nil
		})
	}
	for _, name := range p.DeleteBinders {
		ops = append(ops, func() error {
			j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: objects.BinderJobName(name)}}
			if err := r.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting the binder of %s/%s: %w", ns, name, err)
			}
			return nil
		})
	}
	return ops
}

// recordAffinity annotates a newly Bound warm PVC with its volume's node
// affinity (and, for webhooks of older versions, its zones), so that the
// webhook can match pods to it without reading PVs; this is also when the
// PVC becomes warm.
func (r *PoolReconciler) recordAffinity(ctx context.Context, f *v1alpha1.FluentPVC, c *corev1.PersistentVolumeClaim) error {
	pv := &corev1.PersistentVolume{}
	if err := r.apiReader.Get(ctx, client.ObjectKey{Name: c.Spec.VolumeName}, pv); err != nil {
		return client.IgnoreNotFound(err)
	}
	w, err := claim.RecordAffinity(c, pool.FormatZones(pool.PVZones(pv)), pool.VolumeAffinity(pv))
	if err == nil {
		err = claim.Execute(ctx, r.Client, w)
	}
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	timeToWarm.WithLabelValues(f.Name).Observe(r.clock.Since(c.CreationTimestamp.Time).Seconds())
	return nil
}

// runParallel runs ops with at most n at a time and joins their errors.
func runParallel(ops []func() error, n int) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, n)
	)
	for _, op := range ops {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := op(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
