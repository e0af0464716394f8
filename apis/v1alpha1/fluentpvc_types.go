package v1alpha1

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FluentPVCSpec is the desired state of a FluentPVC: the PVC, sidecar and
// common settings each of its pods gets, the Job that drains each PVC, and
// the warm pool of PVCs handed out at admission.
//
// +kubebuilder:validation:XValidation:rule="!has(self.commonVolumes) || !self.commonVolumes.exists(v, v.name == self.pvcVolumeName)",message="a common volume must not be named like pvcVolumeName",fieldPath=".commonVolumes"
type FluentPVCSpec struct {
	// pvcSpecTemplate is the spec of the PVC each pod gets. It needs at least one
	// access mode and a storage request.
	// +required
	// +kubebuilder:validation:XValidation:rule="has(self.accessModes) && size(self.accessModes) > 0",message="at least one access mode is required",fieldPath=".accessModes"
	// +kubebuilder:validation:XValidation:rule="has(self.resources) && has(self.resources.requests) && 'storage' in self.resources.requests",message="a storage request is required",fieldPath=".resources.requests"
	PVCSpecTemplate corev1.PersistentVolumeClaimSpec `json:"pvcSpecTemplate"`

	// pvcFinalizerJobSpecTemplate is the spec of the Job that drains a PVC once
	// its pod is gone. The Job gets the PVC mounted at pvcVolumeMountPath and the
	// common volumes, mounts and envs. The PVC is deleted only after the Job
	// succeeds. Its pod template needs at least one container; restartPolicy
	// must be Never or OnFailure, and an unset one becomes Never.
	// +required
	// +kubebuilder:validation:XValidation:rule="has(self.template.spec) && has(self.template.spec.containers) && size(self.template.spec.containers) > 0",message="the Job's pod template needs at least one container",fieldPath=".template.spec"
	// +kubebuilder:validation:XValidation:rule="!has(self.template.spec) || !has(self.template.spec.restartPolicy) || self.template.spec.restartPolicy in ['Never', 'OnFailure']",message="a Job's restartPolicy must be Never or OnFailure",fieldPath=".template.spec"
	PVCFinalizerJobSpecTemplate batchv1.JobSpec `json:"pvcFinalizerJobSpecTemplate"`

	// pvcVolumeName is the name of the pod volume that holds the PVC. It must be
	// a DNS-1123 label (at most 63 characters), unique within the pod, and
	// must not be the name of a common volume.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	PVCVolumeName string `json:"pvcVolumeName"`

	// pvcVolumeMountPath is where every container, the sidecar and the
	// finalizer Job mount the PVC. It must be absolute, must not contain ':',
	// and is at most 4096 characters.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:Pattern=`^/[^:]*$`
	PVCVolumeMountPath string `json:"pvcVolumeMountPath"`

	// sidecarContainerTemplate is the container added to every pod (see
	// sidecarMode), typically a log shipper that buffers on the PVC. Its name
	// must be a DNS-1123 label (at most 63 characters).
	// +required
	// +kubebuilder:validation:XValidation:rule="size(self.name) <= 63 && self.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="the sidecar's name must be a DNS-1123 label: lower-case letters, digits and '-', at most 63 characters",fieldPath=".name"
	SidecarContainerTemplate corev1.Container `json:"sidecarContainerTemplate"`

	// sidecarMode is how the sidecar is added to a pod: Native (the default)
	// or Container. Native adds it to initContainers with restartPolicy
	// Always, a Kubernetes native sidecar (Kubernetes 1.29 and later): it
	// starts before the app containers, is restarted by the kubelet when it
	// exits, and is stopped after they exit, so pods of Jobs and CronJobs
	// finish and their claims are drained. Container appends it to
	// containers: a pod that should run to completion then never finishes
	// while the sidecar runs.
	// +optional
	// +kubebuilder:default=Native
	SidecarMode SidecarMode `json:"sidecarMode,omitempty"`

	// commonEnvs are set in every container and the sidecar. A common env
	// replaces a container's env of the same name. Names are unique; at most
	// 128 entries.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	CommonEnvs []corev1.EnvVar `json:"commonEnvs,omitempty"`

	// commonVolumes are added to every pod and finalizer Job. Names must be
	// unique DNS-1123 labels (at most 63 characters) other than
	// pvcVolumeName; at most 64 entries.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:XValidation:rule="size(self.name) <= 63 && self.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="a volume name must be a DNS-1123 label: lower-case letters, digits and '-', at most 63 characters",fieldPath=".name"
	CommonVolumes []corev1.Volume `json:"commonVolumes,omitempty"`

	// commonVolumeMounts are added to every container, the sidecar and the
	// finalizer Job. Names must be DNS-1123 labels (at most 63 characters);
	// mount paths must be absolute, must not contain ':', and are at most
	// 4096 characters. At most 64 entries.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:XValidation:rule="size(self.name) <= 63 && self.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="a volume mount's name must be a DNS-1123 label: lower-case letters, digits and '-', at most 63 characters",fieldPath=".name"
	// +kubebuilder:validation:items:XValidation:rule="self.mountPath.startsWith('/') && !self.mountPath.contains(':')",message="a mount path must be absolute and must not contain ':'",fieldPath=".mountPath"
	CommonVolumeMounts []corev1.VolumeMount `json:"commonVolumeMounts,omitempty"`

	// deletePodIfSidecarContainerTerminationDetected deletes a pod whose sidecar
	// terminated with a non-zero exit code. Defaults to true.
	// +optional
	// +kubebuilder:default=true
	DeletePodIfSidecarContainerTerminationDetected *bool `json:"deletePodIfSidecarContainerTerminationDetected,omitempty"`

	// namespaceSelector selects, by their labels, the namespaces whose pods
	// may use this FluentPVC. Unset or empty (the default) selects every
	// namespace. A pod in another namespace is refused at admission with a
	// message naming the FluentPVC and the selector, and the pool never
	// learns such a namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// usePermission says whether the user who creates a pod must be allowed
	// the verb "use" on this FluentPVC (resource fluentpvcs of group
	// fluent-pvc-operator.tech.zozo.com): NotRequired (the default) or
	// Required. Required checks it at admission with a SubjectAccessReview
	// in the pod's namespace, so a RoleBinding there grants it as well as a
	// ClusterRoleBinding.
	// For pods that a controller creates (Deployments, Jobs, DaemonSets),
	// that user is the controller's service account, not the person who
	// applied the workload: grant it there, or use namespaceSelector.
	// +optional
	// +kubebuilder:default=NotRequired
	UsePermission UsePermission `json:"usePermission,omitempty"`

	// pool keeps warm, bound PVCs ready so that pods start without waiting for
	// a disk to be provisioned. Defaults to no pool.
	// +optional
	// +kubebuilder:default={}
	Pool PoolSpec `json:"pool,omitempty"`
}

// UsePermission is whether creating a pod of a FluentPVC needs the verb
// "use" on it.
// +kubebuilder:validation:Enum=NotRequired;Required
type UsePermission string

const (
	// UsePermissionNotRequired admits pods whoever creates them.
	UsePermissionNotRequired UsePermission = "NotRequired"
	// UsePermissionRequired admits a pod only if its creator may "use" the
	// FluentPVC.
	UsePermissionRequired UsePermission = "Required"
)

// SidecarMode is how the sidecar is added to a pod.
// +kubebuilder:validation:Enum=Native;Container
type SidecarMode string

const (
	// SidecarModeNative adds the sidecar to initContainers with
	// restartPolicy Always.
	SidecarModeNative SidecarMode = "Native"
	// SidecarModeContainer appends the sidecar to containers.
	SidecarModeContainer SidecarMode = "Container"
)

// PoolSpec configures the warm pool of a FluentPVC.
type PoolSpec struct {
	// size is the number of warm, bound PVCs kept ready in each pool namespace,
	// from 0 to 1000. 0 (the default) means no pool: every PVC is created at
	// admission.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Size int32 `json:"size,omitempty"`

	// namespaces are the namespaces the pool keeps warm PVCs in: at most 256
	// distinct namespace names. When empty (the default), the pool learns them
	// from the pods it admits.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespaces []string `json:"namespaces,omitempty"`

	// maxNamespaces caps how many namespaces the pool learns from
	// admissions when none are listed: the most recently active ones keep a
	// pool, and pods elsewhere get claims made at admission. The
	// NamespaceLimitReached condition says when the cap is reached and which
	// namespaces it leaves out. From 1 to 1000; unset (the default) means no
	// cap.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxNamespaces int32 `json:"maxNamespaces,omitempty"`

	// staging says whether warm PVCs are kept attached to a node and
	// staged there by a holder pod, so that a pod handed one starts
	// without waiting for attach, format or mount. Auto (the default)
	// stages where the StorageClass's CSI driver requires attachment (its
	// CSIDriver's attachRequired), Enabled stages wherever the volume has
	// a CSI driver, and Disabled never stages.
	// +optional
	// +kubebuilder:default=Auto
	Staging PoolStaging `json:"staging,omitempty"`

	// reserveAhead is how many of the pool's warm PVCs in each namespace
	// each operator replica reserves ahead of their pods, so that its
	// admissions hand them out without an API write. Reserved PVCs count
	// in size, and a replica reserves at most its share of it: size
	// divided by the replicas whose Leases are live, rounded up. A pool
	// that stages its warm PVCs is not reserved from. From 0 (none) to
	// 1000;
	// unset (the default) means the operator's --reserve-ahead ("share"
	// as the chart and config/default install it, 0 in the binary).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	ReserveAhead *int32 `json:"reserveAhead,omitempty"`
}

// PoolStaging is whether a pool keeps its warm PVCs staged on nodes.
// +kubebuilder:validation:Enum=Auto;Enabled;Disabled
type PoolStaging string

// Values of PoolStaging.
const (
	// PoolStagingAuto stages where the CSI driver requires attachment.
	PoolStagingAuto PoolStaging = "Auto"
	// PoolStagingEnabled stages wherever the volume has a CSI driver.
	PoolStagingEnabled PoolStaging = "Enabled"
	// PoolStagingDisabled never stages.
	PoolStagingDisabled PoolStaging = "Disabled"
)

// FluentPVCStatus is the observed state of a FluentPVC.
type FluentPVCStatus struct {
	// conditions are the FluentPVC's conditions, e.g. Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the generation the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// bindings counts the FluentPVC's bindings by phase.
	// +optional
	Bindings BindingCounts `json:"bindings,omitempty"`

	// active is the number of bindings whose claim is in use or being drained.
	// +optional
	Active int32 `json:"active,omitempty"`

	// warm is the number of warm, bound PVCs over all pool namespaces.
	// +optional
	Warm int32 `json:"warm,omitempty"`

	// pool details the warm pool in each pool namespace.
	// +optional
	// +listType=map
	// +listMapKey=namespace
	Pool []PoolNamespaceStatus `json:"pool,omitempty"`
}

// PoolNamespaceStatus is the warm pool of one namespace.
type PoolNamespaceStatus struct {
	// namespace of the pool.
	// +required
	Namespace string `json:"namespace"`
	// warm is the number of Bound PVCs ready to be handed out.
	// +optional
	Warm int32 `json:"warm"`
	// provisioning is the number of pool PVCs not yet Bound.
	// +optional
	Provisioning int32 `json:"provisioning"`
	// reserved is how many of the warm PVCs are reserved by the webhook's
	// replicas, each to hand to a pod without an API write; omitted when
	// none is.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Reserved int32 `json:"reserved,omitempty"`
	// staged is the number of warm PVCs attached and staged on a node by
	// a running holder pod, at most the pool's size; omitted when none is.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Staged int32 `json:"staged,omitempty"`
	// lastAdmissionTime is when a pod of this FluentPVC was last admitted in
	// the namespace. A learned namespace is dropped from the pool after the
	// hour without admissions.
	// +optional
	LastAdmissionTime *metav1.Time `json:"lastAdmissionTime,omitempty"`
}

// BindingCounts counts bindings by phase.
type BindingCounts struct {
	// pending bindings wait for their pod to appear.
	// +optional
	Pending int32 `json:"pending,omitempty"`
	// inUse bindings have a running pod.
	// +optional
	InUse int32 `json:"inUse,omitempty"`
	// draining bindings run, or wait to retry, their finalizer Job.
	// +optional
	Draining int32 `json:"draining,omitempty"`
	// orphaned bindings are reclaiming a claim no pod ever used.
	// +optional
	Orphaned int32 `json:"orphaned,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="metadata.name must be at most 63 characters: pods name their FluentPVC in a label value"
// +kubebuilder:resource:scope=Cluster,shortName=fpvc,categories=fluent-pvc-operator
// +kubebuilder:printcolumn:name="POOL",type=integer,JSONPath=`.spec.pool.size`,description="Warm PVCs kept per pool namespace"
// +kubebuilder:printcolumn:name="WARM",type=integer,JSONPath=`.status.warm`,description="Warm, bound PVCs ready over all pool namespaces"
// +kubebuilder:printcolumn:name="ACTIVE",type=integer,JSONPath=`.status.active`,description="Bindings in use or draining"
// +kubebuilder:printcolumn:name="READY",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`

// FluentPVC gives every pod labelled with its name a disposable PVC, a sidecar
// and common settings, and drains each PVC with a Job after its pod is gone.
type FluentPVC struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec FluentPVCSpec `json:"spec"`
	// status is the observed state.
	// +optional
	Status FluentPVCStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// FluentPVCList is a list of FluentPVCs.
type FluentPVCList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FluentPVC `json:"items"`
}

// NativeSidecar reports whether the sidecar is a native sidecar (an unset
// sidecarMode is Native).
func (s *FluentPVCSpec) NativeSidecar() bool {
	return s.SidecarMode != SidecarModeContainer
}

// DeletePodOnSidecarFailure reports the effective value of
// deletePodIfSidecarContainerTerminationDetected (true when unset).
func (s *FluentPVCSpec) DeletePodOnSidecarFailure() bool {
	return s.DeletePodIfSidecarContainerTerminationDetected == nil || *s.DeletePodIfSidecarContainerTerminationDetected
}

// FluentPVC condition types and reasons.
const (
	// FluentPVCConditionReady is True while the FluentPVC admits pods.
	FluentPVCConditionReady = "Ready"
	// FluentPVCReadyReasonAdmitting: the FluentPVC admits pods.
	FluentPVCReadyReasonAdmitting = "Admitting"
	// FluentPVCReadyReasonDeleting: the FluentPVC is being deleted and denies new pods.
	FluentPVCReadyReasonDeleting = "Deleting"

	// FluentPVCConditionPoolReady is True when every pool namespace has
	// spec.pool.size warm PVCs.
	FluentPVCConditionPoolReady = "PoolReady"
	// PoolReadyReasonFull: every pool namespace is full.
	PoolReadyReasonFull = "Full"
	// PoolReadyReasonFilling: some warm PVCs are still being provisioned.
	PoolReadyReasonFilling = "Filling"
	// PoolReadyReasonDisabled: spec.pool.size is 0.
	PoolReadyReasonDisabled = "Disabled"
	// PoolReadyReasonNoNamespaces: no namespace has been listed or learned yet.
	PoolReadyReasonNoNamespaces = "NoNamespaces"
	// FluentPVCConditionNamespaceLimitReached is True while
	// spec.pool.maxNamespaces leaves learned namespaces without a pool.
	FluentPVCConditionNamespaceLimitReached = "NamespaceLimitReached"
	// NamespaceLimitReasonReached: some learned namespaces have no pool.
	NamespaceLimitReasonReached = "Reached"
	// NamespaceLimitReasonBelow: every learned namespace has a pool.
	NamespaceLimitReasonBelow = "BelowLimit"
	// PoolReadyReasonNamespaceNotFound: a pool namespace does not exist;
	// the others are filled meanwhile.
	PoolReadyReasonNamespaceNotFound = "NamespaceNotFound"
)
