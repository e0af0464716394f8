package pool

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

func TestBinderJobSpreadIsAPreference(t *testing.T) {
	fpvc := fixtures.MakeFluentPVC("f").Obj()
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "f-warm", Namespace: "ns"}}
	spec := BinderJob(fpvc, claim, "pause").Spec.Template.Spec
	cases := map[string]struct {
		check func(corev1.TopologySpreadConstraint) bool
	}{
		// A required spread keeps every binder Pending on a cluster whose
		// nodes carry no zone label.
		"never required": {check: func(c corev1.TopologySpreadConstraint) bool { return c.WhenUnsatisfiable == corev1.ScheduleAnyway }},
		"over zones":     {check: func(c corev1.TopologySpreadConstraint) bool { return c.TopologyKey == ZoneLabelKey && c.MaxSkew == 1 }},
		"among this pool's": {check: func(c corev1.TopologySpreadConstraint) bool {
			return c.LabelSelector != nil && c.LabelSelector.MatchLabels[v1alpha1.ComponentLabelKey] == v1alpha1.ComponentBinder &&
				c.LabelSelector.MatchLabels[binderPoolLabelKey] == fpvc.Name
		}},
	}
	if len(spec.TopologySpreadConstraints) != 1 {
		t.Fatalf("binder has %d spread constraints, want 1", len(spec.TopologySpreadConstraints))
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if c := spec.TopologySpreadConstraints[0]; !tc.check(c) {
				t.Errorf("spread constraint %+v", c)
			}
		})
	}
	for _, c := range spec.TopologySpreadConstraints {
		if c.WhenUnsatisfiable == corev1.DoNotSchedule {
			t.Errorf("a required spread: %+v", c)
		}
	}
}

func TestBinderUnschedulable(t *testing.T) {
	binder := func(claim string, mutate func(*corev1.Pod)) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: claim + "-bind-x", Labels: map[string]string{v1alpha1.WarmClaimLabelKey: claim}}}
		mutate(&p)
		return p
	}
	unschedulable := func(msg string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg}}
		}
	}
	cases := map[string]struct {
		pods []corev1.Pod
		want []string
	}{
		"no binder":                          {},
		"scheduled":                          {pods: []corev1.Pod{binder("w1", func(p *corev1.Pod) { p.Spec.NodeName = "n1" })}},
		"not looked at by the scheduler yet": {pods: []corev1.Pod{binder("w1", func(*corev1.Pod) {})}},
		"unschedulable, with the scheduler's reason": {
			pods: []corev1.Pod{
				binder("w2", unschedulable("0/6 nodes are available: 6 node(s) had untolerated taint {dedicated: gpu}.")),
				binder("w1", unschedulable("0/6 nodes are available: 6 node(s) didn't match pod topology spread constraints.")),
			},
			want: []string{
				"the binder of warm PVC ns/w1 cannot be scheduled: 0/6 nodes are available: 6 node(s) didn't match pod topology spread constraints.",
				"the binder of warm PVC ns/w2 cannot be scheduled: 0/6 nodes are available: 6 node(s) had untolerated taint {dedicated: gpu}.",
			},
		},
		"being deleted": {pods: []corev1.Pod{binder("w1", func(p *corev1.Pod) {
			unschedulable("x")(p)
			p.DeletionTimestamp = &metav1.Time{Time: fixtures.Epoch}
		})}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, BinderUnschedulable(tc.pods), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("BinderUnschedulable (-want +got):\n%s", diff)
			}
		})
	}
}
