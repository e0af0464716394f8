package controllers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

func TestConstructFluentPVCStatus(t *testing.T) {
	now := fixtures.Epoch
	binding := func(phase v1alpha1.FluentPVCBindingPhase) v1alpha1.FluentPVCBinding {
		return v1alpha1.FluentPVCBinding{Status: v1alpha1.FluentPVCBindingStatus{Phase: phase}}
	}
	rows := func(warm ...int32) []v1alpha1.PoolNamespaceStatus {
		var out []v1alpha1.PoolNamespaceStatus
		for i, w := range warm {
			out = append(out, v1alpha1.PoolNamespaceStatus{Namespace: string(rune('a' + i)), Warm: w})
		}
		return out
	}
	deleting := fixtures.MakeFluentPVC("f").PoolSize(2).Obj()
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	type want struct {
		warm, active     int32
		counts           v1alpha1.BindingCounts
		poolReady        string
		ready            string
		namespaceLimit   string // reason; "" for no condition
		namespaceLimitOn bool
	}
	cases := map[string]struct {
		f        *v1alpha1.FluentPVC
		bindings []v1alpha1.FluentPVCBinding
		pr       poolResult
		want     want
	}{
		"no pool": {
			f:    fixtures.MakeFluentPVC("f").Obj(),
			want: want{poolReady: v1alpha1.PoolReadyReasonDisabled, ready: v1alpha1.FluentPVCReadyReasonAdmitting},
		},
		"a pool with no namespace yet": {
			f:    fixtures.MakeFluentPVC("f").PoolSize(2).Obj(),
			want: want{poolReady: v1alpha1.PoolReadyReasonNoNamespaces, ready: v1alpha1.FluentPVCReadyReasonAdmitting},
		},
		"filling": {
			f:    fixtures.MakeFluentPVC("f").PoolSize(2).Obj(),
			pr:   poolResult{namespaces: rows(2, 1)},
			want: want{warm: 3, poolReady: v1alpha1.PoolReadyReasonFilling, ready: v1alpha1.FluentPVCReadyReasonAdmitting},
		},
		"full": {
			f:    fixtures.MakeFluentPVC("f").PoolSize(2).Obj(),
			pr:   poolResult{namespaces: rows(2, 2)},
			want: want{warm: 4, poolReady: v1alpha1.PoolReadyReasonFull, ready: v1alpha1.FluentPVCReadyReasonAdmitting},
		},
		"a listed namespace missing comes first": {
			f:    fixtures.MakeFluentPVC("f").PoolSize(2).Obj(),
			pr:   poolResult{namespaces: rows(2), missing: []string{"gone"}},
			want: want{warm: 2, poolReady: v1alpha1.PoolReadyReasonNamespaceNotFound, ready: v1alpha1.FluentPVCReadyReasonAdmitting},
		},
		"bindings counted by phase": {
			f: fixtures.MakeFluentPVC("f").Obj(),
			bindings: []v1alpha1.FluentPVCBinding{
				binding(""), binding(v1alpha1.BindingPhasePending), binding(v1alpha1.BindingPhaseInUse),
				binding(v1alpha1.BindingPhaseDraining), binding(v1alpha1.BindingPhaseDrained),
				binding(v1alpha1.BindingPhaseOrphaned), binding(v1alpha1.BindingPhaseAbandoned),
				// A binding made for a pod it saw writes no status while the pod runs.
				func() v1alpha1.FluentPVCBinding {
					b := binding("")
					b.Spec.Pod = v1alpha1.ObjectIdentity{Name: "p", UID: "pod-uid"}
					return b
				}(),
			},
			want: want{active: 4, counts: v1alpha1.BindingCounts{Pending: 2, InUse: 2, Draining: 2, Orphaned: 2},
				poolReady: v1alpha1.PoolReadyReasonDisabled, ready: v1alpha1.FluentPVCReadyReasonAdmitting},
		},
		"being deleted": {
			f:        deleting,
			bindings: []v1alpha1.FluentPVCBinding{binding(v1alpha1.BindingPhaseDraining)},
			pr:       poolResult{namespaces: rows(0)},
			want: want{active: 1, counts: v1alpha1.BindingCounts{Draining: 1},
				poolReady: v1alpha1.PoolReadyReasonFilling, ready: v1alpha1.FluentPVCReadyReasonDeleting},
		},
		"namespace cap not reached": {
			f:    fixtures.MakeFluentPVC("f").PoolSize(1).Mutate(func(f *v1alpha1.FluentPVC) { f.Spec.Pool.MaxNamespaces = 2 }).Obj(),
			pr:   poolResult{namespaces: rows(1)},
			want: want{warm: 1, poolReady: v1alpha1.PoolReadyReasonFull, ready: v1alpha1.FluentPVCReadyReasonAdmitting, namespaceLimit: v1alpha1.NamespaceLimitReasonBelow},
		},
		"namespace cap reached": {
			f:  fixtures.MakeFluentPVC("f").PoolSize(1).Mutate(func(f *v1alpha1.FluentPVC) { f.Spec.Pool.MaxNamespaces = 2 }).Obj(),
			pr: poolResult{namespaces: rows(1, 1), capped: []string{"c"}},
			want: want{warm: 2, poolReady: v1alpha1.PoolReadyReasonFull, ready: v1alpha1.FluentPVCReadyReasonAdmitting,
				namespaceLimit: v1alpha1.NamespaceLimitReasonReached, namespaceLimitOn: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := constructFluentPVCStatus(tc.f, tc.bindings, tc.pr, now)
			got := want{warm: s.Warm, active: s.Active, counts: s.Bindings}
			if c := meta.FindStatusCondition(s.Conditions, v1alpha1.FluentPVCConditionPoolReady); c != nil {
				got.poolReady = c.Reason
			}
			if c := meta.FindStatusCondition(s.Conditions, v1alpha1.FluentPVCConditionReady); c != nil {
				got.ready = c.Reason
			}
			if c := meta.FindStatusCondition(s.Conditions, v1alpha1.FluentPVCConditionNamespaceLimitReached); c != nil {
				got.namespaceLimit, got.namespaceLimitOn = c.Reason, c.Status == metav1.ConditionTrue
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.pr.namespaces, s.Pool); diff != "" {
				t.Errorf("pool rows (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWithoutCounts: two statuses that differ only in counts (and the
// messages that carry them) compare equal, so that their write can wait;
// any other change does not.
func TestWithoutCounts(t *testing.T) {
	f := fixtures.MakeFluentPVC("f").PoolSize(2).Obj()
	base := constructFluentPVCStatus(f, nil, poolResult{namespaces: []v1alpha1.PoolNamespaceStatus{{Namespace: "a", Warm: 1}}}, fixtures.Epoch)
	cases := map[string]struct {
		other     v1alpha1.FluentPVCStatus
		wantEqual bool
	}{
		"more warm PVCs": {
			// The pool became full, and is one short again at each
			// checkout until the refill is Bound: PoolReady's Full and
			// Filling are counts too (a write per pod otherwise).
			other:     constructFluentPVCStatus(f, nil, poolResult{namespaces: []v1alpha1.PoolNamespaceStatus{{Namespace: "a", Warm: 2, Provisioning: 1}}}, fixtures.Epoch),
			wantEqual: true,
		},
		"a pool namespace missing": {
			other: constructFluentPVCStatus(f, nil, poolResult{namespaces: []v1alpha1.PoolNamespaceStatus{{Namespace: "a", Warm: 1}}, missing: []string{"b"}}, fixtures.Epoch),
		},
		"one more binding": {
			other:     constructFluentPVCStatus(f, []v1alpha1.FluentPVCBinding{{}}, poolResult{namespaces: []v1alpha1.PoolNamespaceStatus{{Namespace: "a", Warm: 1, Provisioning: 1}}}, fixtures.Epoch),
			wantEqual: true,
		},
		"a later admission and one more staged PVC": {
			other:     constructFluentPVCStatus(f, nil, poolResult{namespaces: []v1alpha1.PoolNamespaceStatus{{Namespace: "a", Warm: 1, Staged: 1, LastAdmissionTime: &metav1.Time{Time: fixtures.Epoch}}}}, fixtures.Epoch),
			wantEqual: true,
		},
		"another pool namespace": {
			other: constructFluentPVCStatus(f, nil, poolResult{namespaces: []v1alpha1.PoolNamespaceStatus{{Namespace: "a", Warm: 1}, {Namespace: "b"}}}, fixtures.Epoch),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := cmp.Equal(withoutCounts(base), withoutCounts(tc.other)); got != tc.wantEqual {
				t.Errorf("equal without counts = %v, want %v:\n%s", got, tc.wantEqual, cmp.Diff(withoutCounts(base), withoutCounts(tc.other)))
			}
		})
	}
}

func TestOldestUndrained(t *testing.T) {
	t0 := fixtures.Epoch
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: t0.Add(d)} }
	binding := func(phase v1alpha1.FluentPVCBindingPhase, created time.Duration, podGone, drainStart *metav1.Time) v1alpha1.FluentPVCBinding {
		b := v1alpha1.FluentPVCBinding{}
		b.CreationTimestamp = *at(created)
		b.Status.Phase = phase
		b.Status.DrainStartTime = drainStart
		if podGone != nil {
			b.Status.Conditions = []metav1.Condition{{Type: v1alpha1.BindingConditionPodReady, Status: metav1.ConditionFalse, LastTransitionTime: *podGone}}
		}
		return b
	}
	cases := map[string]struct {
		bindings []v1alpha1.FluentPVCBinding
		want     *metav1.Time // nil: none waits
	}{
		"none": {},
		"in use and drained ones wait for nothing":   {bindings: []v1alpha1.FluentPVCBinding{binding(v1alpha1.BindingPhaseInUse, 0, nil, nil), binding(v1alpha1.BindingPhaseDrained, 0, at(time.Minute), at(time.Minute))}},
		"since its pod was seen gone":                {bindings: []v1alpha1.FluentPVCBinding{binding(v1alpha1.BindingPhaseDraining, 0, at(time.Minute), at(2*time.Minute))}, want: at(time.Minute)},
		"a drain started before (a restored status)": {bindings: []v1alpha1.FluentPVCBinding{binding(v1alpha1.BindingPhaseDraining, 0, at(3*time.Minute), at(2*time.Minute))}, want: at(2 * time.Minute)},
		"no condition: since its creation":           {bindings: []v1alpha1.FluentPVCBinding{binding(v1alpha1.BindingPhaseDraining, 5*time.Second, nil, nil)}, want: at(5 * time.Second)},
		"the oldest of several": {bindings: []v1alpha1.FluentPVCBinding{
			binding(v1alpha1.BindingPhaseDraining, 0, at(time.Hour), nil), binding(v1alpha1.BindingPhaseDraining, 0, at(time.Minute), nil),
		}, want: at(time.Minute)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := oldestUndrained(tc.bindings)
			if ok != (tc.want != nil) || (ok && !got.Equal(tc.want.Time)) {
				t.Errorf("oldestUndrained = %v, %v; want %v", got, ok, tc.want)
			}
		})
	}
}
