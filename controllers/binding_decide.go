package controllers

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/checkout"
	"github.com/st-tech/fluent-pvc-operator/claim"
)

// observed is everything a binding's reconcile looks at, read once.
type observed struct {
	binding *v1alpha1.FluentPVCBinding
	// fluentPVC is nil when the FluentPVC is gone.
	fluentPVC *v1alpha1.FluentPVC
	// pod is the pod that carries the binding label and mounts the claim,
	// nil when there is none.
	pod *corev1.Pod
	// pvc is the claim, nil when it is gone.
	pvc *corev1.PersistentVolumeClaim
	// jobs are the binding's finalizer Jobs.
	jobs []batchv1.Job
	// namespaceTerminating is true when the binding's namespace is being deleted.
	namespaceTerminating bool
	// poolAccepts is true when the claim may go back to its FluentPVC's warm
	// pool: the pool is on and the claim was made from the current template.
	poolAccepts bool
	// claimUnused is true on positive proof that no pod ever used the
	// claim: it tracks its pod (see claim.PodOf), records none, a live list
	// finds no pod that mounts it, and the pods' history shows none created
	// with it since it was handed out. Read only once the orphan grace
	// period is over; false means keep and drain.
	claimUnused bool
	// unusedUnproven says why there is no such proof, when it was sought.
	unusedUnproven string
	// checkoutOver is true when the claim the binding records went back to
	// the pool and carries another checkout's token (or none): it is no
	// longer this binding's, and pvc is nil.
	checkoutOver bool
	// podUncached is true when pod was read live because the cache did not
	// hold it: its opt-in label was removed, so no event tells when it ends.
	podUncached bool
	// drainBlocked says why the current finalizer Job cannot make progress,
	// nil when nothing is known to block it (see observeDrain).
	drainBlocked *blockage
	// drainRecheck is when to look at the current finalizer Job's pods
	// again (0: no need).
	drainRecheck time.Duration
	// mountedBy is a pod, neither the claim's nor its drain's, that mounts
	// the claim and has not finished, read live before a drain Job is
	// made or the drained claim deleted; nil when there is none.
	mountedBy *corev1.Pod
	// claimants are the namespace's pods that mount the claim, as listed
	// live in this reconcile, nil when no live list was made: the orphan
	// path and the mount check share one list.
	claimants *claimantList
}

// blockage is why a drain cannot make progress: a DrainBlocked reason and
// a message that quotes the cause.
type blockage struct {
	reason, message string
}

// unwatchedRecheck is how often, and how soon, the controllers look at
// what no event of theirs tells of, since their cache does not hold it:
//   - the pod of a binding while it runs without its opt-in label;
//   - the room on nodes for the warm PVCs a pool left unstaged, which
//     other pods free;
//   - the pods and events of the operator's Jobs (binders and finalizer
//     Jobs), once a Job has run this long without a Ready pod (a binder's
//     warm PVC not Bound yet). The scheduler places a pod in milliseconds
//     and a kubelet starts it within seconds when they can, so a Job
//     still without one is worth a look, while a healthy one costs no
//     reads;
//   - a drain, told in its binding's status only once it has run this
//     long (quietFirstDrain): most drains end sooner;
//   - a reconcile that lost a race to a newer write (an optimistic-lock
//     conflict, or a cached copy older than a live read), as a backstop:
//     the newer write's own event brings it back sooner.
const unwatchedRecheck = 10 * time.Second

// plan is what one reconcile does, decided from observed by decide.
type plan struct {
	status v1alpha1.FluentPVCBindingStatus

	// recordPod and recordPVCUID are written into the binding's spec.
	recordPod    *v1alpha1.ObjectIdentity
	recordPVCUID types.UID
	// recordOnClaim is written on the claim (used-by-pod) before the pod is
	// released, so that the record outlives a lost binding.
	recordOnClaim *v1alpha1.ObjectIdentity
	// releasePod removes the pod-protection finalizer from the pod.
	releasePod bool
	// createJob is the attempt number of a finalizer Job to create; 0 for none.
	createJob int32
	// deleteJobs are superseded failed Jobs, deleted after createJob exists.
	deleteJobs []string
	// releaseClaim removes the claim's finalizer; deleteClaim also deletes it.
	releaseClaim bool
	deleteClaim  bool
	// returnClaim gives an unused claim back to the warm pool.
	returnClaim bool
	// finish deletes the binding (removing first the finalizer that
	// bindings made by earlier versions carry).
	finish bool
	// releaseLabelledPods, with finish, removes the pod-protection
	// finalizer from every pod that carries the binding's label, read live.
	releaseLabelledPods bool
	// requeueAfter is set for timers: a grace period or a backoff.
	requeueAfter time.Duration
	// quiet leaves the status unwritten: it tells only that the first
	// drain Job runs, which the Job itself says, and that drain began less
	// than unwatchedRecheck ago (requeueAfter comes back then).
	quiet bool
	// retry is returned once the plan is carried out, so that the binding
	// is tried again with the rate limiter's backoff.
	retry error

	// outcomes are counted, logged and told once the status is written.
	outcomes []outcome
}

// outcomeKind is one thing a reconcile did to a binding's claim that
// someone may want to know about.
type outcomeKind string

const (
	outcomeDrainStarted      outcomeKind = "drain started"
	outcomeDrainFailed       outcomeKind = "drain failed"
	outcomeDrained           outcomeKind = "drained"
	outcomeOrphanReclaimed   outcomeKind = "orphan reclaimed"
	outcomeAbandoned         outcomeKind = "abandoned"
	outcomeReleasedUndrained outcomeKind = "released undrained"
	outcomeClaimLost         outcomeKind = "claim lost"
	outcomeFluentPVCMissing  outcomeKind = "FluentPVC missing"
	outcomeDrainJobRejected  outcomeKind = "drain Job rejected"
	outcomeDrainBlocked      outcomeKind = "drain blocked"
	outcomeCheckoutOver      outcomeKind = "checkout over"
)

// outcome is one outcome of a reconcile, as report tells it.
type outcome struct {
	kind outcomeKind
	// message says what happened, in the Event and the log.
	message string
	// silent sends no Event: the log and the metric only.
	silent bool
	// claimMessage, when set, is also told on the claim.
	claimMessage string
	// drainSeconds is how long a finished drain took, from its first Job.
	drainSeconds float64
}

// outcomeReport is how each kind of outcome is told: its Event, whether
// the FluentPVC hears of it too, the log level (0 for what a person must
// act on or know was lost, 1 for a claim's normal course), and the counter.
type outcomeReport struct {
	reason      string
	warning     bool
	toFluentPVC bool
	logLevel    int
	log         string
	counter     *prometheus.CounterVec
}

var outcomeReports = map[outcomeKind]outcomeReport{
	// drainsStarted is counted by apply, when the Job is made.
	outcomeDrainStarted:    {reason: v1alpha1.EventReasonDrainStarted, logLevel: 1, log: "drain started"},
	outcomeDrainFailed:     {reason: v1alpha1.EventReasonDrainFailed, warning: true, log: "drain failed; the claim is kept and the drain retried", counter: drainsFailed},
	outcomeDrained:         {reason: v1alpha1.EventReasonDrained, logLevel: 1, log: "claim drained; deleting it", counter: drainsSucceeded},
	outcomeOrphanReclaimed: {reason: v1alpha1.EventReasonOrphanReclaimed, logLevel: 1, log: "no pod appeared within the grace period: claim reclaimed undrained", counter: orphansReclaimed},
	// A terminating namespace takes no new Events: the FluentPVC hears of it.
	outcomeAbandoned:         {reason: v1alpha1.EventReasonAbandoned, warning: true, toFluentPVC: true, log: "namespace is being deleted: claim released undrained", counter: claimsAbandoned},
	outcomeReleasedUndrained: {reason: v1alpha1.EventReasonReleasedUndrained, warning: true, log: "FluentPVC stayed gone: claim let go of undrained and kept", counter: claimsAbandoned},
	outcomeClaimLost:         {reason: v1alpha1.EventReasonClaimLost, warning: true, log: "claim disappeared before it was drained"},
	outcomeFluentPVCMissing:  {reason: v1alpha1.EventReasonFluentPVCMissing, warning: true, log: "FluentPVC is gone: the drain waits for it"},
	// The FluentPVC's template is what was refused.
	outcomeDrainJobRejected: {reason: v1alpha1.EventReasonDrainJobRejected, warning: true, toFluentPVC: true, log: "the API server refused the finalizer Job; the claim is kept", counter: drainJobsRejected},
	// Someone must act on the cause: the FluentPVC's owner hears of it too.
	outcomeDrainBlocked: {reason: v1alpha1.EventReasonDrainBlocked, warning: true, toFluentPVC: true, log: "the drain cannot make progress; the claim is kept", counter: drainsBlocked},
	outcomeCheckoutOver: {logLevel: 1, log: "the claim went back to the pool and was handed out again: this binding's record is done"},
}

func (p *plan) tell(kind outcomeKind, message string) {
	p.outcomes = append(p.outcomes, outcome{kind: kind, message: message})
}

// has is true when p has an outcome of kind.
func (p plan) has(kind outcomeKind) bool {
	return slices.ContainsFunc(p.outcomes, func(o outcome) bool { return o.kind == kind })
}

// decide is the binding's state machine: a pure function of what was
// observed, the time and the options. No state is terminal while the claim
// exists: each one either waits on a watched object or on a timer.
func decide(o observed, now time.Time, opts Options) plan {
	p := decideClaim(o, now, opts)
	// A pod this binding never recorded, or one a terminating namespace
	// must be rid of, may be out of the cache (its opt-in label removed)
	// and still hold the pod-protection finalizer (pods admitted by an
	// earlier version), which nothing would remove once the binding is
	// gone. (An unused claim was just proven to
	// have no pod by a live list; a checkout that is over is another
	// binding's.)
	p.releaseLabelledPods = p.finish && !o.checkoutOver && !o.claimUnused &&
		(o.namespaceTerminating || o.binding.Spec.Pod.UID == "")
	return p
}

func decideClaim(o observed, now time.Time, opts Options) plan {
	b := o.binding
	p := plan{status: *b.Status.DeepCopy()}
	p.status.ObservedGeneration = b.Generation
	gen := b.Generation

	// The claim went back to the pool after this binding's checkout ended:
	// it and any pod carrying it now belong to another checkout, with its
	// own binding. Record nothing and release nothing.
	if o.checkoutOver {
		p.finish = true
		p.tell(outcomeCheckoutOver, fmt.Sprintf("claim %s went back to the pool and was handed out again", b.Spec.PVC.Name))
		return p
	}

	pod := decideRecords(o, &p)
	podSeen := b.Spec.Pod.UID != "" || p.recordPod != nil
	graceLeft := graceStart(b).Add(opts.OrphanGracePeriod).Sub(now)
	claimReleased := o.pvc == nil || (!o.pvc.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(o.pvc, v1alpha1.PVCProtectionFinalizer))

	setPod := func(status metav1.ConditionStatus, reason, msg string) {
		setCondition(&p.status, v1alpha1.BindingConditionPodReady, status, reason, msg, gen, now)
	}
	setDrained := func(status metav1.ConditionStatus, reason, msg string) {
		setCondition(&p.status, v1alpha1.BindingConditionDrained, status, reason, msg, gen, now)
	}

	if o.namespaceTerminating {
		decideNamespaceTerminating(o, pod, now, &p)
		return p
	}

	// The claim is gone, or released by us: nothing is left to protect.
	if claimReleased {
		if o.pvc == nil && !isFinal(p.status.Phase) && !podSeen && graceLeft > 0 {
			// The operator makes bindings from existing claims, but one left by
			// an earlier version was made before its claim: give the claim
			// the grace period to appear.
			p.requeueAfter = graceLeft
			return p
		}
		decideClaimGone(o, now, &p)
		return p
	}

	if podSeen {
		seen := b.Spec.Pod
		if p.recordPod != nil {
			seen = *p.recordPod
		}
		if !claim.Records(o.pvc, seen) && !isFinal(p.status.Phase) {
			// A pod admitted by an earlier version is released only once the
			// claim records it.
			p.recordOnClaim = &seen
		}
	}

	// The pod exists and has not finished.
	if pod != nil && !podFinished(pod) {
		p.status.Phase = v1alpha1.BindingPhaseInUse
		setPod(metav1.ConditionTrue, v1alpha1.PodReadyReasonRunning, fmt.Sprintf("pod %s uses the claim", pod.Name))
		setDrained(metav1.ConditionFalse, v1alpha1.DrainedReasonNotStarted, "the claim is in use")
		if o.podUncached {
			sooner(&p.requeueAfter, unwatchedRecheck)
		}
		// A claim deleted under its running pod will block its drain: say so now.
		decideBlocked(o, now, &p)
		return p
	}

	// No pod ever appeared: the admission was rejected after the webhook.
	if !podSeen {
		decideNoPod(o, now, opts, graceLeft, &p)
		return p
	}

	// The pod is gone or finished: drain.
	if pod == nil {
		setPod(metav1.ConditionFalse, v1alpha1.PodReadyReasonGone, "the pod is gone")
	} else {
		setPod(metav1.ConditionFalse, v1alpha1.PodReadyReasonFinished, fmt.Sprintf("pod %s is %s", pod.Name, pod.Status.Phase))
	}
	decideDrain(o, now, opts, &p)
	return p
}

// decideRecords plans what the binding records of its pod and claim, and
// returns the binding's pod: o.pod unless it is another pod that copied
// the binding label.
func decideRecords(o observed, p *plan) *corev1.Pod {
	b := o.binding
	pod := o.pod
	if pod != nil && b.Spec.Pod.UID != "" && pod.UID != b.Spec.Pod.UID {
		pod = nil // a pod that copied the label is not ours
	}
	if pod != nil {
		if b.Spec.Pod.UID == "" {
			p.recordPod = &v1alpha1.ObjectIdentity{Name: pod.Name, UID: pod.UID}
		}
		p.releasePod = controllerutil.ContainsFinalizer(pod, v1alpha1.PodProtectionFinalizer)
	}
	if o.pvc != nil && b.Spec.PVC.UID == "" {
		p.recordPVCUID = o.pvc.UID
	}
	if o.pvc != nil && b.Spec.Pod.UID == "" && p.recordPod == nil {
		// A binding made again after it was lost learns its pod from the
		// claim, even when the pod is gone.
		if used, _ := claim.PodOf(o.pvc); used.UID != "" {
			p.recordPod = &used
		}
	}
	return pod
}

// decideNoPod is a held claim whose binding has seen no pod: it waits out
// the grace period, then drains the claim unless it is proven unused, in
// which case it is an orphan.
func decideNoPod(o observed, now time.Time, opts Options, graceLeft time.Duration, p *plan) {
	gen := o.binding.Generation
	setPod := func(status metav1.ConditionStatus, reason, msg string) {
		setCondition(&p.status, v1alpha1.BindingConditionPodReady, status, reason, msg, gen, now)
	}
	if graceLeft > 0 {
		p.status.Phase = v1alpha1.BindingPhasePending
		setPod(metav1.ConditionFalse, v1alpha1.PodReadyReasonNotSeen, "waiting for the pod to appear")
		setCondition(&p.status, v1alpha1.BindingConditionDrained, metav1.ConditionFalse, v1alpha1.DrainedReasonNotStarted, "the claim has not been used", gen, now)
		p.requeueAfter = graceLeft
		return
	}
	if !o.claimUnused || drainStarted(o) {
		// No pod is recorded, but nothing proves that none used the claim
		// (its record predates this version, a pod still carries it unseen,
		// or one was created and is gone, its finalizer stripped while the
		// operator could not record it): keep its data and drain it. An
		// empty drain costs a Job; a drained claim is deleted, never
		// returned to the pool. A drain once started is seen
		// through even if a later reconcile finds the proof: that reconcile
		// may have read an older binding, and a claim whose drain Job may be
		// running is neither the pool's nor deleted before the Job
		// succeeded.
		msg := unprovenMessage
		if o.unusedUnproven != "" {
			msg += " (" + o.unusedUnproven + ")"
		}
		// The reason is read once, before the drain starts: keep it.
		if c := meta.FindStatusCondition(p.status.Conditions, v1alpha1.BindingConditionPodReady); o.unusedUnproven != "" || c == nil || !strings.HasPrefix(c.Message, unprovenMessage) {
			setPod(metav1.ConditionFalse, v1alpha1.PodReadyReasonNotSeen, msg)
		}
		decideDrain(o, now, opts, p)
		return
	}
	decideOrphan(o, now, opts, p)
}

// unprovenMessage begins the PodReady condition of a claim drained for
// want of proof that no pod used it.
const unprovenMessage = "no pod is recorded, but nothing proves that none used the claim: it is drained"

// decideNamespaceTerminating lets go of the claim of a binding whose
// namespace is going away with every object in it: no Job can drain the
// claim there, and holding it would block the namespace forever.
func decideNamespaceTerminating(o observed, pod *corev1.Pod, now time.Time, p *plan) {
	b := o.binding
	if p.status.Phase != v1alpha1.BindingPhaseAbandoned && p.status.Phase != v1alpha1.BindingPhaseDrained && p.status.Phase != v1alpha1.BindingPhaseOrphaned {
		p.tell(outcomeAbandoned, fmt.Sprintf("namespace %s is being deleted: claim %s was released without draining its data", b.Namespace, b.Spec.PVC.Name))
		p.status.Phase = v1alpha1.BindingPhaseAbandoned
		setCondition(&p.status, v1alpha1.BindingConditionDrained, metav1.ConditionFalse, v1alpha1.DrainedReasonNamespaceDeleted,
			"the namespace is being deleted; the data was not drained", b.Generation, now)
	}
	p.releasePod = pod != nil && controllerutil.ContainsFinalizer(pod, v1alpha1.PodProtectionFinalizer)
	p.releaseClaim = o.pvc != nil && claim.Keeps(o.pvc)
	p.finish = true
}

// decideClaimGone finishes a binding whose claim is gone, or was let go
// of. A claim deleted after its drain succeeded, by a reconcile whose
// status write then lost to a newer binding, is told as drained now, not
// taken for a loss.
func decideClaimGone(o observed, now time.Time, p *plan) {
	b := o.binding
	if !isFinal(p.status.Phase) {
		if j := succeededJob(o.jobs); j != nil {
			markDrained(b, j, now, p, fmt.Sprintf("finalizer Job %s succeeded: claim %s was deleted", j.Name, b.Spec.PVC.Name))
		} else {
			p.tell(outcomeClaimLost, fmt.Sprintf("claim %s disappeared before it was drained", b.Spec.PVC.Name))
		}
	}
	p.finish = true
}

// decideOrphan reclaims, undrained, a claim proven unused: no pod
// appeared within the grace period and a live list found none that mounts
// it. It goes back to the warm pool when the pool takes it, and is
// deleted otherwise.
func decideOrphan(o observed, now time.Time, opts Options, p *plan) {
	b := o.binding
	fate := "deleted"
	if o.poolAccepts {
		fate = "returned to the warm pool"
	}
	if p.status.Phase != v1alpha1.BindingPhaseOrphaned {
		p.tell(outcomeOrphanReclaimed, fmt.Sprintf("no pod appeared within %s of admission: claim %s is %s without draining", opts.OrphanGracePeriod, b.Spec.PVC.Name, fate))
	}
	p.status.Phase = v1alpha1.BindingPhaseOrphaned
	setCondition(&p.status, v1alpha1.BindingConditionPodReady, metav1.ConditionFalse, v1alpha1.PodReadyReasonNeverAppeared,
		fmt.Sprintf("no pod appeared within %s", opts.OrphanGracePeriod), b.Generation, now)
	setCondition(&p.status, v1alpha1.BindingConditionDrained, metav1.ConditionTrue, v1alpha1.DrainedReasonNotNeeded,
		"no pod ever used the claim", b.Generation, now)
	if o.poolAccepts {
		// Back in the pool, the claim is no longer this binding's.
		p.returnClaim, p.finish = true, true
	} else {
		p.releaseClaim, p.deleteClaim = true, true
	}
}

// decideDrain drains the claim of a binding that no pod uses any more:
// it deletes the claim once a finalizer Job succeeded, and otherwise
// starts, waits for or retries the drain Job.
func decideDrain(o observed, now time.Time, opts Options, p *plan) {
	if j := succeededJob(o.jobs); j != nil {
		decideDrainSucceeded(o, j, now, p)
		return
	}
	current, attempts := recordDrainAttempt(o, now, p)
	switch {
	case current == nil:
		// No Job yet, or the current one vanished: start the next attempt.
		p.createJob = attempts + 1
	case !jobFailed(current):
		decideDrainRunning(o, current, attempts, now, p)
		return
	default:
		if decideDrainFailed(o, current, attempts, now, opts, p) {
			return
		}
		p.createJob = attempts + 1
		p.deleteJobs = []string{current.Name}
	}
	decideDrainStart(o, now, opts, p)
}

// setNotDrained sets binding b's Drained condition to False: until a Job
// succeeds (markDrained), the claim is not drained.
func setNotDrained(b *v1alpha1.FluentPVCBinding, now time.Time, p *plan, reason, msg string) {
	setCondition(&p.status, v1alpha1.BindingConditionDrained, metav1.ConditionFalse, reason, msg, b.Generation, now)
}

// decideDrainSucceeded deletes the claim whose finalizer Job j succeeded,
// unless a pod still mounts it: what that pod writes after the drain
// would go with the claim.
func decideDrainSucceeded(o observed, j *batchv1.Job, now time.Time, p *plan) {
	b := o.binding
	if o.mountedBy != nil {
		p.status.Phase = v1alpha1.BindingPhaseDraining
		setNotDrained(b, now, p, v1alpha1.DrainedReasonRunning, fmt.Sprintf(
			"finalizer Job %s succeeded, but pod %s mounts the claim: it is deleted once that pod is gone", j.Name, o.mountedBy.Name))
		waitForMount(o, now, p)
		return
	}
	markDrained(b, j, now, p, fmt.Sprintf("finalizer Job %s succeeded: deleting claim %s", j.Name, b.Spec.PVC.Name))
	p.releaseClaim, p.deleteClaim = true, true
}

// recordDrainAttempt marks the binding Draining and returns its latest
// attempt, the highest of its status's and its Jobs', so that a deleted
// Job does not restart the count, with that attempt's Job (nil when it
// has none).
func recordDrainAttempt(o observed, now time.Time, p *plan) (*batchv1.Job, int32) {
	var current *batchv1.Job
	attempts := p.status.DrainAttempts
	for i := range o.jobs {
		if n := jobAttempt(&o.jobs[i]); n >= attempts {
			attempts, current = n, &o.jobs[i]
		}
	}
	p.status.Phase = v1alpha1.BindingPhaseDraining
	p.status.DrainAttempts = attempts
	if p.status.DrainStartTime == nil {
		// The first Job's creation, when the status was not written then.
		p.status.DrainStartTime = &metav1.Time{Time: firstJobCreated(o.jobs, now)}
	}
	if o.fluentPVC != nil {
		p.status.FluentPVCMissingSince = nil
	}
	return current, attempts
}

// decideDrainRunning tells that drain Job current, neither succeeded nor
// failed, runs. The Job was made after all: whatever refused it no longer
// does. (Decided here from what exists, not only when this reconcile made
// it: one decided from an older cached binding may not have.)
func decideDrainRunning(o observed, current *batchv1.Job, attempts int32, now time.Time, p *plan) {
	b := o.binding
	meta.RemoveStatusCondition(&p.status.Conditions, v1alpha1.BindingConditionDrainJobRejected)
	p.status.DrainJobName = current.Name
	setNotDrained(b, now, p, v1alpha1.DrainedReasonRunning, fmt.Sprintf("finalizer Job %s (attempt %d) runs", current.Name, attempts))
	decideBlocked(o, now, p)
	quietFirstDrain(b, now, p)
}

// decideDrainFailed tells that drain Job current failed, as a Warning
// once per failure, and reports whether its backoff still runs; when it
// does not, the caller retries at once.
func decideDrainFailed(o observed, current *batchv1.Job, attempts int32, now time.Time, opts Options, p *plan) (waiting bool) {
	failedAt := jobFailureTime(current)
	wait := backoff(attempts, opts)
	left := failedAt.Add(wait).Sub(now)
	if p.status.LastDrainFailureTime == nil || p.status.LastDrainFailureTime.Before(&metav1.Time{Time: failedAt}) {
		// Every failure is told as a Warning, also one first seen
		// after its backoff is over and so retried at once.
		p.status.LastDrainFailureTime = &metav1.Time{Time: failedAt}
		retry := "retried in " + wait.Round(time.Second).String()
		if left <= 0 {
			retry = "retried now"
		}
		p.outcomes = append(p.outcomes, outcome{kind: outcomeDrainFailed,
			message: fmt.Sprintf("finalizer Job %s (attempt %d) failed; the claim is kept and the drain %s", current.Name, attempts, retry)})
	}
	if left <= 0 {
		return false
	}
	p.status.DrainJobName = current.Name
	setNotDrained(o.binding, now, p, v1alpha1.DrainedReasonBackoff, fmt.Sprintf("finalizer Job %s (attempt %d) failed; retrying in %s", current.Name, attempts, left.Round(time.Second)))
	p.requeueAfter = left
	return true
}

// decideDrainStart starts drain attempt p.createJob, unless a pod mounts
// the claim or the FluentPVC that holds the Job's template is gone; then
// it starts nothing and deletes no Job.
func decideDrainStart(o observed, now time.Time, opts Options, p *plan) {
	b := o.binding
	if o.mountedBy != nil {
		// A drain under another writer would miss what it writes next.
		p.createJob, p.deleteJobs = 0, nil
		setNotDrained(b, now, p, v1alpha1.DrainedReasonNotStarted, fmt.Sprintf(
			"pod %s mounts the claim: the drain starts once that pod is gone", o.mountedBy.Name))
		waitForMount(o, now, p)
		return
	}
	if o.fluentPVC == nil {
		// A Job is due, but its template went with the FluentPVC.
		p.createJob, p.deleteJobs = 0, nil
		decideFluentPVCMissing(o, now, opts, p)
		return
	}
	p.status.DrainAttempts = p.createJob
	p.status.DrainJobName = objects.DrainJobName(b.Name, p.createJob)
	setNotDrained(b, now, p, v1alpha1.DrainedReasonRunning, fmt.Sprintf("finalizer Job %s (attempt %d) runs", p.status.DrainJobName, p.createJob))
	// The first attempt is told by the binding's status (Draining, the
	// Job's name) alone: an Event would be one more write per pod saying
	// the same. A retry is told, after the DrainFailed of the last one.
	p.outcomes = append(p.outcomes, outcome{kind: outcomeDrainStarted, silent: p.createJob == 1,
		message: fmt.Sprintf("started finalizer Job %s (attempt %d) for claim %s", p.status.DrainJobName, p.createJob, b.Spec.PVC.Name)})
	decideBlocked(o, now, p)
	quietFirstDrain(b, now, p)
}

// quietFirstDrain leaves p's status unwritten (plan.quiet) while it tells
// only that binding b's first drain Job runs, for unwatchedRecheck from the
// drain's start (most drains end sooner: the claim and the binding are
// then deleted, and a Draining status written in between would be one
// more write per pod, telling what the drain Job itself tells): b's status says nothing of a drain (no phase, or
// InUse; no attempt; nothing blocked or refused, which the write would
// clear), and nothing blocks the drain or was refused now. Once the delay
// is over, or anything else happens, the status is written.
func quietFirstDrain(b *v1alpha1.FluentPVCBinding, now time.Time, p *plan) {
	was := b.Status
	if was.Phase != "" && was.Phase != v1alpha1.BindingPhaseInUse || was.DrainAttempts != 0 || !untroubled(was) ||
		p.status.DrainAttempts != 1 || p.status.DrainStartTime == nil || !untroubled(p.status) {
		return
	}
	left := p.status.DrainStartTime.Add(unwatchedRecheck).Sub(now)
	if left <= 0 {
		return
	}
	p.quiet = true
	if p.requeueAfter == 0 || left < p.requeueAfter {
		p.requeueAfter = left
	}
}

// firstJobCreated is when the first of jobs was created; now if none was.
func firstJobCreated(jobs []batchv1.Job, now time.Time) time.Time {
	first := now
	for i := range jobs {
		if t := jobs[i].CreationTimestamp.Time; !t.IsZero() && t.Before(first) {
			first = t
		}
	}
	return first
}

// decideBlocked records in p whether the running finalizer Job is blocked
// (observed.drainBlocked): a DrainBlocked condition that quotes the cause,
// told as a Warning when the cause is new, and removed once the cause is
// gone. The claim is kept either way.
func decideBlocked(o observed, now time.Time, p *plan) {
	setBlocked(o.binding, o.drainBlocked, o.drainRecheck, now, p)
}

// setBlocked records blockage blk (nil: none) of b's drain in p, with a
// look again after recheck (0: none asked).
func setBlocked(b *v1alpha1.FluentPVCBinding, blk *blockage, recheck time.Duration, now time.Time, p *plan) {
	if recheck > 0 && (p.requeueAfter == 0 || recheck < p.requeueAfter) {
		p.requeueAfter = recheck
	}
	if blk == nil {
		meta.RemoveStatusCondition(&p.status.Conditions, v1alpha1.BindingConditionDrainBlocked)
		return
	}
	was := meta.FindStatusCondition(p.status.Conditions, v1alpha1.BindingConditionDrainBlocked)
	if was == nil || was.Reason != blk.reason {
		p.tell(outcomeDrainBlocked, fmt.Sprintf("the drain of claim %s cannot make progress; the claim is kept: %s", b.Spec.PVC.Name, blk.message))
	}
	setCondition(&p.status, v1alpha1.BindingConditionDrainBlocked, metav1.ConditionTrue, blk.reason, blk.message, b.Generation, now)
}

// waitForMount records in p that the drain waits for o.mountedBy, a pod
// that mounts the claim without being its pod or its drain's: a
// DrainBlocked condition that names it, told as a Warning when new, and a
// look again soon (that pod is not in the operator's cache).
func waitForMount(o observed, now time.Time, p *plan) {
	pod := o.mountedBy
	blk := &blockage{reason: v1alpha1.DrainBlockedReasonMountedByOtherPod, message: fmt.Sprintf(
		"pod %s (uid %s) mounts claim %s but is neither the pod the claim was handed to nor its drain: the drain waits until that pod is gone, so that no pod writes the claim during or after its drain",
		pod.Name, pod.UID, o.binding.Spec.PVC.Name)}
	setBlocked(o.binding, blk, unwatchedRecheck, now, p)
}

// markDrained records in p that finalizer Job j drained b's claim, with
// event told the first time.
func markDrained(b *v1alpha1.FluentPVCBinding, j *batchv1.Job, now time.Time, p *plan, event string) {
	refused := meta.FindStatusCondition(p.status.Conditions, v1alpha1.BindingConditionDrainJobRejected) != nil
	meta.RemoveStatusCondition(&p.status.Conditions, v1alpha1.BindingConditionDrainJobRejected)
	if p.status.Phase != v1alpha1.BindingPhaseDrained {
		// A drain whose first Job succeeded is told by the metrics and the
		// log: an Event on a binding about to be deleted would be one more
		// write per pod. One that took retries, or whose Job was refused
		// first, is told, after the Warnings of those.
		done := outcome{kind: outcomeDrained, message: event, silent: jobAttempt(j) <= 1 && !refused}
		start := p.status.DrainStartTime
		if start == nil && !j.CreationTimestamp.IsZero() {
			// A first drain that ended before its status was written.
			start = &j.CreationTimestamp
		}
		if start != nil {
			done.drainSeconds = now.Sub(start.Time).Seconds()
		}
		p.outcomes = append(p.outcomes, done)
	}
	p.status.Phase, p.status.DrainJobName = v1alpha1.BindingPhaseDrained, j.Name
	setCondition(&p.status, v1alpha1.BindingConditionDrained, metav1.ConditionTrue, v1alpha1.DrainedReasonSucceeded,
		fmt.Sprintf("finalizer Job %s succeeded", j.Name), b.Generation, now)
}

// decideFluentPVCMissing is a drain that needs a Job whose template went
// with the FluentPVC. Its finalizer keeps a FluentPVC while bindings
// drain, so only a finalizer removed by hand gets here. The binding waits
// for the FluentPVC to be made again, but not forever: then it lets go of
// the claim, which is kept with its data.
func decideFluentPVCMissing(o observed, now time.Time, opts Options, p *plan) {
	b := o.binding
	setDrained := func(status metav1.ConditionStatus, reason, msg string) {
		setCondition(&p.status, v1alpha1.BindingConditionDrained, status, reason, msg, b.Generation, now)
	}
	if p.status.FluentPVCMissingSince == nil {
		p.status.FluentPVCMissingSince = &metav1.Time{Time: now}
	}
	left := p.status.FluentPVCMissingSince.Add(opts.FluentPVCMissingTimeout).Sub(now)
	if left <= 0 {
		p.status.Phase = v1alpha1.BindingPhaseAbandoned
		setDrained(metav1.ConditionFalse, v1alpha1.DrainedReasonReleasedUndrained,
			fmt.Sprintf("FluentPVC %s stayed gone for %s: the claim was let go of undrained and kept", b.Spec.FluentPVC.Name, opts.FluentPVCMissingTimeout))
		p.outcomes = append(p.outcomes, outcome{kind: outcomeReleasedUndrained,
			message: fmt.Sprintf("FluentPVC %s stayed gone for %s, so no finalizer Job could drain claim %s: the operator let go of it undrained; the PVC and its data are kept for you to drain and delete", b.Spec.FluentPVC.Name, opts.FluentPVCMissingTimeout, b.Spec.PVC.Name),
			// The binding goes away; the claim it let go of stays, for the user.
			claimMessage: fmt.Sprintf("FluentPVC %s stayed gone for %s: fluent-pvc-operator let go of this claim without draining it; drain and delete it by hand", b.Spec.FluentPVC.Name, opts.FluentPVCMissingTimeout)})
		p.releaseClaim, p.finish = true, true
		return
	}
	setDrained(metav1.ConditionFalse, v1alpha1.DrainedReasonFluentPVCMissing,
		fmt.Sprintf("FluentPVC %s is gone, so no finalizer Job can be built; recreate it before %s to drain the claim",
			b.Spec.FluentPVC.Name, p.status.FluentPVCMissingSince.Add(opts.FluentPVCMissingTimeout).UTC().Format(time.RFC3339)))
	if !conditionHasReason(b.Status.Conditions, v1alpha1.BindingConditionDrained, v1alpha1.DrainedReasonFluentPVCMissing) {
		p.tell(outcomeFluentPVCMissing, fmt.Sprintf("FluentPVC %s is gone: recreate it within %s so that claim %s can be drained; after that the claim is let go of undrained", b.Spec.FluentPVC.Name, opts.FluentPVCMissingTimeout, b.Spec.PVC.Name))
	}
	p.requeueAfter = left
}

// settleJob is p once the API server answered the creation of its
// finalizer Job with err. A Job that exists already was made by an
// earlier reconcile, which told of it. A Job the API server refuses
// (drainJobRejected) is no attempt: the status keeps the last one and
// says why, nothing else planned with the Job happens, and the binding is
// tried again with backoff, or at once when its FluentPVC changes. Any
// other error is the caller's to return.
func settleJob(o observed, p plan, jobName string, err error, now time.Time) plan {
	b := o.binding
	drop := func(kind outcomeKind) {
		p.outcomes = slices.DeleteFunc(p.outcomes, func(o outcome) bool { return o.kind == kind })
	}
	switch {
	case err == nil:
		meta.RemoveStatusCondition(&p.status.Conditions, v1alpha1.BindingConditionDrainJobRejected)
	case apierrors.IsAlreadyExists(err):
		drop(outcomeDrainStarted)
	case drainJobRejected(err):
		p.status.DrainAttempts, p.status.DrainJobName = p.createJob-1, b.Status.DrainJobName
		setCondition(&p.status, v1alpha1.BindingConditionDrained, metav1.ConditionFalse, v1alpha1.DrainedReasonJobRejected,
			fmt.Sprintf("the API server refused finalizer Job %s: %v", jobName, err), b.Generation, now)
		setCondition(&p.status, v1alpha1.BindingConditionDrainJobRejected, metav1.ConditionTrue, string(apierrors.ReasonForError(err)), err.Error(), b.Generation, now)
		p.createJob, p.deleteJobs = 0, nil
		p.quiet = false // the refusal is news
		// Only a failure of the last Job is still told, counted but silent:
		// the refusal is the news.
		p.outcomes = slices.DeleteFunc(p.outcomes, func(o outcome) bool { return o.kind != outcomeDrainFailed })
		for i := range p.outcomes {
			p.outcomes[i].silent = true
		}
		p.tell(outcomeDrainJobRejected, fmt.Sprintf("the API server refused finalizer Job %s made from FluentPVC %s; the claim is kept and the Job is tried again when the FluentPVC changes: %v",
			jobName, b.Spec.FluentPVC.Name, err))
		p.retry = fmt.Errorf("creating finalizer Job %s: %w", jobName, err)
	}
	return p
}

// drainJobRejected is true for an error that says the object itself (a
// finalizer Job, a binding) is refused, so that only a change of its
// template or of a policy or quota can help: invalid, malformed, or
// forbidden.
func drainJobRejected(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err)
}

// backoff is how long to wait after the attempt-th failed Job: the base,
// doubled for each earlier failure, capped at the maximum (or the base, if
// that is longer).
func backoff(attempt int32, opts Options) time.Duration {
	d, most := opts.DrainBackoffBase, max(opts.DrainBackoffMax, opts.DrainBackoffBase)
	for i := int32(1); i < attempt && d < most; i++ {
		d *= 2
	}
	return min(d, most)
}

// statusNews says whether a binding whose status reads was is written
// with next, the status its plan computed. A binding is made once its pod
// is seen, and records the pod in its spec (spec.pod): while that pod uses
// the claim, with nothing blocked, its status stays as the binding was
// made, with no phase. Writing InUse would tell again what spec.pod says,
// one more API write per pod. A binding that was Pending, or whose drain
// is blocked, is written.
func statusNews(was, next v1alpha1.FluentPVCBindingStatus) bool {
	if equality.Semantic.DeepEqual(was, next) {
		return false
	}
	quiet := was.Phase == "" && next.Phase == v1alpha1.BindingPhaseInUse && untroubled(next)
	return !quiet
}

// untroubled is true when status s tells of nothing that holds its drain
// up: no DrainBlocked, no DrainJobRejected. Only such a status may wait to
// be written; trouble is told at once.
func untroubled(s v1alpha1.FluentPVCBindingStatus) bool {
	return meta.FindStatusCondition(s.Conditions, v1alpha1.BindingConditionDrainBlocked) == nil &&
		meta.FindStatusCondition(s.Conditions, v1alpha1.BindingConditionDrainJobRejected) == nil
}

// drainStarted is true once the binding started draining its claim: its
// status says so, or one of its finalizer Jobs exists.
func drainStarted(o observed) bool {
	s := o.binding.Status
	return s.Phase == v1alpha1.BindingPhaseDraining || s.DrainAttempts > 0 || len(o.jobs) > 0
}

// drainDecided is true once a binding has moved past its pod: it drains, or
// its claim was let go of. The pod's absence no longer changes anything.
func drainDecided(phase v1alpha1.FluentPVCBindingPhase) bool {
	return phase == v1alpha1.BindingPhaseDraining || isFinal(phase)
}

func isFinal(phase v1alpha1.FluentPVCBindingPhase) bool {
	return phase == v1alpha1.BindingPhaseDrained || phase == v1alpha1.BindingPhaseOrphaned || phase == v1alpha1.BindingPhaseAbandoned
}

func podFinished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// succeededJob is a Job of jobs that succeeded, nil when none did.
func succeededJob(jobs []batchv1.Job) *batchv1.Job {
	for i := range jobs {
		if jobSucceeded(&jobs[i]) {
			return &jobs[i]
		}
	}
	return nil
}

func jobSucceeded(j *batchv1.Job) bool {
	return jobCondition(j, batchv1.JobComplete) != nil
}

func jobFailed(j *batchv1.Job) bool {
	return jobCondition(j, batchv1.JobFailed) != nil
}

func jobFailureTime(j *batchv1.Job) time.Time {
	if c := jobCondition(j, batchv1.JobFailed); c != nil && !c.LastTransitionTime.IsZero() {
		return c.LastTransitionTime.Time
	}
	return j.CreationTimestamp.Time
}

func jobCondition(j *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range j.Status.Conditions {
		if c := &j.Status.Conditions[i]; c.Type == t && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

func jobAttempt(j *batchv1.Job) int32 {
	n, err := strconv.ParseInt(j.Labels[v1alpha1.DrainAttemptLabelKey], 10, 32)
	if err != nil {
		return 0
	}
	return int32(n)
}

// awaitPod is how long the binding of held claim pvc should wait for the
// claim's pod to appear in the cache (podCached: it has), at now: the rest
// of claim.PodWait since the admission, or 0 to make the binding now. A
// claim that records its pod (its binding lost and made again), or whose
// admission time is unknown, does not wait. A claim reserved ahead of its
// pod (claim.Reservation) may be handed out until its holder's Lease is
// over (holderEnd; the zero time when it is gone), or until the end the
// reservation names: it waits until claim.PodWait after that, at most
// checkout.LeaseDuration (claim.MaxReservation for an end it names) and
// claim.PodWait in a row, whatever the clock of the replica that wrote
// it.
func awaitPod(pvc *corev1.PersistentVolumeClaim, podCached bool, now, holderEnd time.Time) time.Duration {
	if podCached {
		return 0
	}
	if used, _ := claim.PodOf(pvc); used.UID != "" {
		return 0
	}
	admitted, ok := claim.AdmittedAt(pvc.Annotations)
	if !ok {
		return 0
	}
	longest := claim.PodWait
	if _, until, reserved := claim.Reservation(pvc); reserved {
		end, most := holderEnd, checkout.LeaseDuration
		if !until.IsZero() {
			end, most = until, claim.MaxReservation
		}
		if end.After(admitted) {
			admitted, longest = end, most+claim.PodWait
		}
	}
	left := admitted.Add(claim.PodWait).Sub(now)
	if left <= 0 {
		return 0
	}
	return min(left, longest)
}

// graceStart is when the orphan grace period of b's claim starts: b's
// creation, as the API server stamped it. The binding is made once the
// claim was handed out, so the grace period starts no earlier than the
// pod's admission, whatever the clock of the webhook replica that
// admitted it (which stamped claim.AdmittedAt).
func graceStart(b *v1alpha1.FluentPVCBinding) time.Time {
	return b.CreationTimestamp.Time
}

// admissionTime is when the webhook handed out b's claim, on the clock of
// the replica that admitted the pod: for the pool's demand only. A binding
// without that record (a claim reserved ahead, claim.Binding) was made
// moments after its pod, and its creation stands for the admission once
// it records the pod; until then it marks no admission (the zero time):
// a reservation whose replica went away leaves a binding with no pod,
// and no pod came to the namespace.
func admissionTime(b *v1alpha1.FluentPVCBinding) time.Time {
	if t, ok := claim.AdmittedAt(b.Annotations); ok {
		return t
	}
	if b.Spec.Pod.UID == "" {
		return time.Time{}
	}
	return b.CreationTimestamp.Time
}

func setCondition(s *v1alpha1.FluentPVCBindingStatus, t string, status metav1.ConditionStatus, reason, msg string, gen int64, now time.Time) {
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(now)})
}

func conditionHasReason(conds []metav1.Condition, t, reason string) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Reason == reason
		}
	}
	return false
}
