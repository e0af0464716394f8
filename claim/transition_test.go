package claim_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// states are a claim in each state its life can reach, as read: each
// with a UID and a resourceVersion, for the preconditions.
func states() map[string]*corev1.PersistentVolumeClaim {
	stamp := func(c *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
		c.UID, c.ResourceVersion = "uid-1", "7"
		return c
	}
	warm := stamp(claim.NewWarm(fixtures.MakeFluentPVC("f").Obj(), "ns", "h", "").Object)
	warm.Name = "f-abc"
	bound := with(warm, func(c *corev1.PersistentVolumeClaim) { c.Status.Phase = corev1.ClaimBound })
	claimed := stamp(newClaimed())
	deletedAt := &metav1.Time{Time: fixtures.Epoch}
	return map[string]*corev1.PersistentVolumeClaim{
		"warm":            warm,
		"warm, bound":     bound,
		"warm, deleting":  with(bound, func(c *corev1.PersistentVolumeClaim) { c.DeletionTimestamp = deletedAt }),
		"claimed":         claimed,
		"used":            with(claimed, func(c *corev1.PersistentVolumeClaim) { c.Annotations[v1alpha1.UsedByPodAnnotationKey] = "app/pod-uid" }),
		"used, untracked": with(claimed, func(c *corev1.PersistentVolumeClaim) { delete(c.Annotations, v1alpha1.UsedByPodAnnotationKey) }),
		"used, deleting": with(claimed, func(c *corev1.PersistentVolumeClaim) {
			c.Annotations[v1alpha1.UsedByPodAnnotationKey] = "app/pod-uid"
			c.DeletionTimestamp = deletedAt
		}),
		"released": with(claimed, func(c *corev1.PersistentVolumeClaim) { c.Finalizers, c.DeletionTimestamp = nil, deletedAt }),
		"kept":     with(claimed, func(c *corev1.PersistentVolumeClaim) { c.Finalizers = nil }),
		"kept for deletion": with(claimed, func(c *corev1.PersistentVolumeClaim) {
			c.Finalizers = nil
			c.Annotations[v1alpha1.ReleasedForDeletionAnnotationKey] = "true"
		}),
		"another checkout": with(claimed, func(c *corev1.PersistentVolumeClaim) { c.Annotations[v1alpha1.CheckoutIDAnnotationKey] = "next" }),
		"reserved":         reserved(claimed),
		"reserved, used": with(reserved(claimed), func(c *corev1.PersistentVolumeClaim) {
			c.Annotations[v1alpha1.UsedByPodAnnotationKey] = "app/pod-uid"
		}),
		"reserved, deleting": with(reserved(claimed), func(c *corev1.PersistentVolumeClaim) { c.DeletionTimestamp = deletedAt }),
		// As Reserve makes it: no finalizer until its pod is recorded.
		"reserved, unprotected": with(reserved(claimed), func(c *corev1.PersistentVolumeClaim) { c.Finalizers = nil }),
		"reserved, unprotected, deleting": with(reserved(claimed), func(c *corev1.PersistentVolumeClaim) {
			c.Finalizers, c.DeletionTimestamp = nil, deletedAt
		}),
		"not the operator's": stamp(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "f-abc", Namespace: "ns"}}),
	}
}

// reserved is claimed c reserved ahead of its pod by replica "replica-a".
func reserved(c *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
	return with(c, func(c *corev1.PersistentVolumeClaim) {
		c.Annotations[v1alpha1.ReservedByAnnotationKey] = "replica-a"
	})
}

// outcome is what a transition does to a claim in a state: refused, a
// write that leaves it in state to, or no write at all (skip).
type outcome struct {
	refused bool
	op      claim.Op
	to      claim.State
}

var (
	refused = outcome{refused: true}
	skip    = outcome{op: claim.OpSkip}
)

func writes(op claim.Op, to claim.State) outcome { return outcome{op: op, to: to} }

// TestTransitions runs every transition on a claim in every state: what a
// transition may not do (return a claim a pod used, delete a claim still
// held, release another checkout's claim) is refused, with nothing to
// write.
func TestTransitions(t *testing.T) {
	// The binding of the claim's checkout (token "token").
	b := claim.Binding(newClaimed(), "")
	b.Spec.PVC.UID = "uid-1"
	pod := v1alpha1.ObjectIdentity{Name: "app", UID: "pod-uid"}
	other := v1alpha1.ObjectIdentity{Name: "copy", UID: "copy-uid"}
	transitions := map[string]func(*corev1.PersistentVolumeClaim) (claim.Write, error){
		"SelectNode":     func(c *corev1.PersistentVolumeClaim) (claim.Write, error) { return claim.SelectNode(c, "node-1") },
		"RecordAffinity": func(c *corev1.PersistentVolumeClaim) (claim.Write, error) { return claim.RecordAffinity(c, "z1", "") },
		"Checkout": func(c *corev1.PersistentVolumeClaim) (claim.Write, error) {
			return claim.Checkout(c, fixtures.Epoch, "new-token")
		},
		"RecordPod":        func(c *corev1.PersistentVolumeClaim) (claim.Write, error) { return claim.RecordPod(c, pod) },
		"RecordPod, other": func(c *corev1.PersistentVolumeClaim) (claim.Write, error) { return claim.RecordPod(c, other) },
		"Release":          func(c *corev1.PersistentVolumeClaim) (claim.Write, error) { return claim.Release(b, c) },
		"ReleaseForDeletion": func(c *corev1.PersistentVolumeClaim) (claim.Write, error) {
			return claim.ReleaseForDeletion(b, c)
		},
		"DeleteReleased": claim.DeleteReleased,
		"ReleaseUnbound": claim.ReleaseUnbound,
		"Return":         func(c *corev1.PersistentVolumeClaim) (claim.Write, error) { return claim.Return(b, c) },
		"Reserve": func(c *corev1.PersistentVolumeClaim) (claim.Write, error) {
			return claim.Reserve(c, fixtures.Epoch, "replica-a", "new-token")
		},
		"Unreserve":                func(c *corev1.PersistentVolumeClaim) (claim.Write, error) { return claim.Unreserve(c, "replica-a") },
		"Unreserve, other replica": func(c *corev1.PersistentVolumeClaim) (claim.Write, error) { return claim.Unreserve(c, "replica-b") },
		"EndReservation": func(c *corev1.PersistentVolumeClaim) (claim.Write, error) {
			return claim.EndReservation(c, "replica-a", fixtures.Epoch)
		},
		"EndReservation, other replica": func(c *corev1.PersistentVolumeClaim) (claim.Write, error) {
			return claim.EndReservation(c, "replica-b", fixtures.Epoch)
		},
		"Delete":     func(c *corev1.PersistentVolumeClaim) (claim.Write, error) { return claim.Delete(b, c) },
		"DeleteWarm": claim.DeleteWarm,
	}
	// want[transition][state]
	want := map[string]map[string]outcome{
		"SelectNode": {
			"warm": writes(claim.OpPatch, claim.Warm),
		},
		"RecordAffinity": {
			"warm": writes(claim.OpPatch, claim.Warm), "warm, bound": writes(claim.OpPatch, claim.Warm), "warm, deleting": writes(claim.OpPatch, claim.Warm),
		},
		"Checkout": {
			"warm": writes(claim.OpUpdate, claim.Claimed), "warm, bound": writes(claim.OpUpdate, claim.Claimed),
		},
		"Reserve": {
			"warm": writes(claim.OpUpdate, claim.Claimed), "warm, bound": writes(claim.OpUpdate, claim.Claimed),
		},
		// Only the replica that holds a reservation gives the claim back,
		// and only while the claim records no pod: a claim recording one
		// may hold its data.
		"Unreserve": {
			"reserved": writes(claim.OpUpdate, claim.Warm), "reserved, unprotected": writes(claim.OpUpdate, claim.Warm),
		},
		// Only the replica that holds a reservation ends it, and only while
		// no pod is recorded and the claim is not being deleted: it becomes
		// a claim checked out for a pod, with its finalizer.
		"EndReservation": {
			"reserved": writes(claim.OpUpdate, claim.Claimed), "reserved, unprotected": writes(claim.OpUpdate, claim.Claimed),
		},
		// Tested on the claim's checkout token rather than the version
		// read; a claim without a token (not the operator's) on the version.
		// A reservation gets its finalizer with the record, by an update
		// conditioned on the version read.
		"RecordPod": {
			"reserved, unprotected": writes(claim.OpUpdate, claim.Used), "reserved, unprotected, deleting": writes(claim.OpGuardedPatch, claim.Released),
			"reserved": writes(claim.OpGuardedPatch, claim.Used), "reserved, used": skip, "reserved, deleting": writes(claim.OpGuardedPatch, claim.Used),
			"claimed": writes(claim.OpGuardedPatch, claim.Used), "used": skip, "used, untracked": writes(claim.OpGuardedPatch, claim.Used),
			"used, deleting": skip, "another checkout": writes(claim.OpGuardedPatch, claim.Used),
			"released": writes(claim.OpGuardedPatch, claim.Released), "kept": writes(claim.OpGuardedPatch, claim.Kept),
			"kept for deletion": writes(claim.OpGuardedPatch, claim.Kept), "not the operator's": writes(claim.OpPatch, claim.None),
		},
		"RecordPod, other": {
			"reserved, unprotected": writes(claim.OpUpdate, claim.Used), "reserved, unprotected, deleting": writes(claim.OpGuardedPatch, claim.Released),
			"reserved": writes(claim.OpGuardedPatch, claim.Used), "reserved, used": writes(claim.OpGuardedPatch, claim.Used),
			"reserved, deleting": writes(claim.OpGuardedPatch, claim.Used),
			"claimed":            writes(claim.OpGuardedPatch, claim.Used), "used": writes(claim.OpGuardedPatch, claim.Used), "used, untracked": writes(claim.OpGuardedPatch, claim.Used),
			"used, deleting": writes(claim.OpGuardedPatch, claim.Used), "another checkout": writes(claim.OpGuardedPatch, claim.Used),
			"released": writes(claim.OpGuardedPatch, claim.Released), "kept": writes(claim.OpGuardedPatch, claim.Kept),
			"kept for deletion": writes(claim.OpGuardedPatch, claim.Kept), "not the operator's": writes(claim.OpPatch, claim.None),
		},
		"Release": {
			"reserved, unprotected": writes(claim.OpPatch, claim.Kept), "reserved, unprotected, deleting": skip,
			"reserved": writes(claim.OpPatch, claim.Kept), "reserved, used": writes(claim.OpPatch, claim.Kept),
			"reserved, deleting": writes(claim.OpPatch, claim.Released),
			"claimed":            writes(claim.OpPatch, claim.Kept), "used": writes(claim.OpPatch, claim.Kept), "used, untracked": writes(claim.OpPatch, claim.Kept),
			"used, deleting": writes(claim.OpPatch, claim.Released), "released": skip, "kept": skip, "kept for deletion": skip,
		},
		"ReleaseForDeletion": {
			"reserved, unprotected": writes(claim.OpPatch, claim.Kept), "reserved, unprotected, deleting": skip,
			"reserved": writes(claim.OpPatch, claim.Kept), "reserved, used": writes(claim.OpPatch, claim.Kept),
			"reserved, deleting": writes(claim.OpPatch, claim.Released),
			"claimed":            writes(claim.OpPatch, claim.Kept), "used": writes(claim.OpPatch, claim.Kept), "used, untracked": writes(claim.OpPatch, claim.Kept),
			"used, deleting": writes(claim.OpPatch, claim.Released), "released": skip, "kept": skip, "kept for deletion": skip,
		},
		// Only a claim let go of in order to be deleted is deleted without
		// its binding; one kept for the user, or still held, is not.
		"DeleteReleased": {
			"released": skip, "reserved, unprotected, deleting": skip, "kept for deletion": writes(claim.OpDelete, claim.None),
		},
		"ReleaseUnbound": {
			"reserved, unprotected": writes(claim.OpPatch, claim.Kept),
			"reserved":              writes(claim.OpPatch, claim.Kept), "reserved, used": writes(claim.OpPatch, claim.Kept),
			"reserved, deleting": writes(claim.OpPatch, claim.Released),
			"claimed":            writes(claim.OpPatch, claim.Kept), "used": writes(claim.OpPatch, claim.Kept), "used, untracked": writes(claim.OpPatch, claim.Kept),
			"used, deleting": writes(claim.OpPatch, claim.Released), "another checkout": writes(claim.OpPatch, claim.Kept),
		},
		"Return": {
			"claimed": writes(claim.OpUpdate, claim.Warm), "reserved": writes(claim.OpUpdate, claim.Warm),
			"reserved, unprotected": writes(claim.OpUpdate, claim.Warm),
			"reserved, deleting":    writes(claim.OpUpdate, claim.Warm),
		},
		"Delete": {
			"released": skip, "reserved, unprotected, deleting": skip, "kept": writes(claim.OpDelete, claim.None), "kept for deletion": writes(claim.OpDelete, claim.None),
		},
		"DeleteWarm": {
			"warm": writes(claim.OpDelete, claim.None), "warm, bound": writes(claim.OpDelete, claim.None), "warm, deleting": writes(claim.OpDelete, claim.None),
		},
	}
	for tname, transition := range transitions {
		for sname, pvc := range states() {
			t.Run(tname+"/"+sname, func(t *testing.T) {
				wantOut, ok := want[tname][sname]
				if !ok {
					wantOut = refused
				}
				before := pvc.DeepCopy()
				w, err := transition(pvc)
				if diff := cmp.Diff(before, pvc); diff != "" {
					t.Fatalf("the transition changed the claim it read (-before +after):\n%s", diff)
				}
				var r *claim.RefusedError
				if wantOut.refused {
					if !errors.As(err, &r) {
						t.Fatalf("got %v, %v; want refused", w.Op, err)
					}
					return
				}
				if err != nil {
					t.Fatalf("refused: %v; want %+v", err, wantOut)
				}
				if w.Op != wantOut.op {
					t.Fatalf("op = %q, want %q", w.Op, wantOut.op)
				}
				if w.Op == claim.OpSkip {
					return
				}
				if got := w.To(); got != wantOut.to {
					t.Errorf("leaves the claim %q, want %q", got, wantOut.to)
				}
				// Every write to an existing claim is conditioned on the
				// object read; only the record of a warm PVC's affinity,
				// written by the pool alone, carries no resourceVersion.
				if w.Precondition.UID != pvc.UID {
					t.Errorf("precondition UID = %q, want %q", w.Precondition.UID, pvc.UID)
				}
				wantRV := pvc.ResourceVersion
				if tname == "RecordAffinity" || w.Op == claim.OpGuardedPatch {
					wantRV = ""
				}
				if w.Op == claim.OpGuardedPatch && (w.Precondition.CheckoutID == "" || w.Precondition.CheckoutID != pvc.Annotations[v1alpha1.CheckoutIDAnnotationKey]) {
					t.Errorf("guarded patch tests checkout token %q, want the one read, %q", w.Precondition.CheckoutID, pvc.Annotations[v1alpha1.CheckoutIDAnnotationKey])
				}
				if w.Precondition.ResourceVersion != wantRV {
					t.Errorf("precondition resourceVersion = %q, want %q", w.Precondition.ResourceVersion, wantRV)
				}
				if w.Op == claim.OpUpdate && w.Object.ResourceVersion != pvc.ResourceVersion {
					t.Errorf("update carries resourceVersion %q, want the one read, %q", w.Object.ResourceVersion, pvc.ResourceVersion)
				}
				if w.Op == claim.OpPatch && w.From != pvc {
					t.Errorf("patch is not based on the object read")
				}
			})
		}
	}
}

// TestCheckoutAndReturn follows a warm PVC through a checkout and back:
// the checkout writes every key a held claim needs, and a return removes
// them all, so that the returned PVC is a warm PVC like any other.
func TestCheckoutAndReturn(t *testing.T) {
	warm := claim.NewWarm(fixtures.MakeFluentPVC("f").Obj(), "ns", "h", "node-1").Object
	warm.Status.Phase, warm.ResourceVersion = corev1.ClaimBound, "41"
	out, err := claim.Checkout(warm, fixtures.Epoch, "token")
	if err != nil {
		t.Fatal(err)
	}
	c := out.Object
	if !claim.Held(c) || c.Labels[v1alpha1.BindingNameLabelKey] != c.Name || !controllerutil.ContainsFinalizer(c, v1alpha1.PVCProtectionFinalizer) {
		t.Errorf("checked out claim is not held under its own name: %+v", c.ObjectMeta)
	}
	wantAnnotations := map[string]string{
		v1alpha1.SelectedNodeAnnotationKey: "node-1",
		v1alpha1.AdmittedAtAnnotationKey:   "2026-01-01T00:00:00Z",
		v1alpha1.CheckoutAnnotationKey:     v1alpha1.CheckoutHit,
		v1alpha1.UsedByPodAnnotationKey:    "",
		v1alpha1.CheckoutIDAnnotationKey:   "token",
		// Pods created with it come after the version it was read at.
		v1alpha1.PodsSinceAnnotationKey: "41",
	}
	if diff := cmp.Diff(wantAnnotations, c.Annotations); diff != "" {
		t.Errorf("checked out annotations (-want +got):\n%s", diff)
	}
	back, err := claim.Return(claim.Binding(c, ""), c)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(warm, back.Object, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("returned claim differs from the warm PVC it was (-want +got):\n%s", diff)
	}
}

// TestReserveAndUnreserve follows a warm PVC through a reservation and
// back: the reservation writes what a checkout writes and names its
// holder; giving it back removes every key, so that the PVC is a warm PVC
// like any other; ending it leaves a claim checked out at its handout; a
// pod recorded since ends the reservation. A
// reservation that names its end is read with it.
func TestReserveAndUnreserve(t *testing.T) {
	warm := claim.NewWarm(fixtures.MakeFluentPVC("f").Obj(), "ns", "h", "node-1").Object
	warm.Status.Phase, warm.ResourceVersion = corev1.ClaimBound, "41"
	out, err := claim.Reserve(warm, fixtures.Epoch, "ns/replica-a", "token")
	if err != nil {
		t.Fatal(err)
	}
	c := out.Object
	if !claim.Held(c) || claim.StateOf(c) != claim.Claimed {
		t.Errorf("reserved claim is not held and Claimed: %+v", c.ObjectMeta)
	}
	if controllerutil.ContainsFinalizer(c, v1alpha1.PVCProtectionFinalizer) {
		t.Errorf("a reservation with no pod carries the finalizer, which would hold up its namespace's deletion")
	}
	recorded, err := claim.RecordPod(c, v1alpha1.ObjectIdentity{Name: "app", UID: "pod-uid"})
	if err != nil || !controllerutil.ContainsFinalizer(recorded.Object, v1alpha1.PVCProtectionFinalizer) {
		t.Errorf("RecordPod on a reservation = %v, %v; want the finalizer added", recorded.Object.Finalizers, err)
	}
	let, err := claim.Release(claim.Binding(c, ""), c)
	if err != nil || claim.StateOf(let.Object) != claim.Kept || claim.Reserved(let.Object) {
		t.Errorf("Release of a reservation = %v, %v; want it Kept, no longer reserved", let.Object.Annotations, err)
	}
	by, gotUntil, ok := claim.Reservation(c)
	if !ok || by != "ns/replica-a" || !gotUntil.IsZero() {
		t.Errorf("Reservation = %q, %v, %v; want ns/replica-a, no end, true", by, gotUntil, ok)
	}
	checkedOut, err := claim.Checkout(warm, fixtures.Epoch, "token")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range checkedOut.Object.Annotations {
		if c.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want the checkout's %q", k, c.Annotations[k], v)
		}
	}
	handedOut := fixtures.Epoch.Add(time.Hour)
	ended, err := claim.EndReservation(c, "ns/replica-a", handedOut)
	if err != nil {
		t.Fatal(err)
	}
	if claim.Reserved(ended.Object) || claim.StateOf(ended.Object) != claim.Claimed || !controllerutil.ContainsFinalizer(ended.Object, v1alpha1.PVCProtectionFinalizer) {
		t.Errorf("EndReservation = %v, %v; want a Claimed claim, not reserved, with the finalizer", ended.Object.Annotations, ended.Object.Finalizers)
	}
	if at, ok := claim.AdmittedAt(ended.Object.Annotations); !ok || !at.Equal(handedOut) {
		t.Errorf("EndReservation admitted at %v, want the handout's %v", at, handedOut)
	}
	back, err := claim.Unreserve(c, "ns/replica-a")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(warm, back.Object, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("claim given back differs from the warm PVC it was (-want +got):\n%s", diff)
	}
	used := c.DeepCopy()
	used.Annotations[v1alpha1.UsedByPodAnnotationKey] = "app/pod-uid"
	if _, _, ok := claim.Reservation(used); ok {
		t.Errorf("a claim recording its pod is still reserved")
	}
	if !claim.Reserved(used) {
		t.Errorf("a claim reserved ahead of its pod that records it since is not Reserved")
	}
	until := fixtures.Epoch.Add(time.Minute)
	named := c.DeepCopy()
	named.Annotations[v1alpha1.ReservedUntilAnnotationKey] = until.Format(time.RFC3339Nano)
	if _, got, ok := claim.Reservation(named); !ok || !got.Equal(until) {
		t.Errorf("Reservation's end = %v, %v; want %v, true", got, ok, until)
	}
	if _, err := claim.Reserve(warm, fixtures.Epoch, "", "token"); err == nil {
		t.Errorf("a reservation without its holder is not refused")
	}
}
