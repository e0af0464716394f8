package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
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
	"github.com/st-tech/fluent-pvc-operator/pool"
)

// +kubebuilder:rbac:groups=fluent-pvc-operator.tech.zozo.com,resources=fluentpvcbindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=fluent-pvc-operator.tech.zozo.com,resources=fluentpvcbindings/status,verbs=get;update;patch
// The drain Job's controller reference blocks the binding's deletion, which
// OwnerReferencesPermissionEnforcement (on in OpenShift) allows only to
// whoever may update the binding's finalizers.
// +kubebuilder:rbac:groups=fluent-pvc-operator.tech.zozo.com,resources=fluentpvcbindings/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get

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
}

// NewBindingReconciler returns a BindingReconciler that reads through c
// (cached) and apiReader (live) and sends events through recorder.
func NewBindingReconciler(c client.Client, apiReader client.Reader, recorder events.EventRecorder, clk clock.PassiveClock, opts Options) *BindingReconciler {
	return &BindingReconciler{Client: c, apiReader: apiReader, recorder: recorder, clock: clk, opts: opts}
}

// Reconcile implements reconcile.Reconciler.
func (r *BindingReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	b := &v1alpha1.FluentPVCBinding{}
	if err := r.Get(ctx, req.NamespacedName, b); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.createBinding(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	// One time for what is observed and what is decided from it: a grace
	// period must not end between the two.
	now := r.clock.Now()
	o, err := r.observe(ctx, b, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	res, err := r.apply(ctx, o, decide(o, now, r.opts))
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) && !o.namespaceTerminating {
		// The namespace began terminating before the binding was marked
		// for deletion (observe reads the namespace only then): no Job can
		// run there any more, so let go as for a terminating namespace.
		o.namespaceTerminating = true
		return r.apply(ctx, o, decide(o, now, r.opts))
	}
	return res, err
}

// createBinding makes the binding of the claim named key.Name, if it is a
// pod's claim (the webhook admitted a pod with it) and has none: this is how
// every binding is born, and how one lost by hand is remade, so that no
// claim is ever left without the record that drains it.
func (r *BindingReconciler) createBinding(ctx context.Context, key client.ObjectKey) error {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.Get(ctx, key, pvc); err != nil || !objects.Claimed(pvc) || pvc.Labels[v1alpha1.BindingNameLabelKey] != key.Name {
		return client.IgnoreNotFound(err)
	}
	// The cache may lag behind the end of a claim's life (drained, deleted,
	// then the binding removed): only a live read may bring a binding back.
	if err := r.apiReader.Get(ctx, key, pvc); err != nil || !objects.Claimed(pvc) || pvc.Labels[v1alpha1.BindingNameLabelKey] != key.Name {
		return client.IgnoreNotFound(err)
	}
	fpvc := &v1alpha1.FluentPVC{}
	if err := r.Get(ctx, client.ObjectKey{Name: pvc.Labels[v1alpha1.FluentPVCNameLabelKey]}, fpvc); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("reading FluentPVC %s: %w", pvc.Labels[v1alpha1.FluentPVCNameLabelKey], err)
	}
	b := objects.Binding(pvc, fpvc.UID)
	// A pod already in the cache is recorded at once, saving an update.
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(pvc.Namespace), client.MatchingFields{podBindingIndex: b.Name}); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	switch used, _ := objects.ClaimPod(pvc); {
	case used.UID != "":
		// Made again after it was lost: the claim remembers its pod.
		b.Spec.Pod = used
	case len(pods.Items) == 1 && claimantPod(&pods.Items[0], pvc.Name):
		b.Spec.Pod = v1alpha1.ObjectIdentity{Name: pods.Items[0].Name, UID: pods.Items[0].UID}
	}
	err := r.Create(ctx, b)
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return r.abandonUnrecorded(ctx, pvc, fpvc)
	}
	if client.IgnoreAlreadyExists(err) != nil {
		return fmt.Errorf("creating the binding of claim %s: %w", key, err)
	}
	return nil
}

// abandonUnrecorded lets go of a claim whose namespace began terminating
// before its binding was made, as a binding would (see decide): no Job can
// run there, and the namespace would wait forever on the claim's and its
// pods' finalizers.
func (r *BindingReconciler) abandonUnrecorded(ctx context.Context, pvc *corev1.PersistentVolumeClaim, fpvc *v1alpha1.FluentPVC) error {
	name := pvc.Labels[v1alpha1.BindingNameLabelKey]
	if err := r.releaseLabelledPods(ctx, pvc.Namespace, name); err != nil {
		return err
	}
	if err := removeFinalizer(ctx, r.Client, pvc, v1alpha1.PVCProtectionFinalizer); err != nil {
		return fmt.Errorf("releasing PVC %s: %w", pvc.Name, err)
	}
	claimsAbandoned.WithLabelValues(pvc.Labels[v1alpha1.FluentPVCNameLabelKey]).Inc()
	ctrl.LoggerFrom(ctx).Info("namespace is being deleted before the claim's binding was made: claim released undrained",
		"claim", klog.KObj(pvc))
	if fpvc.UID != "" {
		r.recorder.Eventf(fpvc, nil, corev1.EventTypeWarning, v1alpha1.EventReasonAbandoned, v1alpha1.EventReasonAbandoned,
			"%s/%s: namespace %s is being deleted: claim %s was released without draining its data", pvc.Namespace, name, pvc.Namespace, pvc.Name)
	}
	return nil
}

// observe reads the binding's pod, claim, Jobs and FluentPVC, mostly from
// the cache, once.
func (r *BindingReconciler) observe(ctx context.Context, b *v1alpha1.FluentPVCBinding, now time.Time) (observed, error) {
	o := observed{binding: b}

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
		return o, fmt.Errorf("reading FluentPVC %s: %w", b.Spec.FluentPVC.Name, err)
	}

	pvc := &corev1.PersistentVolumeClaim{}
	key := client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.PVC.Name}
	err = r.Get(ctx, key, pvc)
	if apierrors.IsNotFound(err) {
		// Never conclude from the cache alone that a claim is gone.
		err = r.apiReader.Get(ctx, key, pvc)
	}
	recorded := func() bool { return b.Spec.PVC.UID == "" || pvc.UID == b.Spec.PVC.UID }
	if err == nil && recorded() && !objects.SameCheckout(b, pvc) {
		// The cache may lag behind a binding made from a live read of its
		// claim: only a live read may say the checkout is over.
		err = r.apiReader.Get(ctx, key, pvc)
	}
	switch {
	case err == nil && objects.SameCheckout(b, pvc):
		o.pvc = pvc
	case err == nil:
		// The claim b recorded, back in the pool or checked out again; or
		// another object under its name, which is not b's at all.
		o.checkoutOver = recorded()
	case !apierrors.IsNotFound(err):
		return o, fmt.Errorf("reading PVC %s: %w", key, err)
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
			return o, fmt.Errorf("reading binding %s/%s: %w", b.Namespace, b.Name, err)
		}
	}

	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(b.Namespace), client.MatchingFields{podBindingIndex: b.Name}); err != nil {
		return o, fmt.Errorf("listing pods: %w", err)
	}
	for i := range pods.Items {
		if claimantPod(&pods.Items[i], b.Spec.PVC.Name) && (o.pod == nil || pods.Items[i].UID == b.Spec.Pod.UID) {
			o.pod = &pods.Items[i]
		}
	}
	if o.pod != nil && b.Spec.Pod.UID != "" && o.pod.UID != b.Spec.Pod.UID {
		o.pod = nil // a pod that copied the label is not ours
	}
	if o.pod == nil && !drainDecided(b.Status.Phase) && (o.pvc != nil || b.Spec.Pod.UID != "") {
		// The cache holds only pods with the opt-in label: a pod whose label
		// was removed drops out of it while it still runs and writes. Only
		// live reads prove that the claim's pod is gone, or never was.
		if err := r.observeUncachedPod(ctx, &o, now); err != nil {
			return o, err
		}
	}
	if o.pvc != nil && o.fluentPVC != nil {
		o.poolAccepts = o.fluentPVC.Spec.Pool.Size > 0 && o.fluentPVC.DeletionTimestamp.IsZero() &&
			o.pvc.Labels[v1alpha1.TemplateHashLabelKey] == pool.TemplateHash(&o.fluentPVC.Spec.PVCSpecTemplate)
	}

	var jobs batchv1.JobList
	if err := r.List(ctx, &jobs, client.InNamespace(b.Namespace), client.MatchingFields{jobBindingIndex: b.Name}); err != nil {
		return o, fmt.Errorf("listing Jobs: %w", err)
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
			return o, fmt.Errorf("reading finalizer Job %s: %w", objects.DrainJobName(b.Name, n), err)
		}
	}

	if !b.DeletionTimestamp.IsZero() {
		ns := &corev1.Namespace{}
		if err := r.apiReader.Get(ctx, client.ObjectKey{Name: b.Namespace}, ns); client.IgnoreNotFound(err) != nil {
			return o, fmt.Errorf("reading namespace %s: %w", b.Namespace, err)
		}
		o.namespaceTerminating = !ns.DeletionTimestamp.IsZero() || ns.Status.Phase == corev1.NamespaceTerminating
	}
	return o, nil
}

// observeUncachedPod looks, with live reads, for the pod of a binding
// whose pod the cache does not hold. A pod known by UID (recorded on the
// binding, or on the claim by the binding's earlier self) is read by name.
// A binding that never recorded its pod lists the namespace's pods once
// the orphan grace period is over, and looks for one that mounts the
// claim, whatever its labels: a pod found there lost its opt-in or binding
// label before the operator saw it, and is taken as the binding's pod;
// none found, on a claim that tracks its pod and records none, is the
// positive proof that no pod used the claim. Labels can be edited on a
// running pod; its volumes cannot.
func (r *BindingReconciler) observeUncachedPod(ctx context.Context, o *observed, now time.Time) error {
	b := o.binding
	id := b.Spec.Pod
	if id.UID == "" && o.pvc != nil {
		id, _ = objects.ClaimPod(o.pvc)
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
	if o.pvc == nil || admissionTime(b).Add(r.opts.OrphanGracePeriod).After(now) {
		return nil
	}
	var live corev1.PodList
	if err := r.apiReader.List(ctx, &live, client.InNamespace(b.Namespace)); err != nil {
		return fmt.Errorf("listing the pods of namespace %s for claim %s: %w", b.Namespace, b.Spec.PVC.Name, err)
	}
	for i := range live.Items {
		if claimantPod(&live.Items[i], b.Spec.PVC.Name) {
			o.pod, o.podUncached = &live.Items[i], true
			return nil
		}
	}
	_, tracked := objects.ClaimPod(o.pvc)
	o.claimUnused = tracked
	return nil
}

// claimantPod is true when pod p may be the one claim was made for: it
// mounts the claim and is not a finalizer Job's pod, which carries the
// binding label and mounts the claim too. A pod carrying the binding label
// of a claim it does not mount (the label was edited) is not the claim's.
func claimantPod(p *corev1.Pod, claim string) bool {
	if p.Labels[v1alpha1.ComponentLabelKey] == v1alpha1.ComponentDrain {
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
		if err := removeFinalizer(ctx, r.Client, &pods.Items[i], v1alpha1.PodProtectionFinalizer); err != nil {
			return fmt.Errorf("releasing pod %s: %w", pods.Items[i].Name, err)
		}
	}
	return nil
}

// apply carries out a plan: spec records first, then the children, then one
// status write, then events.
func (r *BindingReconciler) apply(ctx context.Context, o observed, p plan) (ctrl.Result, error) {
	b := o.binding
	fpvcName := b.Spec.FluentPVC.Name

	if p.recordPod != nil || p.recordPVCUID != "" {
		if p.recordPod != nil {
			b.Spec.Pod = *p.recordPod
		}
		if p.recordPVCUID != "" {
			b.Spec.PVC.UID = p.recordPVCUID
		}
		if err := r.Update(ctx, b); err != nil {
			return ctrl.Result{}, fmt.Errorf("recording the pod in the binding: %w", err)
		}
	}
	if p.recordOnClaim != nil && o.pvc != nil {
		// Before the pod is let go: this record is what proves, should
		// the binding be lost, that the claim holds a pod's data.
		patch := client.MergeFromWithOptions(o.pvc.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if o.pvc.Annotations == nil {
			o.pvc.Annotations = map[string]string{}
		}
		o.pvc.Annotations[v1alpha1.UsedByPodAnnotationKey] = objects.UsedByPod(*p.recordOnClaim)
		if err := r.Patch(ctx, o.pvc, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("recording pod %s on claim %s: %w", p.recordOnClaim.Name, o.pvc.Name, err)
		}
	}
	if p.releasePod {
		if err := removeFinalizer(ctx, r.Client, o.pod, v1alpha1.PodProtectionFinalizer); err != nil {
			return ctrl.Result{}, fmt.Errorf("releasing pod %s: %w", o.pod.Name, err)
		}
	}
	// rejected is the API server's refusal of the finalizer Job: recorded
	// in the status and told in Events before the retry, not lost in a
	// returned error.
	var rejected error
	var rejectedJob string
	if p.createJob > 0 {
		job := objects.DrainJob(o.fluentPVC, b, p.createJob)
		switch err := r.Create(ctx, job); {
		case err == nil:
			drainsStarted.WithLabelValues(fpvcName).Inc()
			meta.RemoveStatusCondition(&p.status.Conditions, v1alpha1.BindingConditionDrainJobRejected)
		case apierrors.IsAlreadyExists(err):
		case drainJobRejected(err):
			// No attempt was made: the status keeps the last one, says why,
			// and nothing else planned with the Job happens.
			rejected = err
			now := r.clock.Now()
			p.status.DrainAttempts, p.status.DrainJobName = p.createJob-1, b.Status.DrainJobName
			setCondition(&p.status, v1alpha1.BindingConditionDrained, metav1.ConditionFalse, v1alpha1.DrainedReasonJobRejected,
				fmt.Sprintf("the API server refused finalizer Job %s: %v", job.Name, err), b.Generation, now)
			setCondition(&p.status, v1alpha1.BindingConditionDrainJobRejected, metav1.ConditionTrue, string(apierrors.ReasonForError(err)), err.Error(), b.Generation, now)
			p.createJob, p.deleteJobs, p.events = 0, nil, nil
			rejectedJob = job.Name
		default:
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
	if p.releaseClaim && o.pvc != nil {
		if err := r.letGo(ctx, b, o.pvc, releaseClaim); err != nil {
			return ctrl.Result{}, err
		}
	}
	if p.returnClaim && o.pvc != nil {
		if err := r.letGo(ctx, b, o.pvc, returnClaim); err != nil {
			return ctrl.Result{}, err
		}
		o.pvc = nil // no longer this binding's claim
		p.finish = true
	}
	if p.deleteClaim && o.pvc != nil && o.pvc.DeletionTimestamp.IsZero() {
		if err := r.letGo(ctx, b, o.pvc, deleteClaim); err != nil {
			return ctrl.Result{}, err
		}
	}

	if !equality.Semantic.DeepEqual(b.Status, p.status) && !p.finish {
		// Conditioned on the version read: a status computed from a stale
		// copy (the cache behind our own last write) must not overwrite a
		// newer one, nor count its metrics and Events twice. The newer
		// copy's event reconciles the binding again.
		patch := client.MergeFromWithOptions(b.DeepCopy(), client.MergeFromWithOptimisticLock{})
		b.Status = p.status
		if err := r.Status().Patch(ctx, b, patch); err != nil {
			if apierrors.IsConflict(err) {
				ctrl.LoggerFrom(ctx).V(1).Info("binding changed since it was read; its newer version is reconciled next", "binding", klog.KObj(b))
				return ctrl.Result{}, nil
			}
			return ctrl.Result{}, fmt.Errorf("writing the binding's status: %w", err)
		}
	}
	logDecisions(ctx, b, p)
	if p.newFailure {
		drainsFailed.WithLabelValues(fpvcName).Inc()
	}
	if p.drained {
		drainsSucceeded.WithLabelValues(fpvcName).Inc()
		if s := p.status.DrainStartTime; s != nil {
			drainDuration.WithLabelValues(fpvcName).Observe(r.clock.Since(s.Time).Seconds())
		}
	}
	if p.orphaned {
		orphansReclaimed.WithLabelValues(fpvcName).Inc()
	}
	if p.abandoned || p.releasedUndrained {
		claimsAbandoned.WithLabelValues(fpvcName).Inc()
	}
	if p.releasedUndrained && o.pvc != nil {
		// The binding goes away; the claim it let go of stays, for the user.
		r.recorder.Eventf(o.pvc, b, corev1.EventTypeWarning, v1alpha1.EventReasonReleasedUndrained, v1alpha1.EventReasonReleasedUndrained,
			"FluentPVC %s stayed gone for %s: fluent-pvc-operator let go of this claim without draining it; drain and delete it by hand", b.Spec.FluentPVC.Name, r.opts.FluentPVCMissingTimeout)
	}

	for _, e := range p.events {
		typ := corev1.EventTypeNormal
		if e.warning {
			typ = corev1.EventTypeWarning
		}
		r.recorder.Eventf(b, nil, typ, e.reason, e.reason, "%s", e.message)
		// A terminating namespace takes no new events: tell the FluentPVC.
		if p.abandoned && o.fluentPVC != nil {
			r.recorder.Eventf(o.fluentPVC, b, typ, e.reason, e.reason, "%s/%s: %s", b.Namespace, b.Name, e.message)
		}
	}
	if rejected != nil {
		drainJobsRejected.WithLabelValues(fpvcName).Inc()
		msg := fmt.Sprintf("the API server refused finalizer Job %s made from FluentPVC %s; the claim is kept and the Job is tried again when the FluentPVC changes: %v",
			rejectedJob, fpvcName, rejected)
		r.recorder.Eventf(b, nil, corev1.EventTypeWarning, v1alpha1.EventReasonDrainJobRejected, v1alpha1.EventReasonDrainJobRejected, "%s", msg)
		if o.fluentPVC != nil {
			r.recorder.Eventf(o.fluentPVC, b, corev1.EventTypeWarning, v1alpha1.EventReasonDrainJobRejected, v1alpha1.EventReasonDrainJobRejected, "%s/%s: %s", b.Namespace, b.Name, msg)
		}
		// Retried with the rate limiter's backoff; a change of the
		// FluentPVC brings the binding back at once (SetupWithManager).
		return ctrl.Result{}, fmt.Errorf("creating finalizer Job %s: %w", rejectedJob, rejected)
	}

	if p.finish {
		if !p.checkoutOver && !o.claimUnused && (o.namespaceTerminating || b.Spec.Pod.UID == "") {
			// A pod this binding never recorded, or one a terminating
			// namespace must be rid of, may be out of the cache (its opt-in
			// label removed) and still hold the pod-protection finalizer,
			// which nothing would remove once the binding is gone. (An
			// unused claim was just proven to have no pod by a live list.)
			if err := r.releaseLabelledPods(ctx, b.Namespace, b.Name); err != nil {
				return ctrl.Result{}, err
			}
		}
		if err := removeFinalizer(ctx, r.Client, b, v1alpha1.BindingProtectionFinalizer); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("releasing the binding: %w", err)
		}
		if b.DeletionTimestamp.IsZero() {
			// Its successor of the same name, made for the claim's next
			// checkout, is not this binding.
			if err := r.Delete(ctx, b, client.Preconditions{UID: &b.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
				return ctrl.Result{}, fmt.Errorf("deleting the binding: %w", err)
			}
		}
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: p.requeueAfter}, nil
}

// logDecisions logs what p decided about b's claim once it is carried out:
// at the default level what a user must act on or know was lost, at V(1)
// the normal course of a claim's life. A steady state logs nothing.
func logDecisions(ctx context.Context, b *v1alpha1.FluentPVCBinding, p plan) {
	log := ctrl.LoggerFrom(ctx).WithValues("binding", klog.KObj(b), "claim", b.Spec.PVC.Name)
	switch {
	case p.createJob > 0 && len(p.deleteJobs) > 0:
		log.V(1).Info("drain retried", "attempt", p.createJob, "job", p.status.DrainJobName, "replaces", p.deleteJobs)
	case p.createJob > 0:
		log.V(1).Info("drain started", "attempt", p.createJob, "job", p.status.DrainJobName)
	}
	if p.newFailure {
		log.Info("drain failed; the claim is kept and the drain retried", "attempt", p.status.DrainAttempts, "job", p.status.DrainJobName, "after", p.requeueAfter)
	}
	if p.drained {
		log.V(1).Info("claim drained; deleting it", "job", p.status.DrainJobName)
	}
	if p.checkoutOver {
		log.V(1).Info("the claim went back to the pool and was handed out again: this binding's record is done")
	}
	if p.orphaned {
		log.V(1).Info("no pod appeared within the grace period: claim reclaimed undrained", "returnedToPool", p.returnClaim)
	}
	if p.abandoned {
		log.Info("namespace is being deleted: claim released undrained", "namespace", b.Namespace)
	}
	if p.releasedUndrained {
		log.Info("FluentPVC stayed gone: claim let go of undrained and kept", "fluentPVC", b.Spec.FluentPVC.Name)
	}
	for _, e := range p.events {
		if e.reason == v1alpha1.EventReasonClaimLost || e.reason == v1alpha1.EventReasonFluentPVCMissing {
			log.Info("claim waits for the user", "reason", e.reason, "detail", e.message)
		}
	}
}

// claimWrite is one of the three writes that let go of a claim.
type claimWrite string

const (
	// releaseClaim removes the claim's finalizer, so that it may be deleted.
	releaseClaim claimWrite = "release"
	// returnClaim gives the claim back to the warm pool.
	returnClaim claimWrite = "return to the pool"
	// deleteClaim deletes the (released) claim.
	deleteClaim claimWrite = "delete"
)

// letGo is the one place where a binding lets go of its claim. Every such
// write is conditioned on the claim being the checkout b records (its UID
// and checkout token, see objects.SameCheckout) and on the resourceVersion
// pvc was read at, so that a stale binding or a stale read fails instead of
// taking a claim that another pod holds now.
func (r *BindingReconciler) letGo(ctx context.Context, b *v1alpha1.FluentPVCBinding, pvc *corev1.PersistentVolumeClaim, w claimWrite) error {
	if !objects.SameCheckout(b, pvc) {
		return fmt.Errorf("refusing to %s claim %s: it is no longer the checkout binding %s records", w, pvc.Name, b.Name)
	}
	var err error
	switch w {
	case releaseClaim:
		err = removeFinalizer(ctx, r.Client, pvc, v1alpha1.PVCProtectionFinalizer)
	case returnClaim:
		err = r.Update(ctx, pool.Returned(pvc))
	case deleteClaim:
		err = client.IgnoreNotFound(r.Delete(ctx, pvc, client.Preconditions{UID: &pvc.UID, ResourceVersion: &pvc.ResourceVersion}))
	}
	if err != nil {
		return fmt.Errorf("%s claim %s: %w", w, pvc.Name, err)
	}
	return nil
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

// bindingWorkers is how many bindings are reconciled at once.
const bindingWorkers = 8

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
		WithOptions(controller.Options{MaxConcurrentReconciles: bindingWorkers}).
		For(&v1alpha1.FluentPVCBinding{}).
		Owns(&batchv1.Job{}).
		Watches(&corev1.Pod{}, byBindingLabel).
		Watches(&corev1.PersistentVolumeClaim{}, byBindingLabel).
		Watches(&v1alpha1.FluentPVC{}, handler.EnqueueRequestsFromMapFunc(r.bindingsOf), builder.WithPredicates(fluentPVCCreated)).
		// A changed FluentPVC may fix the finalizer Jobs it made refused.
		Watches(&v1alpha1.FluentPVC{}, handler.EnqueueRequestsFromMapFunc(r.rejectedBindingsOf), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

// drainJobRejected is true for an error that says the finalizer Job itself
// is refused, so that only a change of its template (or of a policy or
// quota) can help: invalid, malformed, or forbidden.
func drainJobRejected(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err)
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
