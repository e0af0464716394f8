package pool

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

func TestBinderJobSpread(t *testing.T) {
	spread := func(fpvc string) []corev1.TopologySpreadConstraint {
		return []corev1.TopologySpreadConstraint{{
			MaxSkew:     1,
			TopologyKey: ZoneLabelKey,
			// Only a preference: a required spread (DoNotSchedule) filters
			// out every node without a zone label, so on a cluster without
			// zone labels no binder would ever schedule.
			WhenUnsatisfiable: corev1.ScheduleAnyway,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
				v1alpha1.ComponentLabelKey: v1alpha1.ComponentBinder,
				v1alpha1.BinderOfLabelKey:  fpvc,
			}},
		}}
	}
	cases := map[string]struct {
		fpvc, namespace, claim string
		want                   []corev1.TopologySpreadConstraint
	}{
		"spreads over zones by preference, among the binders of its FluentPVC": {
			fpvc: "f", namespace: "ns", claim: "f-warm", want: spread("f"),
		},
		"another FluentPVC's binders spread among themselves": {
			fpvc: "g", namespace: "other", claim: "g-warm", want: spread("g"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: tc.claim, Namespace: tc.namespace}}
			job := BinderJob(fixtures.MakeFluentPVC(tc.fpvc).Obj(), claim, "pause")
			got := job.Spec.Template.Spec.TopologySpreadConstraints
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("spread constraints (-want +got):\n%s", diff)
			}
			// The selector must match the binder's own pod, or the spread
			// counts nothing.
			sel, err := metav1.LabelSelectorAsSelector(got[0].LabelSelector)
			if err != nil {
				t.Fatal(err)
			}
			if !sel.Matches(labels.Set(job.Spec.Template.Labels)) {
				t.Errorf("the spread's selector %v does not match the binder pod's labels %v", sel, job.Spec.Template.Labels)
			}
		})
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
