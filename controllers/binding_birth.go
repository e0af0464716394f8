package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/checkout"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/expectations"
)

// birth is what createBinding reads of a claim whose binding does not
// exist: first from the cache, then, when decideBirth asks for it, the
// claim again, live.
type birth struct {
	// key names the binding and its claim alike.
	key client.ObjectKey
	// claim is the claim as last read: the cache's copy, then the live
	// one; nil once gone.
	claim *corev1.PersistentVolumeClaim
	// pods are the cached pods labelled with the binding's name.
	pods []corev1.Pod
	// checkout is the cached claim's checkout, which the live one must
	// still be for what was found for it to be its own.
	checkout seenKey
	// ownClaimStale says that the cache has not seen this reconciler's
	// last record of a pod on the claim yet (ownClaims).
	ownClaimStale bool
	// seen is the pod remembered for checkout, if wasSeen (seenPods).
	seen    v1alpha1.ObjectIdentity
	wasSeen bool
	// holderEnd is when the Lease of the claim's reservation holder is
	// over (checkout.HolderEnd), for a claim reserved ahead of its pod
	// that records none; the zero time otherwise, or when it is gone.
	holderEnd time.Time
}

// birthStep is what createBinding does once a birthPlan is decided.
type birthStep int

const (
	// birthWait makes no binding now: createBinding looks again after
	// the plan's wait, or not at all (0).
	birthWait birthStep = iota
	// birthReadLive reads the claim live and decides again
	// (decideLiveBirth).
	birthReadLive
	// birthCreate makes the binding, which records the plan's pod.
	birthCreate
	// birthDeleteReleased deletes the claim, which its binding let go of
	// in order to delete it and went before the deletion
	// (claim.DeleteReleased).
	birthDeleteReleased
)

// birthPlan is what createBinding does about a claim whose binding does
// not exist, decided from a birth.
type birthPlan struct {
	step birthStep
	// wait is, with birthWait, how long until createBinding looks again.
	wait time.Duration
	// pod is, with birthCreate, the pod recorded in the binding.
	pod v1alpha1.ObjectIdentity
	// remember remembers pod for the checkout (seenPods) once the binding
	// is made, which otherwise forgets what the checkout remembers.
	remember bool
}

// createBinding makes the binding of the claim named key.Name, if it is a
// pod's claim (the webhook admitted a pod with it) and has none: this is how
// every binding is born, and how one lost by hand is remade, so that no
// claim is ever left without the record that drains it. It returns how
// long to wait instead when the claim's pod may come within moments
// (awaitPod). It reads
// (observeBirth), decides (decideBirth, and decideLiveBirth after a live
// read of the claim), and executes (applyBirth).
func (r *BindingReconciler) createBinding(ctx context.Context, key client.ObjectKey, now time.Time) (time.Duration, error) {
	o, err := r.observeBirth(ctx, key, now)
	if err != nil {
		return 0, err
	}
	p := decideBirth(o, now)
	if p.step == birthReadLive {
		// The cache may lag behind the end of a claim's life (drained,
		// deleted, then the binding removed): only a live read may bring
		// a binding back. It is read into a new object: decoding into the
		// cached copy would keep the labels and annotations the API server
		// no longer has.
		live := &corev1.PersistentVolumeClaim{}
		switch err := r.apiReader.Get(ctx, key, live); {
		case apierrors.IsNotFound(err):
			o.claim = nil
		case err != nil:
			return 0, err
		default:
			o.claim = live
		}
		// Only a Lease read live proves that its holder hands the claim
		// to no pod any more.
		if o.holderEnd, err = holderEnd(ctx, r.apiReader, o.claim, now); err != nil {
			return 0, err
		}
		p = decideLiveBirth(o, now)
	}
	return r.applyBirth(ctx, o, p, now)
}

// observeBirth reads, from the cache, claim key and the pods labelled
// with its binding's name, and what this reconciler remembers of the
// claim: its own record of a pod on it not seen yet, and the pod seen for
// its checkout. A claim that no binding named key.Name is to be made for
// is all it reads.
func (r *BindingReconciler) observeBirth(ctx context.Context, key client.ObjectKey, now time.Time) (birth, error) {
	o := birth{key: key}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.Get(ctx, key, pvc); err != nil {
		return o, client.IgnoreNotFound(err)
	}
	o.claim = pvc
	if !bindsClaim(pvc, key.Name) {
		return o, nil
	}
	// A pod already in the cache is recorded at once, saving an update.
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(pvc.Namespace), client.MatchingFields{podBindingIndex: key.Name}); err != nil {
		return o, fmt.Errorf("listing pods: %w", err)
	}
	o.pods = pods.Items
	o.checkout = seenKeyOf(pvc)
	o.ownClaimStale = r.ownClaims.Stale(key, pvc.ResourceVersion, now)
	o.seen, o.wasSeen = r.seen.Value(o.checkout, now)
	var err error
	o.holderEnd, err = holderEnd(ctx, r.Client, pvc, now)
	return o, err
}

// holderEnd is when the Lease of the holder of claim pvc's reservation is
// over, as r shows it at now (checkout.HolderEnd), if pvc is reserved
// ahead of its pod under a Lease and records no pod; the zero time
// otherwise, and when the Lease is gone.
func holderEnd(ctx context.Context, r client.Reader, pvc *corev1.PersistentVolumeClaim, now time.Time) (time.Time, error) {
	if pvc == nil {
		return time.Time{}, nil
	}
	by, until, reserved := claim.Reservation(pvc)
	if !reserved || !until.IsZero() {
		return time.Time{}, nil
	}
	end, _, err := checkout.HolderEnd(ctx, r, by, now)
	return end, err
}

// bindsClaim says whether the binding named name is to be made for claim
// pvc (nil: gone): a held claim labelled with that name.
func bindsClaim(pvc *corev1.PersistentVolumeClaim, name string) bool {
	return pvc != nil && claim.Held(pvc) && pvc.Labels[v1alpha1.BindingNameLabelKey] == name
}

// releasedForDeletion says whether claim pvc (nil: gone), labelled for
// the binding named name, was let go of by that binding in order to be
// deleted, and is not being deleted.
func releasedForDeletion(pvc *corev1.PersistentVolumeClaim, name string) bool {
	return pvc != nil && pvc.Labels[v1alpha1.BindingNameLabelKey] == name && claim.StateOf(pvc) == claim.Kept &&
		pvc.Annotations[v1alpha1.ReleasedForDeletionAnnotationKey] == "true"
}

// birthPod is o's claim's pod as cached: the one pod labelled with the
// binding's name, if it uses the claim; nil otherwise.
func birthPod(o birth) *corev1.Pod {
	if len(o.pods) == 1 && claimantPod(&o.pods[0], o.claim.Name) {
		return &o.pods[0]
	}
	return nil
}

// decideBirth is what createBinding does, at now, about the claim of o
// as cached.
func decideBirth(o birth, now time.Time) birthPlan {
	if releasedForDeletion(o.claim, o.key.Name) {
		return birthPlan{step: birthDeleteReleased}
	}
	if !bindsClaim(o.claim, o.key.Name) {
		return birthPlan{step: birthWait}
	}
	if o.ownClaimStale {
		// The cache has not seen this reconciler's record of the pod on
		// the claim yet; the record's event reconciles it again.
		return birthPlan{step: birthWait, wait: expectations.TTL}
	}
	if birthPod(o) == nil && !o.wasSeen {
		if wait := awaitPod(o.claim, false, now, o.holderEnd); wait > 0 {
			return birthPlan{step: birthWait, wait: wait}
		}
	}
	// Only a live read of the claim may make its binding: the cache may
	// lag behind the end of the claim's life, or behind a new checkout.
	return birthPlan{step: birthReadLive}
}

// decideLiveBirth is what createBinding does, at now, about the claim of
// o as read live, after decideBirth asked for that read.
func decideLiveBirth(o birth, now time.Time) birthPlan {
	if !bindsClaim(o.claim, o.key.Name) {
		return birthPlan{step: birthWait}
	}
	if seenKeyOf(o.claim) != o.checkout {
		// Handed out again since the cached copy: what was found for the
		// cached checkout is not this one's. The cache's event of the new
		// checkout reconciles it; the requeue is a backstop.
		return birthPlan{step: birthWait, wait: unwatchedRecheck}
	}
	pod := birthPod(o)
	if pod == nil && !o.wasSeen {
		// A reservation whose holder's Lease was renewed lately, which the
		// cache does not show yet: its pod may still come.
		if wait := awaitPod(o.claim, false, now, o.holderEnd); wait > 0 {
			return birthPlan{step: birthWait, wait: wait}
		}
	}
	p := birthPlan{step: birthCreate}
	used, _ := claim.PodOf(o.claim)
	switch {
	case used.UID != "":
		// Made again after it was lost: the claim remembers its pod.
		p.pod = used
	case pod != nil:
		p.pod = v1alpha1.ObjectIdentity{Name: pod.Name, UID: pod.UID}
	case o.wasSeen:
		p.pod = o.seen
	}
	// The claim records the pod after its binding: a binding lost before
	// then, with its pod gone or relabelled meanwhile, is made again with
	// the pod all the same.
	p.remember = p.pod.UID != "" && used.UID == ""
	return p
}

// applyBirth executes plan p for the claim of o.
func (r *BindingReconciler) applyBirth(ctx context.Context, o birth, p birthPlan, now time.Time) (time.Duration, error) {
	switch p.step {
	case birthCreate:
		return r.makeBinding(ctx, o, p, now)
	case birthDeleteReleased:
		if _, err := r.writeClaim(ctx, o.claim, claim.DeleteReleased); err != nil {
			return 0, fmt.Errorf("deleting claim %s, let go of to be deleted: %w", o.key, err)
		}
		return 0, nil
	}
	return p.wait, nil
}

// makeBinding creates the binding of the claim of o, which records the
// pod of plan p, and tells when the API server refuses it.
func (r *BindingReconciler) makeBinding(ctx context.Context, o birth, p birthPlan, now time.Time) (time.Duration, error) {
	pvc := o.claim
	fpvc := &v1alpha1.FluentPVC{}
	if err := r.Get(ctx, client.ObjectKey{Name: pvc.Labels[v1alpha1.FluentPVCNameLabelKey]}, fpvc); client.IgnoreNotFound(err) != nil {
		return 0, fmt.Errorf("reading FluentPVC %s: %w", pvc.Labels[v1alpha1.FluentPVCNameLabelKey], err)
	}
	b := claim.Binding(pvc, fpvc.UID)
	b.Spec.Pod = p.pod
	err := r.Create(ctx, b)
	if err == nil {
		r.own.Expect(o.key, "", struct{}{}, r.clock.Now())
		if p.remember {
			r.seen.Expect(o.checkout, "", p.pod, now)
		} else {
			r.seen.Drop(o.checkout)
		}
	}
	switch {
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return 0, r.abandonUnrecorded(ctx, pvc, fpvc)
	case client.IgnoreAlreadyExists(err) == nil:
		return 0, nil
	case drainJobRejected(err):
		// A quota on bindings or a policy engine: nothing records the
		// pod, and nothing drains the claim until the binding can be
		// made. Tell whoever can fix it; the
		// claim is kept and the binding tried again with backoff.
		r.tellBindingRejected(pvc, o.pods, fpvc, err)
	}
	return 0, fmt.Errorf("creating the binding of claim %s: %w", o.key, err)
}

// tellBindingRejected tells, with Warning Events on the claim, its pods
// and its FluentPVC, and a metric, that the API server refuses the
// binding of claim pvc with err.
func (r *BindingReconciler) tellBindingRejected(pvc *corev1.PersistentVolumeClaim, pods []corev1.Pod, fpvc *v1alpha1.FluentPVC, err error) {
	name := pvc.Labels[v1alpha1.FluentPVCNameLabelKey]
	bindingsRejected.WithLabelValues(name).Inc()
	msg := fmt.Sprintf("the API server refused the FluentPVCBinding of claim %s, so the operator cannot record its pod nor drain it; the claim is kept and the binding tried again: %v", pvc.Name, err)
	reason := v1alpha1.EventReasonBindingRejected
	r.recorder.Eventf(pvc, nil, corev1.EventTypeWarning, reason, reason, "%s", msg)
	for i := range pods {
		r.recorder.Eventf(&pods[i], pvc, corev1.EventTypeWarning, reason, reason, "%s", msg)
	}
	if fpvc.UID != "" {
		r.recorder.Eventf(fpvc, pvc, corev1.EventTypeWarning, reason, reason, "%s/%s: %s", pvc.Namespace, pvc.Name, msg)
	}
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
	if _, err := r.writeClaim(ctx, pvc, claim.ReleaseUnbound); err != nil {
		return err
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

// seenPods remember, by checkout of a claim (seenKey), for
// expectations.TTL, the pod a new binding recorded that the claim does not
// record yet, so that the binding, lost before the claim's record, is made
// again with that pod even if it went meanwhile: the API server deletes a
// pod with no node at once, and the cache may show nothing but its
// absence. A warm PVC keeps its name from one checkout to the next,
// so a pod remembered for one checkout is never taken for the next one's.
// They are lost with the process, or after the TTL: a binding made then
// without its pod takes the path of a pod deleted before the cache showed
// it (observeUncachedPod), and its claim is drained.
type seenPods = expectations.Expectations[seenKey, v1alpha1.ObjectIdentity]

// seenKey is one checkout of a claim: its namespace and name, and the
// checkout's ID (v1alpha1.CheckoutIDAnnotationKey; "" for a claim handed
// out by an earlier version, which records none).
type seenKey struct {
	claim    client.ObjectKey
	checkout string
}

// seenKeyOf is the seenKey of pvc's current checkout.
func seenKeyOf(pvc *corev1.PersistentVolumeClaim) seenKey {
	return seenKey{claim: client.ObjectKeyFromObject(pvc), checkout: pvc.Annotations[v1alpha1.CheckoutIDAnnotationKey]}
}
