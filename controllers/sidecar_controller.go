package controllers

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete

// SidecarReconciler deletes a pod whose injected sidecar terminated with a
// non-zero exit code, when its FluentPVC asks for it, so that the pod's
// owner replaces it and the claim is drained.
type SidecarReconciler struct {
	client.Client
	recorder events.EventRecorder
}

// NewSidecarReconciler returns a SidecarReconciler that reads and deletes
// pods through c and sends events through recorder.
func NewSidecarReconciler(c client.Client, recorder events.EventRecorder) *SidecarReconciler {
	return &SidecarReconciler{Client: c, recorder: recorder}
}

// Reconcile implements reconcile.Reconciler.
func (r *SidecarReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pod := &corev1.Pod{}
	if err := r.Get(ctx, req.NamespacedName, pod); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pod.Labels[v1alpha1.BindingNameLabelKey] == "" {
		return ctrl.Result{}, nil
	}
	fpvc := &v1alpha1.FluentPVC{}
	if err := r.Get(ctx, client.ObjectKey{Name: pod.Labels[v1alpha1.FluentPVCNameLabelKey]}, fpvc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !fpvc.Spec.DeletePodOnSidecarFailure() {
		return ctrl.Result{}, nil
	}
	sidecar := objects.PodSidecar(pod, fpvc.Spec.SidecarContainerTemplate.Name)
	code, failed := sidecarFailure(pod, sidecar)
	if !failed {
		return ctrl.Result{}, nil
	}
	if err := r.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return ctrl.Result{}, nil // gone, or another pod of that name
		}
		return ctrl.Result{}, fmt.Errorf("deleting pod %s after its sidecar failed: %w", pod.Name, err)
	}
	podsDeletedForSidecar.WithLabelValues(fpvc.Name).Inc()
	ctrl.LoggerFrom(ctx).Info("sidecar failed: pod deleted", "pod", klog.KObj(pod), "sidecar", sidecar, "exitCode", code)
	msg := fmt.Sprintf("sidecar %s of pod %s terminated with exit code %d: the pod was deleted", sidecar, pod.Name, code)
	r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, v1alpha1.EventReasonSidecarFailed, "DeletePod", "%s", msg)
	b := &v1alpha1.FluentPVCBinding{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: pod.Labels[v1alpha1.BindingNameLabelKey]}, b); err == nil {
		r.recorder.Eventf(b, pod, corev1.EventTypeWarning, v1alpha1.EventReasonSidecarFailed, "DeletePod", "%s", msg)
	}
	return ctrl.Result{}, nil
}

// sidecarFailure reports the non-zero exit code of the sidecar named name
// (a native sidecar in initContainerStatuses, or a container), as it is
// now or as it was before its last restart. A pod that is being deleted or
// has finished (evicted, or its containers all stopped) is left alone: its
// sidecar's exit is the pod's end, not a failure. So is a native sidecar
// once every app container has stopped: the kubelet then stops it, and
// many programs exit 143 on that SIGTERM.
func sidecarFailure(pod *corev1.Pod, name string) (int32, bool) {
	if !pod.DeletionTimestamp.IsZero() || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return 0, false
	}
	native := slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool {
		return c.Name == name && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
	})
	if native && appsStopped(pod) {
		return 0, false
	}
	for _, s := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		if s.Name != name {
			continue
		}
		for _, t := range []*corev1.ContainerStateTerminated{s.State.Terminated, s.LastTerminationState.Terminated} {
			if t != nil && t.ExitCode != 0 {
				return t.ExitCode, true
			}
		}
	}
	return 0, false
}

// appsStopped reports whether every app container of pod has terminated.
func appsStopped(pod *corev1.Pod) bool {
	if len(pod.Status.ContainerStatuses) < len(pod.Spec.Containers) {
		return false
	}
	for _, s := range pod.Status.ContainerStatuses {
		if s.State.Terminated == nil {
			return false
		}
	}
	return true
}

// sidecarMayHaveFailed is false for a pod whose sidecar, named at its
// admission, did not fail (sidecarFailure), so that its reconcile would
// read the FluentPVC for nothing: every labelled pod's every event, most
// of them in its start, would. A pod admitted by an earlier version, whose
// sidecar is named only by its FluentPVC, may have failed.
func sidecarMayHaveFailed(obj client.Object) bool {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return true
	}
	name := objects.PodSidecar(pod, "")
	if name == "" {
		return true
	}
	_, failed := sidecarFailure(pod, name)
	return failed
}

// SetupWithManager registers the reconciler; it sees only labelled pods,
// and of those only the ones whose sidecar may have failed.
func (r *SidecarReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("sidecar").
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(sidecarMayHaveFailed))).
		Complete(quietConflicts(r))
}
