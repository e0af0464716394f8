package oracle

import (
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// leftoverRule is one reason for which an object of the settled final
// state is a leftover (I3).
type leftoverRule[T any] struct {
	reason string
	match  func(*T) bool
}

// The leftover rules, per kind. Warm PVCs and FluentPVCs are expected to
// stay and match none. The harness removes all load (and its pods) before
// the dump, so a labelled pod still there is a leftover too, but a holder
// (whose FluentPVC label puts it in the operator's cache): I5 judges those.
var (
	pvcLeftovers = []leftoverRule[corev1.PersistentVolumeClaim]{
		{"claim-role is " + v1alpha1.ClaimRoleClaimed, func(p *corev1.PersistentVolumeClaim) bool {
			return p.Labels[v1alpha1.ClaimRoleLabelKey] == v1alpha1.ClaimRoleClaimed
		}},
		{"carries finalizer " + v1alpha1.PVCProtectionFinalizer, func(p *corev1.PersistentVolumeClaim) bool {
			return slices.Contains(p.Finalizers, v1alpha1.PVCProtectionFinalizer)
		}},
	}
	bindingLeftovers = []leftoverRule[v1alpha1.FluentPVCBinding]{
		{"a FluentPVCBinding remains", func(*v1alpha1.FluentPVCBinding) bool { return true }},
		{"it has finalizers", func(b *v1alpha1.FluentPVCBinding) bool { return len(b.Finalizers) > 0 }},
	}
	jobLeftovers = []leftoverRule[batchv1.Job]{
		{"drain Job (component=drain)", func(j *batchv1.Job) bool { return component(j.Labels) == v1alpha1.ComponentDrain }},
		{"binder Job (component=binder)", func(j *batchv1.Job) bool { return component(j.Labels) == v1alpha1.ComponentBinder }},
	}
	podLeftovers = []leftoverRule[corev1.Pod]{
		{"binder pod (component=binder)", func(p *corev1.Pod) bool { return component(p.Labels) == v1alpha1.ComponentBinder }},
		{"drain pod (component=drain)", func(p *corev1.Pod) bool { return component(p.Labels) == v1alpha1.ComponentDrain }},
		{"carries finalizer " + v1alpha1.PodProtectionFinalizer, func(p *corev1.Pod) bool {
			return slices.Contains(p.Finalizers, v1alpha1.PodProtectionFinalizer)
		}},
		{"labelled pod (" + v1alpha1.FluentPVCNameLabelKey + ") after the load was removed", func(p *corev1.Pod) bool {
			return p.Labels[v1alpha1.FluentPVCNameLabelKey] != "" && component(p.Labels) != v1alpha1.ComponentHolder
		}},
	}
)

func component(labels map[string]string) string { return labels[v1alpha1.ComponentLabelKey] }

// checkLeftovers (I3) reports each object of the final state that matches
// a leftover rule, once, with every reason it matches.
func checkLeftovers(final State) []Violation {
	var out []Violation
	out = append(out, leftovers("persistentvolumeclaim", final.PVCs, pvcLeftovers)...)
	out = append(out, leftovers("fluentpvcbinding", final.Bindings, bindingLeftovers)...)
	out = append(out, leftovers("job", final.Jobs, jobLeftovers)...)
	out = append(out, leftovers("pod", final.Pods, podLeftovers)...)
	return out
}

// leftovers applies rules to objs of kind.
func leftovers[T any, P interface {
	*T
	metav1.Object
}](kind string, objs []T, rules []leftoverRule[T]) []Violation {
	var out []Violation
	for i := range objs {
		var reasons []string
		for _, r := range rules {
			if r.match(&objs[i]) {
				reasons = append(reasons, r.reason)
			}
		}
		if len(reasons) == 0 {
			continue
		}
		m := P(&objs[i])
		out = append(out, Violation{
			Invariant: InvariantLeftover,
			Object:    kind + " " + objRef{Namespace: m.GetNamespace(), Name: m.GetName(), UID: m.GetUID()}.String(),
			Detail:    strings.Join(reasons, "; ") + metaNote(m),
		})
	}
	return out
}

// metaNote says whether an object is being deleted and what holds it.
func metaNote(m metav1.Object) string {
	s := ""
	if ts := m.GetDeletionTimestamp(); ts != nil {
		s += "; deletionTimestamp " + ts.UTC().Format(time.RFC3339)
	}
	return s + finalizersNote(m)
}

// finalizersNote lists an object's finalizers, if any.
func finalizersNote(m metav1.Object) string {
	if f := m.GetFinalizers(); len(f) > 0 {
		return "; finalizers " + strings.Join(f, ", ")
	}
	return ""
}

// checkStuck (I4) reports each pod of the final state whose
// deletionTimestamp is more than after before the dump.
func checkStuck(final State, after time.Duration) []Violation {
	var out []Violation
	for i := range final.Pods {
		p := &final.Pods[i]
		if p.DeletionTimestamp == nil {
			continue
		}
		late := final.At.Sub(p.DeletionTimestamp.Time)
		if late <= after {
			continue
		}
		out = append(out, Violation{
			Invariant: InvariantStuckTerminating,
			Object:    "pod " + objRef{Namespace: p.Namespace, Name: p.Name, UID: p.UID}.String(),
			Detail: fmt.Sprintf("Terminating: deletionTimestamp %s is %s before the dump at %s (limit %s); node %q, phase %q%s",
				p.DeletionTimestamp.UTC().Format(time.RFC3339), late.Round(time.Second), final.At.UTC().Format(time.RFC3339),
				after, p.Spec.NodeName, p.Status.Phase, finalizersNote(p)),
		})
	}
	return out
}
