package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ObjectIdentity names one object and, once known, its UID.
type ObjectIdentity struct {
	// name of the object. Empty for a pod admitted with generateName until the
	// operator has seen the created pod.
	// +optional
	Name string `json:"name,omitempty"`
	// uid of the object, once known.
	// +optional
	UID types.UID `json:"uid,omitempty"`
}

// FluentPVCBindingSpec links one pod, its PVC and the FluentPVC they came from.
type FluentPVCBindingSpec struct {
	// fluentPVC is the FluentPVC the pod opted into.
	// +required
	FluentPVC ObjectIdentity `json:"fluentPVC"`
	// pod is the pod the claim was handed to. Its UID is recorded when the
	// operator first sees the pod; it stays empty for a pod that never appeared.
	// +optional
	Pod ObjectIdentity `json:"pod,omitempty"`
	// pvc is the claim, in the binding's namespace.
	// +required
	PVC ObjectIdentity `json:"pvc"`
}

// FluentPVCBindingPhase is a step of a binding's life.
// +kubebuilder:validation:Enum=Pending;InUse;Draining;Drained;Orphaned;Abandoned
type FluentPVCBindingPhase string

const (
	// BindingPhasePending: the claim was handed out; the pod has not been seen yet.
	BindingPhasePending FluentPVCBindingPhase = "Pending"
	// BindingPhaseInUse: the pod exists and has not finished.
	BindingPhaseInUse FluentPVCBindingPhase = "InUse"
	// BindingPhaseDraining: the pod is gone or finished; a finalizer Job runs,
	// or waits to be retried after a failure.
	BindingPhaseDraining FluentPVCBindingPhase = "Draining"
	// BindingPhaseDrained: a finalizer Job succeeded; the claim and then the
	// binding are being deleted.
	BindingPhaseDrained FluentPVCBindingPhase = "Drained"
	// BindingPhaseOrphaned: no pod ever appeared for the claim, so it is
	// reclaimed without draining.
	BindingPhaseOrphaned FluentPVCBindingPhase = "Orphaned"
	// BindingPhaseAbandoned: the claim was released without a successful
	// drain, because the namespace is being deleted, or because the
	// FluentPVC stayed gone for more than an hour (the
	// PVC is then kept, with its data).
	BindingPhaseAbandoned FluentPVCBindingPhase = "Abandoned"
)

// FluentPVCBindingStatus is the observed state of a binding.
type FluentPVCBindingStatus struct {
	// conditions detail the phase: PodReady, Drained.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// phase is where the binding is in its life.
	// +optional
	Phase FluentPVCBindingPhase `json:"phase,omitempty"`

	// observedGeneration is the generation the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// drainAttempts counts the finalizer Jobs started for the claim.
	// +optional
	DrainAttempts int32 `json:"drainAttempts,omitempty"`

	// drainJobName is the name of the current finalizer Job.
	// +optional
	DrainJobName string `json:"drainJobName,omitempty"`

	// drainStartTime is when the first finalizer Job was started.
	// +optional
	DrainStartTime *metav1.Time `json:"drainStartTime,omitempty"`

	// lastDrainFailureTime is when the last finalizer Job failed; the next
	// attempt starts after an exponential backoff from it.
	// +optional
	LastDrainFailureTime *metav1.Time `json:"lastDrainFailureTime,omitempty"`

	// fluentPVCMissingSince is when the binding found its FluentPVC gone while
	// the claim had to be drained. Once an hour has passed since then, the
	// claim is let go of undrained and kept, with a Warning Event.
	// +optional
	FluentPVCMissingSince *metav1.Time `json:"fluentPVCMissingSince,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fpvcb,categories=fluent-pvc-operator
// +kubebuilder:printcolumn:name="PHASE",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="FLUENTPVC",type=string,JSONPath=`.spec.fluentPVC.name`
// +kubebuilder:printcolumn:name="POD",type=string,JSONPath=`.spec.pod.name`
// +kubebuilder:printcolumn:name="PVC",type=string,JSONPath=`.spec.pvc.name`
// +kubebuilder:printcolumn:name="ATTEMPTS",type=integer,JSONPath=`.status.drainAttempts`,priority=1
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`

// FluentPVCBinding records that one pod was given one PVC from a FluentPVC,
// and tracks that PVC until it has been drained and deleted.
type FluentPVCBinding struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec links the pod, the PVC and the FluentPVC.
	// +required
	Spec FluentPVCBindingSpec `json:"spec"`
	// status is the observed state.
	// +optional
	Status FluentPVCBindingStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// FluentPVCBindingList is a list of FluentPVCBindings.
type FluentPVCBindingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FluentPVCBinding `json:"items"`
}

// FluentPVCBinding condition types and reasons.
const (
	// BindingConditionPodReady is True while the pod exists and has not finished.
	BindingConditionPodReady = "PodReady"
	// PodReadyReasonNotSeen: the pod has not been seen yet.
	PodReadyReasonNotSeen = "NotSeen"
	// PodReadyReasonRunning: the pod exists and has not finished.
	PodReadyReasonRunning = "Running"
	// PodReadyReasonFinished: the pod Succeeded or Failed.
	PodReadyReasonFinished = "Finished"
	// PodReadyReasonGone: the pod object is gone.
	PodReadyReasonGone = "Gone"
	// PodReadyReasonNeverAppeared: the grace period passed without a pod.
	PodReadyReasonNeverAppeared = "NeverAppeared"

	// BindingConditionDrainJobRejected is True while the API server refuses
	// the finalizer Job made from the FluentPVC's template (for example a
	// container without an image); its message is the API server's. The
	// claim is kept, the Job is tried again with backoff, and at once when
	// the FluentPVC changes. It goes once a Job is created.
	BindingConditionDrainJobRejected = "DrainJobRejected"

	// BindingConditionDrainBlocked is True while the current finalizer Job
	// cannot make progress for a reason outside the operator: its pod cannot
	// be scheduled, its pods are refused, the claim is being deleted, or a
	// pod other than the claim's own mounts it (then no Job starts and the
	// drained claim is not deleted while that pod exists). The
	// message quotes the cause; the claim is kept, and the condition goes
	// once the cause is fixed.
	BindingConditionDrainBlocked = "DrainBlocked"
	// DrainBlockedReasonUnschedulable: the scheduler cannot place the
	// finalizer Job's pod; the message quotes it.
	DrainBlockedReasonUnschedulable = "PodUnschedulable"
	// DrainBlockedReasonPodsRefused: the Job controller cannot create the
	// finalizer Job's pod (a quota or a policy refuses it); the message
	// quotes its FailedCreate event.
	DrainBlockedReasonPodsRefused = "PodsRefused"
	// DrainBlockedReasonClaimDeleting: someone deleted the claim while the
	// operator holds it, and no new pod that mounts a claim being deleted
	// is scheduled.
	DrainBlockedReasonClaimDeleting = "ClaimDeleting"
	// DrainBlockedReasonMountedByOtherPod: a pod that is neither the
	// claim's pod nor its drain mounts the claim; the message names it.
	DrainBlockedReasonMountedByOtherPod = "MountedByOtherPod"

	// BindingConditionDrained is True once a finalizer Job succeeded.
	BindingConditionDrained = "Drained"
	// DrainedReasonNotStarted: the claim is in use.
	DrainedReasonNotStarted = "NotStarted"
	// DrainedReasonRunning: a finalizer Job runs.
	DrainedReasonRunning = "JobRunning"
	// DrainedReasonBackoff: the last finalizer Job failed; the next waits for its backoff.
	DrainedReasonBackoff = "BackoffAfterFailure"
	// DrainedReasonJobRejected: the API server refused the finalizer Job
	// (see the DrainJobRejected condition).
	DrainedReasonJobRejected = "JobRejected"
	// DrainedReasonSucceeded: a finalizer Job succeeded.
	DrainedReasonSucceeded = "JobSucceeded"
	// DrainedReasonNotNeeded: no pod ever used the claim.
	DrainedReasonNotNeeded = "NotNeeded"
	// DrainedReasonFluentPVCMissing: the FluentPVC is gone, so no finalizer Job can be built.
	DrainedReasonFluentPVCMissing = "FluentPVCMissing"
	// DrainedReasonReleasedUndrained: the FluentPVC stayed gone; the claim was let go of undrained and kept.
	DrainedReasonReleasedUndrained = "ReleasedUndrained"
	// DrainedReasonNamespaceDeleted: the namespace is going away; the data was not drained.
	DrainedReasonNamespaceDeleted = "NamespaceDeleted"
)
