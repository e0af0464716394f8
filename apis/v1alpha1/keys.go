package v1alpha1

const (
	keyPrefix = "fluent-pvc-operator.tech.zozo.com/"

	// FluentPVCNameLabelKey is the opt-in label of a pod: its value names the
	// FluentPVC whose PVC, sidecar and common settings the pod gets. The same
	// label is put on every PVC, binding and Job the operator makes for that
	// FluentPVC, so that its caches can select them.
	FluentPVCNameLabelKey = keyPrefix + "fluent-pvc-name"

	// BindingNameLabelKey links a pod, its PVC and its finalizer Jobs to their
	// FluentPVCBinding. The webhook puts it on the pod at admission, because the
	// pod's final name and UID are not known yet.
	BindingNameLabelKey = keyPrefix + "fluent-pvc-binding-name"

	// ClaimRoleLabelKey tells what a PVC made by the operator is for: a warm
	// pool PVC waiting for a pod, or a claim handed to a pod.
	ClaimRoleLabelKey = keyPrefix + "claim-role"

	// ClaimRoleWarm is the ClaimRoleLabelKey value of a pool PVC not yet handed out.
	ClaimRoleWarm = "warm"
	// ClaimRoleClaimed is the ClaimRoleLabelKey value of a PVC handed to a pod.
	ClaimRoleClaimed = "claimed"

	// ComponentLabelKey tells a finalizer Job (drain) from a pool binder Job.
	ComponentLabelKey = keyPrefix + "component"
	// ComponentDrain is the ComponentLabelKey value of a finalizer Job.
	ComponentDrain = "drain"

	// ComponentBinder is the ComponentLabelKey value of a pool binder Job, a
	// short-lived Job whose pod makes the scheduler bind a warm PVC of a
	// WaitForFirstConsumer StorageClass.
	ComponentBinder = "binder"

	// ComponentHolder is the ComponentLabelKey value of a pool holder pod: a
	// pod of the operator's that mounts a warm PVC, read-only, on a node, so
	// that the volume stays attached and staged there until a pod takes
	// the PVC. It never writes, and steps away once that pod is on a node.
	ComponentHolder = "holder"

	// BinderOfLabelKey names, on a binder Job's pod, the FluentPVC whose
	// pool it binds, so that the pods of one pool spread over zones
	// together.
	BinderOfLabelKey = keyPrefix + "binder-of"

	// WarmClaimLabelKey names, on a binder Job and its pod, the warm PVC it
	// binds, and on a holder pod the warm PVC it stages.
	WarmClaimLabelKey = keyPrefix + "warm-claim"

	// TemplateHashLabelKey is the hash of the pvcSpecTemplate a pool PVC was
	// made from. A warm PVC whose hash differs from its FluentPVC's is stale:
	// it is replaced and never handed out.
	TemplateHashLabelKey = keyPrefix + "template-hash"

	// ZonesAnnotationKey lists, comma-separated, the zones
	// (topology.kubernetes.io/zone) in which a warm PVC's volume can be
	// used, read from its PV's node affinity once it is Bound; empty when
	// the affinity names no such zone. NodeAffinityAnnotationKey, which
	// covers every key, supersedes it; it is still written for webhooks of
	// older versions during an upgrade.
	ZonesAnnotationKey = keyPrefix + "zones"

	// NodeAffinityAnnotationKey records on a warm PVC, once it is Bound, its
	// PV's required node affinity as JSON (empty: any node), whatever keys
	// it uses (a zone, topology.gke.io/zone, a hostname...). The webhook
	// hands the PVC only to a pod that can run on a node it accepts,
	// without reading PVs; the pool replaces a warm PVC no node accepts.
	NodeAffinityAnnotationKey = keyPrefix + "node-affinity"

	// HolderRequestAnnotationKey pairs a warm PVC with the holder pod the
	// pool is creating for it. The pool writes it on the PVC, conditioned on
	// the version it read, before it creates the holder, and the holder
	// carries the same value: the time of the request in RFC 3339 with the
	// fraction of a second, on the API server's clock. The mount webhook
	// admits a holder only while its PVC is warm and records its request,
	// within 30 s of it, and a checkout skips a warm PVC whose recent request
	// has no holder in its cache yet, so that no holder is created after its
	// PVC was handed to a pod.
	HolderRequestAnnotationKey = keyPrefix + "holder-request"

	// DrainAttemptLabelKey numbers a binding's finalizer Jobs (1, 2, ...), so
	// that a restarted operator derives the next attempt from the Jobs.
	DrainAttemptLabelKey = keyPrefix + "drain-attempt"

	// AdmittedAtAnnotationKey records, in RFC 3339 with the fraction of a
	// second (older claims have whole seconds), when the webhook handed a
	// claim to a pod. The fraction orders admissions of the same second, as
	// spec.pool.maxNamespaces needs to keep the most recently active. With
	// the binding's empty spec.pod.uid it is the orphan record: a claim
	// whose pod never appeared is reclaimed without draining once the
	// orphan grace period has passed since this time.
	AdmittedAtAnnotationKey = keyPrefix + "admitted-at"

	// ReleasedForDeletionAnnotationKey marks a claim that the operator let
	// go of in order to delete it (drained, or proven unused), in the same
	// write that removes its finalizer: should its deletion not follow
	// (its binding deleted in between), the claim is still deleted once
	// seen. A claim let go of to be kept for the user carries none.
	ReleasedForDeletionAnnotationKey = keyPrefix + "released-for-deletion"

	// PodsSinceAnnotationKey records on a claim a resourceVersion the API
	// server reached before the webhook handed the claim out: every pod
	// created with the claim comes after it. A watch of the namespace's pods
	// from it is how the operator proves that no pod was ever created with
	// an unrecorded claim before it reclaims it undrained.
	PodsSinceAnnotationKey = keyPrefix + "pods-since"

	// UsedByPodAnnotationKey records on a claim the pod that used it, as
	// "<name>/<uid>". The operator writes it before it lets the pod go, so
	// that the record outlives the claim's binding. The webhook hands every
	// claim out with the key present and empty: no pod recorded yet. A claim
	// without the key (made by an earlier version) has an unknown history.
	// A claim is reclaimed without draining only when the key is present
	// and empty and no pod carries the claim; otherwise it is drained.
	UsedByPodAnnotationKey = keyPrefix + "used-by-pod"

	// CheckoutIDAnnotationKey is a random token that names one checkout of a
	// claim: the webhook writes a new one each time it hands the claim to a
	// pod, and the binding made for that pod copies it. A warm PVC that went
	// back to the pool keeps its name and UID, so only this token tells its
	// next checkout from the one a stale binding remembers. The operator
	// releases, returns or deletes a claim only under a binding whose token
	// is the claim's. A binding made by an earlier version has none and is
	// matched by the claim's UID alone.
	CheckoutIDAnnotationKey = keyPrefix + "checkout-id"

	// ReservedByAnnotationKey marks a claim that a webhook replica checked
	// out ahead of any pod (a reservation), and names the replica's Lease
	// ("namespace/name", StockLeaseLabelKey): while that Lease is renewed,
	// the replica alone hands the claim to a pod, without a write, and
	// alone gives it back to the pool. The claim's binding waits for the
	// pod until the Lease is over; a reserved claim whose Lease is over and
	// that no pod carries is a claim whose pod never came, reclaimed as
	// any other.
	//
	// A reservation that also carries ReservedUntilAnnotationKey (RFC 3339,
	// the API server's clock) runs until that time instead, whatever its
	// holder's Lease.
	ReservedByAnnotationKey = keyPrefix + "reserved-by"

	// ReservedUntilAnnotationKey is the end of a reservation that names
	// its own (see ReservedByAnnotationKey).
	ReservedUntilAnnotationKey = keyPrefix + "reserved-until"

	// StockLeaseLabelKey labels the Lease of each webhook replica that
	// holds reservations (ReservedByAnnotationKey), in the operator's
	// namespace: the live ones share each pool's reservations.
	StockLeaseLabelKey = keyPrefix + "stock"

	// SidecarAnnotationKey records on a pod, at admission, the name of the
	// sidecar the webhook added, so that the sidecar is known by that name
	// for the pod's whole life, whatever later becomes of the FluentPVC's
	// template.
	SidecarAnnotationKey = keyPrefix + "sidecar"

	// CheckoutAnnotationKey records on a claim and its binding whether the
	// claim came from the warm pool ("hit") or was created at admission ("miss").
	CheckoutAnnotationKey = keyPrefix + "checkout"

	// CheckoutHit is the CheckoutAnnotationKey value of a claim taken from the pool.
	CheckoutHit = "hit"
	// CheckoutMiss is the CheckoutAnnotationKey value of a claim created at admission.
	CheckoutMiss = "miss"

	// PVCProtectionFinalizer keeps a claim from being deleted before its data
	// has been drained by a successful finalizer Job.
	PVCProtectionFinalizer = keyPrefix + "pvc-protection"

	// PodProtectionFinalizer was put on admitted pods by earlier versions, so
	// that a pod could not vanish before the operator recorded it. The webhook
	// no longer adds it: a claim whose pod went unrecorded is drained unless
	// the API server's history proves that no pod used it. The operator still
	// removes it from pods that carry it, once they are recorded.
	PodProtectionFinalizer = keyPrefix + "pod-protection"

	// FluentPVCProtectionFinalizer keeps a FluentPVC until every binding made
	// from it has finished draining.
	FluentPVCProtectionFinalizer = keyPrefix + "fluentpvc-protection"
)

// SelectedNodeAnnotationKey is Kubernetes' hand-off of a
// WaitForFirstConsumer claim to its provisioner: the node whose topology
// the volume must fit. The scheduler sets it when it places a claim's
// first pod; the pool sets it on a warm PVC at creation, so that the volume
// is provisioned at once with no pod at all. A provisioner that cannot use
// the node removes it again.
const SelectedNodeAnnotationKey = "volume.kubernetes.io/selected-node"

// BindingProtectionFinalizer kept FluentPVCBindings made by earlier
// versions until their claims were gone. Bindings no longer carry it: a
// binding deleted early is made again from its claim, which records its
// pod; the operator still removes it from bindings that carry it.
const BindingProtectionFinalizer = keyPrefix + "fluentpvcbinding-protection"

// Event reasons the operator records on pods, bindings and FluentPVCs.
const (
	// EventReasonSidecarFailed: the pod was deleted because its sidecar failed.
	EventReasonSidecarFailed = "SidecarFailed"
	// EventReasonDrainStarted: a finalizer Job was created for a retry
	// (attempt 2 or later; the first shows in the binding's status only).
	EventReasonDrainStarted = "DrainStarted"
	// EventReasonDrainFailed: a finalizer Job failed; it will be retried.
	EventReasonDrainFailed = "DrainFailed"
	// EventReasonDrainJobRejected: the API server refused the finalizer Job
	// made from the FluentPVC's template; the claim is kept and the Job is
	// tried again once the FluentPVC changes, or after a backoff.
	EventReasonDrainJobRejected = "DrainJobRejected"
	// EventReasonBindingRejected: the API server refused a claim's
	// FluentPVCBinding (a quota or a policy), so its pod cannot be recorded
	// nor its claim drained; the claim is kept and the binding tried again.
	// Told on the claim, its pod and the FluentPVC.
	EventReasonBindingRejected = "BindingRejected"
	// EventReasonDrainBlocked: the current finalizer Job cannot make
	// progress (its pod is unschedulable or refused, or the claim is being
	// deleted); the claim is kept and the message quotes the cause.
	EventReasonDrainBlocked = "DrainBlocked"
	// EventReasonDrained: a finalizer Job succeeded after a failed or a
	// refused one; the claim is deleted. The first Job's success sends no
	// Event: the drains-succeeded metric and the log count it.
	EventReasonDrained = "Drained"
	// EventReasonOrphanReclaimed: no pod ever used the claim; it was reclaimed.
	EventReasonOrphanReclaimed = "OrphanReclaimed"
	// EventReasonAbandoned: the namespace is being deleted; the claim was not drained.
	EventReasonAbandoned = "ClaimAbandoned"
	// EventReasonClaimLost: the claim disappeared before it was drained.
	EventReasonClaimLost = "ClaimLost"
	// EventReasonNoNodeToSelect: no node qualifies to be named on warm PVCs
	// (--pool-bind-mode=select-node), so binder Jobs bind them instead.
	EventReasonNoNodeToSelect = "NoNodeToSelect"
	// EventReasonBinderUnschedulable: a warm PVC's binder pod
	// (--pool-bind-mode=binder-job) cannot be scheduled; the message quotes
	// the scheduler's reason.
	EventReasonBinderUnschedulable = "BinderUnschedulable"
	// EventReasonHolderRejected: the API server refused a holder pod that
	// stages a warm PVC (a policy, a quota, or a missing PriorityClass);
	// the PVC is handed out unstaged meanwhile.
	EventReasonHolderRejected = "HolderRejected"
	// EventReasonWarmPVCStranded: a warm PVC's volume stays attached to a
	// node that is gone, so the pool replaces the PVC.
	EventReasonWarmPVCStranded = "WarmPVCStranded"
	// EventReasonFluentPVCMissing: the binding's FluentPVC is gone, so no finalizer Job can be built.
	EventReasonFluentPVCMissing = "FluentPVCMissing"
	// EventReasonReleasedUndrained: the FluentPVC stayed gone for an
	// hour: the claim was let go of
	// without draining; the PVC and its data are kept for the user.
	EventReasonReleasedUndrained = "ClaimReleasedUndrained"
)
