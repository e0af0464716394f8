package oracle

import (
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// ordering compares positions: by resourceVersion when both have one,
// unless byTime, else by stage timestamp, then by line.
type ordering struct {
	byTime bool
}

// before is true when a was committed before b.
func (o ordering) before(a, b position) bool {
	if !o.byTime && a.rv != 0 && b.rv != 0 && a.rv != b.rv {
		return a.rv < b.rv
	}
	if !o.byTime && a.rv != 0 && b.rv != 0 {
		return a.line < b.line
	}
	if !a.at.Equal(b.at) {
		return a.at.Before(b.at)
	}
	return a.line < b.line
}

// objRef names one object: namespace, name and, when known, UID.
type objRef struct {
	Namespace, Name string
	UID             types.UID
}

func (r objRef) String() string {
	s := r.Namespace + "/" + r.Name
	if r.UID != "" {
		s += " (uid " + string(r.UID) + ")"
	}
	return s
}

// podCreate is a successful create of a pod that is not one of the
// operator's own (drain, binder or holder) pods.
type podCreate struct {
	ev  *Event
	pos position
	pod objRef
	// labelled: the pod carries the opt-in label.
	labelled bool
	// binding is the pod's binding label: the name of its claim.
	binding string
	// volumes are the names of the PVCs the pod's volumes mount.
	volumes []string
	// failedOpen names the operator's mount webhook when the API server
	// admitted the pod without its answer (no replica answered, and its
	// failure policy is Ignore): "" otherwise.
	failedOpen string
}

// failedOpenKeyPrefix begins the audit annotation with which the API
// server records a validating webhook that it could not call and whose
// failure policy let the request through; its value is the webhook's name.
const failedOpenKeyPrefix = "failed-open.validating.webhook.admission.k8s.io/"

// mountWebhookPrefix begins the names of the operator's mount webhooks.
const mountWebhookPrefix = "mounts."

// failedOpenMount is the name of the operator's mount webhook that failed
// open on the request of e, or "".
func failedOpenMount(e *Event) string {
	for k, v := range e.Annotations {
		if strings.HasPrefix(k, failedOpenKeyPrefix) && strings.HasPrefix(v, mountWebhookPrefix) {
			return v
		}
	}
	return ""
}

// claimWrite is the state of a PVC after one logged write.
type claimWrite struct {
	ev  *Event
	pos position
	// held: the operator holds the claim (finalizer pvc-protection, or a
	// reservation that records no pod yet; not warm, not gone).
	held bool
	// gone: the write ended the PVC's existence.
	gone bool
	// finalizer: the PVC carries pvc-protection.
	finalizer bool
	// role is the claim-role label ("" when absent); binding the binding label.
	role, binding string
	// userDelete: the write is a delete one of Options.Users requested.
	userDelete bool
	// reserved: the PVC carries a reservation ahead of its pod
	// (reserved-by), whether or not it records its pod since.
	reserved bool
}

// claimLife is one PVC object (one UID) as the log shows it.
type claimLife struct {
	ref    objRef
	writes []claimWrite // ordered by position once the log is read
}

// reserved is true when a write shows the claim reserved ahead of its pod.
func (c *claimLife) reserved() bool {
	return slices.ContainsFunc(c.writes, func(w claimWrite) bool { return w.reserved })
}

// jobLife is one Job object (one UID) as the log shows it.
type jobLife struct {
	ref objRef
	// drain: the Job carries component=drain.
	drain bool
	// claims are the PVCs its pod template mounts.
	claims []string
	// created is the position of its create, if logged.
	created    position
	createdEv  *Event
	succeeded  position
	succeedEv  *Event
	hasCreate  bool
	hasSuccess bool
}

// nsChange is a logged create or delete of a namespace.
type nsChange struct {
	ev      *Event
	pos     position
	deleted bool
}

// warning is a created ClaimAbandoned Warning event.
type warning struct {
	ev *Event
	// text is the event's message (core) or note (events.k8s.io).
	text string
	// objects are the objects it is about (involvedObject/regarding, related).
	objects []objRef
}

// podMoment is the logged write that marks a moment of a pod's life.
type podMoment struct {
	ev  *Event
	pos position
}

// history is what the audit log says happened, per object.
type history struct {
	order ordering
	// users are the usernames of Options.Users; operator is Options.Operator.
	users    map[string]bool
	operator string
	pods     []podCreate
	// refused are the audit IDs of the creates of labelled pods without
	// a claim that the pod webhook denied (refusedFresh).
	refused []string
	// holders are the operator's holder pods, in log order.
	holders []holderLife
	// Moments of pods, by UID: the first binding to a node, the first
	// write that shows a container started, the first deletion request.
	bound, started, deleted map[types.UID]podMoment
	// lease names the operator's leader-election Lease (Options.Lease);
	// leaseWrites are its logged writes, ordered by position once the log
	// is read, and leaderless the spans in which no replica led.
	lease       string
	leaseWrites []leaseWrite
	leaderless  []span

	claims     map[types.UID]*claimLife
	claimNames map[string][]*claimLife // by "namespace/name"
	jobs       map[types.UID]*jobLife
	jobUIDs    []types.UID // in order of first sighting
	namespaces map[string][]nsChange
	warnings   []warning
	// drains are the succeeded drain Jobs of each claim UID.
	drains map[types.UID][]*jobLife
	// undecodable counts relevant successful writes whose objects did not decode.
	undecodable int
}

// buildHistory reads the successful, non-dry-run writes of events into a
// history, ordered as opts say; opts.Users are the usernames whose deletes
// are the users', opts.Operator the operator's.
func buildHistory(events []Event, opts Options) *history {
	order := ordering{byTime: opts.OrderByTime}
	h := &history{
		order:      order,
		users:      map[string]bool{},
		operator:   opts.Operator,
		lease:      opts.Lease,
		bound:      map[types.UID]podMoment{},
		started:    map[types.UID]podMoment{},
		deleted:    map[types.UID]podMoment{},
		claims:     map[types.UID]*claimLife{},
		claimNames: map[string][]*claimLife{},
		jobs:       map[types.UID]*jobLife{},
		namespaces: map[string][]nsChange{},
		drains:     map[types.UID][]*jobLife{},
	}
	for _, u := range opts.Users {
		h.users[u] = true
	}
	for i := range events {
		e := &events[i]
		if refusedFresh(e) {
			h.refused = append(h.refused, e.AuditID)
		}
		if e.ObjectRef == nil || !e.Succeeded() || e.DryRun() {
			continue
		}
		var ok bool
		switch {
		case e.is("", "pods", ""):
			ok = h.addPodWrite(e, i)
		case e.is("", "pods", "status"):
			ok = h.addPodStatus(e, i)
		case e.is("", "pods", "binding"):
			ok = e.Verb != "create" || h.addBinding(e, i)
		case e.is("", "persistentvolumeclaims", ""):
			ok = h.addClaimWrite(e, i)
		case e.ObjectRef.APIGroup == "batch" && e.ObjectRef.Resource == "jobs":
			ok = h.addJobWrite(e, i)
		case e.is("", "namespaces", ""):
			ok = h.addNamespace(e, i)
		case e.is("coordination.k8s.io", "leases", ""):
			ok = h.addLeaseWrite(e, i)
		case e.ObjectRef.Resource == "events" && (e.ObjectRef.APIGroup == "" || e.ObjectRef.APIGroup == "events.k8s.io"):
			ok = e.Verb != "create" || h.addEvent(e)
		default:
			ok = true
		}
		if !ok {
			h.undecodable++
		}
	}
	for _, c := range h.claims {
		sort.SliceStable(c.writes, func(i, j int) bool { return order.before(c.writes[i].pos, c.writes[j].pos) })
	}
	for _, chs := range h.namespaces {
		sort.SliceStable(chs, func(i, j int) bool { return order.before(chs[i].pos, chs[j].pos) })
	}
	h.attributeDrains()
	h.findLeaderless()
	return h
}

// podWebhookDenial starts the message of a pod create that the operator's
// pod webhook denied.
const podWebhookDenial = `admission webhook "pod.fluent-pvc-operator.tech.zozo.com" denied the request`

// refusedFresh is true for a create of a labelled pod that carries no
// claim yet (not a copy of an admitted pod's manifest) which the pod
// webhook denied (403): every FluentPVC of the load exists, so the webhook
// has no reason to refuse it. An admission that failed (500, an API fault
// under the webhook's write) is not a refusal.
func refusedFresh(e *Event) bool {
	if !e.is("", "pods", "") || e.Verb != "create" || e.DryRun() || e.ResponseStatus == nil ||
		e.ResponseStatus.Code != http.StatusForbidden || !strings.Contains(e.ResponseStatus.Message, podWebhookDenial) {
		return false
	}
	var pod corev1.Pod
	if !decode(e.RequestObject, &pod) {
		return false
	}
	return pod.Labels[v1alpha1.FluentPVCNameLabelKey] != "" && pod.Labels[v1alpha1.BindingNameLabelKey] == ""
}

// addPodWrite records a write of a pod: its create, a start its
// response shows, or its deletion.
func (h *history) addPodWrite(e *Event, line int) bool {
	switch e.Verb {
	case "create":
		return h.addPod(e, line)
	case "update", "patch":
		return h.addPodStatus(e, line)
	case "delete", "deletecollection":
		return h.addPodDelete(e, line)
	}
	return true
}

// addPod records the create of a pod, labelled or not, that is not one
// of the operator's own pods: any pod that mounts a claim can read or
// write its data. The operator's holders are recorded apart; its drain
// and binder pods, which the Job controller creates, not at all.
func (h *history) addPod(e *Event, line int) bool {
	var pod corev1.Pod
	if !decode(e.ResponseObject, &pod) {
		return false
	}
	if c := pod.Labels[v1alpha1.ComponentLabelKey]; c == v1alpha1.ComponentDrain || c == v1alpha1.ComponentBinder {
		return true
	}
	pod.Namespace = orElse(pod.Namespace, e.ObjectRef.Namespace)
	pos := positionOf(e, line, pod.ResourceVersion)
	if claim, uid, ok := operatorHolder(&pod, e.Username(), h.operator); ok {
		h.holders = append(h.holders, holderLife{
			ev: e, pos: pos, pod: objRef{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
			claim: objRef{Namespace: pod.Namespace, Name: claim, UID: uid},
		})
		return true
	}
	p := podCreate{
		ev:         e,
		pos:        pos,
		pod:        objRef{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		labelled:   pod.Labels[v1alpha1.FluentPVCNameLabelKey] != "",
		binding:    pod.Labels[v1alpha1.BindingNameLabelKey],
		failedOpen: failedOpenMount(e),
	}
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil && !slices.Contains(p.volumes, v.PersistentVolumeClaim.ClaimName) {
			p.volumes = append(p.volumes, v.PersistentVolumeClaim.ClaimName)
		}
	}
	h.pods = append(h.pods, p)
	return true
}

// addPodStatus records the first write of a pod whose response shows it
// started (podStarted).
func (h *history) addPodStatus(e *Event, line int) bool {
	if e.Verb != "update" && e.Verb != "patch" {
		return true
	}
	var pod corev1.Pod
	if !decode(e.ResponseObject, &pod) {
		return false
	}
	if pod.UID != "" && podStarted(&pod) {
		h.firstMoment(h.started, pod.UID, podMoment{ev: e, pos: positionOf(e, line, pod.ResourceVersion)})
	}
	return true
}

// addBinding records the first binding of a pod to a node (the scheduler's
// create of pods/binding, whose request names the pod's UID).
func (h *history) addBinding(e *Event, line int) bool {
	var b corev1.Binding
	if !decode(e.RequestObject, &b) {
		return false
	}
	if b.UID != "" {
		h.firstMoment(h.bound, b.UID, podMoment{ev: e, pos: positionOf(e, line, "")})
	}
	return true
}

// addPodDelete records the first request to delete each pod a delete or
// deletecollection names in its response: the pod itself (marked or
// removed), a list of them, or a Status whose details carry its UID.
func (h *history) addPodDelete(e *Event, line int) bool {
	var k responseKind
	if !decode(e.ResponseObject, &k) {
		return false
	}
	switch {
	case k.Kind == "Status":
		if k.Details != nil && k.Details.UID != "" {
			h.firstMoment(h.deleted, k.Details.UID, podMoment{ev: e, pos: positionOf(e, line, "")})
		}
	case strings.HasSuffix(k.Kind, "List"):
		var list corev1.PodList
		if !decode(e.ResponseObject, &list) {
			return false
		}
		for i := range list.Items {
			h.firstMoment(h.deleted, list.Items[i].UID, podMoment{ev: e, pos: positionOf(e, line, list.Items[i].ResourceVersion)})
		}
	default:
		var pod corev1.Pod
		if !decode(e.ResponseObject, &pod) || pod.UID == "" {
			return false
		}
		h.firstMoment(h.deleted, pod.UID, podMoment{ev: e, pos: positionOf(e, line, pod.ResourceVersion)})
	}
	return true
}

// firstMoment keeps m as pod uid's moment in moments unless an earlier
// one is there.
func (h *history) firstMoment(moments map[types.UID]podMoment, uid types.UID, m podMoment) {
	if old, ok := moments[uid]; !ok || h.order.before(m.pos, old.pos) {
		moments[uid] = m
	}
}

// responseKind peeks at a response's kind and, for a Status, its details.
type responseKind struct {
	Kind    string                `json:"kind"`
	Details *metav1.StatusDetails `json:"details,omitempty"`
}

// addClaimWrite records the state of the PVCs a write left behind.
func (h *history) addClaimWrite(e *Event, line int) bool {
	switch e.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
	default:
		return true
	}
	var k responseKind
	if !decode(e.ResponseObject, &k) {
		return false
	}
	deleted := e.Verb == "delete" || e.Verb == "deletecollection"
	switch {
	case k.Kind == "Status":
		// A delete answered by a Status removed the object at once.
		if !deleted || k.Details == nil || k.Details.UID == "" {
			return true
		}
		c := h.claimLife(objRef{Namespace: e.ObjectRef.Namespace, Name: orElse(k.Details.Name, e.ObjectRef.Name), UID: k.Details.UID})
		c.writes = append(c.writes, claimWrite{ev: e, pos: positionOf(e, line, ""), gone: true})
	case strings.HasSuffix(k.Kind, "List"):
		var list corev1.PersistentVolumeClaimList
		if !decode(e.ResponseObject, &list) {
			return false
		}
		for i := range list.Items {
			h.addClaimState(e, line, &list.Items[i], deleted)
		}
	default:
		var pvc corev1.PersistentVolumeClaim
		if !decode(e.ResponseObject, &pvc) || pvc.UID == "" {
			return false
		}
		if pvc.Namespace == "" {
			pvc.Namespace = e.ObjectRef.Namespace
		}
		h.addClaimState(e, line, &pvc, deleted)
	}
	return true
}

// addClaimState records pvc as a write left it; deleted tells a delete.
// An object answered by a delete without finalizers was removed at once;
// one answered by any write with a deletionTimestamp and no finalizers was
// removed by that write.
func (h *history) addClaimState(e *Event, line int, pvc *corev1.PersistentVolumeClaim, deleted bool) {
	gone := len(pvc.Finalizers) == 0 && (deleted || pvc.DeletionTimestamp != nil)
	fin := slices.Contains(pvc.Finalizers, v1alpha1.PVCProtectionFinalizer)
	role := pvc.Labels[v1alpha1.ClaimRoleLabelKey]
	reserved := pvc.Annotations[v1alpha1.ReservedByAnnotationKey] != ""
	// A reservation gets pvc-protection only with the record of its pod:
	// until then the operator holds it by its reserved-by.
	usedBy, tracked := pvc.Annotations[v1alpha1.UsedByPodAnnotationKey]
	unprotected := reserved && tracked && usedBy == "" && role == v1alpha1.ClaimRoleClaimed
	w := claimWrite{
		ev:         e,
		pos:        positionOf(e, line, pvc.ResourceVersion),
		gone:       gone,
		finalizer:  fin,
		held:       !gone && (fin || unprotected) && role != v1alpha1.ClaimRoleWarm,
		role:       role,
		binding:    pvc.Labels[v1alpha1.BindingNameLabelKey],
		userDelete: e.Verb == "delete" && h.users[e.Username()],
		reserved:   reserved,
	}
	c := h.claimLife(objRef{Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID})
	c.writes = append(c.writes, w)
}

// claimLife is the record of PVC ref, made on first sight.
func (h *history) claimLife(ref objRef) *claimLife {
	if c, ok := h.claims[ref.UID]; ok {
		return c
	}
	c := &claimLife{ref: ref}
	h.claims[ref.UID] = c
	key := ref.Namespace + "/" + ref.Name
	h.claimNames[key] = append(h.claimNames[key], c)
	return c
}

// addJobWrite records a Job's create, what it mounts, and the first
// response that shows it Complete.
func (h *history) addJobWrite(e *Event, line int) bool {
	switch e.Verb {
	case "create", "update", "patch":
	default:
		return true
	}
	var job batchv1.Job
	if !decode(e.ResponseObject, &job) {
		return false
	}
	if job.UID == "" {
		return job.Kind == "Status"
	}
	j, ok := h.jobs[job.UID]
	if !ok {
		j = &jobLife{
			ref:   objRef{Namespace: orElse(job.Namespace, e.ObjectRef.Namespace), Name: job.Name, UID: job.UID},
			drain: job.Labels[v1alpha1.ComponentLabelKey] == v1alpha1.ComponentDrain,
		}
		for _, v := range job.Spec.Template.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				j.claims = append(j.claims, v.PersistentVolumeClaim.ClaimName)
			}
		}
		h.jobs[job.UID] = j
		h.jobUIDs = append(h.jobUIDs, job.UID)
	}
	pos := positionOf(e, line, job.ResourceVersion)
	if e.Verb == "create" && e.ObjectRef.Subresource == "" {
		j.created, j.createdEv, j.hasCreate = pos, e, true
	}
	if jobComplete(&job) && (!j.hasSuccess || h.order.before(pos, j.succeeded)) {
		j.succeeded, j.succeedEv, j.hasSuccess = pos, e, true
	}
	return true
}

// jobComplete is true when job has the condition Complete=True.
func jobComplete(job *batchv1.Job) bool {
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// addNamespace records a namespace's create or delete.
func (h *history) addNamespace(e *Event, line int) bool {
	if e.Verb != "create" && e.Verb != "delete" {
		return true
	}
	var ns corev1.Namespace
	if len(e.ResponseObject) > 0 && !decode(e.ResponseObject, &ns) {
		return false
	}
	name := orElse(e.ObjectRef.Name, ns.Name)
	if ns.Kind == "Status" {
		ns.ResourceVersion = ""
	}
	if name == "" {
		return false
	}
	h.namespaces[name] = append(h.namespaces[name], nsChange{ev: e, pos: positionOf(e, line, ns.ResourceVersion), deleted: e.Verb == "delete"})
	return true
}

// eventRequest is what the oracle reads of a core/v1 or events.k8s.io/v1 Event.
type eventRequest struct {
	Reason         string                  `json:"reason"`
	Type           string                  `json:"type"`
	Message        string                  `json:"message"`
	Note           string                  `json:"note"`
	InvolvedObject *corev1.ObjectReference `json:"involvedObject,omitempty"`
	Regarding      *corev1.ObjectReference `json:"regarding,omitempty"`
	Related        *corev1.ObjectReference `json:"related,omitempty"`
}

// addEvent records a created ClaimAbandoned Warning.
func (h *history) addEvent(e *Event) bool {
	var ev eventRequest
	if !decode(e.RequestObject, &ev) {
		return false
	}
	if ev.Reason != v1alpha1.EventReasonAbandoned || ev.Type != corev1.EventTypeWarning {
		return true
	}
	w := warning{ev: e, text: orElse(ev.Message, ev.Note)}
	for _, o := range []*corev1.ObjectReference{ev.InvolvedObject, ev.Regarding, ev.Related} {
		if o != nil && o.Name != "" {
			w.objects = append(w.objects, objRef{Namespace: o.Namespace, Name: o.Name, UID: o.UID})
		}
	}
	h.warnings = append(h.warnings, w)
	return true
}

// attributeDrains files each succeeded drain Job under the claims it
// mounted: the PVC of that name alive when it succeeded, or else when it
// was created.
func (h *history) attributeDrains() {
	for _, uid := range h.jobUIDs {
		j := h.jobs[uid]
		if !j.drain || !j.hasSuccess {
			continue
		}
		for _, name := range j.claims {
			c := h.claimAt(j.ref.Namespace, name, j.succeeded)
			if c == nil && j.hasCreate {
				c = h.claimAt(j.ref.Namespace, name, j.created)
			}
			if c != nil {
				h.drains[c.ref.UID] = append(h.drains[c.ref.UID], j)
			}
		}
	}
}

// claimAt is the PVC named name in namespace ns alive at p: seen written
// before p and not gone before p. Nil when there is none.
func (h *history) claimAt(ns, name string, p position) *claimLife {
	var found *claimLife
	for _, c := range h.claimNames[ns+"/"+name] {
		if len(c.writes) == 0 || !h.order.before(c.writes[0].pos, p) {
			continue
		}
		if g := c.goneWrite(); g != nil && h.order.before(g.pos, p) {
			continue
		}
		if found == nil || h.order.before(found.writes[0].pos, c.writes[0].pos) {
			found = c
		}
	}
	return found
}

// goneWrite is the write that removed the PVC, or nil.
func (c *claimLife) goneWrite() *claimWrite {
	for i := range c.writes {
		if c.writes[i].gone {
			return &c.writes[i]
		}
	}
	return nil
}

// stateBefore is the last write before p, or nil.
func (h *history) stateBefore(c *claimLife, p position) *claimWrite {
	var last *claimWrite
	for i := range c.writes {
		if h.order.before(c.writes[i].pos, p) {
			last = &c.writes[i]
		}
	}
	return last
}

// releaseAfter is the first write after p that left the claim not held:
// pvc-protection removed, turned warm, or the PVC removed. Nil if none.
func (h *history) releaseAfter(c *claimLife, p position) *claimWrite {
	for i := range c.writes {
		if h.order.before(p, c.writes[i].pos) && !c.writes[i].held {
			return &c.writes[i]
		}
	}
	return nil
}

// drainBetween is a drain Job of claim uid created after from (or whose
// create was not logged) that succeeded after from and before to, or nil.
func (h *history) drainBetween(uid types.UID, from, to position) *jobLife {
	for _, j := range h.drains[uid] {
		if (!j.hasCreate || h.order.before(from, j.created)) &&
			h.order.before(from, j.succeeded) && h.order.before(j.succeeded, to) {
			return j
		}
	}
	return nil
}

// namespaceDeletedBefore is the delete of namespace ns that was in force
// at p (logged before p, with no create of ns between), or nil.
func (h *history) namespaceDeletedBefore(ns string, p position) *nsChange {
	var last *nsChange
	for i, ch := range h.namespaces[ns] {
		if h.order.before(ch.pos, p) {
			last = &h.namespaces[ns][i]
		}
	}
	if last != nil && last.deleted {
		return last
	}
	return nil
}

// userDeletedBefore is the first delete of claim c that one of
// Options.Users requested before p, or nil.
func (h *history) userDeletedBefore(c *claimLife, p position) *claimWrite {
	for i := range c.writes {
		if c.writes[i].userDelete && h.order.before(c.writes[i].pos, p) {
			return &c.writes[i]
		}
	}
	return nil
}

// warned is true when a ClaimAbandoned Warning is about claim c: it names
// the claim or its binding as its object, or names the claim in its text.
func (h *history) warned(c *claimLife, binding string) bool {
	for _, w := range h.warnings {
		for _, o := range w.objects {
			if (o.Namespace == "" || o.Namespace == c.ref.Namespace) && (o.Name == c.ref.Name || (binding != "" && o.Name == binding)) {
				return true
			}
		}
		if slices.Contains(nameTokens(w.text), c.ref.Name) {
			return true
		}
	}
	return false
}

// nameTokens splits text into the runs of characters an object name can
// hold, without a leading or trailing dot or dash (punctuation).
func nameTokens(text string) []string {
	tokens := strings.FieldsFunc(text, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' && r != '.'
	})
	for i, t := range tokens {
		tokens[i] = strings.Trim(t, ".-")
	}
	return tokens
}

// decode unmarshals raw into v; false when raw is empty or malformed.
func decode(raw json.RawMessage, v any) bool {
	return len(raw) > 0 && json.Unmarshal(raw, v) == nil
}

func orElse(s, otherwise string) string {
	if s != "" {
		return s
	}
	return otherwise
}
