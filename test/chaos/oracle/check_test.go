package oracle

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// counts is the number of violations per invariant; absent means zero.
type counts map[string]int

func (c counts) of(r Report) counts {
	got := counts{}
	for _, inv := range Invariants {
		if n := r.Count(inv.ID); n > 0 {
			got[inv.ID] = n
		}
	}
	return got
}

func equalCounts(a, b counts) bool {
	for _, inv := range Invariants {
		if a[inv.ID] != b[inv.ID] {
			return false
		}
	}
	return true
}

// TestCheckAudit covers I1 and I2: each case logs a history and tells how
// many violations of each invariant it holds.
// auditCase is an audit log, the options of the check, and the violations
// it must count.
type auditCase struct {
	name  string
	log   func(l *auditLog)
	opts  Options
	want  counts
	check func(t *testing.T, r Report)
}

// runAuditCases checks each case's log against its wanted violations.
func runAuditCases(t *testing.T, cases []auditCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newAuditLog()
			tc.log(l)
			r := Check(l.events, State{}, tc.opts)
			if got := counts(nil).of(r); !equalCounts(got, tc.want) {
				t.Errorf("violations = %v, want %v:\n%s", got, tc.want, strings.Join(r.Markdown(), "\n"))
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

func TestCheckAudit(t *testing.T) {
	cases := []auditCase{
		{
			name: "claim created at admission, drained, released and deleted",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.drainAndDelete(c, 1)
			},
			want: counts{},
			check: func(t *testing.T, r Report) {
				s := r.Stats
				if s.PodsCreated != 1 || s.ClaimsReferenced != 1 || s.DrainsSucceeded != 1 || s.ReleasesChecked != 1 || s.NotReleased != 0 {
					t.Errorf("stats = %+v", s)
				}
			},
		},
		{
			name: "a claim reserved ahead, handed to a pod, drained and deleted; another given back unused",
			log: func(l *auditLog) {
				used, unused := l.warmPVC("ns", "w1"), l.warmPVC("ns", "w2")
				l.reserve(used)
				l.reserve(unused)
				l.pod("ns", "a", "w1")
				l.recordPod(used, "a")
				l.returnWarm(unused)
				l.drainAndDelete(used, 1)
			},
			want: counts{},
			check: func(t *testing.T, r Report) {
				if s := r.Stats; s.ClaimsReserved != 2 || s.ReservedClaimsUsed != 1 {
					t.Errorf("reserved %d, used %d; want 2, 1", s.ClaimsReserved, s.ReservedClaimsUsed)
				}
			},
		},
		{
			name: "I2: a claim reserved ahead, handed to a pod, given back to the pool undrained",
			log: func(l *auditLog) {
				w := l.warmPVC("ns", "w")
				l.reserve(w)
				l.pod("ns", "a", "w")
				l.returnWarm(w)
			},
			want: counts{InvariantUndrainedRelease: 1},
		},
		{
			name: "I2: a claim reserved ahead, handed to a pod, deleted before its record, undrained",
			log: func(l *auditLog) {
				w := l.warmPVC("ns", "w")
				l.reserve(w)
				l.pod("ns", "a", "w")
				l.deletePVC(w) // no finalizer yet: gone at once
			},
			want: counts{InvariantUndrainedRelease: 1},
		},
		{
			name: "I1 ok: warm claim used by a second pod after a drain of it succeeded",
			log: func(l *auditLog) {
				w := l.warmPVC("ns", "w")
				l.checkout(w)
				l.pod("ns", "a", "w")
				l.complete(l.drainJob(w, 1))
				l.returnWarm(w)
				l.checkout(w)
				l.pod("ns", "b", "w")
				l.drainAndDelete(w, 2)
			},
			want: counts{},
		},
		{
			name: "I1 violation: warm claim used by a second pod with no drain between",
			log: func(l *auditLog) {
				w := l.warmPVC("ns", "w")
				l.checkout(w)
				l.pod("ns", "a", "w")
				l.returnWarm(w) // also I2: a's data was never drained
				l.checkout(w)
				l.pod("ns", "b", "w")
				l.drainAndDelete(w, 1)
			},
			want: counts{InvariantSharedClaim: 1, InvariantUndrainedRelease: 1},
			check: func(t *testing.T, r Report) {
				for _, v := range r.Violations {
					if v.Invariant == InvariantSharedClaim && !strings.Contains(v.Detail, "ns/a") {
						t.Errorf("I1 detail does not name the first pod: %s", v.Detail)
					}
					if v.Invariant == InvariantUndrainedRelease && !strings.Contains(v.Detail, "returned to the pool") {
						t.Errorf("I2 detail does not say how the claim was let go of: %s", v.Detail)
					}
				}
			},
		},
		{
			name: "I1 violation: a claim held by a pod handed to a second one",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.pod("ns", "b", "c")
				l.drainAndDelete(c, 1)
			},
			want: counts{InvariantSharedClaim: 1},
		},
		{
			name: "I1 violation: the drain between the pods was started before the first",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				j := l.drainJob(c, 1)
				l.pod("ns", "a", "c")
				l.complete(j)
				l.pod("ns", "b", "c")
				l.drainAndDelete(c, 2)
			},
			want: counts{InvariantSharedClaim: 1},
		},
		{
			name: "I1 ok: a failed drain between the pods is no drain, but denied and dry-run pods are no pods",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.deniedPod("ns", "b", "c")
				l.dryRunPod("ns", "b", "c")
				l.fail(l.drainJob(c, 1))
				l.drainAndDelete(c, 2)
			},
			want: counts{},
			check: func(t *testing.T, r Report) {
				if r.Stats.PodsCreated != 1 || r.Stats.DrainsSucceeded != 1 {
					t.Errorf("stats = %+v", r.Stats)
				}
			},
		},
		{
			name: "I1 ok: a new PVC under the name of a deleted one is another claim",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.drainAndDelete(c, 1)
				c2 := l.claim("ns", "c")
				l.pod("ns", "b", "c")
				l.drainAndDelete(c2, 1)
			},
			want: counts{},
			check: func(t *testing.T, r Report) {
				if r.Stats.ClaimsReferenced != 2 {
					t.Errorf("ClaimsReferenced = %d, want 2", r.Stats.ClaimsReferenced)
				}
			},
		},
		{
			name: "I1 ok: a PVC of the user's mounted by two labelled pods is no claim",
			log: func(l *auditLog) {
				l.userPVC("ns", "data")
				c1, c2 := l.claim("ns", "c1"), l.claim("ns", "c2")
				l.pod("ns", "a", "c1", "data")
				l.pod("ns", "b", "c2", "data")
				l.drainAndDelete(c1, 1)
				l.drainAndDelete(c2, 1)
			},
			want: counts{},
		},
		{
			name: "I1 violation: an unlabelled pod mounts a claim another pod uses, before a drain",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.unlabelledPod("ns", "a-debug", "c")
				l.drainAndDelete(c, 1)
			},
			want: counts{InvariantSharedClaim: 1},
			check: func(t *testing.T, r Report) {
				if r.Stats.PodsCreated != 1 || r.Stats.UnlabelledClaimPods != 1 {
					t.Errorf("stats = %+v", r.Stats)
				}
				if d := r.Violations[0].Detail; !strings.Contains(d, "ns/a-debug") {
					t.Errorf("I1 detail does not name the unlabelled pod: %s", d)
				}
			},
		},
		{
			name: "I1 excused: an unlabelled copy admitted while the mount webhook failed open is listed, not a violation",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.failedOpenPod("ns", "a-debug", "mounts.fluent-pvc-operator.tech.zozo.com", "c")
				l.drainAndDelete(c, 1)
			},
			want: counts{},
			check: func(t *testing.T, r Report) {
				if len(r.FailedOpen) != 1 || !strings.Contains(r.FailedOpen[0], "ns/a-debug") {
					t.Errorf("failed open = %v, want the copy listed", r.FailedOpen)
				}
				if md := strings.Join(r.Markdown(), "\n"); !strings.Contains(md, "failed open") {
					t.Errorf("the report does not list it:\n%s", md)
				}
			},
		},
		{
			name: "I1 violation: a copy admitted while another webhook failed open",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.failedOpenPod("ns", "a-debug", "policy.example.com", "c")
				l.drainAndDelete(c, 1)
			},
			want: counts{InvariantSharedClaim: 1},
		},
		{
			name: "I1 violation: a labelled pod sharing a claim is never excused by a webhook that failed open",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				b := labelledPod("ns", "b", "c")
				b.UID = l.uid("b")
				e := l.write("create", "", "pods", "", b)
				e.Annotations = map[string]string{failedOpenKeyPrefix + "round_0_index_1": "mounts.fluent-pvc-operator.tech.zozo.com"}
				l.drainAndDelete(c, 1)
			},
			want: counts{InvariantSharedClaim: 1},
		},
		{
			name: "I1 and I2 violations: an unlabelled pod mounts a claim while its drain runs",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				j := l.drainJob(c, 1)
				l.unlabelledPod("ns", "a-debug", "c")
				l.complete(j)
				l.release(c)
				l.deletePVC(c)
			},
			want: counts{InvariantSharedClaim: 1, InvariantUndrainedRelease: 1},
		},
		{
			name: "I1 ok: an unlabelled pod that mounts only the user's PVC, and a drain Job's pod, use no claim",
			log: func(l *auditLog) {
				l.userPVC("ns", "data")
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.unlabelledPod("ns", "b", "data")
				j := l.drainJob(c, 1)
				l.drainPod(j)
				l.complete(j)
				l.release(c)
				l.deletePVC(c)
			},
			want: counts{},
			check: func(t *testing.T, r Report) {
				if r.Stats.UnlabelledClaimPods != 0 {
					t.Errorf("stats = %+v", r.Stats)
				}
			},
		},
		{
			name: "I2 excused: a user deleted the held claim, then gave up its data",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.deletePVCAs(c, "alice")
				l.release(c)
			},
			opts: Options{Users: []string{"alice"}},
			want: counts{},
			check: func(t *testing.T, r Report) {
				if r.Stats.ReleasesExcusedByUser != 1 || r.Stats.ReleasesExcused != 0 {
					t.Errorf("stats = %+v", r.Stats)
				}
				if len(r.Excused) != 1 || !strings.Contains(r.Excused[0].ClaimDeleted, "alice") || r.Excused[0].NamespaceDeleted != "" {
					t.Errorf("excused = %+v", r.Excused)
				}
			},
		},
		{
			name: "I2 excused once: the uses of two pods end in one release, which a user's deletion excuses",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.complete(l.drainJob(c, 1))
				l.pod("ns", "b", "c")
				l.deletePVCAs(c, "alice")
				l.release(c)
			},
			opts: Options{Users: []string{"alice"}},
			want: counts{},
			check: func(t *testing.T, r Report) {
				if r.Stats.ReleasesChecked != 2 || r.Stats.ReleasesExcusedByUser != 1 || r.Stats.ReleasesExcused != 0 {
					t.Errorf("stats = %+v", r.Stats)
				}
				if len(r.Excused) != 1 || !strings.Contains(r.Excused[0].ClaimDeleted, "alice") {
					t.Errorf("excused = %+v", r.Excused)
				}
			},
		},
		{
			name: "I2 excused by its namespace's deletion, when a user deleted the claim too",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.deletePVCAs(c, "alice")
				l.deleteNamespace("ns")
				l.release(c)
			},
			opts: Options{Users: []string{"alice"}},
			want: counts{},
			check: func(t *testing.T, r Report) {
				if r.Stats.ReleasesExcused != 1 || r.Stats.ReleasesExcusedByUser != 0 {
					t.Errorf("stats = %+v", r.Stats)
				}
				if len(r.Excused) != 1 || r.Excused[0].NamespaceDeleted == "" || r.Excused[0].ClaimDeleted != "" {
					t.Errorf("excused = %+v", r.Excused)
				}
			},
		},
		{
			name: "I2 violation: a deletion by someone not among the users excuses nothing",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.deletePVC(c) // by system:test, not impersonating anyone
				l.release(c)
			},
			opts: Options{Users: []string{"alice"}},
			want: counts{InvariantUndrainedRelease: 1},
		},
		{
			name: "I2 violation: a deletion impersonating a user not among the users excuses nothing",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.deletePVCAs(c, "mallory")
				l.release(c)
			},
			opts: Options{Users: []string{"alice"}},
			want: counts{InvariantUndrainedRelease: 1},
		},
		{
			name: "I2 violation: a user's deletion after the release excuses nothing",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.release(c)
				l.deletePVCAs(c, "alice")
			},
			opts: Options{Users: []string{"alice"}},
			want: counts{InvariantUndrainedRelease: 1},
		},
		{
			name: "I2 violation: finalizer removed before the drain succeeded",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				j := l.drainJob(c, 1)
				l.release(c)
				l.complete(j)
				l.deletePVC(c)
			},
			want: counts{InvariantUndrainedRelease: 1},
		},
		{
			name: "I2 violation: deleted (last finalizer removed) with no drain",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.deletePVC(c) // marked only: still held
				l.release(c)   // the last finalizer goes: the PVC goes
			},
			want: counts{InvariantUndrainedRelease: 1},
			check: func(t *testing.T, r Report) {
				if d := r.Violations[0].Detail; !strings.Contains(d, "deleted") || !strings.Contains(d, "audit-") {
					t.Errorf("detail = %s", d)
				}
			},
		},
		{
			name: "I2 violation: turned warm, even with the finalizer kept",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				c.Labels[v1alpha1.ClaimRoleLabelKey] = v1alpha1.ClaimRoleWarm
				l.write("update", "", "persistentvolumeclaims", "", c)
				l.complete(l.drainJob(c, 1))
			},
			want: counts{InvariantUndrainedRelease: 1},
		},
		{
			name: "I2 violation: removed by a delete answered with a Status",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.deleteAnsweredByStatus(c)
				l.complete(l.drainJob(c, 1))
			},
			want: counts{InvariantUndrainedRelease: 1},
		},
		{
			name: "I2 excused: a namespace's deletecollection marks a claim, which is released later",
			log: func(l *auditLog) {
				w := l.warmPVC("ns", "w")
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.deleteNamespace("ns")
				l.deleteCollection("ns", w, c) // w goes at once, c is marked: still held
				l.release(c)
			},
			want: counts{},
			check: func(t *testing.T, r Report) {
				if r.Stats.ReleasesExcused != 1 || r.Stats.Undecodable != 0 {
					t.Errorf("stats = %+v", r.Stats)
				}
			},
		},
		{
			name: "I2 violation: a deletecollection that removes a claim outright, with no namespace deletion",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				c.Finalizers = nil // as if the finalizer had been lost unlogged
				l.deleteCollection("ns", c)
			},
			want: counts{InvariantUndrainedRelease: 1},
		},
		{
			name: "I2 violation: only a Job that is not a drain succeeded",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.complete(l.job("ns", "copy", "c", ""))
				l.release(c)
				l.deletePVC(c)
			},
			want: counts{InvariantUndrainedRelease: 1},
		},
		{
			name: "I2 violation: only a drain of another claim succeeded",
			log: func(l *auditLog) {
				c1, c2 := l.claim("ns", "c1"), l.claim("ns", "c2")
				l.pod("ns", "a", "c1")
				l.complete(l.drainJob(c2, 1))
				l.release(c1)
			},
			want: counts{InvariantUndrainedRelease: 1},
		},
		{
			name: "I2 violation: the operator did not hold the claim when the pod was created",
			log: func(l *auditLog) {
				l.warmPVC("pool", "w2")
				l.pod("pool", "a", "w2")
			},
			want: counts{InvariantUndrainedRelease: 1},
			check: func(t *testing.T, r Report) {
				if d := r.Violations[0].Detail; !strings.Contains(d, "did not hold") {
					t.Errorf("detail = %s", d)
				}
			},
		},
		{
			name: "I2 excused: released undrained after its namespace's deletion, with a Warning",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.deleteNamespace("ns")
				l.abandoned(c)
				l.release(c)
			},
			want: counts{},
			check: func(t *testing.T, r Report) {
				s := r.Stats
				if s.ReleasesExcused != 1 || s.AbandonWarnings != 1 || s.NamespacesDeleted != 1 {
					t.Errorf("stats = %+v", s)
				}
				if len(r.Excused) != 1 || !r.Excused[0].Warned {
					t.Errorf("excused = %+v", r.Excused)
				}
			},
		},
		{
			name: "I2 excused, without a Warning",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.abandoned(l.claim("ns", "other"))
				l.pod("ns", "a", "c")
				l.deleteNamespace("ns")
				l.release(c)
			},
			want: counts{},
			check: func(t *testing.T, r Report) {
				if len(r.Excused) != 1 || r.Excused[0].Warned {
					t.Errorf("excused = %+v", r.Excused)
				}
			},
		},
		{
			name: "I2 violation: a deletion of another namespace, or of this one before it was made again, excuses nothing",
			log: func(l *auditLog) {
				l.deleteNamespace("ns")
				l.createNamespace("ns")
				l.deleteNamespace("other")
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.release(c)
			},
			want: counts{InvariantUndrainedRelease: 1},
		},
		{
			name: "order: by resourceVersion a drain committed before the release is before it, whatever the timestamps",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.complete(l.drainJob(c, 1))
				l.events[len(l.events)-1].StageTimestamp = t0.Add(time.Hour) // the Complete write's audit was stamped late
				l.release(c)
			},
			want: counts{},
		},
		{
			name: "order: by time alone the same log has the release first",
			log: func(l *auditLog) {
				c := l.claim("ns", "c")
				l.pod("ns", "a", "c")
				l.complete(l.drainJob(c, 1))
				l.events[len(l.events)-1].StageTimestamp = t0.Add(time.Hour)
				l.release(c)
			},
			opts: Options{OrderByTime: true},
			want: counts{InvariantUndrainedRelease: 1},
		},
	}
	runAuditCases(t, cases)
}

// TestCheckVanishedClaim: a used claim the log never lets go of must still
// be in the final state (where I3 reports it).
func TestCheckVanishedClaim(t *testing.T) {
	l := newAuditLog()
	c := l.claim("ns", "c")
	l.pod("ns", "a", "c")
	cases := []struct {
		name  string
		final State
		want  counts
	}{
		{"no final state given", State{}, counts{}},
		{"gone from the final state", State{At: t0.Add(time.Hour)}, counts{InvariantUndrainedRelease: 1}},
		{"still in the final state", State{At: t0.Add(time.Hour), PVCs: []corev1.PersistentVolumeClaim{*c}}, counts{InvariantLeftover: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(l.events, tc.final, Options{})
			if got := counts(nil).of(r); !equalCounts(got, tc.want) {
				t.Errorf("violations = %v, want %v:\n%s", got, tc.want, strings.Join(r.Markdown(), "\n"))
			}
		})
	}
}

// TestCheckFinalState covers I3 and I4.
func TestCheckFinalState(t *testing.T) {
	at := t0.Add(time.Hour)
	meta := func(name string, labels map[string]string, finalizers ...string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Labels: labels, Finalizers: finalizers}
	}
	component := func(c string) map[string]string { return map[string]string{v1alpha1.ComponentLabelKey: c} }
	deleting := func(p corev1.Pod, ago time.Duration) corev1.Pod {
		p.DeletionTimestamp = &metav1.Time{Time: at.Add(-ago)}
		return p
	}
	plainPod := corev1.Pod{ObjectMeta: meta("web", map[string]string{"app": "web"})}
	cases := []struct {
		name  string
		final State
		opts  Options
		want  counts
	}{
		{
			name: "settled: warm PVCs, the user's PVCs, pods and Jobs",
			final: State{
				PVCs: []corev1.PersistentVolumeClaim{
					{ObjectMeta: meta("w", map[string]string{v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleWarm})},
					{ObjectMeta: meta("data", nil, "kubernetes.io/pvc-protection")},
				},
				Pods: []corev1.Pod{plainPod},
				Jobs: []batchv1.Job{{ObjectMeta: meta("backup", nil)}},
			},
			want: counts{},
		},
		{
			name: "leftovers: one violation per object",
			final: State{
				PVCs: []corev1.PersistentVolumeClaim{
					{ObjectMeta: meta("c", map[string]string{v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleClaimed}, v1alpha1.PVCProtectionFinalizer)},
					{ObjectMeta: meta("w", map[string]string{v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleWarm}, v1alpha1.PVCProtectionFinalizer)},
				},
				Bindings: []v1alpha1.FluentPVCBinding{{ObjectMeta: meta("c", nil, v1alpha1.BindingProtectionFinalizer)}},
				Jobs: []batchv1.Job{
					{ObjectMeta: meta("c-drain-1", component(v1alpha1.ComponentDrain))},
					{ObjectMeta: meta("w-bind", component(v1alpha1.ComponentBinder))},
				},
				Pods: []corev1.Pod{
					{ObjectMeta: meta("w-bind-x", component(v1alpha1.ComponentBinder))},
					{ObjectMeta: meta("c-drain-1-x", component(v1alpha1.ComponentDrain))},
					{ObjectMeta: meta("app", map[string]string{v1alpha1.FluentPVCNameLabelKey: "fpvc"}, v1alpha1.PodProtectionFinalizer)},
					{ObjectMeta: meta("unlabelled", nil, v1alpha1.PodProtectionFinalizer)},
				},
			},
			want: counts{InvariantLeftover: 9},
		},
		{
			name:  "a pod Terminating for 10 min is stuck",
			final: State{Pods: []corev1.Pod{deleting(plainPod, 10*time.Minute)}},
			want:  counts{InvariantStuckTerminating: 1},
		},
		{
			name:  "a pod Terminating for 30 s is not",
			final: State{Pods: []corev1.Pod{deleting(plainPod, 30*time.Second)}},
			want:  counts{},
		},
		{
			name:  "StuckAfter sets the limit",
			final: State{Pods: []corev1.Pod{deleting(plainPod, 30*time.Second)}},
			opts:  Options{StuckAfter: 10 * time.Second},
			want:  counts{InvariantStuckTerminating: 1},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.final.At = at
			r := Check(nil, tc.final, tc.opts)
			if got := counts(nil).of(r); !equalCounts(got, tc.want) {
				t.Errorf("violations = %v, want %v:\n%s", got, tc.want, strings.Join(r.Markdown(), "\n"))
			}
		})
	}
}

// TestCheckLeftoverReasons: an object matching several rules is one
// violation naming every reason.
func TestCheckLeftoverReasons(t *testing.T) {
	pvc := corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: "c", UID: "u1",
		Labels:     map[string]string{v1alpha1.ClaimRoleLabelKey: v1alpha1.ClaimRoleClaimed},
		Finalizers: []string{v1alpha1.PVCProtectionFinalizer},
	}}
	r := Check(nil, State{At: t0, PVCs: []corev1.PersistentVolumeClaim{pvc}}, Options{})
	if len(r.Violations) != 1 {
		t.Fatalf("violations = %+v, want one", r.Violations)
	}
	v := r.Violations[0]
	if v.Object != "persistentvolumeclaim ns/c (uid u1)" || !strings.Contains(v.Detail, "claim-role is claimed") ||
		!strings.Contains(v.Detail, "carries finalizer "+v1alpha1.PVCProtectionFinalizer) {
		t.Errorf("violation = %+v", v)
	}
}

// TestCheckHolders covers I5 from the log, and how I1 and I2 see holders:
// the operator's read-only holder of a warm claim is no user of it; a pod
// that only looks like one is.
func TestCheckHolders(t *testing.T) {
	operator := Options{Operator: operatorUser}
	cases := []auditCase{
		{
			name: "ok: the holder, made while warm, is deleted by the operator as its pod starts, within the grace",
			log: func(l *auditLog) {
				w := l.warmPVC("ns", "w")
				h := l.holder(w, operatorUser)
				l.checkout(w)
				p := l.pod("ns", "a", "w")
				l.bind(p)
				l.start(p)
				l.deletePod(h, operatorUser)
				l.drainAndDelete(w, 1)
			},
			opts: operator,
			want: counts{},
			check: func(t *testing.T, r Report) {
				h := r.Holders
				if h.Created != 1 || h.Checked != 1 || h.AfterStart != 1 || h.Grace != DefaultHolderGrace {
					t.Errorf("holders = %+v", h)
				}
				if h.BoundToDeleted.N != 1 || h.BoundToDeleted.Max != 2*time.Second || h.StartedToDeleted.Max != time.Second {
					t.Errorf("step-away = %+v, %+v; want 2s from the binding, 1s from the start", h.BoundToDeleted, h.StartedToDeleted)
				}
				if r.Stats.PodsCreated != 1 || r.Stats.ClaimsReferenced != 1 {
					t.Errorf("stats = %+v: the holder is no pod of the load", r.Stats)
				}
			},
		},
		{
			name: "ok: the holder is deleted once its pod is bound, before it starts",
			log: func(l *auditLog) {
				w := l.warmPVC("ns", "w")
				h := l.holder(w, operatorUser)
				l.checkout(w)
				p := l.pod("ns", "a", "w")
				l.bind(p)
				l.deletePod(h, operatorUser)
				l.start(p)
				l.drainAndDelete(w, 1)
			},
			opts: operator,
			want: counts{},
			check: func(t *testing.T, r Report) {
				if h := r.Holders; h.Checked != 1 || h.AfterStart != 0 || h.StartedToDeleted.Min != -time.Second {
					t.Errorf("holders = %+v", h)
				}
			},
		},
		{
			name: "ok: a killed holder is made again while the claim is warm; the killing is no step-away",
			log: func(l *auditLog) {
				w := l.warmPVC("ns", "w")
				h1 := l.holder(w, operatorUser)
				l.deletePod(h1, "chaos")
				h2 := l.holder(w, operatorUser)
				l.checkout(w)
				p := l.pod("ns", "a", "w")
				l.bind(p)
				l.start(p)
				l.deletePod(h2, operatorUser)
				l.drainAndDelete(w, 1)
			},
			opts: operator,
			want: counts{},
			check: func(t *testing.T, r Report) {
				if h := r.Holders; h.Created != 2 || h.Checked != 2 || h.BoundToDeleted.N != 1 {
					t.Errorf("holders = %+v", h)
				}
			},
		},
		{
			name: "ok: the claim returns warm and gets a holder again",
			log: func(l *auditLog) {
				w := l.warmPVC("ns", "w")
				h := l.holder(w, operatorUser)
				l.checkout(w)
				p := l.pod("ns", "a", "w")
				l.start(p)
				l.deletePod(h, operatorUser)
				l.complete(l.drainJob(w, 1))
				l.returnWarm(w)
				l.holder(w, operatorUser)
			},
			opts: operator,
			want: counts{},
		},
		{
			name: "violation: the holder is deleted later than the grace after its pod started",
			log: func(l *auditLog) {
				w := l.warmPVC("ns", "w")
				h := l.holder(w, operatorUser)
				l.checkout(w)
				p := l.pod("ns", "a", "w")
				l.start(p)
				l.deletePod(h, operatorUser) // 1 s after the start
				l.drainAndDelete(w, 1)
			},
			opts: Options{Operator: operatorUser, HolderGrace: 500 * time.Millisecond},
			want: counts{InvariantHolder: 1},
			check: func(t *testing.T, r Report) {
				if d := r.Violations[0].Detail; !strings.Contains(d, "ns/a") || !strings.Contains(d, "1s after the start") {
					t.Errorf("detail = %s", d)
				}
			},
		},
		{
			name: "ok: the leader dies; the new leader deletes the holder within the grace of the time a replica led",
			log: func(l *auditLog) {
				w := l.warmPVC("ns", "w")
				h := l.holder(w, operatorUser)
				l.checkout(w)
				p := l.pod("ns", "a", "w")
				l.lease("replica-0") // its last renewal
				l.start(p)
				l.write("update", "", "persistentvolumeclaims", "", w) // time passes
				l.lease("replica-1")                                   // takes the Lease 2 s after the start
				l.deletePod(h, operatorUser)                           // 1 s later
				l.drainAndDelete(w, 1)
			},
			opts: Options{Operator: operatorUser, Lease: leaseName, HolderGrace: 1500 * time.Millisecond},
			want: counts{},
			check: func(t *testing.T, r Report) {
				h := r.Holders
				if h.Failovers != 1 || h.LeaderChanges != 1 || h.AfterStart != 1 || h.StartedToDeleted.Max != 3*time.Second || h.LedToDeleted.Max != time.Second {
					t.Errorf("holders = %+v", h)
				}
			},
		},
		{
			name: "violation: a leader that goes on renewing the Lease excuses nothing",
			log: func(l *auditLog) {
				w := l.warmPVC("ns", "w")
				h := l.holder(w, operatorUser)
				l.checkout(w)
				p := l.pod("ns", "a", "w")
				l.lease("replica-0")
				l.start(p)
				l.lease("replica-0")
				l.deletePod(h, operatorUser)
				l.drainAndDelete(w, 1)
			},
			opts: Options{Operator: operatorUser, Lease: leaseName, HolderGrace: 1500 * time.Millisecond},
			want: counts{InvariantHolder: 1},
			check: func(t *testing.T, r Report) {
				if d := r.Violations[0].Detail; !strings.Contains(d, "a replica of the operator led 2s") {
					t.Errorf("detail = %s", d)
				}
			},
		},
		{
			name: "violation: the Lease of another name excuses nothing",
			log: func(l *auditLog) {
				w := l.warmPVC("ns", "w")
				h := l.holder(w, operatorUser)
				l.checkout(w)
				p := l.pod("ns", "a", "w")
				l.lease("replica-0")
				l.start(p)
				l.lease("replica-1")
				l.deletePod(h, operatorUser)
				l.drainAndDelete(w, 1)
			},
			opts: Options{Operator: operatorUser, Lease: "default/another", HolderGrace: 1500 * time.Millisecond},
			want: counts{InvariantHolder: 1},
		},
		{
			name: "violation: the holder is never deleted though its pod started",
			log: func(l *auditLog) {
				w := l.warmPVC("ns", "w")
				l.holder(w, operatorUser)
				l.checkout(w)
				l.start(l.pod("ns", "a", "w"))
			},
			opts: operator,
			want: counts{InvariantHolder: 1},
			check: func(t *testing.T, r Report) {
				if d := r.Violations[0].Detail; !strings.Contains(d, "never requested") {
					t.Errorf("detail = %s", d)
				}
			},
		},
		{
			name: "violation: a holder created after the claim's checkout",
			log: func(l *auditLog) {
				w := l.warmPVC("ns", "w")
				l.checkout(w)
				h := l.holder(w, operatorUser)
				p := l.pod("ns", "a", "w")
				l.bind(p)
				l.deletePod(h, operatorUser)
				l.start(p)
				l.drainAndDelete(w, 1)
			},
			opts: operator,
			want: counts{InvariantHolder: 1},
			check: func(t *testing.T, r Report) {
				if d := r.Violations[0].Detail; !strings.Contains(d, "not warm") || !strings.Contains(d, `claim-role="claimed"`) {
					t.Errorf("detail = %s", d)
				}
			},
		},
		{
			name: "violation: the holder is still there when a drain Job of its claim is created",
			log: func(l *auditLog) {
				w := l.warmPVC("ns", "w")
				h := l.holder(w, operatorUser)
				l.checkout(w)
				l.pod("ns", "a", "w") // deleted before it started
				j := l.drainJob(w, 1)
				l.deletePod(h, operatorUser)
				l.complete(j)
				l.release(w)
				l.deletePVC(w)
			},
			opts: operator,
			want: counts{InvariantHolder: 1},
			check: func(t *testing.T, r Report) {
				if d := r.Violations[0].Detail; !strings.Contains(d, "drain Job ns/w-drain-1") {
					t.Errorf("detail = %s", d)
				}
			},
		},
		{
			name: "I1 and I2 violations: a holder look-alike made by another user is a user of the claim",
			log: func(l *auditLog) {
				w := l.warmPVC("ns", "w")
				l.holder(w, "mallory")
				l.checkout(w)
				l.start(l.pod("ns", "a", "w"))
				l.drainAndDelete(w, 1)
			},
			opts: operator,
			want: counts{InvariantSharedClaim: 1, InvariantUndrainedRelease: 1},
			check: func(t *testing.T, r Report) {
				if r.Holders.Created != 0 || r.Stats.PodsCreated != 2 {
					t.Errorf("holders = %+v, stats = %+v", r.Holders, r.Stats)
				}
			},
		},
		{
			name: "I1 and I2 violations: the operator's holder that mounts the claim writable is a user of it",
			log: func(l *auditLog) {
				w := l.warmPVC("ns", "w")
				pod := holderPod(w)
				pod.Spec.Containers[0].VolumeMounts[0].ReadOnly = false
				l.createPodAs(pod, operatorUser)
				l.checkout(w)
				l.start(l.pod("ns", "a", "w"))
				l.drainAndDelete(w, 1)
			},
			opts: operator,
			want: counts{InvariantSharedClaim: 1, InvariantUndrainedRelease: 1},
		},
		{
			name: "I1 and I2 violations: without Options.Operator no pod is a holder",
			log: func(l *auditLog) {
				w := l.warmPVC("ns", "w")
				h := l.holder(w, operatorUser)
				l.checkout(w)
				p := l.pod("ns", "a", "w")
				l.start(p)
				l.deletePod(h, operatorUser)
				l.drainAndDelete(w, 1)
			},
			want: counts{InvariantSharedClaim: 1, InvariantUndrainedRelease: 1},
		},
	}
	runAuditCases(t, cases)
}

// TestCheckFinalHolders covers I5 in the final state: a holder is left
// only for a warm claim.
func TestCheckFinalHolders(t *testing.T) {
	at := t0.Add(time.Hour)
	pvc := func(name, role string) corev1.PersistentVolumeClaim {
		return corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
			Labels: map[string]string{v1alpha1.FluentPVCNameLabelKey: "fpvc", v1alpha1.ClaimRoleLabelKey: role},
		}}
	}
	warm, claimed := pvc("w", v1alpha1.ClaimRoleWarm), pvc("c", v1alpha1.ClaimRoleClaimed)
	deleting := pvc("d", v1alpha1.ClaimRoleWarm)
	deleting.DeletionTimestamp = &metav1.Time{Time: at}
	stale := pvc("w", v1alpha1.ClaimRoleWarm)
	stale.UID = "uid-w-before"
	cases := []struct {
		name  string
		final State
		want  counts
	}{
		{"a holder of a warm claim stays", State{PVCs: []corev1.PersistentVolumeClaim{warm}, Pods: []corev1.Pod{*holderPod(&warm)}}, counts{}},
		{"a holder of a claim handed out (itself an I3 leftover)", State{PVCs: []corev1.PersistentVolumeClaim{claimed}, Pods: []corev1.Pod{*holderPod(&claimed)}},
			counts{InvariantLeftover: 1, InvariantHolder: 1}},
		{"a holder of a claim being deleted", State{PVCs: []corev1.PersistentVolumeClaim{deleting}, Pods: []corev1.Pod{*holderPod(&deleting)}}, counts{InvariantHolder: 1}},
		{"a holder of a claim gone", State{Pods: []corev1.Pod{*holderPod(&warm)}}, counts{InvariantHolder: 1}},
		{"a holder of an earlier claim of the same name", State{PVCs: []corev1.PersistentVolumeClaim{warm}, Pods: []corev1.Pod{*holderPod(&stale)}}, counts{InvariantHolder: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.final.At = at
			r := Check(nil, tc.final, Options{Operator: operatorUser})
			if got := counts(nil).of(r); !equalCounts(got, tc.want) {
				t.Errorf("violations = %v, want %v:\n%s", got, tc.want, strings.Join(r.Markdown(), "\n"))
			}
		})
	}
}
