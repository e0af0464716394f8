package oracle

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// DefaultHolderGrace is Options.HolderGrace when it is zero: for how much
// of the time a replica of the operator led after the start of the pod a
// claim was handed to the claim's holder may stay before its deletion is
// requested (I5). On kwok a pod is marked Running within milliseconds of
// its binding, which is what the operator waits for before it deletes the
// holder, so the two race: the grace bounds the operator's reaction. A
// reaction takes tens of milliseconds; the chaos suite's API faults (a
// request held up to 1 s, a 429 retried after 1 s, a 500 or a cut watch
// retried with backoff) stretch one to about a second each, and 5 s
// allows for a few on one step-away while still far below the minute
// after which the operator removes a holder whose pod never came
// (pool.HolderPatience). results/latest.md gives the measured delays.
const DefaultHolderGrace = 5 * time.Second

// holderLife is a holder pod the operator created: labelled as the holder
// of a warm claim, controlled by that claim and mounting it, and no other
// PVC, read-only (operatorHolder).
type holderLife struct {
	ev  *Event
	pos position
	pod objRef
	// claim is the claim it holds: its name and, from the controller
	// reference, its UID.
	claim objRef
}

// operatorHolder says whether pod, created by user, is the holder of a
// warm claim that the operator (Options.Operator) created, and which
// claim: labelled component=holder with the warm-claim label, controlled
// by the PVC that label names, and mounting it, and no other PVC,
// read-only. A pod that only looks like one (made by anyone else, or
// writing) is not: it is a user of the claim like any other pod.
func operatorHolder(pod *corev1.Pod, user, operator string) (string, types.UID, bool) {
	claim := pod.Labels[v1alpha1.WarmClaimLabelKey]
	if operator == "" || user != operator || component(pod.Labels) != v1alpha1.ComponentHolder || claim == "" {
		return "", "", false
	}
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil || ref.APIVersion != "v1" || ref.Kind != "PersistentVolumeClaim" || ref.Name != claim || ref.UID == "" {
		return "", "", false
	}
	if !mountsReadOnly(pod, claim) {
		return "", "", false
	}
	return claim, ref.UID, true
}

// mountsReadOnly says whether the PVC volumes of pod all name claim, at
// least one does, each is read-only, and every container mounts them
// read-only and as a filesystem only.
func mountsReadOnly(pod *corev1.Pod, claim string) bool {
	var names []string
	for _, v := range pod.Spec.Volumes {
		if src := v.PersistentVolumeClaim; src != nil {
			if src.ClaimName != claim || !src.ReadOnly {
				return false
			}
			names = append(names, v.Name)
		}
	}
	if len(names) == 0 {
		return false
	}
	var mounts []corev1.VolumeMount
	var devices []corev1.VolumeDevice
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		mounts, devices = append(mounts, c.VolumeMounts...), append(devices, c.VolumeDevices...)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		mounts, devices = append(mounts, c.VolumeMounts...), append(devices, c.VolumeDevices...)
	}
	for _, m := range mounts {
		if slices.Contains(names, m.Name) && !m.ReadOnly {
			return false
		}
	}
	for _, d := range devices {
		if slices.Contains(names, d.Name) {
			return false
		}
	}
	return true
}

// podStarted says whether pod, as a write left it, has started: phase
// Running, or a container or init container running or having run.
func podStarted(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodRunning {
		return true
	}
	for _, s := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		if s.State.Running != nil || (s.State.Terminated != nil && !s.State.Terminated.StartedAt.IsZero()) {
			return true
		}
	}
	return false
}

// HolderReport is what Check saw of the operator's holder pods.
type HolderReport struct {
	// Grace is the grace I5 allowed a holder after its pod started.
	Grace time.Duration
	// Created counts the holders the operator created.
	Created int
	// LeaderChanges counts the new leaders that took the operator's Lease
	// (Options.Lease) after another had held it: the spans in which none
	// led.
	LeaderChanges int
	// Checked counts the holders whose claim was handed to a pod that
	// started, each checked against that start.
	Checked int
	// AfterStart counts those whose deletion was requested after the
	// start, within Grace.
	AfterStart int
	// Failovers counts those deleted after the start with some of the
	// time between in a span in which no replica led.
	Failovers int
	// BoundToDeleted is the step-away delay from the binding of the pod a
	// holder's claim was handed to, to the operator's request to delete
	// the holder; StartedToDeleted from that pod's start (negative: the
	// holder went first). Holders that someone else deleted first, or
	// that were deleted before that pod was created, are left out.
	BoundToDeleted, StartedToDeleted Delays
	// LedToDeleted is the delay Grace bounds: StartedToDeleted but the
	// spans in which no replica led.
	LedToDeleted Delays
}

// Delays summarises a distribution of delays.
type Delays struct {
	N                  int
	Min, P50, P99, Max time.Duration
}

// summarise is the distribution of ds.
func summarise(ds []time.Duration) Delays {
	if len(ds) == 0 {
		return Delays{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration { return s[int(math.Ceil(p*float64(len(s))))-1] }
	return Delays{N: len(s), Min: s[0], P50: rank(0.5), P99: rank(0.99), Max: s[len(s)-1]}
}

// checkHolders (I5, from the log): every holder was created while its
// claim was warm; once the claim is handed to a pod that starts, the
// holder's deletion was requested before that start or within grace of
// it; and no holder of a claim remains when a drain Job of it is created.
func (h *history) checkHolders(uses []claimUse, grace time.Duration) ([]Violation, HolderReport) {
	var out []Violation
	r := HolderReport{Grace: grace, Created: len(h.holders), LeaderChanges: len(h.leaderless)}
	holders := make([]*holderLife, len(h.holders))
	byClaim := map[types.UID][]*holderLife{}
	for i := range h.holders {
		holders[i] = &h.holders[i]
	}
	sort.SliceStable(holders, func(i, j int) bool { return h.order.before(holders[i].pos, holders[j].pos) })
	for _, hl := range holders {
		byClaim[hl.claim.UID] = append(byClaim[hl.claim.UID], hl)
	}
	usesOf := map[types.UID][]claimUse{}
	for _, u := range h.sortedUses(uses) {
		if u.claim != nil {
			usesOf[u.claim.ref.UID] = append(usesOf[u.claim.ref.UID], u)
		}
	}
	var samples stepAways
	for _, hl := range holders {
		object := "pod " + hl.pod.String()
		var st *claimWrite
		if c := h.claims[hl.claim.UID]; c != nil {
			st = h.stateBefore(c, hl.pos)
		}
		if st == nil || st.gone || st.role != v1alpha1.ClaimRoleWarm {
			out = append(out, Violation{
				Invariant: InvariantHolder, Object: object,
				Detail: fmt.Sprintf("holder of claim %s created %s, when the claim was not warm (%s)", hl.claim, hl.ev.where(), describeState(st)),
			})
		}
		// The pod the claim was handed to next.
		for i, u := range usesOf[hl.claim.UID] {
			if h.order.before(hl.pos, u.pod.pos) {
				if v := h.checkStepAway(hl, &usesOf[hl.claim.UID][i], grace, &r, &samples); v != nil {
					out = append(out, *v)
				}
				break
			}
		}
	}
	r.BoundToDeleted, r.StartedToDeleted, r.LedToDeleted = summarise(samples.bound), summarise(samples.started), summarise(samples.led)
	out = append(out, h.holdersAtDrains(byClaim)...)
	return out, r
}

// stepAways are samples of the holders' step-away delays (HolderReport).
type stepAways struct{ bound, started, led []time.Duration }

// checkStepAway (I5): if use's pod, the one holder hl's claim went to
// next, started, hl's deletion was requested before that start or while
// a replica of the operator led for at most grace after it. It counts hl
// in r and samples the operator's step-away in s.
func (h *history) checkStepAway(hl *holderLife, use *claimUse, grace time.Duration, r *HolderReport, s *stepAways) *Violation {
	start, ok := h.started[use.pod.pod.UID]
	if !ok {
		return nil
	}
	r.Checked++
	del, deleted := h.deleted[hl.pod.UID]
	if !deleted {
		return &Violation{
			Invariant: InvariantHolder, Object: "pod " + hl.pod.String(),
			Detail: fmt.Sprintf("holder of claim %s created %s; the claim went to pod %s, created %s and started %s; "+
				"its deletion was never requested", hl.claim, hl.ev.where(), use.pod.pod, use.pod.ev.where(), start.ev.where()),
		}
	}
	at := del.ev.StageTimestamp
	full, led := at.Sub(start.ev.StageTimestamp), h.led(start.ev.StageTimestamp, at)
	if del.ev.Username() == h.operator && h.order.before(use.pod.pos, del.pos) {
		s.started, s.led = append(s.started, full), append(s.led, led)
		if b, ok := h.bound[use.pod.pod.UID]; ok {
			s.bound = append(s.bound, at.Sub(b.ev.StageTimestamp))
		}
	}
	switch {
	case h.order.before(del.pos, start.pos):
		return nil
	case led < full:
		r.Failovers++
	}
	if led <= grace {
		r.AfterStart++
		return nil
	}
	return &Violation{
		Invariant: InvariantHolder, Object: "pod " + hl.pod.String(),
		Detail: fmt.Sprintf("holder of claim %s created %s; the claim went to pod %s, created %s and started %s; "+
			"its deletion was requested %s, %s after the start, of which a replica of the operator led %s (grace %s)",
			hl.claim, hl.ev.where(), use.pod.pod, use.pod.ev.where(), start.ev.where(), del.ev.where(), full, led, grace),
	}
}

// holdersAtDrains (I5): no holder of a claim exists (created, and its
// deletion not requested) when a drain Job of the claim is created.
func (h *history) holdersAtDrains(byClaim map[types.UID][]*holderLife) []Violation {
	var out []Violation
	for _, uid := range h.jobUIDs {
		j := h.jobs[uid]
		if !j.drain || !j.hasCreate {
			continue
		}
		for _, name := range j.claims {
			c := h.claimAt(j.ref.Namespace, name, j.created)
			if c == nil {
				continue
			}
			for _, hl := range byClaim[c.ref.UID] {
				del, deleted := h.deleted[hl.pod.UID]
				if !h.order.before(hl.pos, j.created) || (deleted && h.order.before(del.pos, j.created)) {
					continue
				}
				when := "its deletion was never requested"
				if deleted {
					when = "its deletion was requested " + del.ev.where()
				}
				out = append(out, Violation{
					Invariant: InvariantHolder, Object: "pod " + hl.pod.String(),
					Detail: fmt.Sprintf("holder of claim %s created %s still mounted the claim when drain Job %s was created %s; %s",
						c.ref, hl.ev.where(), j.ref, j.createdEv.where(), when),
				})
			}
		}
	}
	return out
}

// checkFinalHolders (I5, from the final state): a pod labelled as a
// holder is left only for a claim that is warm, by the UID of its
// controller reference (or, lacking one, the name its label gives).
func checkFinalHolders(final State) []Violation {
	var out []Violation
	for i := range final.Pods {
		p := &final.Pods[i]
		if component(p.Labels) != v1alpha1.ComponentHolder {
			continue
		}
		name, uid := p.Labels[v1alpha1.WarmClaimLabelKey], types.UID("")
		if ref := metav1.GetControllerOfNoCopy(p); ref != nil && ref.Kind == "PersistentVolumeClaim" {
			name, uid = ref.Name, ref.UID
		}
		var pvc *corev1.PersistentVolumeClaim
		for j := range final.PVCs {
			c := &final.PVCs[j]
			if c.Namespace == p.Namespace && c.Name == name && (uid == "" || c.UID == uid) {
				pvc = c
			}
		}
		state := "gone"
		switch {
		case pvc == nil:
		case pvc.DeletionTimestamp != nil:
			state = "being deleted"
		case pvc.Labels[v1alpha1.ClaimRoleLabelKey] == v1alpha1.ClaimRoleWarm:
			continue
		default:
			state = fmt.Sprintf("claim-role %q", pvc.Labels[v1alpha1.ClaimRoleLabelKey])
		}
		out = append(out, Violation{
			Invariant: InvariantHolder,
			Object:    "pod " + objRef{Namespace: p.Namespace, Name: p.Name, UID: p.UID}.String(),
			Detail:    fmt.Sprintf("holder of claim %s left in the final state while the claim is not warm (%s)%s", name, state, metaNote(p)),
		})
	}
	return out
}

// leaseWrite is the state of the operator's leader-election Lease after a
// logged write.
type leaseWrite struct {
	podMoment
	// holder is the Lease's holderIdentity: the leader ("" once released).
	holder string
}

// addLeaseWrite records a write of the Lease that Options.Lease names.
func (h *history) addLeaseWrite(e *Event, line int) bool {
	switch e.Verb {
	case "create", "update", "patch":
	default:
		return true
	}
	var lease coordinationv1.Lease
	if !decode(e.ResponseObject, &lease) {
		return false
	}
	if h.lease == "" || orElse(lease.Namespace, e.ObjectRef.Namespace)+"/"+lease.Name != h.lease {
		return true
	}
	w := leaseWrite{podMoment: podMoment{ev: e, pos: positionOf(e, line, lease.ResourceVersion)}}
	if lease.Spec.HolderIdentity != nil {
		w.holder = *lease.Spec.HolderIdentity
	}
	h.leaseWrites = append(h.leaseWrites, w)
	return true
}

// findLeaderless orders the Lease's writes and finds the spans in which
// no replica led: from the last write before a new leader took the Lease
// (the old leader's last renewal, or its release) to that taking. The old
// leader may have led a little into the span (less than its renewal
// period) or, losing the Lease to API faults, until its renew deadline.
func (h *history) findLeaderless() {
	sort.SliceStable(h.leaseWrites, func(i, j int) bool { return h.order.before(h.leaseWrites[i].pos, h.leaseWrites[j].pos) })
	for i := 1; i < len(h.leaseWrites); i++ {
		prev, w := h.leaseWrites[i-1], h.leaseWrites[i]
		if w.holder != "" && w.holder != prev.holder {
			h.leaderless = append(h.leaderless, span{from: prev.ev.StageTimestamp, to: w.ev.StageTimestamp})
		}
	}
}

// span is a time interval.
type span struct{ from, to time.Time }

// led is how much of [from, to] a replica of the operator led: all of it
// but its overlap with the leaderless spans.
func (h *history) led(from, to time.Time) time.Duration {
	d := to.Sub(from)
	for _, s := range h.leaderless {
		lo, hi := s.from, s.to
		if lo.Before(from) {
			lo = from
		}
		if hi.After(to) {
			hi = to
		}
		if hi.After(lo) {
			d -= hi.Sub(lo)
		}
	}
	return d
}
