package claim

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// Op is the kind of API write a transition makes.
type Op string

const (
	// OpSkip writes nothing: the claim is already where the transition leads.
	OpSkip Op = "skip"
	// OpCreate creates Write.Object; it fails if the name is taken.
	OpCreate Op = "create"
	// OpUpdate replaces the object, conditioned on the resourceVersion read.
	OpUpdate Op = "update"
	// OpPatch sends the difference between Write.From and Write.Object as a
	// merge patch, conditioned on the resourceVersion read when the
	// precondition names one.
	OpPatch Op = "patch"
	// OpDelete deletes the object, conditioned on its UID and resourceVersion.
	OpDelete Op = "delete"
	// OpGuardedPatch sets Write.Annotations with a JSON patch that first
	// tests what the transition was decided on, instead of the
	// resourceVersion read: the object's UID, its claim-role label, its
	// checkout token (Precondition) and the annotations it writes, as read.
	// Other writers' changes in between (the PV binder's annotations, the
	// pvc-protection finalizer) do not fail it; a new checkout, a role
	// left, or another record written since, does. Execute first tries
	// the same write as an update conditioned on the resourceVersion read
	// (Write.From's), which costs the API server less, and sends the patch
	// when that update fails, unless the claim is gone.
	OpGuardedPatch Op = "guarded-patch"
)

// Precondition is what the API server must still find for a write to
// apply: the object's UID and the resourceVersion it was read at. A
// checkout token, when the transition checked one, is the token the write
// was decided under; the resourceVersion makes that check hold at write
// time, since only a write changes the token.
type Precondition struct {
	UID             types.UID
	ResourceVersion string
	CheckoutID      string
}

// Write is one transition's write: what to send, and under which
// precondition. Execute carries it out.
type Write struct {
	Op Op
	// Object is the object to create, update, patch into, or delete.
	Object *corev1.PersistentVolumeClaim
	// From is the object as read, the base of a Patch.
	From         *corev1.PersistentVolumeClaim
	Precondition Precondition
	// Annotations are what a GuardedPatch sets.
	Annotations map[string]string
}

// To is the state the write leaves the claim in (None once deleted).
func (w Write) To() State {
	if w.Op == OpDelete {
		return None
	}
	return StateOf(w.Object)
}

// RefusedError is a transition refused because the claim is not in a state
// it may leave that way. Nothing was written.
type RefusedError struct {
	Transition string
	Claim      string
	State      State
	Why        string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("refusing to %s claim %s (%s): %s", e.Transition, e.Claim, stateName(e.State), e.Why)
}

func stateName(s State) string {
	if s == None {
		return "not a claim"
	}
	return string(s)
}

func refuse(transition string, pvc *corev1.PersistentVolumeClaim, why string) error {
	return &RefusedError{Transition: transition, Claim: pvc.Namespace + "/" + pvc.Name, State: StateOf(pvc), Why: why}
}

// NewWarm is a new warm PVC of fpvc in namespace, made from its template
// (whose hash is hash), named for node when node is not "" (the
// selected-node hand-off of a WaitForFirstConsumer class). It has no
// finalizer: it holds no data until it is checked out.
func NewWarm(fpvc *v1alpha1.FluentPVC, namespace, hash, node string) Write {
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:      Name(fpvc.Name),
			Namespace: namespace,
			Labels: map[string]string{
				v1alpha1.FluentPVCNameLabelKey: fpvc.Name,
				v1alpha1.ClaimRoleLabelKey:     v1alpha1.ClaimRoleWarm,
				v1alpha1.TemplateHashLabelKey:  hash,
			},
		},
		Spec: *fpvc.Spec.PVCSpecTemplate.DeepCopy(),
	}
	if node != "" {
		c.Annotations = map[string]string{v1alpha1.SelectedNodeAnnotationKey: node}
	}
	return Write{Op: OpCreate, Object: c}
}

// NewClaimed is the claim named name in namespace made from fpvc's
// template (whose hash is hash) and handed to a pod at admission time
// now, without the pool (checkout is v1alpha1.CheckoutMiss, or a dry
// run's). Its labels put it in the operator's cache; its finalizer keeps
// it until it is drained; its annotations are the orphan record, the
// empty pod record, the checkout token, whether it came from the pool,
// and podsSince, a resourceVersion read before (none when "": then the
// claim is drained if its pod never appears).
func NewClaimed(fpvc *v1alpha1.FluentPVC, namespace, name, hash, checkout, checkoutID, podsSince string, now time.Time) Write {
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			Labels: map[string]string{
				v1alpha1.FluentPVCNameLabelKey: fpvc.Name,
				v1alpha1.BindingNameLabelKey:   name,
				v1alpha1.ClaimRoleLabelKey:     v1alpha1.ClaimRoleClaimed,
				v1alpha1.TemplateHashLabelKey:  hash,
			},
			Annotations: map[string]string{
				v1alpha1.AdmittedAtAnnotationKey: now.UTC().Format(time.RFC3339Nano),
				v1alpha1.CheckoutAnnotationKey:   checkout,
				v1alpha1.UsedByPodAnnotationKey:  "",
				v1alpha1.CheckoutIDAnnotationKey: checkoutID,
			},
			Finalizers: []string{v1alpha1.PVCProtectionFinalizer},
		},
		Spec: *fpvc.Spec.PVCSpecTemplate.DeepCopy(),
	}
	if podsSince != "" {
		c.Annotations[v1alpha1.PodsSinceAnnotationKey] = podsSince
	}
	return Write{Op: OpCreate, Object: c, Precondition: Precondition{CheckoutID: checkoutID}}
}

// SelectNode names node on warm PVC pvc, not yet Bound, for the
// provisioner (the selected-node hand-off). Conditioned on the version
// read, so that a node the scheduler or the provisioner wrote meanwhile
// wins.
func SelectNode(pvc *corev1.PersistentVolumeClaim, node string) (Write, error) {
	if StateOf(pvc) != Warm {
		return Write{}, refuse("name a node on", pvc, "only a warm PVC is placed by the pool")
	}
	if pvc.Status.Phase == corev1.ClaimBound {
		return Write{}, refuse("name a node on", pvc, "its volume is bound already")
	}
	out := pvc.DeepCopy()
	setAnnotation(out, v1alpha1.SelectedNodeAnnotationKey, node)
	return Write{Op: OpPatch, Object: out, From: pvc, Precondition: preconditionOf(pvc)}, nil
}

// RecordAffinity records on Bound warm PVC pvc where its volume can be
// used: zones (comma-separated) and the PV's required node affinity as
// JSON ("" for any node). From then on the webhook may hand it out. The
// patch is unconditioned: these keys are written by the pool alone, and a
// warm PVC cannot be checked out before they are.
func RecordAffinity(pvc *corev1.PersistentVolumeClaim, zones, affinity string) (Write, error) {
	if StateOf(pvc) != Warm {
		return Write{}, refuse("record the volume's affinity on", pvc, "only a warm PVC waits for it")
	}
	out := pvc.DeepCopy()
	setAnnotation(out, v1alpha1.ZonesAnnotationKey, zones)
	setAnnotation(out, v1alpha1.NodeAffinityAnnotationKey, affinity)
	return Write{Op: OpPatch, Object: out, From: pvc, Precondition: Precondition{UID: pvc.UID}}, nil
}

// Checkout turns warm PVC pvc into a pod's claim admitted at admittedAt,
// under the new checkout token checkoutID: the claim role and binding
// label, the orphan record, the empty pod record and the finalizer that
// keeps it until it is drained. The update is conditioned on the version
// read, so that of two admissions taking the same warm PVC one fails.
func Checkout(pvc *corev1.PersistentVolumeClaim, admittedAt time.Time, checkoutID string) (Write, error) {
	if StateOf(pvc) != Warm {
		return Write{}, refuse("check out", pvc, "only a warm PVC is handed to a pod")
	}
	if !pvc.DeletionTimestamp.IsZero() {
		return Write{}, refuse("check out", pvc, "it is being deleted")
	}
	out := pvc.DeepCopy()
	out.Labels[v1alpha1.ClaimRoleLabelKey] = v1alpha1.ClaimRoleClaimed
	out.Labels[v1alpha1.BindingNameLabelKey] = pvc.Name
	setAnnotation(out, v1alpha1.AdmittedAtAnnotationKey, admittedAt.UTC().Format(time.RFC3339Nano))
	setAnnotation(out, v1alpha1.CheckoutAnnotationKey, v1alpha1.CheckoutHit)
	setAnnotation(out, v1alpha1.UsedByPodAnnotationKey, "")
	setAnnotation(out, v1alpha1.CheckoutIDAnnotationKey, checkoutID)
	// A claim has no holder: the request has served its purpose.
	delete(out.Annotations, v1alpha1.HolderRequestAnnotationKey)
	// The write is conditioned on the version read: nothing happened to
	// the claim between that version and the checkout.
	if pvc.ResourceVersion != "" {
		setAnnotation(out, v1alpha1.PodsSinceAnnotationKey, pvc.ResourceVersion)
	}
	controllerutil.AddFinalizer(out, v1alpha1.PVCProtectionFinalizer)
	pre := preconditionOf(pvc)
	pre.CheckoutID = checkoutID
	return Write{Op: OpUpdate, Object: out, Precondition: pre}, nil
}

// RecordPod records pod on claim pvc as the pod that used it. The
// operator writes it before it lets the pod go, so that the record
// outlives a lost binding: from then on the claim is Used and is drained
// before it is let go of. A reservation gets its finalizer with the
// record. Only a warm PVC is refused: a claim whose finalizer was removed
// by hand still takes the record.
func RecordPod(pvc *corev1.PersistentVolumeClaim, pod v1alpha1.ObjectIdentity) (Write, error) {
	switch {
	case StateOf(pvc) == Warm:
		return Write{}, refuse("record pod "+pod.Name+" on", pvc, "a warm PVC has no pod")
	case pod.UID == "":
		return Write{}, refuse("record a pod on", pvc, "the pod has no UID")
	case Records(pvc, pod):
		return Write{Op: OpSkip, Object: pvc}, nil
	}
	out := pvc.DeepCopy()
	setAnnotation(out, v1alpha1.UsedByPodAnnotationKey, usedBy(pod))
	if StateOf(pvc) == Claimed && !controllerutil.ContainsFinalizer(pvc, v1alpha1.PVCProtectionFinalizer) {
		// A reservation (Reserve) is protected from the record on: the
		// same update adds the finalizer, conditioned on the version read.
		controllerutil.AddFinalizer(out, v1alpha1.PVCProtectionFinalizer)
		pre := preconditionOf(pvc)
		pre.CheckoutID = pvc.Annotations[v1alpha1.CheckoutIDAnnotationKey]
		return Write{Op: OpUpdate, Object: out, Precondition: pre}, nil
	}
	if token := pvc.Annotations[v1alpha1.CheckoutIDAnnotationKey]; token != "" && StateOf(pvc) != None {
		// A claim is written by others just after it is made (a miss's
		// claim gets bound): tested on its checkout, not on the version
		// read, the record does not lose to them.
		return Write{Op: OpGuardedPatch, Object: out, From: pvc,
			Precondition: Precondition{UID: pvc.UID, CheckoutID: token},
			Annotations:  map[string]string{v1alpha1.UsedByPodAnnotationKey: usedBy(pod)}}, nil
	}
	return Write{Op: OpPatch, Object: out, From: pvc, Precondition: preconditionOf(pvc)}, nil
}

// Release removes the finalizer of held claim pvc for binding b, so that
// it may be deleted: after a drain succeeded, for a claim proven unused,
// or for a claim let go of undrained (its namespace or its FluentPVC is
// gone). It is refused unless pvc is the checkout b records.
func Release(b *v1alpha1.FluentPVCBinding, pvc *corev1.PersistentVolumeClaim) (Write, error) {
	if !SameCheckout(b, pvc) {
		return Write{}, refuse("release", pvc, "it is no longer the checkout binding "+b.Name+" records")
	}
	return release(pvc, b.Annotations[v1alpha1.CheckoutIDAnnotationKey])
}

// ReleaseForDeletion is Release for a claim that is deleted next (drained,
// or proven unused): the same write marks it
// (v1alpha1.ReleasedForDeletionAnnotationKey), so that DeleteReleased
// deletes it should its binding go before Delete.
func ReleaseForDeletion(b *v1alpha1.FluentPVCBinding, pvc *corev1.PersistentVolumeClaim) (Write, error) {
	w, err := Release(b, pvc)
	if err != nil || w.Op == OpSkip {
		return w, err
	}
	setAnnotation(w.Object, v1alpha1.ReleasedForDeletionAnnotationKey, "true")
	return w, nil
}

// DeleteReleased deletes claim pvc, which the operator let go of in order
// to delete it (ReleaseForDeletion) and which is not being deleted: its
// binding went before the deletion. A claim let go of to be kept is
// refused, as is any claim still held.
func DeleteReleased(pvc *corev1.PersistentVolumeClaim) (Write, error) {
	switch StateOf(pvc) {
	case Released:
		return Write{Op: OpSkip, Object: pvc}, nil
	case Kept:
	default:
		return Write{}, refuse("delete", pvc, "only a claim let go of is deleted without its binding")
	}
	if pvc.Annotations[v1alpha1.ReleasedForDeletionAnnotationKey] != "true" {
		return Write{}, refuse("delete", pvc, "it was let go of to be kept")
	}
	return Write{Op: OpDelete, Object: pvc.DeepCopy(), Precondition: preconditionOf(pvc)}, nil
}

// ReleaseUnbound removes the finalizer of held claim pvc that never got a
// binding: its namespace began terminating before the binding was made,
// so no Job can drain it there.
func ReleaseUnbound(pvc *corev1.PersistentVolumeClaim) (Write, error) {
	if !Held(pvc) {
		return Write{}, refuse("release", pvc, "only a held claim is released")
	}
	return release(pvc, pvc.Annotations[v1alpha1.CheckoutIDAnnotationKey])
}

func release(pvc *corev1.PersistentVolumeClaim, checkoutID string) (Write, error) {
	switch {
	case StateOf(pvc) == Warm:
		return Write{}, refuse("release", pvc, "a warm PVC holds no data to let go of")
	case !Keeps(pvc):
		return Write{Op: OpSkip, Object: pvc}, nil
	}
	out := pvc.DeepCopy()
	controllerutil.RemoveFinalizer(out, v1alpha1.PVCProtectionFinalizer)
	// A claim let go of is no reservation any more, with or without its
	// finalizer (see unprotected).
	delete(out.Annotations, v1alpha1.ReservedByAnnotationKey)
	delete(out.Annotations, v1alpha1.ReservedUntilAnnotationKey)
	pre := preconditionOf(pvc)
	pre.CheckoutID = checkoutID
	return Write{Op: OpPatch, Object: out, From: pvc, Precondition: pre}, nil
}

// Return gives claim pvc of binding b back to the warm pool, for a claim
// no pod ever used. It is refused for a claim that records a pod or does
// not track its pod, since it may hold a pod's data, and unless pvc is
// the checkout b records. The update is conditioned on the version read.
func Return(b *v1alpha1.FluentPVCBinding, pvc *corev1.PersistentVolumeClaim) (Write, error) {
	if !SameCheckout(b, pvc) {
		return Write{}, refuse("return", pvc, "it is no longer the checkout binding "+b.Name+" records")
	}
	if StateOf(pvc) != Claimed {
		return Write{}, refuse("return", pvc, "only a claim no pod used goes back to the pool")
	}
	return toWarm(pvc, b.Annotations[v1alpha1.CheckoutIDAnnotationKey]), nil
}

// toWarm is the update that makes claim pvc, checked out under token
// checkoutID, a warm PVC again, conditioned on the version read.
func toWarm(pvc *corev1.PersistentVolumeClaim, checkoutID string) Write {
	out := pvc.DeepCopy()
	out.Labels[v1alpha1.ClaimRoleLabelKey] = v1alpha1.ClaimRoleWarm
	delete(out.Labels, v1alpha1.BindingNameLabelKey)
	for _, key := range []string{
		v1alpha1.AdmittedAtAnnotationKey, v1alpha1.CheckoutAnnotationKey, v1alpha1.UsedByPodAnnotationKey,
		v1alpha1.CheckoutIDAnnotationKey, v1alpha1.PodsSinceAnnotationKey,
		v1alpha1.ReservedUntilAnnotationKey, v1alpha1.ReservedByAnnotationKey,
		// A webhook that knows no holder requests keeps it at checkout.
		v1alpha1.HolderRequestAnnotationKey,
	} {
		delete(out.Annotations, key)
	}
	controllerutil.RemoveFinalizer(out, v1alpha1.PVCProtectionFinalizer)
	pre := preconditionOf(pvc)
	pre.CheckoutID = checkoutID
	return Write{Op: OpUpdate, Object: out, Precondition: pre}
}

// Reserve checks warm PVC pvc out ahead of any pod (Checkout, at now)
// for holder, the name of a webhook replica's Lease ("namespace/name"),
// which alone hands it to a pod, without a write, while that Lease is
// renewed. Everything a checkout writes is written here but the
// finalizer, which RecordPod adds once the pod is scheduled: the claim's
// binding waits for its pod until the Lease is over, and reclaims it as
// any other claim whose pod never came after that.
func Reserve(pvc *corev1.PersistentVolumeClaim, now time.Time, holder, checkoutID string) (Write, error) {
	if holder == "" {
		return Write{}, refuse("reserve", pvc, "a reservation names its holder")
	}
	w, err := Checkout(pvc, now, checkoutID)
	if err != nil {
		return Write{}, err
	}
	setAnnotation(w.Object, v1alpha1.ReservedByAnnotationKey, holder)
	// Until a pod is recorded on it the claim holds no data: without the
	// finalizer it never holds up its namespace's deletion, even while no
	// operator runs. RecordPod adds it.
	controllerutil.RemoveFinalizer(w.Object, v1alpha1.PVCProtectionFinalizer)
	return w, nil
}

// Unreserve gives claim pvc, reserved by owner, back to the warm pool.
// Only owner knows that it handed the claim to no pod, so only owner
// gives it back, and only while the claim records no pod; the update is
// conditioned on the version read.
func Unreserve(pvc *corev1.PersistentVolumeClaim, owner string) (Write, error) {
	if by, _, ok := Reservation(pvc); !ok || by != owner {
		return Write{}, refuse("give back", pvc, "it is not reserved by "+owner)
	}
	if !pvc.DeletionTimestamp.IsZero() {
		return Write{}, refuse("give back", pvc, "it is being deleted")
	}
	return toWarm(pvc, pvc.Annotations[v1alpha1.CheckoutIDAnnotationKey]), nil
}

// EndReservation turns claim pvc, reserved by owner and handed out by it
// at handedOut, whose pod nothing has recorded since, into a claim
// checked out at handedOut for a pod: the reservation goes, and the
// claim gets its finalizer. Only owner knows it handed the claim out, so
// only owner ends the reservation, once no pod admitted with the claim
// can still be stored (AdmissionBound after handedOut): the binding
// controller then takes it for a claim whose pod never came (after its
// proof that none was created with it) or drains it, instead of waiting
// for the end of owner's Lease, which may never come while owner lives.
// The update is conditioned on the version read.
func EndReservation(pvc *corev1.PersistentVolumeClaim, owner string, handedOut time.Time) (Write, error) {
	if by, _, ok := Reservation(pvc); !ok || by != owner {
		return Write{}, refuse("end the reservation of", pvc, "it is not reserved by "+owner)
	}
	if used, _ := PodOf(pvc); used.UID != "" {
		return Write{}, refuse("end the reservation of", pvc, "it records its pod")
	}
	if !pvc.DeletionTimestamp.IsZero() {
		return Write{}, refuse("end the reservation of", pvc, "it is being deleted")
	}
	out := pvc.DeepCopy()
	delete(out.Annotations, v1alpha1.ReservedByAnnotationKey)
	delete(out.Annotations, v1alpha1.ReservedUntilAnnotationKey)
	setAnnotation(out, v1alpha1.AdmittedAtAnnotationKey, handedOut.UTC().Format(time.RFC3339Nano))
	controllerutil.AddFinalizer(out, v1alpha1.PVCProtectionFinalizer)
	return Write{Op: OpUpdate, Object: out, Precondition: preconditionOf(pvc)}, nil
}

// Delete deletes released claim pvc of binding b. It is refused while the
// operator's finalizer holds it (Release comes first) and unless pvc is
// the checkout b records; a claim being deleted already needs no write.
func Delete(b *v1alpha1.FluentPVCBinding, pvc *corev1.PersistentVolumeClaim) (Write, error) {
	if !SameCheckout(b, pvc) {
		return Write{}, refuse("delete", pvc, "it is no longer the checkout binding "+b.Name+" records")
	}
	if Keeps(pvc) {
		return Write{}, refuse("delete", pvc, "a held claim is released first")
	}
	if !pvc.DeletionTimestamp.IsZero() {
		return Write{Op: OpSkip, Object: pvc}, nil
	}
	pre := preconditionOf(pvc)
	pre.CheckoutID = b.Annotations[v1alpha1.CheckoutIDAnnotationKey]
	return Write{Op: OpDelete, Object: pvc.DeepCopy(), Precondition: pre}, nil
}

// DeleteWarm deletes warm PVC pvc from the pool: its FluentPVC shrank,
// changed its template, or the PVC is replaced. Conditioned on the UID and
// version read, so that a PVC the webhook has just checked out has moved
// on and is not deleted.
func DeleteWarm(pvc *corev1.PersistentVolumeClaim) (Write, error) {
	if StateOf(pvc) != Warm {
		return Write{}, refuse("delete", pvc, "the pool deletes only warm PVCs")
	}
	return Write{Op: OpDelete, Object: pvc.DeepCopy(), Precondition: preconditionOf(pvc)}, nil
}

func preconditionOf(pvc *corev1.PersistentVolumeClaim) Precondition {
	return Precondition{UID: pvc.UID, ResourceVersion: pvc.ResourceVersion}
}

func setAnnotation(pvc *corev1.PersistentVolumeClaim, key, value string) {
	if pvc.Annotations == nil {
		pvc.Annotations = map[string]string{}
	}
	pvc.Annotations[key] = value
}
