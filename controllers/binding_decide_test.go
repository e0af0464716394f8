package controllers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

func TestDecide(t *testing.T) {
	opts := Options{OrphanGracePeriod: 2 * time.Minute, DrainBackoffBase: 10 * time.Second, DrainBackoffMax: 10 * time.Minute, FluentPVCMissingTimeout: time.Hour}
	admitted := fixtures.Epoch
	fpvc := fixtures.MakeFluentPVC("f").Obj()
	claim := "f-abc"
	mkBinding := func(mut func(*v1alpha1.FluentPVCBinding)) *v1alpha1.FluentPVCBinding {
		b := fixtures.Binding(fixtures.Claim(fpvc, "ns", claim, "h", v1alpha1.CheckoutMiss, admitted), fpvc.UID)
		b.Spec.PVC.UID = "pvc-uid"
		// The API server stamps the binding, made at the admission.
		b.CreationTimestamp = metav1.NewTime(admitted)
		if mut != nil {
			mut(b)
		}
		return b
	}
	recorded := func(b *v1alpha1.FluentPVCBinding) { b.Spec.Pod = v1alpha1.ObjectIdentity{Name: "p", UID: "pod-uid"} }
	// fresh is a claim as the webhook hands it out; pvc is one whose pod
	// the operator recorded on it.
	fresh := fixtures.Claim(fpvc, "ns", claim, "h", v1alpha1.CheckoutMiss, admitted)
	fresh.UID = "pvc-uid"
	pvc := fresh.DeepCopy()
	pvc.Annotations[v1alpha1.UsedByPodAnnotationKey] = "p/pod-uid"
	legacy := fresh.DeepCopy()
	delete(legacy.Annotations, v1alpha1.UsedByPodAnnotationKey)
	pod := func(phase corev1.PodPhase, finalizer bool) *corev1.Pod {
		p := fixtures.MakePod("p", "ns").Obj()
		p.UID, p.Status.Phase = "pod-uid", phase
		if finalizer {
			p.Finalizers = []string{v1alpha1.PodProtectionFinalizer}
		}
		return p
	}
	job := func(attempt int32, cond batchv1.JobConditionType, at time.Time) batchv1.Job {
		j := objects.DrainJob(fpvc, mkBinding(nil), attempt)
		if cond != "" {
			j.Status.Conditions = []batchv1.JobCondition{{Type: cond, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)}}
		}
		return *j
	}
	failedAt := admitted.Add(time.Hour)
	copyPod := fixtures.MakePod("p-debug", "ns").Claim(claim).Obj()
	copyPod.UID, copyPod.Status.Phase = "copy-uid", corev1.PodRunning

	type want struct {
		phase         v1alpha1.FluentPVCBindingPhase
		drainedReas   string
		recordPod     bool
		recordOnClaim bool
		releasePod    bool
		createJob     int32
		deleteJobs    []string
		releaseClaim  bool
		deleteClaim   bool
		returnClaim   bool
		finish        bool
		// releasePods: labelled pods are released, read live, on finishing.
		releasePods  bool
		requeueAfter time.Duration
		newFailure   bool
		attempts     int32
		events       []string
		// refused is whether the DrainJobRejected condition stays True.
		refused bool
		// blocked is the reason of a True DrainBlocked condition.
		blocked string
		// quiet: the status is not written (the first drain, just begun).
		quiet bool
	}
	// refused is a binding whose last finalizer Job the API server refused,
	// after attempts earlier ones.
	refused := func(attempts int32) func(*v1alpha1.FluentPVCBinding) {
		return func(b *v1alpha1.FluentPVCBinding) {
			recorded(b)
			b.Status.DrainAttempts = attempts
			meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: v1alpha1.BindingConditionDrainJobRejected, Status: metav1.ConditionTrue, Reason: "Forbidden", Message: "denied"})
		}
	}
	cases := map[string]struct {
		obs  observed
		now  time.Time
		want want
	}{
		"binding created before its claim, within the grace period: wait": {
			obs:  observed{binding: mkBinding(func(b *v1alpha1.FluentPVCBinding) { b.Spec.PVC.UID = "" }), fluentPVC: fpvc},
			now:  admitted.Add(time.Second),
			want: want{requeueAfter: 2*time.Minute - time.Second},
		},
		"claim exists, no pod yet: Pending until the grace period ends": {
			obs:  observed{binding: mkBinding(nil), fluentPVC: fpvc, pvc: fresh},
			now:  admitted.Add(time.Minute),
			want: want{phase: v1alpha1.BindingPhasePending, drainedReas: v1alpha1.DrainedReasonNotStarted, requeueAfter: time.Minute},
		},
		"the admitting replica's clock runs 10 minutes behind: the grace period counts from the binding's creation, on the server's clock": {
			obs: observed{binding: mkBinding(func(b *v1alpha1.FluentPVCBinding) {
				b.Annotations[v1alpha1.AdmittedAtAnnotationKey] = admitted.Add(-10 * time.Minute).Format(time.RFC3339Nano)
			}), fluentPVC: fpvc, pvc: fresh},
			now:  admitted.Add(time.Minute),
			want: want{phase: v1alpha1.BindingPhasePending, drainedReas: v1alpha1.DrainedReasonNotStarted, requeueAfter: time.Minute},
		},
		"first sight of a running pod: record it, release it, InUse": {
			obs:  observed{binding: mkBinding(nil), fluentPVC: fpvc, pvc: fresh, pod: pod(corev1.PodRunning, true)},
			now:  admitted.Add(time.Second),
			want: want{phase: v1alpha1.BindingPhaseInUse, drainedReas: v1alpha1.DrainedReasonNotStarted, recordPod: true, recordOnClaim: true, releasePod: true},
		},
		"a pending pod still counts as in use": {
			obs:  observed{binding: mkBinding(recorded), fluentPVC: fpvc, pvc: pvc, pod: pod(corev1.PodPending, false)},
			now:  admitted.Add(time.Hour),
			want: want{phase: v1alpha1.BindingPhaseInUse, drainedReas: v1alpha1.DrainedReasonNotStarted},
		},
		"a running pod read live, out of the cache: InUse, and read again later": {
			obs:  observed{binding: mkBinding(recorded), fluentPVC: fpvc, pvc: pvc, pod: pod(corev1.PodRunning, false), podUncached: true},
			now:  admitted.Add(time.Hour),
			want: want{phase: v1alpha1.BindingPhaseInUse, drainedReas: v1alpha1.DrainedReasonNotStarted, requeueAfter: unwatchedRecheck},
		},
		"pod gone: start the first finalizer Job": {
			obs:  observed{binding: mkBinding(recorded), fluentPVC: fpvc, pvc: pvc},
			now:  admitted.Add(time.Hour),
			want: want{quiet: true, requeueAfter: unwatchedRecheck, phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonRunning, createJob: 1, attempts: 1},
		},
		"pod Succeeded but still there: drain it": {
			obs:  observed{binding: mkBinding(recorded), fluentPVC: fpvc, pvc: pvc, pod: pod(corev1.PodSucceeded, false)},
			now:  admitted.Add(time.Hour),
			want: want{quiet: true, requeueAfter: unwatchedRecheck, phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonRunning, createJob: 1, attempts: 1},
		},
		"a different pod with a copied label is not ours: drain": {
			obs: observed{binding: mkBinding(recorded), fluentPVC: fpvc, pvc: pvc, pod: func() *corev1.Pod {
				p := pod(corev1.PodRunning, false)
				p.UID = types.UID("impostor")
				return p
			}()},
			now:  admitted.Add(time.Hour),
			want: want{quiet: true, requeueAfter: unwatchedRecheck, phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonRunning, createJob: 1, attempts: 1},
		},
		"Job running: wait for it": {
			obs:  observed{binding: mkBinding(recorded), fluentPVC: fpvc, pvc: pvc, jobs: []batchv1.Job{job(1, "", time.Time{})}},
			now:  admitted.Add(time.Hour),
			want: want{quiet: true, requeueAfter: unwatchedRecheck, phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonRunning, attempts: 1},
		},
		"Job running but blocked: say why, keep the claim, look again": {
			obs: observed{binding: mkBinding(recorded), fluentPVC: fpvc, pvc: pvc, jobs: []batchv1.Job{job(1, "", time.Time{})},
				drainBlocked: &blockage{reason: v1alpha1.DrainBlockedReasonUnschedulable, message: "0/3 nodes are available"}, drainRecheck: 30 * time.Second},
			now: admitted.Add(time.Hour),
			want: want{phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonRunning, attempts: 1, requeueAfter: 30 * time.Second,
				blocked: v1alpha1.DrainBlockedReasonUnschedulable, events: []string{v1alpha1.EventReasonDrainBlocked}},
		},
		"claim deleted under its running pod: say so before the drain is due": {
			obs: observed{binding: mkBinding(recorded), fluentPVC: fpvc, pvc: pvc, pod: pod(corev1.PodRunning, false),
				drainBlocked: &blockage{reason: v1alpha1.DrainBlockedReasonClaimDeleting, message: "claim f-abc was deleted"}},
			now: admitted.Add(time.Hour),
			want: want{phase: v1alpha1.BindingPhaseInUse, drainedReas: v1alpha1.DrainedReasonNotStarted,
				blocked: v1alpha1.DrainBlockedReasonClaimDeleting, events: []string{v1alpha1.EventReasonDrainBlocked}},
		},
		"pod gone, but a copy mounts the claim: no Job while it exists, say so and look again": {
			obs: observed{binding: mkBinding(recorded), fluentPVC: fpvc, pvc: pvc, mountedBy: copyPod},
			now: admitted.Add(time.Hour),
			want: want{phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonNotStarted, requeueAfter: unwatchedRecheck,
				blocked: v1alpha1.DrainBlockedReasonMountedByOtherPod, events: []string{v1alpha1.EventReasonDrainBlocked}},
		},
		"drain succeeded, but a copy mounts the claim: not deleted while it exists": {
			obs: observed{binding: mkBinding(recorded), fluentPVC: fpvc, pvc: pvc, mountedBy: copyPod,
				jobs: []batchv1.Job{job(1, batchv1.JobComplete, admitted.Add(time.Hour))}},
			now: admitted.Add(time.Hour),
			want: want{phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonRunning, attempts: 0, requeueAfter: unwatchedRecheck,
				blocked: v1alpha1.DrainBlockedReasonMountedByOtherPod, events: []string{v1alpha1.EventReasonDrainBlocked}},
		},
		"Job running, blocked no more: the condition goes": {
			obs: observed{binding: mkBinding(func(b *v1alpha1.FluentPVCBinding) {
				recorded(b)
				setCondition(&b.Status, v1alpha1.BindingConditionDrainBlocked, metav1.ConditionTrue, v1alpha1.DrainBlockedReasonUnschedulable, "earlier", 0, admitted)
			}), fluentPVC: fpvc, pvc: pvc, jobs: []batchv1.Job{job(1, "", time.Time{})}},
			now:  admitted.Add(time.Hour),
			want: want{phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonRunning, attempts: 1},
		},
		"Job failed, backoff not over: keep the claim, warn once, wait": {
			obs:  observed{binding: mkBinding(recorded), fluentPVC: fpvc, pvc: pvc, jobs: []batchv1.Job{job(1, batchv1.JobFailed, failedAt)}},
			now:  failedAt.Add(4 * time.Second),
			want: want{phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonBackoff, requeueAfter: 6 * time.Second, newFailure: true, attempts: 1, events: []string{v1alpha1.EventReasonDrainFailed}},
		},
		"Job failure already counted: no second warning": {
			obs: observed{binding: mkBinding(func(b *v1alpha1.FluentPVCBinding) {
				recorded(b)
				b.Status.DrainAttempts = 1
				b.Status.LastDrainFailureTime = &metav1.Time{Time: failedAt}
			}), fluentPVC: fpvc, pvc: pvc, jobs: []batchv1.Job{job(1, batchv1.JobFailed, failedAt)}},
			now:  failedAt.Add(5 * time.Second),
			want: want{phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonBackoff, requeueAfter: 5 * time.Second, attempts: 1},
		},
		"Job failed, backoff over when first seen: warn, and replace it with the next attempt": {
			obs:  observed{binding: mkBinding(recorded), fluentPVC: fpvc, pvc: pvc, jobs: []batchv1.Job{job(1, batchv1.JobFailed, failedAt)}},
			now:  failedAt.Add(10 * time.Second),
			want: want{phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonRunning, createJob: 2, deleteJobs: []string{"f-abc-drain-1"}, newFailure: true, attempts: 2, events: []string{v1alpha1.EventReasonDrainFailed, v1alpha1.EventReasonDrainStarted}},
		},
		"third failure waits four times the base": {
			obs:  observed{binding: mkBinding(recorded), fluentPVC: fpvc, pvc: pvc, jobs: []batchv1.Job{job(3, batchv1.JobFailed, failedAt)}},
			now:  failedAt.Add(39 * time.Second),
			want: want{phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonBackoff, requeueAfter: time.Second, newFailure: true, attempts: 3, events: []string{v1alpha1.EventReasonDrainFailed}},
		},
		"restarted after creating a Job but before writing the status: no duplicate": {
			obs: observed{binding: mkBinding(func(b *v1alpha1.FluentPVCBinding) {
				recorded(b)
				b.Status.DrainAttempts = 1
			}), fluentPVC: fpvc, pvc: pvc, jobs: []batchv1.Job{job(1, batchv1.JobFailed, failedAt), job(2, "", time.Time{})}},
			now:  failedAt.Add(time.Hour),
			want: want{phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonRunning, attempts: 2},
		},
		"Job succeeded: release and delete the claim": {
			obs:  observed{binding: mkBinding(recorded), fluentPVC: fpvc, pvc: pvc, jobs: []batchv1.Job{job(1, batchv1.JobFailed, failedAt), job(2, batchv1.JobComplete, failedAt)}},
			now:  failedAt.Add(time.Hour),
			want: want{phase: v1alpha1.BindingPhaseDrained, drainedReas: v1alpha1.DrainedReasonSucceeded, releaseClaim: true, deleteClaim: true, events: []string{v1alpha1.EventReasonDrained}},
		},
		"claim released after the drain: finish": {
			obs: observed{binding: mkBinding(func(b *v1alpha1.FluentPVCBinding) {
				recorded(b)
				b.Status.Phase = v1alpha1.BindingPhaseDrained
			}), fluentPVC: fpvc},
			now:  failedAt.Add(time.Hour),
			want: want{phase: v1alpha1.BindingPhaseDrained, finish: true},
		},
		"a recorded pod not yet on the claim: record it there too": {
			obs:  observed{binding: mkBinding(recorded), fluentPVC: fpvc, pvc: fresh, pod: pod(corev1.PodRunning, true)},
			now:  admitted.Add(time.Second),
			want: want{phase: v1alpha1.BindingPhaseInUse, drainedReas: v1alpha1.DrainedReasonNotStarted, recordOnClaim: true, releasePod: true},
		},
		"binding made again after its pod is gone: the claim names the pod, drain": {
			obs:  observed{binding: mkBinding(nil), fluentPVC: fpvc, pvc: pvc},
			now:  admitted.Add(time.Hour),
			want: want{quiet: true, requeueAfter: unwatchedRecheck, phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonRunning, recordPod: true, createJob: 1, attempts: 1},
		},
		"no pod recorded, history unknown (no record on the claim): drain, never reclaim": {
			obs:  observed{binding: mkBinding(nil), fluentPVC: fpvc, pvc: legacy},
			now:  admitted.Add(time.Hour),
			want: want{quiet: true, requeueAfter: unwatchedRecheck, phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonRunning, createJob: 1, attempts: 1},
		},
		"no pod within the grace period: reclaim the orphan without a Job": {
			obs:  observed{binding: mkBinding(nil), fluentPVC: fpvc, pvc: fresh, claimUnused: true},
			now:  admitted.Add(2 * time.Minute),
			want: want{phase: v1alpha1.BindingPhaseOrphaned, drainedReas: v1alpha1.DrainedReasonNotNeeded, releaseClaim: true, deleteClaim: true, events: []string{v1alpha1.EventReasonOrphanReclaimed}},
		},
		"no pod within the grace period, the pool takes it: return it and finish": {
			obs: observed{binding: mkBinding(nil), fluentPVC: fpvc, pvc: fresh, claimUnused: true, poolAccepts: true},
			now: admitted.Add(2 * time.Minute),
			want: want{phase: v1alpha1.BindingPhaseOrphaned, drainedReas: v1alpha1.DrainedReasonNotNeeded, returnClaim: true, finish: true,
				events: []string{v1alpha1.EventReasonOrphanReclaimed}},
		},
		"proof of no pod found after a drain started (older binding read): keep draining, never reclaim": {
			obs:  observed{binding: mkBinding(nil), fluentPVC: fpvc, pvc: fresh, claimUnused: true, jobs: []batchv1.Job{job(1, "", time.Time{})}},
			now:  admitted.Add(time.Hour),
			want: want{quiet: true, requeueAfter: unwatchedRecheck, phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonRunning, attempts: 1},
		},
		"proof of no pod found while the status says Draining and the Job is not cached yet: keep draining": {
			obs: observed{binding: mkBinding(func(b *v1alpha1.FluentPVCBinding) {
				b.Status.Phase, b.Status.DrainAttempts = v1alpha1.BindingPhaseDraining, 1
			}), fluentPVC: fpvc, pvc: fresh, claimUnused: true},
			now:  admitted.Add(time.Hour),
			want: want{phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonRunning, createJob: 2, attempts: 2, events: []string{v1alpha1.EventReasonDrainStarted}},
		},
		"proof of no pod found after the drain succeeded: delete after the drain, never return to the pool": {
			obs:  observed{binding: mkBinding(nil), fluentPVC: fpvc, pvc: fresh, claimUnused: true, poolAccepts: true, jobs: []batchv1.Job{job(1, batchv1.JobComplete, failedAt)}},
			now:  failedAt,
			want: want{phase: v1alpha1.BindingPhaseDrained, drainedReas: v1alpha1.DrainedReasonSucceeded, releaseClaim: true, deleteClaim: true, events: nil},
		},
		"namespace deleted: abandon, warn, finish": {
			obs:  observed{binding: mkBinding(recorded), fluentPVC: fpvc, pvc: pvc, jobs: []batchv1.Job{job(1, "", time.Time{})}, namespaceTerminating: true},
			now:  admitted.Add(time.Hour),
			want: want{phase: v1alpha1.BindingPhaseAbandoned, drainedReas: v1alpha1.DrainedReasonNamespaceDeleted, releaseClaim: true, finish: true, releasePods: true, events: []string{v1alpha1.EventReasonAbandoned}},
		},
		"FluentPVC gone while draining: wait for it, with a warning": {
			obs:  observed{binding: mkBinding(recorded), pvc: pvc},
			now:  admitted.Add(time.Hour),
			want: want{phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonFluentPVCMissing, requeueAfter: time.Hour, events: []string{v1alpha1.EventReasonFluentPVCMissing}},
		},
		"FluentPVC gone for less than the timeout: keep waiting, no second warning": {
			obs: observed{binding: mkBinding(func(b *v1alpha1.FluentPVCBinding) {
				recorded(b)
				b.Status.FluentPVCMissingSince = &metav1.Time{Time: admitted.Add(time.Hour)}
				setCondition(&b.Status, v1alpha1.BindingConditionDrained, metav1.ConditionFalse, v1alpha1.DrainedReasonFluentPVCMissing, "", 0, admitted)
			}), pvc: pvc},
			now:  admitted.Add(90 * time.Minute),
			want: want{phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonFluentPVCMissing, requeueAfter: 30 * time.Minute},
		},
		"FluentPVC gone past the timeout: let go of the claim undrained, keep it, warn": {
			obs: observed{binding: mkBinding(func(b *v1alpha1.FluentPVCBinding) {
				recorded(b)
				b.Status.FluentPVCMissingSince = &metav1.Time{Time: admitted.Add(time.Hour)}
			}), pvc: pvc},
			now: admitted.Add(2 * time.Hour),
			want: want{phase: v1alpha1.BindingPhaseAbandoned, drainedReas: v1alpha1.DrainedReasonReleasedUndrained, releaseClaim: true, finish: true,
				events: []string{v1alpha1.EventReasonReleasedUndrained}},
		},
		"FluentPVC made again after it was missing: drain": {
			obs: observed{binding: mkBinding(func(b *v1alpha1.FluentPVCBinding) {
				recorded(b)
				b.Status.FluentPVCMissingSince = &metav1.Time{Time: admitted.Add(time.Hour)}
			}), fluentPVC: fpvc, pvc: pvc},
			now:  admitted.Add(2 * time.Hour),
			want: want{quiet: true, requeueAfter: unwatchedRecheck, phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonRunning, createJob: 1, attempts: 1},
		},
		"claim gone after its drain succeeded, the Drained status lost to a conflict: finish as drained, no warning": {
			obs: observed{binding: mkBinding(func(b *v1alpha1.FluentPVCBinding) {
				recorded(b)
				b.Status.Phase, b.Status.DrainAttempts = v1alpha1.BindingPhaseDraining, 1
			}), fluentPVC: fpvc, jobs: []batchv1.Job{job(1, batchv1.JobComplete, failedAt)}},
			now:  failedAt.Add(time.Second),
			want: want{phase: v1alpha1.BindingPhaseDrained, drainedReas: v1alpha1.DrainedReasonSucceeded, finish: true, attempts: 1, events: nil},
		},
		"claim gone while its drain Job failed: finish with a warning": {
			obs: observed{binding: mkBinding(func(b *v1alpha1.FluentPVCBinding) {
				recorded(b)
				b.Status.Phase, b.Status.DrainAttempts = v1alpha1.BindingPhaseDraining, 1
			}), fluentPVC: fpvc, jobs: []batchv1.Job{job(1, batchv1.JobFailed, failedAt)}},
			now:  failedAt.Add(time.Second),
			want: want{phase: v1alpha1.BindingPhaseDraining, finish: true, attempts: 1, events: []string{v1alpha1.EventReasonClaimLost}},
		},
		"claim lost while in use: finish with a warning": {
			obs:  observed{binding: mkBinding(recorded), fluentPVC: fpvc, pod: pod(corev1.PodRunning, false)},
			now:  admitted.Add(time.Hour),
			want: want{finish: true, events: []string{v1alpha1.EventReasonClaimLost}},
		},
		"Job refused: still refused while no Job exists, tried again": {
			obs:  observed{binding: mkBinding(refused(0)), fluentPVC: fpvc, pvc: pvc},
			now:  admitted.Add(time.Hour),
			want: want{phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonRunning, createJob: 1, attempts: 1, refused: true},
		},
		"Job refused, then made by a reconcile that read an older binding: the refusal is cleared": {
			obs:  observed{binding: mkBinding(refused(0)), fluentPVC: fpvc, pvc: pvc, jobs: []batchv1.Job{job(1, "", time.Time{})}},
			now:  admitted.Add(time.Hour),
			want: want{phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonRunning, attempts: 1},
		},
		"Job refused, then made and succeeded: the refusal is cleared": {
			obs:  observed{binding: mkBinding(refused(0)), fluentPVC: fpvc, pvc: pvc, jobs: []batchv1.Job{job(1, batchv1.JobComplete, failedAt)}},
			now:  failedAt,
			want: want{phase: v1alpha1.BindingPhaseDrained, drainedReas: v1alpha1.DrainedReasonSucceeded, releaseClaim: true, deleteClaim: true, events: []string{v1alpha1.EventReasonDrained}},
		},
		"second attempt refused after the first failed: the failed Job does not clear the refusal": {
			obs:  observed{binding: mkBinding(refused(1)), fluentPVC: fpvc, pvc: pvc, jobs: []batchv1.Job{job(1, batchv1.JobFailed, failedAt)}},
			now:  failedAt.Add(time.Hour),
			want: want{phase: v1alpha1.BindingPhaseDraining, drainedReas: v1alpha1.DrainedReasonRunning, createJob: 2, deleteJobs: []string{"f-abc-drain-1"}, newFailure: true, attempts: 2, events: []string{v1alpha1.EventReasonDrainFailed, v1alpha1.EventReasonDrainStarted}, refused: true},
		},
		"claim back in the pool after this checkout: finish quietly, touch nothing": {
			obs:  observed{binding: mkBinding(nil), fluentPVC: fpvc, checkoutOver: true},
			now:  admitted.Add(time.Hour),
			want: want{finish: true},
		},
		"claim checked out again while its next pod runs: finish quietly, leave the pod": {
			obs:  observed{binding: mkBinding(nil), fluentPVC: fpvc, checkoutOver: true, pod: pod(corev1.PodRunning, true)},
			now:  admitted.Add(time.Hour),
			want: want{finish: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := decide(tc.obs, tc.now, opts)
			var events []string
			for _, o := range p.outcomes {
				if r := outcomeReports[o.kind]; r.reason != "" && !o.silent {
					events = append(events, r.reason)
				}
			}
			got := want{
				phase: p.status.Phase, recordPod: p.recordPod != nil, recordOnClaim: p.recordOnClaim != nil, releasePod: p.releasePod,
				createJob: p.createJob, deleteJobs: p.deleteJobs, releaseClaim: p.releaseClaim, deleteClaim: p.deleteClaim, returnClaim: p.returnClaim, releasePods: p.releaseLabelledPods,
				finish: p.finish, requeueAfter: p.requeueAfter, newFailure: p.has(outcomeDrainFailed), attempts: p.status.DrainAttempts, events: events,
				refused: meta.IsStatusConditionTrue(p.status.Conditions, v1alpha1.BindingConditionDrainJobRejected), quiet: p.quiet,
			}
			if c := meta.FindStatusCondition(p.status.Conditions, v1alpha1.BindingConditionDrainBlocked); c != nil && c.Status == metav1.ConditionTrue {
				got.blocked = c.Reason
			}
			for _, c := range p.status.Conditions {
				if c.Type == v1alpha1.BindingConditionDrained {
					got.drainedReas = c.Reason
				}
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("decide (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	opts := Options{DrainBackoffBase: 10 * time.Second, DrainBackoffMax: 10 * time.Minute}
	longBase := Options{DrainBackoffBase: 20 * time.Minute, DrainBackoffMax: 10 * time.Minute}
	cases := map[string]struct {
		opts    Options
		attempt int32
		want    time.Duration
	}{
		"first failure waits the base":    {opts: opts, attempt: 1, want: 10 * time.Second},
		"second doubles":                  {opts: opts, attempt: 2, want: 20 * time.Second},
		"sixth":                           {opts: opts, attempt: 6, want: 320 * time.Second},
		"capped":                          {opts: opts, attempt: 7, want: 10 * time.Minute},
		"far past the cap":                {opts: opts, attempt: 1000, want: 10 * time.Minute},
		"a base over the cap is the wait": {opts: longBase, attempt: 1, want: 20 * time.Minute},
		"a base over the cap never grows": {opts: longBase, attempt: 3, want: 20 * time.Minute},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := backoff(tc.attempt, tc.opts); got != tc.want {
				t.Errorf("backoff(%d) = %s, want %s", tc.attempt, got, tc.want)
			}
		})
	}
}

// TestAdmissionTimeOrdersWithinASecond admits a pod in namespace "a-early"
// and, 500 ms later in the same second, one in "z-late", with
// spec.pool.maxNamespaces 1: the pool must stay with the later one. With
// admission times of whole seconds the two tied, and the tie went to the
// first name (a flake of the envtest spec "keeps pools in at most
// maxNamespaces learned namespaces").
func TestAdmissionTimeOrdersWithinASecond(t *testing.T) {
	fpvc := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
	early := fixtures.Epoch.Add(200 * time.Millisecond)
	late := early.Add(500 * time.Millisecond)
	cases := map[string]func(ns string, at time.Time) *corev1.PersistentVolumeClaim{
		"miss: a new claim": func(ns string, at time.Time) *corev1.PersistentVolumeClaim {
			return fixtures.Claim(fpvc, ns, "f-abc", "h", v1alpha1.CheckoutMiss, at)
		},
		"hit: a warm PVC checked out": func(ns string, at time.Time) *corev1.PersistentVolumeClaim {
			return fixtures.CheckedOut(fixtures.Returned(fixtures.Claim(fpvc, ns, "f-abc", "h", v1alpha1.CheckoutHit, fixtures.Epoch)), at)
		},
	}
	for name, claim := range cases {
		t.Run(name, func(t *testing.T) {
			last := map[string]time.Time{}
			for ns, at := range map[string]time.Time{"a-early": early, "z-late": late} {
				b := fixtures.Binding(claim(ns, at), fpvc.UID)
				b.CreationTimestamp = metav1.NewTime(at.Truncate(time.Second))
				if got := admissionTime(b); !got.Equal(at) {
					t.Errorf("admissionTime in %s = %v; want %v", ns, got, at)
				}
				last[ns] = admissionTime(b)
			}
			keep, _, capped := pool.Namespaces(nil, last, late, time.Hour, pool.Learning{Max: 1})
			if !cmp.Equal(keep, []string{"z-late"}) || !cmp.Equal(capped, []string{"a-early"}) {
				t.Errorf("kept %v, capped %v; want [z-late], [a-early]", keep, capped)
			}
		})
	}
}

// TestAdmissionTimeOfAReservation: the binding of a claim reserved ahead
// records no admission time; its creation stands for the admission once
// it records its pod, and a binding with neither marks none.
func TestAdmissionTimeOfAReservation(t *testing.T) {
	fpvc := fixtures.MakeFluentPVC("f").PoolSize(1).Obj()
	admitted := fixtures.Epoch.Add(200 * time.Millisecond)
	created := fixtures.Epoch.Add(time.Hour)
	reserved := func(pod types.UID) *v1alpha1.FluentPVCBinding {
		c := fixtures.Claim(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutHit, admitted)
		c.Annotations[v1alpha1.ReservedByAnnotationKey] = "replica-a"
		c.Annotations[v1alpha1.ReservedUntilAnnotationKey] = admitted.Add(5 * time.Minute).Format(time.RFC3339Nano)
		b := fixtures.Binding(c, fpvc.UID)
		b.CreationTimestamp = metav1.NewTime(created)
		b.Spec.Pod.UID = pod
		return b
	}
	for name, tc := range map[string]struct {
		b    *v1alpha1.FluentPVCBinding
		want time.Time
	}{
		"checked out at its pod's admission":             {b: fixtures.Binding(fixtures.Claim(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutHit, admitted), fpvc.UID), want: admitted},
		"reserved ahead, its pod recorded":               {b: reserved("pod-uid"), want: created},
		"reserved ahead, no pod (its replica went away)": {b: reserved("")},
	} {
		t.Run(name, func(t *testing.T) {
			if got := admissionTime(tc.b); !got.Equal(tc.want) {
				t.Errorf("admissionTime = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSettleJob settles a plan once the API server answered the creation
// of its finalizer Job.
func TestSettleJob(t *testing.T) {
	b := fixtures.Binding(fixtures.Claim(fixtures.MakeFluentPVC("f").Obj(), "ns", "f-abc", "h", v1alpha1.CheckoutMiss, fixtures.Epoch), "")
	b.Status.DrainAttempts, b.Status.DrainJobName = 1, "f-abc-drain-1"
	planned := func() plan {
		// quiet as a first drain's would be: a refusal must still be written.
		p := plan{createJob: 2, deleteJobs: []string{"f-abc-drain-1"}, status: *b.Status.DeepCopy(), quiet: true}
		p.status.DrainAttempts, p.status.DrainJobName = 2, "f-abc-drain-2"
		p.outcomes = []outcome{{kind: outcomeDrainFailed, message: "attempt 1 failed"}, {kind: outcomeDrainStarted, message: "attempt 2"}}
		return p
	}
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: "batch", Kind: "Job"}, "f-abc-drain-2", nil)
	cases := map[string]struct {
		err          error
		wantOutcomes []outcome
		wantAttempts int32
		wantRetry    bool
		wantWritten  bool
	}{
		"created": {wantAttempts: 2, wantOutcomes: planned().outcomes},
		"made by an earlier reconcile, which told of it": {err: apierrors.NewAlreadyExists(schema.GroupResource{Group: "batch", Resource: "jobs"}, "f-abc-drain-2"),
			wantAttempts: 2, wantOutcomes: []outcome{{kind: outcomeDrainFailed, message: "attempt 1 failed"}}},
		"refused: no attempt, the failure counted silently, the refusal told": {err: invalid, wantAttempts: 1, wantRetry: true, wantWritten: true,
			wantOutcomes: []outcome{{kind: outcomeDrainFailed, message: "attempt 1 failed", silent: true}, {kind: outcomeDrainJobRejected}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := settleJob(observed{binding: b}, planned(), "f-abc-drain-2", tc.err, fixtures.Epoch)
			for i := range p.outcomes {
				if p.outcomes[i].kind == outcomeDrainJobRejected {
					p.outcomes[i].message = "" // the API server's words
				}
			}
			if diff := cmp.Diff(tc.wantOutcomes, p.outcomes, cmp.AllowUnexported(outcome{})); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
			if p.status.DrainAttempts != tc.wantAttempts || (p.retry != nil) != tc.wantRetry {
				t.Errorf("attempts %d, retry %v; want %d, %v", p.status.DrainAttempts, p.retry, tc.wantAttempts, tc.wantRetry)
			}
			if tc.wantWritten && p.quiet {
				t.Error("the status stays quiet: the refusal would not be written")
			}
		})
	}
}

func TestStatusNews(t *testing.T) {
	blocked := metav1.Condition{Type: v1alpha1.BindingConditionDrainBlocked, Status: metav1.ConditionTrue, Reason: v1alpha1.DrainBlockedReasonClaimDeleting}
	inUse := v1alpha1.FluentPVCBindingStatus{Phase: v1alpha1.BindingPhaseInUse, ObservedGeneration: 1}
	cases := map[string]struct {
		was, next v1alpha1.FluentPVCBindingStatus
		want      bool
	}{
		"nothing changed":                        {was: inUse, next: inUse},
		"a new binding's pod uses the claim":     {next: inUse},
		"a new binding's drain is blocked":       {next: v1alpha1.FluentPVCBindingStatus{Phase: v1alpha1.BindingPhaseInUse, Conditions: []metav1.Condition{blocked}}, want: true},
		"a Pending binding's pod appeared":       {was: v1alpha1.FluentPVCBindingStatus{Phase: v1alpha1.BindingPhasePending}, next: inUse, want: true},
		"a new binding's pod is gone: it drains": {next: v1alpha1.FluentPVCBindingStatus{Phase: v1alpha1.BindingPhaseDraining, DrainAttempts: 1}, want: true},
		"a new binding waits for its pod":        {next: v1alpha1.FluentPVCBindingStatus{Phase: v1alpha1.BindingPhasePending}, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := statusNews(tc.was, tc.next); got != tc.want {
				t.Errorf("statusNews = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestDrainedDuration times a drain from the status' drainStartTime, or,
// for a first drain that ended before its status was written
// (quietFirstDrain), from its Job's creation.
func TestDrainedDuration(t *testing.T) {
	start := fixtures.Epoch
	fpvc := fixtures.MakeFluentPVC("f").Obj()
	b := fixtures.Binding(fixtures.Claim(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutMiss, start), fpvc.UID)
	j := objects.DrainJob(fpvc, b, 1)
	j.CreationTimestamp = metav1.NewTime(start)
	cases := map[string]struct {
		status v1alpha1.FluentPVCBindingStatus
		want   float64
	}{
		"status written":     {status: v1alpha1.FluentPVCBindingStatus{Phase: v1alpha1.BindingPhaseDraining, DrainStartTime: &metav1.Time{Time: start.Add(-time.Second)}}, want: 5},
		"status not written": {want: 4},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := plan{status: tc.status}
			markDrained(b, j, start.Add(4*time.Second), &p, "drained")
			if len(p.outcomes) != 1 || p.outcomes[0].drainSeconds != tc.want {
				t.Errorf("outcomes %+v, want one drained in %vs", p.outcomes, tc.want)
			}
		})
	}
}

// TestDecideRecordOnClaim: the claim records its pod as soon as the
// binding has the pod, whatever the pod's phase: its drain, and the
// refusal of a copy of its manifest, rest on that record.
func TestDecideRecordOnClaim(t *testing.T) {
	created := fixtures.Epoch
	fpvc := fixtures.MakeFluentPVC("f").Obj()
	fresh := fixtures.Claim(fpvc, "ns", "f-abc", "h", v1alpha1.CheckoutHit, created)
	fresh.UID = "pvc-uid"
	id := v1alpha1.ObjectIdentity{Name: "p", UID: "pod-uid"}
	w, err := claim.RecordPod(fresh.DeepCopy(), id)
	if err != nil {
		t.Fatal(err)
	}
	recorded := w.Object
	binding := func(recorded bool) *v1alpha1.FluentPVCBinding {
		b := fixtures.Binding(fresh, fpvc.UID)
		b.Spec.PVC.UID = "pvc-uid"
		b.CreationTimestamp = metav1.NewTime(created)
		if recorded {
			b.Spec.Pod = id
		}
		return b
	}
	pod := func(phase corev1.PodPhase, deleting bool) *corev1.Pod {
		p := fixtures.MakePod("p", "ns").Obj()
		p.UID, p.Status.Phase = "pod-uid", phase
		p.CreationTimestamp = metav1.NewTime(created)
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: created.Add(time.Second)}
		}
		return p
	}
	legacy := pod(corev1.PodRunning, false)
	legacy.Finalizers = []string{v1alpha1.PodProtectionFinalizer}
	cases := map[string]struct {
		obs           observed
		recordPod     bool
		recordOnClaim bool
	}{
		"first sight of a pod started moments ago: the binding and the claim record it": {
			obs: observed{binding: binding(false), fluentPVC: fpvc, pvc: fresh, pod: pod(corev1.PodRunning, false)}, recordPod: true, recordOnClaim: true,
		},
		"a pod still pending": {
			obs: observed{binding: binding(true), fluentPVC: fpvc, pvc: fresh, pod: pod(corev1.PodPending, false)}, recordOnClaim: true,
		},
		"a pod being deleted": {
			obs: observed{binding: binding(true), fluentPVC: fpvc, pvc: fresh, pod: pod(corev1.PodRunning, true)}, recordOnClaim: true,
		},
		"a pod finished": {
			obs: observed{binding: binding(true), fluentPVC: fpvc, pvc: fresh, pod: pod(corev1.PodSucceeded, false)}, recordOnClaim: true,
		},
		"a pod gone": {
			obs: observed{binding: binding(true), fluentPVC: fpvc, pvc: fresh}, recordOnClaim: true,
		},
		"a pod admitted by an earlier version, with the pod-protection finalizer: the claim records it before it is released": {
			obs: observed{binding: binding(true), fluentPVC: fpvc, pvc: fresh, pod: legacy}, recordOnClaim: true,
		},
		"the claim records the pod already": {
			obs: observed{binding: binding(true), fluentPVC: fpvc, pvc: recorded, pod: pod(corev1.PodRunning, false)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			opts := Options{OrphanGracePeriod: 2 * time.Minute, DrainBackoffBase: 10 * time.Second, DrainBackoffMax: 10 * time.Minute, FluentPVCMissingTimeout: time.Hour}
			p := decide(tc.obs, created.Add(500*time.Millisecond), opts)
			if got := p.recordPod != nil; got != tc.recordPod {
				t.Errorf("binding records the pod = %v, want %v", got, tc.recordPod)
			}
			if got := p.recordOnClaim != nil; got != tc.recordOnClaim {
				t.Errorf("claim records the pod = %v, want %v", got, tc.recordOnClaim)
			}
		})
	}
}
