package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"golang.org/x/time/rate"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/expectations"
	"github.com/st-tech/fluent-pvc-operator/pool"
)

// +kubebuilder:rbac:groups=fluent-pvc-operator.tech.zozo.com,resources=fluentpvcbindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=fluent-pvc-operator.tech.zozo.com,resources=fluentpvcbindings/status,verbs=get;update;patch
// The drain Job's controller reference blocks the binding's deletion, which
// OwnerReferencesPermissionEnforcement (on in OpenShift) allows only to
// whoever may update the binding's finalizers.
// +kubebuilder:rbac:groups=fluent-pvc-operator.tech.zozo.com,resources=fluentpvcbindings/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
// The FailedCreate events of a finalizer Job whose pod does not appear.
// +kubebuilder:rbac:groups="",resources=events,verbs=list

// BindingReconciler carries a FluentPVCBinding through its life: it creates
// it from the claim the webhook handed out, records
// the pod, drains the claim with finalizer Jobs once the pod is gone,
// retries failed Jobs with backoff, reclaims orphan claims, and deletes the
// claim and the binding only after a successful drain.
type BindingReconciler struct {
	client.Client
	// apiReader reads what the cache may not have seen yet.
	apiReader client.Reader
	recorder  events.EventRecorder
	clock     clock.PassiveClock
	opts      Options
	// seen are the pods whose bindings wait for them to be scheduled, and
	// those a new binding recorded that the claim does not record yet.
	seen seenPods
	// history proves that no pod was created with an unrecorded claim.
	history podHistory
	// own are the bindings' versions this reconciler's writes replaced,
	// and the bindings it created, until the cache shows the writes.
	// A cached copy at one of those versions is older than the
	// reconciler's last write: a decision made from it would repeat or
	// undo that write, and a write conditioned on it would fail with a
	// conflict, so the reconciler waits for the write's watch event.
	own ownWrites
	// ownClaims are the claims' versions its records of a pod on the claim
	// replaced: deciding from an older copy would write the record again.
	ownClaims ownWrites
}

// ownWrites expect a reconciler's writes of objects by key.
type ownWrites = expectations.Expectations[client.ObjectKey, struct{}]

// NewBindingReconciler returns a BindingReconciler that reads through c
// (cached) and apiReader (live) and sends events through recorder.
func NewBindingReconciler(c client.Client, apiReader client.Reader, recorder events.EventRecorder, clk clock.PassiveClock, opts Options) *BindingReconciler {
	return &BindingReconciler{Client: c, apiReader: apiReader, recorder: recorder, clock: clk, opts: opts}
}

// Reconcile implements reconcile.Reconciler.
func (r *BindingReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	b := &v1alpha1.FluentPVCBinding{}
	// One time for what is observed and what is decided from it: a grace
	// period must not end between the two.
	now := r.clock.Now()
	if err := r.Get(ctx, req.NamespacedName, b); err != nil {
		if apierrors.IsNotFound(err) {
			if r.own.Stale(req.NamespacedName, "", now) {
				// Created moments ago; its event reconciles it.
				return ctrl.Result{RequeueAfter: expectations.TTL}, nil
			}
			wait, err := r.createBinding(ctx, req.NamespacedName, now)
			return ctrl.Result{RequeueAfter: wait}, err
		}
		return ctrl.Result{}, err
	}
	if r.own.Stale(req.NamespacedName, b.ResourceVersion, now) {
		// The cache has not seen this reconciler's last write of b yet: the
		// write's event reconciles it again, and deciding from the older
		// copy would only repeat that write, or fail on its version.
		return ctrl.Result{RequeueAfter: expectations.TTL}, nil
	}
	o, err := r.observe(ctx, b, now)
	if errors.Is(err, errOwnClaimUnseen) {
		return ctrl.Result{RequeueAfter: expectations.TTL}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	res, err := r.apply(ctx, &o, decide(o, now, r.opts), now)
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) && !o.namespaceTerminating {
		// The namespace began terminating before the binding was marked
		// for deletion (observe reads the namespace only then): no Job can
		// run there any more, so let go as for a terminating namespace.
		o.namespaceTerminating = true
		return r.apply(ctx, &o, decide(o, now, r.opts), now)
	}
	return res, err
}

// observe reads the binding's FluentPVC, claim, pod, Jobs and namespace,
// mostly from the cache, once.
func (r *BindingReconciler) observe(ctx context.Context, b *v1alpha1.FluentPVCBinding, now time.Time) (observed, error) {
	o := observed{binding: b}
	for _, read := range []func(context.Context, *observed, time.Time) error{
		r.observeFluentPVC, r.observeClaim, r.observeJobs, r.observePod, r.observeDrain, r.observeNamespace, r.observeMounts,
	} {
		if err := read(ctx, &o, now); err != nil {
			return o, err
		}
	}
	return o, nil
}

// observeFluentPVC reads the binding's FluentPVC; nil when it is gone.
func (r *BindingReconciler) observeFluentPVC(ctx context.Context, o *observed, _ time.Time) error {
	b := o.binding
	fpvc := &v1alpha1.FluentPVC{}
	err := r.Get(ctx, client.ObjectKey{Name: b.Spec.FluentPVC.Name}, fpvc)
	if apierrors.IsNotFound(err) {
		// A FluentPVC missing for long lets its claims go: never on the
		// word of a cache that may not have seen it made again.
		err = r.apiReader.Get(ctx, client.ObjectKey{Name: b.Spec.FluentPVC.Name}, fpvc)
	}
	switch {
	case err == nil:
		o.fluentPVC = fpvc
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading FluentPVC %s: %w", b.Spec.FluentPVC.Name, err)
	}
	return nil
}

// errOwnClaimUnseen: the cache has not seen this reconciler's record of the
// pod on the claim yet. The claim's event reconciles the binding again;
// deciding from the older copy would only write the record again.
var errOwnClaimUnseen = errors.New("the cache has not seen the record of the pod on the claim yet")

// observeClaim reads the binding's claim: nil when it is gone, and
// checkoutOver when the claim went on to another checkout. It returns
// errOwnClaimUnseen, before the other reads, while the cache lags behind
// this reconciler's record of the pod on the claim.
func (r *BindingReconciler) observeClaim(ctx context.Context, o *observed, now time.Time) error {
	b := o.binding
	pvc := &corev1.PersistentVolumeClaim{}
	key := client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.PVC.Name}
	err := r.Get(ctx, key, pvc)
	if apierrors.IsNotFound(err) {
		// Never conclude from the cache alone that a claim is gone.
		err = r.apiReader.Get(ctx, key, pvc)
	}
	recorded := func() bool { return b.Spec.PVC.UID == "" || pvc.UID == b.Spec.PVC.UID }
	if err == nil && recorded() && !claim.SameCheckout(b, pvc) {
		// The cache may lag behind a binding made from a live read of its
		// claim: only a live read may say the checkout is over.
		err = r.apiReader.Get(ctx, key, pvc)
	}
	switch {
	case err == nil && claim.SameCheckout(b, pvc):
		o.pvc = pvc
	case err == nil:
		// The claim b recorded, back in the pool or checked out again; or
		// another object under its name, which is not b's at all.
		o.checkoutOver = recorded()
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading PVC %s: %w", key, err)
	}
	if (o.pvc == nil || !o.pvc.DeletionTimestamp.IsZero()) && !o.checkoutOver && !isFinal(b.Status.Phase) {
		// A claim deleted after its drain succeeded may be gone before the
		// cache has the binding's final phase: decide on the live binding,
		// so that a drained claim is never reported lost.
		live := &v1alpha1.FluentPVCBinding{}
		switch err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(b), live); {
		case err == nil && live.UID == b.UID:
			*b = *live
		case err != nil && !apierrors.IsNotFound(err):
			return fmt.Errorf("reading binding %s/%s: %w", b.Namespace, b.Name, err)
		}
	}
	if o.pvc != nil && r.ownClaims.Stale(client.ObjectKeyFromObject(o.pvc), o.pvc.ResourceVersion, now) {
		// Before any other read, some of them live.
		return errOwnClaimUnseen
	}
	if o.pvc != nil && o.fluentPVC != nil {
		// Only a claim that claim.Return takes (one no pod is recorded on).
		o.poolAccepts = o.fluentPVC.Spec.Pool.Size > 0 && o.fluentPVC.DeletionTimestamp.IsZero() &&
			o.pvc.Labels[v1alpha1.TemplateHashLabelKey] == pool.TemplateHash(&o.fluentPVC.Spec.PVCSpecTemplate) &&
			claim.StateOf(o.pvc) == claim.Claimed
	}
	return nil
}

// observePod finds the claim's pod: from the cache, else, while it may
// matter, by live reads (observeUncachedPod).
func (r *BindingReconciler) observePod(ctx context.Context, o *observed, now time.Time) error {
	b := o.binding
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(b.Namespace), client.MatchingFields{podBindingIndex: b.Name}); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	for i := range pods.Items {
		if claimantPod(&pods.Items[i], b.Spec.PVC.Name) && (o.pod == nil || pods.Items[i].UID == b.Spec.Pod.UID) {
			o.pod = &pods.Items[i]
		}
	}
	if o.pod != nil && b.Spec.Pod.UID != "" && o.pod.UID != b.Spec.Pod.UID {
		o.pod = nil // a pod that copied the label is not ours
	}
	// Once a drain Job exists, the drain was decided on a live read: the
	// pod's absence changes nothing more (its status may not say Draining
	// yet, see quietFirstDrain).
	if o.pod == nil && !drainDecided(b.Status.Phase) && len(o.jobs) == 0 && (o.pvc != nil || b.Spec.Pod.UID != "") {
		// The cache holds only pods with the opt-in label: a pod whose label
		// was removed drops out of it while it still runs and writes. Only
		// live reads prove that the claim's pod is gone, or never was.
		if err := r.observeUncachedPod(ctx, o, now); err != nil {
			return err
		}
	}
	return nil
}

// observeJobs reads the binding's finalizer Jobs.
func (r *BindingReconciler) observeJobs(ctx context.Context, o *observed, _ time.Time) error {
	b := o.binding
	var jobs batchv1.JobList
	if err := r.List(ctx, &jobs, client.InNamespace(b.Namespace), client.MatchingFields{jobBindingIndex: b.Name}); err != nil {
		return fmt.Errorf("listing Jobs: %w", err)
	}
	o.jobs = jobs.Items
	if n := b.Status.DrainAttempts; n > 0 && !slices.ContainsFunc(o.jobs, func(j batchv1.Job) bool { return jobAttempt(&j) == n }) {
		// The status names attempt n, written only after its Job was
		// created, but the Job cache may not show that Job yet. A live read
		// tells a Job not yet seen from one that is gone, so that attempt
		// n+1 never starts beside a running attempt n.
		job := &batchv1.Job{}
		switch err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: objects.DrainJobName(b.Name, n)}, job); {
		case err == nil && metav1.IsControlledBy(job, b):
			o.jobs = append(o.jobs, *job)
		case err != nil && !apierrors.IsNotFound(err):
			return fmt.Errorf("reading finalizer Job %s: %w", objects.DrainJobName(b.Name, n), err)
		}
	}
	return nil
}

// failedCreateWindow is how recent a finalizer Job's FailedCreate event
// must be to say that its pods are refused now: longer than the Job
// controller's longest wait between two tries to create a pod.
const failedCreateWindow = 10 * time.Minute

// observeDrain finds what keeps the current finalizer Job from making
// progress: its claim being deleted (no new pod that mounts it is
// scheduled), the Job controller unable to create its pod (its
// FailedCreate events, read live), or its pod unschedulable (the
// scheduler's condition, read live: drain pods are not cached). Pods and
// events are read only for a Job that has run unwatchedRecheck without a
// Ready pod, and again every unwatchedRecheck while it has none.
func (r *BindingReconciler) observeDrain(ctx context.Context, o *observed, now time.Time) error {
	b := o.binding
	if o.pvc != nil && !o.pvc.DeletionTimestamp.IsZero() && controllerutil.ContainsFinalizer(o.pvc, v1alpha1.PVCProtectionFinalizer) {
		// A namespace being deleted takes its claims first: the binding
		// lets go of them undrained once it is deleted too, and nothing
		// is blocked that anyone should be told of.
		ns := namespaceMeta()
		switch err := r.Get(ctx, client.ObjectKey{Name: b.Namespace}, ns); {
		case err != nil && !apierrors.IsNotFound(err):
			return fmt.Errorf("reading namespace %s: %w", b.Namespace, err)
		case err != nil || !ns.DeletionTimestamp.IsZero():
			return nil
		}
		o.drainBlocked = &blockage{reason: v1alpha1.DrainBlockedReasonClaimDeleting, message: fmt.Sprintf(
			"claim %s was deleted while the operator holds it, and no pod that mounts a claim being deleted is scheduled; see the operations guide, \"A held claim was deleted\"", b.Spec.PVC.Name)}
		return nil
	}
	job := runningJob(o.jobs)
	if job == nil || ptr.Deref(job.Status.Ready, 0) > 0 {
		return nil
	}
	if wait := job.CreationTimestamp.Add(unwatchedRecheck).Sub(now); wait > 0 {
		o.drainRecheck = wait
		return nil
	}
	o.drainRecheck = unwatchedRecheck
	if job.Status.Active == 0 {
		var events corev1.EventList
		if err := r.apiReader.List(ctx, &events, client.InNamespace(b.Namespace),
			client.MatchingFields{"involvedObject.uid": string(job.UID), "reason": "FailedCreate"}); err != nil {
			return fmt.Errorf("reading the events of finalizer Job %s: %w", job.Name, err)
		}
		// A refusal is current while the Job controller keeps retrying
		// (its backoff stays under failedCreateWindow), and only before
		// any pod of the Job ran: a pod that ran and failed is newer news.
		if e := latestEvent(events.Items); e != nil && job.Status.Failed == 0 && now.Sub(e.LastTimestamp.Time) < failedCreateWindow {
			o.drainBlocked = &blockage{reason: v1alpha1.DrainBlockedReasonPodsRefused,
				message: fmt.Sprintf("finalizer Job %s cannot create its pod: %s", job.Name, e.Message)}
		}
		return nil
	}
	var pods corev1.PodList
	if err := r.apiReader.List(ctx, &pods, client.InNamespace(b.Namespace), client.MatchingLabels{
		v1alpha1.BindingNameLabelKey: b.Name, v1alpha1.ComponentLabelKey: v1alpha1.ComponentDrain,
	}); err != nil {
		return fmt.Errorf("listing the pods of finalizer Job %s: %w", job.Name, err)
	}
	if msg := unschedulable(pods.Items, job); msg != "" {
		o.drainBlocked = &blockage{reason: v1alpha1.DrainBlockedReasonUnschedulable, message: msg}
	}
	return nil
}

// runningJob is the finalizer Job of jobs that has neither succeeded nor
// failed, nil when there is none.
func runningJob(jobs []batchv1.Job) *batchv1.Job {
	for i := range jobs {
		if j := &jobs[i]; !jobSucceeded(j) && !jobFailed(j) && j.DeletionTimestamp.IsZero() {
			return j
		}
	}
	return nil
}

// latestEvent is the event of events seen last, nil when there is none.
func latestEvent(events []corev1.Event) *corev1.Event {
	var latest *corev1.Event
	for i := range events {
		if e := &events[i]; latest == nil || e.LastTimestamp.After(latest.LastTimestamp.Time) {
			latest = e
		}
	}
	return latest
}

// unschedulable quotes the scheduler for a pod of job that it cannot
// place; "" when none is known to be unschedulable.
func unschedulable(pods []corev1.Pod, job *batchv1.Job) string {
	for i := range pods {
		p := &pods[i]
		if !metav1.IsControlledBy(p, job) || !p.DeletionTimestamp.IsZero() {
			continue
		}
		if why, ok := pool.Unschedulable(p); ok {
			return fmt.Sprintf("the pod %s of finalizer Job %s cannot be scheduled: %s", p.Name, job.Name, why)
		}
	}
	return ""
}

// observeMounts looks, with a live list of the namespace's pods, for a pod
// other than the claim's own and its drain's that mounts the claim, when
// the claim is about to be drained or deleted: its pod is gone or
// finished, and no finalizer Job runs. The admission webhook refuses such
// pods, but it lets pods through while the operator is down.
func (r *BindingReconciler) observeMounts(ctx context.Context, o *observed, now time.Time) error {
	b := o.binding
	if o.pvc == nil || !claim.Keeps(o.pvc) || o.namespaceTerminating ||
		runningJob(o.jobs) != nil || (o.pod != nil && !podFinished(o.pod)) {
		return nil
	}
	if b.Spec.Pod.UID == "" && graceStart(b).Add(r.opts.OrphanGracePeriod).After(now) {
		return nil // still waiting for its pod
	}
	found, err := r.claimants(ctx, o)
	if err != nil {
		return err
	}
	for i := range found.pods {
		p := &found.pods[i]
		if p.UID != b.Spec.Pod.UID && !podFinished(p) {
			o.mountedBy = p
			return nil
		}
	}
	return nil
}

// claimants lists, live, the pods of the binding's namespace that mount
// its claim, once per reconcile: a later call returns the first call's.
func (r *BindingReconciler) claimants(ctx context.Context, o *observed) (*claimantList, error) {
	if o.claimants != nil {
		return o.claimants, nil
	}
	b := o.binding
	found, err := listClaimants(ctx, r.apiReader, b.Namespace, b.Spec.PVC.Name, livePodPage)
	if err != nil {
		return nil, fmt.Errorf("listing the pods of namespace %s for claim %s: %w", b.Namespace, b.Spec.PVC.Name, err)
	}
	o.claimants = found
	return found, nil
}

// livePodPage is the most pods one page of a live list of a namespace's
// pods holds: the operator keeps only the pods that mount the claim, so
// that its memory does not grow with the namespace.
const livePodPage = 500

// claimantList are the pods that mount a claim (claimantPod), as a live
// list of their namespace found them, and the resourceVersion the list
// was served at.
type claimantList struct {
	pods            []corev1.Pod
	resourceVersion string
}

// listClaimants lists the pods of namespace through r in pages of at most
// limit pods and keeps those that mount claim. The pages after the first
// continue it at the first one's resourceVersion, so together they are one
// list of the namespace at that version: a pod created later is in none,
// one deleted later in one. A continuation the API server no longer keeps
// is an error, and the list is made anew by the next reconcile.
func listClaimants(ctx context.Context, r client.Reader, namespace, claim string, limit int64) (*claimantList, error) {
	out := &claimantList{}
	for cont := ""; ; {
		page := &corev1.PodList{}
		if err := r.List(ctx, page, client.InNamespace(namespace), client.Limit(limit), client.Continue(cont)); err != nil {
			return nil, err
		}
		if out.resourceVersion == "" {
			out.resourceVersion = page.ResourceVersion
		}
		for i := range page.Items {
			if claimantPod(&page.Items[i], claim) {
				out.pods = append(out.pods, page.Items[i])
			}
		}
		if cont = page.Continue; cont == "" {
			return out, nil
		}
	}
}

// observeNamespace reads, live, whether a deleted binding's namespace is
// terminating.
func (r *BindingReconciler) observeNamespace(ctx context.Context, o *observed, _ time.Time) error {
	b := o.binding
	if !b.DeletionTimestamp.IsZero() {
		ns := &corev1.Namespace{}
		if err := r.apiReader.Get(ctx, client.ObjectKey{Name: b.Namespace}, ns); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("reading namespace %s: %w", b.Namespace, err)
		}
		o.namespaceTerminating = !ns.DeletionTimestamp.IsZero() || ns.Status.Phase == corev1.NamespaceTerminating
	}
	return nil
}

// observeUncachedPod looks, with live reads, for the pod of a binding
// whose pod the cache does not hold. A pod known by UID (recorded on the
// binding, or on the claim by the binding's earlier self) is read by name.
// A binding that never recorded its pod lists the namespace's pods once
// the orphan grace period is over, and looks for one that mounts the
// claim, whatever its labels: a pod found there lost its opt-in or binding
// label before the operator saw it, and is taken as the binding's pod;
// none found, on a claim that tracks its pod and records none, and no
// such pod in the namespace's history since the claim was handed out
// (podHistory), is the positive proof that no pod used the claim. Labels
// can be edited on a running pod; its volumes cannot.
func (r *BindingReconciler) observeUncachedPod(ctx context.Context, o *observed, now time.Time) error {
	b := o.binding
	id := b.Spec.Pod
	if id.UID == "" && o.pvc != nil {
		id, _ = claim.PodOf(o.pvc)
	}
	if id.UID != "" {
		live := &corev1.Pod{}
		switch err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: id.Name}, live); {
		case err == nil && live.UID == id.UID:
			o.pod, o.podUncached = live, true
		case err != nil && !apierrors.IsNotFound(err):
			return fmt.Errorf("reading pod %s: %w", id.Name, err)
		}
		return nil
	}
	if o.pvc == nil || graceStart(b).Add(r.opts.OrphanGracePeriod).After(now) {
		return nil
	}
	live, err := r.claimants(ctx, o)
	if err != nil {
		return err
	}
	if len(live.pods) > 0 {
		o.pod, o.podUncached = &live.pods[0], true
		return nil
	}
	if _, tracked := claim.PodOf(o.pvc); !tracked {
		o.unusedUnproven = "the claim predates the record of its pod"
		return nil
	}
	// No pod mounts the claim now; that none ever did takes the history:
	// a pod deleted unrecorded (its finalizer stripped while the operator
	// was down) leaves no other trace.
	proof, why, err := r.history.noPodSince(ctx, b.Namespace, b.Spec.PVC.Name, claim.PodsSince(o.pvc), live.resourceVersion)
	if err != nil {
		return fmt.Errorf("reading the pod history of claim %s: %w", b.Spec.PVC.Name, err)
	}
	o.claimUnused, o.unusedUnproven = proof, why
	return nil
}

// claimantPod is true when pod p may be the one claim was made for: it
// mounts the claim and is not a finalizer Job's pod, which mounts the
// claim too. A drain pod is known by its controlling Job, named as the
// claim's drain Job, not by its labels: a pod that copies a drain pod's
// labels still counts. A pod carrying the binding label of a claim it
// does not mount (the label was edited) is not the claim's.
func claimantPod(p *corev1.Pod, claim string) bool {
	if objects.ControlledByDrainJob(p, claim) {
		return false
	}
	return slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool {
		return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim
	})
}

// releaseLabelledPods removes the pod-protection finalizer from every pod
// that carries binding label name, listed live: the cache holds no pod
// whose opt-in label was removed.
func (r *BindingReconciler) releaseLabelledPods(ctx context.Context, namespace, name string) error {
	var pods corev1.PodList
	if err := r.apiReader.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{v1alpha1.BindingNameLabelKey: name}); err != nil {
		return fmt.Errorf("listing the pods of claim %s: %w", name, err)
	}
	for i := range pods.Items {
		if err := releasePod(ctx, r.Client, &pods.Items[i]); err != nil {
			return fmt.Errorf("releasing pod %s: %w", pods.Items[i].Name, err)
		}
	}
	return nil
}

// apply carries out plan p, decided from o at now: spec records first,
// then the children, then one status write, then the outcomes.
// The claim written is kept in o, for a second apply in the same reconcile.
func (r *BindingReconciler) apply(ctx context.Context, o *observed, p plan, now time.Time) (ctrl.Result, error) {
	b := o.binding
	if p.recordPod != nil || p.recordPVCUID != "" {
		if p.recordPod != nil {
			b.Spec.Pod = *p.recordPod
		}
		if p.recordPVCUID != "" {
			b.Spec.PVC.UID = p.recordPVCUID
		}
		before := b.ResourceVersion
		if err := r.Update(ctx, b); err != nil {
			return ctrl.Result{}, fmt.Errorf("recording the pod in the binding: %w", err)
		}
		r.own.Expect(client.ObjectKeyFromObject(b), before, struct{}{}, now)
	}
	if p.recordOnClaim != nil && o.pvc != nil {
		// Before the pod is let go: this record is what proves, should
		// the binding be lost, that the claim holds a pod's data.
		pvc, err := r.recordPod(ctx, o.pvc, *p.recordOnClaim, now)
		if err != nil {
			return ctrl.Result{}, err
		}
		o.pvc = pvc
	}
	if p.releasePod {
		if err := releasePod(ctx, r.Client, o.pod); err != nil {
			return ctrl.Result{}, fmt.Errorf("releasing pod %s: %w", o.pod.Name, err)
		}
	}
	if p.createJob > 0 {
		job := objects.DrainJob(o.fluentPVC, b, p.createJob)
		err := r.Create(ctx, job)
		if err == nil {
			// Counted when made: a status write that loses a race later in
			// this reconcile must not lose the count.
			drainsStarted.WithLabelValues(b.Spec.FluentPVC.Name).Inc()
		}
		if p = settleJob(*o, p, job.Name, err, now); err != nil && !apierrors.IsAlreadyExists(err) && p.retry == nil {
			return ctrl.Result{}, fmt.Errorf("creating finalizer Job %s: %w", job.Name, err)
		}
	}
	for _, name := range p.deleteJobs {
		job := &batchv1.Job{}
		job.Namespace, job.Name = b.Namespace, name
		if err := r.Delete(ctx, job, client.PropagationPolicy("Background")); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("deleting failed Job %s: %w", name, err)
		}
	}
	pvc, err := r.letGo(ctx, *o, p)
	if err != nil {
		return ctrl.Result{}, err
	}
	if p.deleteClaim && pvc == nil && isFinal(p.status.Phase) && !p.finish {
		// The claim is deleted: the binding ends now, as its next
		// reconcile would find it, without writing a final status that
		// its own deletion follows at once. Its outcomes are told here,
		// and not again: the next plan starts from this one's status.
		r.report(ctx, *o, p)
		o.pvc, o.binding.Status = nil, p.status
		return r.apply(ctx, o, decide(*o, now, r.opts), now)
	}

	if statusNews(b.Status, p.status) && !p.finish && !p.quiet {
		// Conditioned on the version read: a status computed from a stale
		// copy (the cache behind our own last write) must not overwrite a
		// newer one, nor count its outcomes twice. The newer copy's event
		// reconciles the binding again.
		patch := client.MergeFromWithOptions(b.DeepCopy(), client.MergeFromWithOptimisticLock{})
		before := b.ResourceVersion
		b.Status = p.status
		if err := r.Status().Patch(ctx, b, patch); err != nil {
			if apierrors.IsConflict(err) {
				ctrl.LoggerFrom(ctx).V(1).Info("binding changed since it was read; its newer version is reconciled next", "binding", klog.KObj(b))
				return ctrl.Result{}, nil
			}
			return ctrl.Result{}, fmt.Errorf("writing the binding's status: %w", err)
		}
		r.own.Expect(client.ObjectKeyFromObject(b), before, struct{}{}, now)
	}
	r.report(ctx, *o, p)
	if p.retry != nil {
		return ctrl.Result{}, p.retry
	}
	if !p.finish {
		return ctrl.Result{RequeueAfter: p.requeueAfter}, nil
	}
	return ctrl.Result{}, r.finish(ctx, b, p, now)
}

// letGo carries out the plan's writes that let go of the claim: release,
// return to the pool, delete. It returns the claim as its last write left
// it, nil once deleted or gone. Each is conditioned on the claim being the
// checkout b records and on the version read (package claim), so that a
// stale binding or a stale read fails instead of taking a claim that
// another pod holds now.
func (r *BindingReconciler) letGo(ctx context.Context, o observed, p plan) (*corev1.PersistentVolumeClaim, error) {
	b := o.binding
	var steps []func(*corev1.PersistentVolumeClaim) (claim.Write, error)
	switch {
	case p.releaseClaim && p.deleteClaim:
		// Marked in the same write, so that the claim is deleted even if
		// this binding goes before the deletion (DeleteReleased).
		steps = append(steps, func(c *corev1.PersistentVolumeClaim) (claim.Write, error) { return claim.ReleaseForDeletion(b, c) })
	case p.releaseClaim:
		steps = append(steps, func(c *corev1.PersistentVolumeClaim) (claim.Write, error) { return claim.Release(b, c) })
	}
	if p.returnClaim {
		steps = append(steps, func(c *corev1.PersistentVolumeClaim) (claim.Write, error) { return claim.Return(b, c) })
	}
	if p.deleteClaim {
		steps = append(steps, func(c *corev1.PersistentVolumeClaim) (claim.Write, error) { return claim.Delete(b, c) })
	}
	pvc := o.pvc
	for i := 0; pvc != nil && i < len(steps); i++ {
		var err error
		if pvc, err = r.writeClaim(ctx, pvc, steps[i]); err != nil {
			return nil, err
		}
	}
	return pvc, nil
}

// finish ends binding b: the pods it may leave holding the pod-protection
// finalizer are released if p says so, then it is deleted (its finalizer
// removed first, on a binding made by an earlier version).
func (r *BindingReconciler) finish(ctx context.Context, b *v1alpha1.FluentPVCBinding, p plan, now time.Time) error {
	if p.releaseLabelledPods {
		if err := r.releaseLabelledPods(ctx, b.Namespace, b.Name); err != nil {
			return err
		}
	}
	key, before := client.ObjectKeyFromObject(b), b.ResourceVersion
	if err := removeFinalizer(ctx, r.Client, b, v1alpha1.BindingProtectionFinalizer); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("releasing the binding: %w", err)
	}
	if b.ResourceVersion != before {
		r.own.Expect(key, before, struct{}{}, now)
	}
	if b.DeletionTimestamp.IsZero() {
		// Its successor of the same name, made for the claim's next
		// checkout, is not this binding.
		switch err := r.Delete(ctx, b, client.Preconditions{UID: &b.UID}); {
		case err == nil:
			r.own.Expect(key, b.ResourceVersion, struct{}{}, now)
		case client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err):
			return fmt.Errorf("deleting the binding: %w", err)
		}
	}
	return nil
}

// recordPod records pod on claim pvc and notes the write as this
// reconciler's own, so that a cache still behind it is not acted on. It
// returns the claim as written, nil once it is gone. A claim gone, or one
// that records the pod already (nothing written), leaves no own write to
// wait for.
func (r *BindingReconciler) recordPod(ctx context.Context, pvc *corev1.PersistentVolumeClaim, pod v1alpha1.ObjectIdentity, now time.Time) (*corev1.PersistentVolumeClaim, error) {
	before := pvc.ResourceVersion
	written, err := r.writeClaim(ctx, pvc, func(c *corev1.PersistentVolumeClaim) (claim.Write, error) {
		return claim.RecordPod(c, pod)
	})
	if err != nil {
		return nil, err
	}
	if written != nil && written.ResourceVersion != before {
		r.ownClaims.Expect(client.ObjectKeyFromObject(pvc), before, struct{}{}, now)
	}
	return written, nil
}

// writeClaim executes the write that transition makes of pvc, and
// returns the claim as written, nil once it is gone.
func (r *BindingReconciler) writeClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim, transition func(*corev1.PersistentVolumeClaim) (claim.Write, error)) (*corev1.PersistentVolumeClaim, error) {
	w, err := transition(pvc)
	if err != nil {
		return nil, err
	}
	switch err := claim.Execute(ctx, r.Client, w); {
	case apierrors.IsNotFound(err) || (err == nil && w.Op == claim.OpDelete):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return w.Object, nil
}

// report counts, logs and tells as Events the outcomes of plan p, each
// as its kind's outcomeReport says. A steady state reports nothing.
func (r *BindingReconciler) report(ctx context.Context, o observed, p plan) {
	b := o.binding
	fpvc := b.Spec.FluentPVC.Name
	log := ctrl.LoggerFrom(ctx).WithValues("binding", klog.KObj(b), "claim", b.Spec.PVC.Name)
	for _, out := range p.outcomes {
		rep := outcomeReports[out.kind]
		log.V(rep.logLevel).Info(rep.log, "detail", out.message)
		if rep.counter != nil {
			rep.counter.WithLabelValues(fpvc).Inc()
		}
		if out.kind == outcomeDrained && out.drainSeconds > 0 {
			drainDuration.WithLabelValues(fpvc).Observe(out.drainSeconds)
		}
		if rep.reason == "" || out.silent {
			continue
		}
		typ := corev1.EventTypeNormal
		if rep.warning {
			typ = corev1.EventTypeWarning
		}
		r.recorder.Eventf(b, nil, typ, rep.reason, rep.reason, "%s", out.message)
		if rep.toFluentPVC && o.fluentPVC != nil {
			r.recorder.Eventf(o.fluentPVC, b, typ, rep.reason, rep.reason, "%s/%s: %s", b.Namespace, b.Name, out.message)
		}
		if out.claimMessage != "" && o.pvc != nil {
			r.recorder.Eventf(o.pvc, b, typ, rep.reason, rep.reason, "%s", out.claimMessage)
		}
	}
}

// removeFinalizer removes finalizer from obj with an optimistic-lock patch.
func removeFinalizer(ctx context.Context, c client.Client, obj client.Object, finalizer string) error {
	if !controllerutil.ContainsFinalizer(obj, finalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(obj, finalizer)
	return client.IgnoreNotFound(c.Patch(ctx, obj, patch))
}

// releasePod removes the pod-protection finalizer from pod. The patch
// tests that the pod is the one read (its UID) and that the finalizer is
// where it was read, and needs no resourceVersion: the kubelet writes a
// pod's status often, and a patch conditioned on the version read would
// lose to it, costing a failed write and a retry. A pod whose finalizers
// moved fails the test, and is released on the next reconcile.
func releasePod(ctx context.Context, c client.Client, pod *corev1.Pod) error {
	i := slices.Index(pod.Finalizers, v1alpha1.PodProtectionFinalizer)
	if i < 0 {
		return nil
	}
	ops, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": pod.UID},
		{"op": "test", "path": fmt.Sprintf("/metadata/finalizers/%d", i), "value": v1alpha1.PodProtectionFinalizer},
		{"op": "remove", "path": fmt.Sprintf("/metadata/finalizers/%d", i)},
	})
	if err != nil {
		return err
	}
	return client.IgnoreNotFound(c.Patch(ctx, pod, client.RawPatch(types.JSONPatchType, ops)))
}

// bindingWorkers is how many bindings are reconciled at once.
const bindingWorkers = 8

// maxBindingRetry caps the wait before a binding whose reconcile failed
// is tried again. What fails for long is a refusal by a quota or a policy
// (of the binding, or of its finalizer Job), whose end no event tells:
// the binding then recovers within maxBindingRetry of the fix, instead of
// the default limiter's 16 minutes.
const maxBindingRetry = 30 * time.Second

// bindingRateLimiter is the default controller rate limiter (per-item
// exponential backoff from 5 ms, and an overall 10 per second with bursts
// of 100) with the per-item backoff capped at maxBindingRetry.
func bindingRateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, maxBindingRetry),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// SetupWithManager registers the reconciler and its watches.
func (r *BindingReconciler) SetupWithManager(mgr ctrl.Manager) error {
	byBindingLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		name := obj.GetLabels()[v1alpha1.BindingNameLabelKey]
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}}}
	})
	// A FluentPVC that comes back lets bindings waiting for it drain.
	fluentPVCCreated := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return true },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("fluentpvcbinding").
		// Bindings are independent of each other, and a burst of pods brings
		// a burst of them: several at once keep their records current.
		WithOptions(controller.Options{MaxConcurrentReconciles: bindingWorkers, RateLimiter: bindingRateLimiter()}).
		For(&v1alpha1.FluentPVCBinding{}).
		Owns(&batchv1.Job{}).
		Watches(&corev1.Pod{}, byBindingLabel).
		Watches(&corev1.PersistentVolumeClaim{}, byBindingLabel).
		Watches(&v1alpha1.FluentPVC{}, handler.EnqueueRequestsFromMapFunc(r.bindingsOf), builder.WithPredicates(fluentPVCCreated)).
		// A changed FluentPVC may fix the finalizer Jobs it made refused.
		Watches(&v1alpha1.FluentPVC{}, handler.EnqueueRequestsFromMapFunc(r.rejectedBindingsOf), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(quietConflicts(r))
}

// rejectedBindingsOf are the bindings of a FluentPVC whose finalizer Job
// was refused: a change of the FluentPVC may fix it, so they try again now
// instead of after their backoff.
func (r *BindingReconciler) rejectedBindingsOf(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.bindingsWhere(ctx, obj.GetName(), func(b *v1alpha1.FluentPVCBinding) bool {
		return meta.IsStatusConditionTrue(b.Status.Conditions, v1alpha1.BindingConditionDrainJobRejected)
	})
}

func (r *BindingReconciler) bindingsOf(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.bindingsWhere(ctx, obj.GetName(), func(*v1alpha1.FluentPVCBinding) bool { return true })
}

// bindingsWhere are the bindings of FluentPVC fpvc that keep selects.
func (r *BindingReconciler) bindingsWhere(ctx context.Context, fpvc string, keep func(*v1alpha1.FluentPVCBinding) bool) []reconcile.Request {
	var l v1alpha1.FluentPVCBindingList
	if err := r.List(ctx, &l, client.MatchingFields{bindingFluentPVCIndex: fpvc}, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range l.Items {
		if keep(&l.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&l.Items[i])})
		}
	}
	return reqs
}
