package oracle

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// t0 is the time of the first fixture event.
var t0 = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

// auditLog builds a synthetic audit log: each write gets the next
// resourceVersion and a stage timestamp one second after the previous one.
type auditLog struct {
	rv     uint64
	n      int
	events []Event
}

func newAuditLog() *auditLog { return &auditLog{rv: 1000} }

// next is a fresh event with the next ID and timestamps.
func (l *auditLog) next(verb, user string, ref ObjectRef, code int32) Event {
	l.n++
	at := t0.Add(time.Duration(l.n) * time.Second)
	return Event{
		AuditID:                  fmt.Sprintf("audit-%03d", l.n),
		Stage:                    StageResponseComplete,
		RequestURI:               "/" + ref.Resource,
		Verb:                     verb,
		User:                     UserInfo{Username: user},
		ObjectRef:                &ref,
		ResponseStatus:           &ResponseStatus{Code: code},
		RequestReceivedTimestamp: at.Add(-20 * time.Millisecond),
		StageTimestamp:           at,
	}
}

// write logs a successful write of obj, whose response is obj as it is now,
// with the next resourceVersion.
func (l *auditLog) write(verb, group, resource, sub string, obj metav1.Object) *Event {
	l.rv++
	obj.SetResourceVersion(strconv.FormatUint(l.rv, 10))
	ref := ObjectRef{Resource: resource, Namespace: obj.GetNamespace(), Name: obj.GetName(), APIGroup: group, Subresource: sub}
	code := int32(200)
	if verb == "create" {
		code = 201
		ref.Name = "" // as with generateName: the name is read from the response
	}
	e := l.next(verb, "system:test", ref, code)
	raw, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	e.ResponseObject = raw
	l.events = append(l.events, e)
	return &l.events[len(l.events)-1]
}

// uid is a fresh UID for an object named name.
func (l *auditLog) uid(name string) types.UID {
	return types.UID(fmt.Sprintf("uid-%s-%d", name, l.n+1))
}

// warmPVC logs the pool's create of a warm PVC.
func (l *auditLog) warmPVC(ns, name string) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: l.uid(name), Labels: map[string]string{
			v1alpha1.FluentPVCNameLabelKey: "fpvc",
			v1alpha1.ClaimRoleLabelKey:     v1alpha1.ClaimRoleWarm,
		}},
	}
	l.write("create", "", "persistentvolumeclaims", "", pvc)
	return pvc
}

// userPVC logs the create of a PVC that is not the operator's.
func (l *auditLog) userPVC(ns, name string) {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: l.uid(name)}}
	l.write("create", "", "persistentvolumeclaims", "", pvc)
}

// checkout logs the webhook's checkout of warm PVC pvc.
func (l *auditLog) checkout(pvc *corev1.PersistentVolumeClaim) {
	pvc.Labels[v1alpha1.ClaimRoleLabelKey] = v1alpha1.ClaimRoleClaimed
	pvc.Labels[v1alpha1.BindingNameLabelKey] = pvc.Name
	pvc.Finalizers = append(pvc.Finalizers, v1alpha1.PVCProtectionFinalizer)
	l.write("update", "", "persistentvolumeclaims", "", pvc)
}

// reserve logs a replica's reservation of warm PVC pvc ahead of its pod:
// the checkout's write, with reserved-by.
func (l *auditLog) reserve(pvc *corev1.PersistentVolumeClaim) {
	if pvc.Annotations == nil {
		pvc.Annotations = map[string]string{}
	}
	pvc.Annotations[v1alpha1.ReservedByAnnotationKey] = "replica-a"
	pvc.Annotations[v1alpha1.UsedByPodAnnotationKey] = ""
	pvc.Labels[v1alpha1.ClaimRoleLabelKey] = v1alpha1.ClaimRoleClaimed
	pvc.Labels[v1alpha1.BindingNameLabelKey] = pvc.Name
	// Without pvc-protection until its pod is recorded (recordPod).
	l.write("update", "", "persistentvolumeclaims", "", pvc)
}

// recordPod logs the record of pod on claim pvc, which adds pvc-protection
// to a reservation.
func (l *auditLog) recordPod(pvc *corev1.PersistentVolumeClaim, pod string) {
	if pvc.Annotations == nil {
		pvc.Annotations = map[string]string{}
	}
	pvc.Annotations[v1alpha1.UsedByPodAnnotationKey] = pod + "/" + string(l.uid(pod))
	if !slices.Contains(pvc.Finalizers, v1alpha1.PVCProtectionFinalizer) {
		pvc.Finalizers = append(pvc.Finalizers, v1alpha1.PVCProtectionFinalizer)
	}
	l.write("update", "", "persistentvolumeclaims", "", pvc)
}

// claim logs the webhook's create of a claim on a pool miss.
func (l *auditLog) claim(ns, name string) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: name, UID: l.uid(name),
		Labels: map[string]string{
			v1alpha1.FluentPVCNameLabelKey: "fpvc",
			v1alpha1.BindingNameLabelKey:   name,
			v1alpha1.ClaimRoleLabelKey:     v1alpha1.ClaimRoleClaimed,
		},
		Finalizers: []string{v1alpha1.PVCProtectionFinalizer},
	}}
	l.write("create", "", "persistentvolumeclaims", "", pvc)
	return pvc
}

// release logs the removal of pvc-protection from pvc.
func (l *auditLog) release(pvc *corev1.PersistentVolumeClaim) {
	pvc.Finalizers = slices.DeleteFunc(pvc.Finalizers, func(f string) bool { return f == v1alpha1.PVCProtectionFinalizer })
	l.write("patch", "", "persistentvolumeclaims", "", pvc)
}

// returnWarm logs pvc's return to the pool.
func (l *auditLog) returnWarm(pvc *corev1.PersistentVolumeClaim) {
	pvc.Labels[v1alpha1.ClaimRoleLabelKey] = v1alpha1.ClaimRoleWarm
	delete(pvc.Labels, v1alpha1.BindingNameLabelKey)
	delete(pvc.Annotations, v1alpha1.ReservedByAnnotationKey)
	pvc.Finalizers = nil
	l.write("update", "", "persistentvolumeclaims", "", pvc)
}

// deletePVC logs a delete of pvc: removed at once without finalizers,
// otherwise marked with a deletionTimestamp.
func (l *auditLog) deletePVC(pvc *corev1.PersistentVolumeClaim) {
	if len(pvc.Finalizers) > 0 && pvc.DeletionTimestamp == nil {
		pvc.DeletionTimestamp = &metav1.Time{Time: t0.Add(time.Duration(l.n+1) * time.Second)}
	}
	l.write("delete", "", "persistentvolumeclaims", "", pvc)
}

// deletePVCAs logs a delete of pvc that the admin requested as user
// (impersonation).
func (l *auditLog) deletePVCAs(pvc *corev1.PersistentVolumeClaim, user string) {
	l.deletePVC(pvc)
	l.events[len(l.events)-1].ImpersonatedUser = &UserInfo{Username: user}
}

// deleteCollection logs a deletecollection of PVCs answered with pvcs:
// each removed at once without finalizers, otherwise marked.
func (l *auditLog) deleteCollection(ns string, pvcs ...*corev1.PersistentVolumeClaim) {
	list := &corev1.PersistentVolumeClaimList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaimList"}}
	for _, pvc := range pvcs {
		l.rv++
		pvc.ResourceVersion = strconv.FormatUint(l.rv, 10)
		if len(pvc.Finalizers) > 0 && pvc.DeletionTimestamp == nil {
			pvc.DeletionTimestamp = &metav1.Time{Time: t0}
		}
		list.Items = append(list.Items, *pvc)
	}
	e := l.next("deletecollection", "system:serviceaccount:kube-system:namespace-controller", ObjectRef{Resource: "persistentvolumeclaims", Namespace: ns}, 200)
	e.ResponseObject, _ = json.Marshal(list)
	l.events = append(l.events, e)
}

// deleteAnsweredByStatus logs a delete of pvc answered by a Status: the
// object was removed at once.
func (l *auditLog) deleteAnsweredByStatus(pvc *corev1.PersistentVolumeClaim) {
	e := l.next("delete", "system:test", ObjectRef{Resource: "persistentvolumeclaims", Namespace: pvc.Namespace, Name: pvc.Name}, 200)
	e.ResponseObject, _ = json.Marshal(&metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusSuccess,
		Details:  &metav1.StatusDetails{Name: pvc.Name, Kind: "persistentvolumeclaims", UID: pvc.UID},
	})
	l.events = append(l.events, e)
}

// pod logs the create of a labelled pod mounting claim and the PVCs in
// more, and returns it.
func (l *auditLog) pod(ns, name, claim string, more ...string) *corev1.Pod {
	pod := labelledPod(ns, name, claim, more...)
	pod.UID = l.uid(name)
	l.write("create", "", "pods", "", pod)
	return pod
}

// operatorUser is the operator's username in the fixtures (Options.Operator).
const operatorUser = "system:operator"

// holderPod is the holder pod of warm PVC pvc as the operator makes it:
// labelled, controlled by pvc, mounting it read-only.
func holderPod(pvc *corev1.PersistentVolumeClaim) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: pvc.Namespace, Name: pvc.Name + "-hold",
		Labels: map[string]string{
			v1alpha1.FluentPVCNameLabelKey: pvc.Labels[v1alpha1.FluentPVCNameLabelKey],
			v1alpha1.ComponentLabelKey:     v1alpha1.ComponentHolder,
			v1alpha1.WarmClaimLabelKey:     pvc.Name,
		},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "PersistentVolumeClaim", Name: pvc.Name, UID: pvc.UID, Controller: ptr.To(true),
		}},
	}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "claim", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name, ReadOnly: true},
	}}}
	pod.Spec.Containers = []corev1.Container{{Name: "hold", VolumeMounts: []corev1.VolumeMount{{Name: "claim", MountPath: "/held", ReadOnly: true}}}}
	return pod
}

// holder logs user's create of the holder pod of pvc (holderPod).
func (l *auditLog) holder(pvc *corev1.PersistentVolumeClaim, user string) *corev1.Pod {
	return l.createPodAs(holderPod(pvc), user)
}

// createPodAs logs user's create of pod, with a fresh UID, and returns it.
func (l *auditLog) createPodAs(pod *corev1.Pod, user string) *corev1.Pod {
	pod.UID = l.uid(pod.Name)
	l.write("create", "", "pods", "", pod)
	l.events[len(l.events)-1].User = UserInfo{Username: user}
	return pod
}

// deletePod logs user's delete of pod (whose grace period, 0, removes it
// at once).
func (l *auditLog) deletePod(pod *corev1.Pod, user string) {
	pod.DeletionTimestamp = &metav1.Time{Time: t0.Add(time.Duration(l.n+1) * time.Second)}
	l.write("delete", "", "pods", "", pod)
	l.events[len(l.events)-1].User = UserInfo{Username: user}
}

// bind logs the scheduler's binding of pod to a node (pods/binding,
// answered by a Status).
func (l *auditLog) bind(pod *corev1.Pod) {
	e := l.next("create", "system:kube-scheduler", ObjectRef{Resource: "pods", Namespace: pod.Namespace, Name: pod.Name, Subresource: "binding"}, 201)
	e.RequestObject, _ = json.Marshal(&corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: "node-1"},
	})
	e.ResponseObject, _ = json.Marshal(&metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusSuccess})
	l.events = append(l.events, e)
	pod.Spec.NodeName = "node-1"
}

// leaseName is the operator's leader-election Lease in the fixtures
// (Options.Lease).
const leaseName = "default/fluent-pvc-operator.tech.zozo.com"

// lease logs a write of the operator's Lease by holder: a renewal, or a
// new leader's taking of it.
func (l *auditLog) lease(holder string) {
	ns, name, _ := strings.Cut(leaseName, "/")
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: "uid-lease"}}
	lease.Spec.HolderIdentity = &holder
	l.write("update", "coordination.k8s.io", "leases", "", lease)
}

// start logs the node's status write that shows pod Running.
func (l *auditLog) start(pod *corev1.Pod) {
	pod.Status.Phase = corev1.PodRunning
	l.write("patch", "", "pods", "status", pod)
}

// unlabelledPod logs the create of a pod without the opt-in and binding
// labels that mounts the PVCs claims, as a copy made by kubectl debug
// --copy-to does.
func (l *auditLog) unlabelledPod(ns, name string, claims ...string) {
	pod := labelledPod(ns, name, claims[0], claims[1:]...)
	pod.Labels = map[string]string{"app": "debug"}
	pod.UID = l.uid(name)
	l.write("create", "", "pods", "", pod)
}

// failedOpenPod is unlabelledPod admitted without an answer of webhook
// (failure policy Ignore), as the API server's audit annotation says.
func (l *auditLog) failedOpenPod(ns, name, webhook string, claims ...string) {
	pod := labelledPod(ns, name, claims[0], claims[1:]...)
	pod.Labels = map[string]string{"app": "debug"}
	pod.UID = l.uid(name)
	e := l.write("create", "", "pods", "", pod)
	e.Annotations = map[string]string{failedOpenKeyPrefix + "round_0_index_1": webhook}
}

// drainPod logs the Job controller's create of the pod of drain Job job.
func (l *auditLog) drainPod(job *batchv1.Job) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + "-x", UID: l.uid(job.Name + "-x"), Labels: map[string]string{
			v1alpha1.ComponentLabelKey: v1alpha1.ComponentDrain,
		}},
		Spec: job.Spec.Template.Spec,
	}
	l.write("create", "", "pods", "", pod)
}

// deniedPod logs a create of a labelled pod that was denied.
func (l *auditLog) deniedPod(ns, name, claim string) {
	e := l.next("create", "system:test", ObjectRef{Resource: "pods", Namespace: ns}, 403)
	raw, _ := json.Marshal(labelledPod(ns, name, claim))
	e.RequestObject = raw
	l.events = append(l.events, e)
}

// dryRunPod logs a successful dry-run create of a labelled pod.
func (l *auditLog) dryRunPod(ns, name, claim string) {
	e := l.write("create", "", "pods", "", labelledPod(ns, name, claim))
	e.RequestURI = "/api/v1/namespaces/" + ns + "/pods?dryRun=All"
}

func labelledPod(ns, name, claim string, more ...string) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
		v1alpha1.FluentPVCNameLabelKey: "fpvc",
		v1alpha1.BindingNameLabelKey:   claim,
	}}}
	for i, c := range append([]string{claim}, more...) {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{
			Name:         fmt.Sprintf("v%d", i),
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}},
		})
	}
	return pod
}

// job logs the create of a Job named name mounting claim, labelled with
// component (none if "").
func (l *auditLog) job(ns, name, claim, component string) *batchv1.Job {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: l.uid(name), Labels: map[string]string{}}}
	if component != "" {
		job.Labels[v1alpha1.ComponentLabelKey] = component
	}
	job.Spec.Template.Spec.Volumes = []corev1.Volume{{
		Name:         "claim",
		VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}},
	}}
	l.write("create", "batch", "jobs", "", job)
	return job
}

// drainJob logs the create of claim pvc's attempt-th drain Job.
func (l *auditLog) drainJob(pvc *corev1.PersistentVolumeClaim, attempt int) *batchv1.Job {
	return l.job(pvc.Namespace, fmt.Sprintf("%s-drain-%d", pvc.Name, attempt), pvc.Name, v1alpha1.ComponentDrain)
}

// complete logs the Job controller's status update that makes job Complete.
func (l *auditLog) complete(job *batchv1.Job) {
	job.Status.Conditions = append(job.Status.Conditions, batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue})
	l.write("update", "batch", "jobs", "status", job)
}

// fail logs the Job controller's status update that makes job Failed.
func (l *auditLog) fail(job *batchv1.Job) {
	job.Status.Conditions = append(job.Status.Conditions, batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue})
	l.write("update", "batch", "jobs", "status", job)
}

// createNamespace and deleteNamespace log a namespace's create and delete.
func (l *auditLog) createNamespace(name string) {
	l.write("create", "", "namespaces", "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, UID: l.uid(name)}})
}

func (l *auditLog) deleteNamespace(name string) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, DeletionTimestamp: &metav1.Time{Time: t0}}}
	ns.Status.Phase = corev1.NamespaceTerminating
	l.write("delete", "", "namespaces", "", ns)
}

// abandoned logs the operator's create, through events.k8s.io, of the
// ClaimAbandoned Warning about claim, on FluentPVC fpvc. Like the policy
// asks, only the request is logged.
func (l *auditLog) abandoned(claim *corev1.PersistentVolumeClaim) {
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "fpvc.1873"},
		Reason:     v1alpha1.EventReasonAbandoned,
		Type:       corev1.EventTypeWarning,
		Regarding:  corev1.ObjectReference{Kind: "FluentPVC", Name: "fpvc"},
		Note: fmt.Sprintf("namespace %s is being deleted: claim %s was released without draining its data",
			claim.Namespace, claim.Name),
	}
	e := l.next("create", "system:operator", ObjectRef{Resource: "events", Namespace: "default", APIGroup: "events.k8s.io"}, 201)
	raw, _ := json.Marshal(ev)
	e.RequestObject = raw
	l.events = append(l.events, e)
}

// drainAndDelete logs a successful drain of pvc, its release and deletion.
func (l *auditLog) drainAndDelete(pvc *corev1.PersistentVolumeClaim, attempt int) {
	l.complete(l.drainJob(pvc, attempt))
	l.release(pvc)
	l.deletePVC(pvc)
}
