package oracle

import (
	"fmt"
	"sort"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// The invariants Check counts violations of.
const (
	// InvariantSharedClaim (I1): two created pods, labelled or not, used
	// one claim (one PVC UID) with no drain of it between them.
	InvariantSharedClaim = "I1"
	// InvariantUndrainedRelease (I2): a claim a created pod used was let go
	// of before a drain of it succeeded, unless its namespace's deletion or
	// a user's deletion of the claim was requested first.
	InvariantUndrainedRelease = "I2"
	// InvariantLeftover (I3): the settled final state still holds a claim,
	// binding, drain or binder Job, or pod the operator should have removed.
	InvariantLeftover = "I3"
	// InvariantStuckTerminating (I4): a pod of the final state has been
	// Terminating for longer than Options.StuckAfter.
	InvariantStuckTerminating = "I4"
	// InvariantHolder (I5): a holder pod of the operator's mounted a claim
	// while it was not warm: created after its checkout, kept past the
	// start of the pod it went to (beyond Options.HolderGrace), or there
	// when a drain Job of it was created or in the final state.
	InvariantHolder = "I5"
)

// Invariants lists the invariants in report order with a one-line title.
var Invariants = []struct{ ID, Title string }{
	{InvariantSharedClaim, "a claim serves one pod until it is drained"},
	{InvariantUndrainedRelease, "a used claim is let go of only after a drain succeeded (or its namespace, or the claim by a user, is deleted)"},
	{InvariantLeftover, "nothing of the operator's is left once the load is gone"},
	{InvariantStuckTerminating, "no pod is stuck Terminating"},
	{InvariantHolder, "a holder mounts a claim only while it is warm and until the pod it goes to starts"},
}

// DefaultStuckAfter is Options.StuckAfter when it is zero.
const DefaultStuckAfter = 2 * time.Minute

// Options tune Check.
type Options struct {
	// StuckAfter is how long after its deletionTimestamp (which already
	// includes the grace period) a pod of the final state counts as stuck
	// Terminating (I4). Zero means DefaultStuckAfter.
	StuckAfter time.Duration
	// OrderByTime orders writes by their stage timestamps alone. By
	// default writes whose responses carry a resourceVersion are ordered by
	// it, which on kube-apiserver with etcd3 is the commit order; set this
	// for an API server where that does not hold.
	OrderByTime bool
	// Users are the usernames of the cluster's users, as opposed to the
	// operator's: a deletion of a claim one of them requested excuses the
	// claim's later release without a drain, as the documented way out of
	// a claim deleted while held gives up its data. Empty: no user's
	// deletion excuses anything.
	Users []string
	// Operator is the username of the operator's requests. A pod it
	// creates that is labelled as the holder of a warm claim, is
	// controlled by that claim and mounts it read-only is the claim's
	// holder, judged by I5, not a user of the claim (I1, I2). Empty: no
	// pod is a holder; every pod that mounts a claim is a user of it.
	Operator string
	// HolderGrace is how long after the start of the pod a claim was
	// handed to the deletion of the claim's holder may be requested (I5).
	// Zero means DefaultHolderGrace.
	HolderGrace time.Duration
	// Lease names the operator's leader-election Lease, as
	// "namespace/name" (Policy logs its writes by that name): a holder's
	// grace bounds the time a replica led after the pod's start, without
	// the spans from an old leader's last write of it to a new leader's
	// taking of it, since no replica acts while none leads. Empty: the
	// grace bounds all the time from the start.
	Lease string
}

func (o Options) stuckAfter() time.Duration {
	if o.StuckAfter == 0 {
		return DefaultStuckAfter
	}
	return o.StuckAfter
}

func (o Options) holderGrace() time.Duration {
	if o.HolderGrace == 0 {
		return DefaultHolderGrace
	}
	return o.HolderGrace
}

// State is the final state of the cluster, dumped once the system has
// settled: every namespace's pods, PVCs, Jobs and FluentPVCBindings.
type State struct {
	Pods     []corev1.Pod
	PVCs     []corev1.PersistentVolumeClaim
	Jobs     []batchv1.Job
	Bindings []v1alpha1.FluentPVCBinding
	// At is when the dump was taken. Zero means there is no final state:
	// I3, I4, I5's check of holders left and the check for claims that
	// vanished unlogged are skipped.
	At time.Time
}

// Violation is one breach of an invariant.
type Violation struct {
	// Invariant is "I1" to "I5".
	Invariant string
	// Object names the object at fault, as "kind namespace/name (uid ...)".
	Object string
	// Detail says what happened, with timestamps and audit IDs.
	Detail string
}

// Excuse is a release of a used claim without a drain that its
// namespace's deletion, or a user's deletion of the claim, excuses.
type Excuse struct {
	// Claim names the claim, as "namespace/name (uid ...)".
	Claim string
	// Release says when and by whom the claim was let go of.
	Release string
	// NamespaceDeleted says when the deletion of the namespace was
	// requested; empty when ClaimDeleted excuses the release.
	NamespaceDeleted string
	// ClaimDeleted says when and by which user the deletion of the claim
	// was requested; empty when NamespaceDeleted excuses the release.
	ClaimDeleted string
	// Warned: a ClaimAbandoned Warning event about the claim was created.
	Warned bool
}

// Stats counts what Check saw.
type Stats struct {
	// AuditEvents is the number of events given to Check.
	AuditEvents int
	// Undecodable counts successful writes Check looks at whose object
	// did not decode (or was absent: the audit level was too low).
	Undecodable int
	// PodsCreated counts successful creates of labelled pods.
	PodsCreated int
	// UnlabelledClaimPods counts successful creates of pods without the
	// opt-in label (nor the operator's) that mount a claim.
	UnlabelledClaimPods int
	// ClaimsReferenced counts the distinct claims (PVC UIDs) they used.
	ClaimsReferenced int
	// ClaimsReserved counts the distinct PVCs some write shows reserved
	// ahead of their pods (reserved-by).
	ClaimsReserved int
	// ReservedClaimsUsed counts those that created pods used.
	ReservedClaimsUsed int
	// UnresolvedClaims counts claim references of created pods to a name
	// under which no PVC was alive when the pod was created.
	UnresolvedClaims int
	// DrainsSucceeded counts drain Jobs seen Complete.
	DrainsSucceeded int
	// ReleasesChecked counts (pod, release) pairs checked for a prior drain.
	ReleasesChecked int
	// ReleasesExcused counts the distinct releases excused by their
	// namespace's deletion.
	ReleasesExcused int
	// ReleasesExcusedByUser counts the distinct releases excused by a
	// user's deletion of the claim.
	ReleasesExcusedByUser int
	// NotReleased counts (pod, claim) pairs whose claim the log never shows
	// let go of (the final-state checks cover them).
	NotReleased int
	// AbandonWarnings counts ClaimAbandoned Warning events whose create
	// succeeded (one aimed at the terminating namespace itself is refused).
	AbandonWarnings int
	// NamespacesDeleted counts the namespaces whose deletion was requested.
	NamespacesDeleted int
}

// Report is the outcome of Check.
type Report struct {
	Violations []Violation
	Excused    []Excuse
	// FailedOpen are the claims shared with an unlabelled pod that the API
	// server admitted without the mount webhook's answer (its failure
	// policy is Ignore, docs/design.md): not I1 violations, which are a
	// webhook's wrong answers, but listed.
	FailedOpen []string
	// Refused are the audit IDs of labelled pods, created without a
	// claim, that the pod webhook denied: none should be.
	Refused []string
	Stats   Stats
	Holders HolderReport
}

// Count is the number of violations of invariant id.
func (r Report) Count(id string) int {
	n := 0
	for _, v := range r.Violations {
		if v.Invariant == id {
			n++
		}
	}
	return n
}

// OK is true when no invariant was violated.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// Check counts the violations of I1, I2 and I5 in the audit log events
// (in log order, as ReadAudit returns them) and of I3, I4 and I5 in the
// final state.
func Check(events []Event, final State, opts Options) Report {
	h := buildHistory(events, opts)
	uses := h.claimUses()
	var r Report
	shared, failedOpen := h.checkShared(uses)
	r.Violations = append(r.Violations, shared...)
	r.FailedOpen = failedOpen
	released, excused, stats := h.checkReleases(uses, final)
	r.Violations = append(r.Violations, released...)
	r.Excused = excused
	held, holders := h.checkHolders(uses, opts.holderGrace())
	r.Violations = append(r.Violations, held...)
	r.Holders = holders
	if !final.At.IsZero() {
		r.Violations = append(r.Violations, checkLeftovers(final)...)
		r.Violations = append(r.Violations, checkStuck(final, opts.stuckAfter())...)
		r.Violations = append(r.Violations, checkFinalHolders(final)...)
	}
	r.Refused = h.refused
	r.Stats = stats
	r.Stats.AuditEvents = len(events)
	r.Stats.Undecodable = h.undecodable
	for i := range h.pods {
		if h.pods[i].labelled {
			r.Stats.PodsCreated++
		}
	}
	r.Stats.AbandonWarnings = len(h.warnings)
	claims := map[types.UID]bool{}
	unlabelled := map[*podCreate]bool{}
	for _, u := range uses {
		if !u.pod.labelled {
			unlabelled[u.pod] = true
		}
		if u.claim == nil {
			r.Stats.UnresolvedClaims++
		} else {
			claims[u.claim.ref.UID] = true
		}
	}
	r.Stats.ClaimsReferenced = len(claims)
	for uid, c := range h.claims {
		if c.reserved() {
			r.Stats.ClaimsReserved++
			if claims[uid] {
				r.Stats.ReservedClaimsUsed++
			}
		}
	}
	r.Stats.UnlabelledClaimPods = len(unlabelled)
	for _, j := range h.jobs {
		if j.drain && j.hasSuccess {
			r.Stats.DrainsSucceeded++
		}
	}
	for _, chs := range h.namespaces {
		for _, ch := range chs {
			if ch.deleted {
				r.Stats.NamespacesDeleted++
				break
			}
		}
	}
	return r
}

// claimUse is one claim of a created pod.
type claimUse struct {
	pod *podCreate
	// name is the claim's name; claim its PVC when the pod was created,
	// nil when none was alive.
	name  string
	claim *claimLife
}

// claimUses are the claims of the created pods: the PVC a labelled pod's
// binding label names, and any other PVC a pod, labelled or not, mounts
// that carried the claim-role label when the pod was created. Other PVCs a
// pod mounts are the user's.
func (h *history) claimUses() []claimUse {
	var uses []claimUse
	for i := range h.pods {
		p := &h.pods[i]
		for _, name := range p.volumes {
			c := h.claimAt(p.pod.Namespace, name, p.pos)
			isClaim := p.labelled && name == p.binding
			if c != nil && !isClaim {
				st := h.stateBefore(c, p.pos)
				isClaim = st != nil && st.role != ""
			}
			if isClaim {
				uses = append(uses, claimUse{pod: p, name: name, claim: c})
			}
		}
	}
	return uses
}

// checkShared (I1): for every two consecutive creates of pods using one
// claim UID, a drain Job of that claim must have been created after the
// first pod and succeeded before the second pod was created. An
// unlabelled pod that the API server admitted without the mount webhook's
// answer (failedOpen) is no violation, only listed (failedOpen): the
// webhook's failure policy lets a pod through when no replica answers,
// and the binding controller keeps the claim's drain off while the pod
// mounts it.
func (h *history) checkShared(uses []claimUse) (out []Violation, failedOpen []string) {
	last := map[types.UID]claimUse{}
	for _, u := range h.sortedUses(uses) {
		if u.claim == nil {
			continue
		}
		uid := u.claim.ref.UID
		prev, seen := last[uid]
		if seen && !u.pod.labelled && u.pod.failedOpen != "" && h.drainBetween(uid, prev.pod.pos, u.pod.pos) == nil {
			failedOpen = append(failedOpen, fmt.Sprintf("%s: pod %s created %s, admitted while webhook %s failed open, beside pod %s",
				u.claim.ref.String(), u.pod.pod, u.pod.ev.where(), u.pod.failedOpen, prev.pod.pod))
			continue
		}
		last[uid] = u
		if !seen || h.drainBetween(uid, prev.pod.pos, u.pod.pos) != nil {
			continue
		}
		out = append(out, Violation{
			Invariant: InvariantSharedClaim,
			Object:    "persistentvolumeclaim " + u.claim.ref.String(),
			Detail: fmt.Sprintf("pod %s created %s and pod %s created %s both use the claim, "+
				"and no drain Job of it was created after the first and succeeded before the second",
				prev.pod.pod, prev.pod.ev.where(), u.pod.pod, u.pod.ev.where()),
		})
	}
	return out, failedOpen
}

// sortedUses orders uses by their pods' creates.
func (h *history) sortedUses(uses []claimUse) []claimUse {
	out := append([]claimUse(nil), uses...)
	sort.SliceStable(out, func(i, j int) bool { return h.order.before(out[i].pod.pos, out[j].pod.pos) })
	return out
}

// checkReleases (I2): every claim of a created pod must be held by the
// operator when the pod is created, and the first write after that which
// lets it go must come after a drain Job of it, created after the pod,
// succeeded; unless the claim's namespace was being deleted or a user had
// asked to delete the claim. A claim the log never shows let go of must
// still be in the final state.
func (h *history) checkReleases(uses []claimUse, final State) ([]Violation, []Excuse, Stats) {
	var (
		out     []Violation
		excused []Excuse
		stats   Stats
	)
	inFinal := map[types.UID]bool{}
	for _, pvc := range final.PVCs {
		inFinal[pvc.UID] = true
	}
	seenExcuse := map[*claimWrite]bool{}
	// excuse is true when request, the request that reason names (nil:
	// none), excuses release rel of claim c, held for binding; the first
	// time a release is excused, it records its Excuse and counts it.
	excuse := func(c *claimLife, binding string, rel *claimWrite, reason excuseReason, request *Event) bool {
		if request == nil {
			return false
		}
		if seenExcuse[rel] {
			return true
		}
		seenExcuse[rel] = true
		e := Excuse{Claim: c.ref.String(), Release: releaseKind(rel) + " " + rel.ev.where(), Warned: h.warned(c, binding)}
		switch reason {
		case byNamespaceDeletion:
			stats.ReleasesExcused++
			e.NamespaceDeleted = request.where()
		case byUserDeletion:
			stats.ReleasesExcusedByUser++
			e.ClaimDeleted = request.where()
		}
		excused = append(excused, e)
		return true
	}
	for _, u := range h.sortedUses(uses) {
		c := u.claim
		if c == nil {
			continue
		}
		object := "persistentvolumeclaim " + c.ref.String()
		st := h.stateBefore(c, u.pod.pos)
		if st == nil || !st.held {
			out = append(out, Violation{
				Invariant: InvariantUndrainedRelease, Object: object,
				Detail: fmt.Sprintf("pod %s created %s uses the claim, but the operator did not hold it then (%s)",
					u.pod.pod, u.pod.ev.where(), describeState(st)),
			})
			continue
		}
		rel := h.releaseAfter(c, u.pod.pos)
		if rel == nil {
			stats.NotReleased++
			if !final.At.IsZero() && !inFinal[c.ref.UID] {
				out = append(out, Violation{
					Invariant: InvariantUndrainedRelease, Object: object,
					Detail: fmt.Sprintf("pod %s created %s used the claim; it is not in the final state, "+
						"but no logged write let it go (last write %s)", u.pod.pod, u.pod.ev.where(), describeState(&c.writes[len(c.writes)-1])),
				})
			}
			continue
		}
		stats.ReleasesChecked++
		if excuse(c, st.binding, rel, byNamespaceDeletion, h.namespaceDeletedBefore(c.ref.Namespace, rel.pos).event()) ||
			excuse(c, st.binding, rel, byUserDeletion, h.userDeletedBefore(c, rel.pos).event()) {
			continue
		}
		if h.drainBetween(c.ref.UID, u.pod.pos, rel.pos) != nil {
			continue
		}
		out = append(out, Violation{
			Invariant: InvariantUndrainedRelease, Object: object,
			Detail: fmt.Sprintf("pod %s created %s used the claim; it was %s %s, before any drain Job of it "+
				"created after the pod had succeeded%s", u.pod.pod, u.pod.ev.where(), releaseKind(rel), rel.ev.where(), h.drainNote(c.ref.UID)),
		})
	}
	return out, excused, stats
}

// excuseReason is what excuses a release of a used claim without a drain.
type excuseReason int

const (
	// byNamespaceDeletion: the deletion of the claim's namespace was
	// requested before the release.
	byNamespaceDeletion excuseReason = iota
	// byUserDeletion: one of Options.Users requested the deletion of the
	// claim before the release.
	byUserDeletion
)

// event is the request that made namespace change ch; nil when ch is nil.
func (ch *nsChange) event() *Event {
	if ch == nil {
		return nil
	}
	return ch.ev
}

// event is the request that made claim write w; nil when w is nil.
func (w *claimWrite) event() *Event {
	if w == nil {
		return nil
	}
	return w.ev
}

// releaseKind says how a write let a claim go.
func releaseKind(w *claimWrite) string {
	switch {
	case w.gone:
		return "deleted"
	case w.role == v1alpha1.ClaimRoleWarm:
		return "returned to the pool (claim-role=warm)"
	default:
		return "released (finalizer pvc-protection removed)"
	}
}

// describeState says what a claim looked like after write w (nil: unseen).
func describeState(w *claimWrite) string {
	if w == nil {
		return "no write of it logged before"
	}
	return fmt.Sprintf("after the write %s: claim-role=%q, pvc-protection=%v, deleted=%v", w.ev.where(), w.role, w.finalizer, w.gone)
}

// drainNote lists the successful drains of claim uid for a violation's detail.
func (h *history) drainNote(uid types.UID) string {
	js := h.drains[uid]
	if len(js) == 0 {
		return " (no drain Job of it succeeded at all)"
	}
	s := " (drains that succeeded:"
	for _, j := range js {
		created := "create not logged"
		if j.hasCreate {
			created = "created " + j.createdEv.where()
		}
		s += fmt.Sprintf(" Job %s %s, Complete %s;", j.ref, created, j.succeedEv.where())
	}
	return s[:len(s)-1] + ")"
}
