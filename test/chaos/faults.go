package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/test/provisioner/hostpath"
)

// chaosUser is the user, as opposed to the operator, as whom the driver
// copies pods, deletes claims and gives up their data. The oracle excuses
// a release that follows this user's deletion of the claim.
const chaosUser = "chaos-user"

// userClient is a client of cfg that impersonates chaosUser, with every right.
func userClient(cfg *rest.Config, opts client.Options) (client.Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: chaosUser, Groups: []string{"system:masters", "system:authenticated"}}
	return client.New(cfg, opts)
}

// Node-local volumes: the FluentPVC localFluentPVCName takes its claims
// from localStorageClass, whose volumes the test provisioner pins to one
// node (topologyKey kubernetes.io/hostname), so that deleting a node
// strands its claims' drains.
const (
	localFluentPVCName = "chaos-local"
	localStorageClass  = "chaos-node-local"
)

// nodeLocalClass is the StorageClass of node-local volumes.
func nodeLocalClass() *storagev1.StorageClass {
	return &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: localStorageClass},
		Provisioner:       cluster.ProvisionerName,
		Parameters:        map[string]string{hostpath.TopologyKeyParameter: corev1.LabelHostname},
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
	}
}

// denied is true when err is an admission's refusal.
func denied(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) || strings.Contains(err.Error(), "denied the request")
}

// pause waits for d, or less when ctx ends first; false then.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// between is a random duration in [r[0], r[1]).
func between(r [2]time.Duration) time.Duration {
	if r[1] <= r[0] {
		return r[0]
	}
	return r[0] + rand.N(r[1]-r[0])
}

// later runs f in the background with ctx's values but not its end, so
// that a fault's recovery runs even when the load stops; waitLater waits
// for every such f.
func (d *driver) later(ctx context.Context, f func(context.Context)) {
	d.after.Add(1)
	go func() {
		defer d.after.Done()
		f(context.WithoutCancel(ctx))
	}()
}

func (d *driver) waitLater() { d.after.Wait() }

// debugCopy creates a copy of a running labelled pod in its namespace
// without its labels, annotations and finalizers but mounting the same
// claim, as `kubectl debug --copy-to` does. The webhook must deny it; an
// admitted copy is deleted a few seconds later, so that the claim can drain.
func (d *driver) debugCopy(ctx context.Context) {
	pod := d.runningLabelled(ctx, false)
	if pod == nil {
		return
	}
	spec := pod.Spec.DeepCopy()
	spec.NodeName = ""
	cp := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name + "-debug"}, Spec: *spec}
	err := d.user.Create(ctx, cp)
	switch {
	case err == nil:
		d.t.DebugCopiesAdmitted.Add(1)
		d.logf("an unlabelled copy %s/%s of pod %s was admitted", cp.Namespace, cp.Name, pod.Name)
		d.mu.Lock()
		d.bare[client.ObjectKeyFromObject(cp)] = time.Now().Add(between([2]time.Duration{3 * time.Second, 6 * time.Second}))
		d.mu.Unlock()
	case denied(err):
		d.t.DebugCopiesDenied.Add(1)
	default:
		d.fail("creating an unlabelled copy of a pod", err)
	}
}

// claimWebhookName is the claim deletion webhook's name in the webhook
// configuration.
const claimWebhookName = "claim.fluent-pvc-operator.tech.zozo.com"

// heldClaim is the claim a running labelled pod uses, and the pod, or nils.
func (d *driver) heldClaim(ctx context.Context) (*corev1.Pod, *corev1.PersistentVolumeClaim) {
	pod := d.runningLabelled(ctx, false)
	if pod == nil {
		return nil, nil
	}
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc := &corev1.PersistentVolumeClaim{}
		if err := d.c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, pvc); err != nil {
			d.fail("reading a claim", client.IgnoreNotFound(err))
			continue
		}
		if pvc.Labels[v1alpha1.BindingNameLabelKey] == pod.Labels[v1alpha1.BindingNameLabelKey] &&
			slices.Contains(pvc.Finalizers, v1alpha1.PVCProtectionFinalizer) && pvc.DeletionTimestamp.IsZero() {
			return pod, pvc
		}
	}
	return nil, nil
}

// deleteClaim deletes, as a user, a held claim whose pod runs; one time in
// three the claim webhook is unreachable then, and its failure policy
// (Ignore) admits the deletion, as while both replicas are down. An
// admitted deletion is followed by the documented way out (recoverDeletedClaim).
func (d *driver) deleteClaim(ctx context.Context) {
	pod, pvc := d.heldClaim(ctx)
	if pvc == nil {
		return
	}
	var err error
	del := func(ctx context.Context) { err = d.user.Delete(ctx, pvc) }
	if rand.N(3) == 0 {
		if !d.withClaimWebhookUnreachable(ctx, pvc, del) {
			return
		}
	} else {
		del(ctx)
	}
	switch {
	case err == nil:
		d.t.ClaimDeletesAdmitted.Add(1)
		d.logf("a user's deletion of held claim %s/%s (pod %s) was admitted", pvc.Namespace, pvc.Name, pod.Name)
		d.later(ctx, func(ctx context.Context) { d.recoverDeletedClaim(ctx, pod, pvc) })
	case denied(err):
		d.t.ClaimDeletesDenied.Add(1)
	default:
		d.fail("deleting a held claim", err)
	}
}

// claimWebhookTimeout bounds each wait for the API server to act on a
// change of the claim webhook's configuration.
const claimWebhookTimeout = 30 * time.Second

// withClaimWebhookUnreachable points the claim deletion webhook at a
// closed port, runs f once the API server admits a dry-run deletion of
// held claim pvc (the failure policy, Ignore, admits what the webhook
// cannot be asked about), points the webhook back, and waits until the
// API server refuses that deletion again. It returns false, without
// running f, when the webhook could not be made unreachable.
func (d *driver) withClaimWebhookUnreachable(ctx context.Context, pvc *corev1.PersistentVolumeClaim, f func(context.Context)) bool {
	bg := context.WithoutCancel(ctx)
	var saved *string
	setURL := func(url func(old *string) *string) error {
		wh := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := d.c.Get(bg, client.ObjectKey{Name: cluster.WebhookConfigurationName}, wh); err != nil {
			return err
		}
		for i := range wh.Webhooks {
			if wh.Webhooks[i].Name == claimWebhookName {
				wh.Webhooks[i].ClientConfig.URL = url(wh.Webhooks[i].ClientConfig.URL)
			}
		}
		return d.c.Update(bg, wh)
	}
	unreachable := func(old *string) *string { saved = old; return ptr.To("https://127.0.0.1:1/unreachable") }
	if err := setURL(unreachable); err != nil {
		d.fail("making the claim webhook unreachable", err)
		return false
	}
	defer func() {
		restore := func(*string) *string { return saved }
		err := wait.PollUntilContextTimeout(bg, 200*time.Millisecond, claimWebhookTimeout, true, func(context.Context) (bool, error) {
			return setURL(restore) == nil, nil
		})
		if err != nil {
			d.fail("restoring the claim webhook", err)
			return
		}
		d.fail("waiting for the restored claim webhook", d.awaitClaimWebhook(bg, pvc, true))
	}()
	if err := d.awaitClaimWebhook(bg, pvc, false); err != nil {
		d.fail("waiting for the claim webhook to be unreachable", err)
		return false
	}
	f(bg)
	return true
}

// awaitClaimWebhook polls a dry-run deletion of claim pvc, as the user,
// until the API server refuses it (refused) or admits it (!refused), for
// at most claimWebhookTimeout. While pvc is held and its namespace is not
// being deleted, the reachable claim webhook refuses the deletion and the
// unreachable one, failing open, admits it. A claim that is gone ends the
// wait either way, and so does, when a refusal is awaited, a claim the
// webhook no longer refuses (guardedClaim): neither tells the two apart.
func (d *driver) awaitClaimWebhook(ctx context.Context, pvc *corev1.PersistentVolumeClaim, refused bool) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, claimWebhookTimeout, true, func(ctx context.Context) (bool, error) {
		err := d.user.Delete(ctx, pvc, client.DryRunAll)
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err == nil && refused:
			guarded, err := d.guardedClaim(ctx, pvc)
			last = err
			return err == nil && !guarded, nil
		case err == nil:
			return true, nil
		case denied(err):
			return refused, nil
		default:
			last = err
			return false, nil
		}
	})
	if err != nil {
		want := "admitted"
		if refused {
			want = "refused"
		}
		return fmt.Errorf("a dry-run deletion of claim %s/%s was not %s within %v: %w (last error: %v)",
			pvc.Namespace, pvc.Name, want, claimWebhookTimeout, err, last)
	}
	return nil
}

// guardedClaim is true when the claim webhook, reachable, refuses to
// delete pvc: pvc is held (claim.Held) and its namespace is not being
// deleted.
func (d *driver) guardedClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (bool, error) {
	cur := &corev1.PersistentVolumeClaim{}
	if err := d.c.Get(ctx, client.ObjectKeyFromObject(pvc), cur); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	ns := &corev1.Namespace{}
	if err := d.c.Get(ctx, client.ObjectKey{Name: pvc.Namespace}, ns); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return claim.Held(cur) && ns.DeletionTimestamp.IsZero(), nil
}

// recoverDeletedClaim follows the documented way out of a held claim
// deleted by a user: the pod is deleted, the binding reports DrainBlocked
// (reason ClaimDeleting) as no drain Job's pod may mount a claim being
// deleted, and the user removes the claim's pvc-protection finalizer,
// giving up its data. It waits up to a minute for the condition, then
// gives the data up all the same.
func (d *driver) recoverDeletedClaim(ctx context.Context, pod *corev1.Pod, pvc *corev1.PersistentVolumeClaim) {
	d.fail("deleting the pod of a deleted claim", client.IgnoreNotFound(d.user.Delete(ctx, pod)))
	binding := client.ObjectKey{Namespace: pvc.Namespace, Name: pvc.Labels[v1alpha1.BindingNameLabelKey]}
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, false, func(ctx context.Context) (bool, error) {
		b := &v1alpha1.FluentPVCBinding{}
		if err := d.c.Get(ctx, binding, b); err != nil {
			return false, nil
		}
		c := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.BindingConditionDrainBlocked)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.DrainBlockedReasonClaimDeleting, nil
	})
	if err == nil {
		d.t.ClaimDeletingReported.Add(1)
	}
	if d.removeFinalizer(ctx, d.user, &corev1.PersistentVolumeClaim{}, client.ObjectKeyFromObject(pvc), v1alpha1.PVCProtectionFinalizer) {
		d.t.ClaimsGivenUp.Add(1)
		d.logf("gave up deleted claim %s (DrainBlocked ClaimDeleting seen: %v)", binding, err == nil)
	}
}

// removeFinalizer removes finalizer from the object key names, retrying
// on conflicts; true when it removed it.
func (d *driver) removeFinalizer(ctx context.Context, c client.Client, obj client.Object, key client.ObjectKey, finalizer string) bool {
	removed := false
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, obj); err != nil {
			return apierrors.IsNotFound(err), nil
		}
		if !slices.Contains(obj.GetFinalizers(), finalizer) {
			return true, nil
		}
		patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
		obj.SetFinalizers(slices.DeleteFunc(obj.GetFinalizers(), func(f string) bool { return f == finalizer }))
		if err := c.Patch(ctx, obj, patch); err != nil {
			return false, nil
		}
		removed = true
		return true, nil
	})
	d.fail("removing finalizer "+finalizer, err)
	return removed
}

// refusalMessage starts the message of the chaos suite's policies'
// refusals, which the other actors meet too.
const refusalMessage = "refused by the chaos suite's policy "

// refusal is a ValidatingAdmissionPolicy, and its binding, that refuses
// every request its rules match in namespace ns, of the objects selected
// by objects (all when nil), as a cluster's policy might.
func refusal(name, ns string, objects *metav1.LabelSelector, rules ...admissionregistrationv1.NamedRuleWithOperations) []client.Object {
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
				ObjectSelector:    objects,
				ResourceRules:     rules,
			},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: refusalMessage + name}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	return []client.Object{policy, binding}
}

// rule matches operations on resources of API group group.
func rule(group string, resources []string, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.NamedRuleWithOperations {
	return admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: ops,
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{"*"}, Resources: resources},
	}}
}

// window creates objs, waits for a window of the mode's length (cut short
// when the load stops) while during runs, and deletes objs again. It
// returns whether objs were created.
func (d *driver) window(ctx context.Context, what string, objs []client.Object, during func(ctx context.Context)) bool {
	bg := context.WithoutCancel(ctx)
	for i, o := range objs {
		if err := d.c.Create(bg, o); err != nil {
			d.fail("creating "+what, err)
			d.deleteAll(bg, what, objs[:i])
			return false
		}
	}
	d.logf("%s: window opens", what)
	end := time.Now().Add(between(d.m.Window))
	if during != nil {
		during(ctx)
	}
	pause(ctx, time.Until(end))
	d.deleteAll(bg, what, objs)
	d.logf("%s: window closes", what)
	return true
}

func (d *driver) deleteAll(ctx context.Context, what string, objs []client.Object) {
	for _, o := range objs {
		d.fail("deleting "+what, client.IgnoreNotFound(d.c.Delete(ctx, o)))
	}
}

func (d *driver) nextSeq() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faultSeq++
	return d.faultSeq
}

var (
	bindingResources = []string{"fluentpvcbindings", "fluentpvcbindings/status"}
	createUpdate     = []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
)

// refuseBindings refuses every write of FluentPVCBindings in one namespace
// for a window while labelled bare pods are created there, then deletes
// some of those pods and strips their pod-protection finalizer, as an
// admin's runbook for pods stuck Terminating says: their pods are never
// recorded. The operator must drain their claims all the same.
func (d *driver) refuseBindings(ctx context.Context) {
	ns := d.randomNamespace()
	if ns == "" {
		return
	}
	name := fmt.Sprintf("chaos-refuse-bindings-%d", d.nextSeq())
	objs := refusal(name, ns, nil, rule(v1alpha1.GroupVersion.Group, bindingResources, createUpdate...))
	if d.window(ctx, name+" in "+ns, objs, func(ctx context.Context) { d.unrecordedPods(ctx, ns) }) {
		d.t.BindingRefusals.Add(1)
	}
}

// unrecordedPods creates labelled bare pods in ns, lets them run, then
// deletes half of them and strips their pod-protection finalizers.
func (d *driver) unrecordedPods(ctx context.Context, ns string) {
	if !pause(ctx, 2*time.Second) { // the API server sees the policy
		return
	}
	var pods []*corev1.Pod
	for range 4 {
		if p := d.createBarePodIn(ctx, ns); p != nil {
			pods = append(pods, p)
		}
		if !pause(ctx, time.Second) {
			return
		}
	}
	if !pause(ctx, 4*time.Second) {
		return
	}
	bg := context.WithoutCancel(ctx)
	stuck := pods[:len(pods)/2]
	for _, p := range stuck {
		d.mu.Lock()
		delete(d.bare, client.ObjectKeyFromObject(p))
		d.mu.Unlock()
		d.fail("deleting a pod whose binding is refused", client.IgnoreNotFound(d.c.Delete(bg, p)))
	}
	pause(bg, 2*time.Second)
	for _, p := range stuck {
		if d.removeFinalizer(bg, d.c, &corev1.Pod{}, client.ObjectKeyFromObject(p), v1alpha1.PodProtectionFinalizer) {
			d.t.PodFinalizersStripped.Add(1)
			d.logf("stripped the pod-protection finalizer of unrecorded pod %s/%s", p.Namespace, p.Name)
		}
	}
}

// bindingQuota puts a ResourceQuota of no FluentPVCBindings on one
// namespace for a window: the operator cannot make the bindings of the
// claims handed out there until it goes.
func (d *driver) bindingQuota(ctx context.Context) {
	ns := d.randomNamespace()
	if ns == "" {
		return
	}
	name := fmt.Sprintf("chaos-binding-quota-%d", d.nextSeq())
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			corev1.ResourceName("count/fluentpvcbindings." + v1alpha1.GroupVersion.Group): resource.MustParse("0"),
		}},
	}
	if d.window(ctx, name+" in "+ns, []client.Object{quota}, nil) {
		d.t.BindingQuotas.Add(1)
	}
}

// refuseDrainPods refuses, for a window, the creation of drain Jobs' pods
// in one namespace: their drains must report DrainBlocked and go on once
// the policy goes.
func (d *driver) refuseDrainPods(ctx context.Context) {
	ns := d.randomNamespace()
	if ns == "" {
		return
	}
	name := fmt.Sprintf("chaos-refuse-drain-pods-%d", d.nextSeq())
	drainPods := &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.ComponentLabelKey: v1alpha1.ComponentDrain}}
	objs := refusal(name, ns, drainPods, rule("", []string{"pods"}, admissionregistrationv1.Create))
	if d.window(ctx, name+" in "+ns, objs, nil) {
		d.t.DrainPodRefusals.Add(1)
	}
}

// deleteNode deletes the node of a running pod with a node-local claim
// and makes it again after the mode's NodeDown (bounceNode): the drains
// of its claims cannot schedule meanwhile and must go on by themselves
// once it is back.
func (d *driver) deleteNode(ctx context.Context) {
	nodes := d.nodesOf(ctx, client.MatchingLabels{v1alpha1.FluentPVCNameLabelKey: localFluentPVCName})
	d.bounceNode(ctx, nodes, "node-local claims in use", &d.t.NodesDeleted)
}

// deleteStagedNode deletes the node of a running holder pod, where warm
// PVCs are staged, and makes it again after the mode's NodeDown
// (bounceNode): the pool must stage them on other nodes meanwhile.
func (d *driver) deleteStagedNode(ctx context.Context) {
	nodes := d.nodesOf(ctx, client.MatchingLabels{v1alpha1.ComponentLabelKey: v1alpha1.ComponentHolder})
	d.bounceNode(ctx, nodes, "holders of staged warm PVCs", &d.t.StagedNodesDeleted)
}

// killHolder deletes a random holder pod, as a preemption by a pod of
// higher priority would: the pool must stage its warm PVC again, and a
// pod handed the PVC meanwhile must start all the same.
func (d *driver) killHolder(ctx context.Context) {
	var l corev1.PodList
	if err := d.c.List(ctx, &l, client.MatchingLabels{v1alpha1.ComponentLabelKey: v1alpha1.ComponentHolder}); err != nil {
		d.fail("listing holders", err)
		return
	}
	var pick []*corev1.Pod
	for i := range l.Items {
		if l.Items[i].DeletionTimestamp.IsZero() {
			pick = append(pick, &l.Items[i])
		}
	}
	if len(pick) == 0 {
		return
	}
	h := pick[rand.N(len(pick))]
	if err := d.c.Delete(ctx, h, client.Preconditions{UID: &h.UID}); err != nil {
		d.fail("killing a holder", err)
		return
	}
	d.t.HoldersKilled.Add(1)
	d.logf("killed holder %s/%s on node %s (%s)", h.Namespace, h.Name, h.Spec.NodeName, h.Status.Phase)
}

// nodesOf are the nodes of the Running pods that match opts, but those
// deleted and not made again yet.
func (d *driver) nodesOf(ctx context.Context, opts ...client.ListOption) []string {
	var l corev1.PodList
	if err := d.c.List(ctx, &l, opts...); err != nil {
		d.fail("listing pods", err)
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var nodes []string
	for _, p := range l.Items {
		if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" && d.down[p.Spec.NodeName] == "" && !slices.Contains(nodes, p.Spec.NodeName) {
			nodes = append(nodes, p.Spec.NodeName)
		}
	}
	return nodes
}

// bounceNode deletes one of nodes, at random, leaving alone a node in a
// zone that has another one down (every zone keeps a node for its zonal
// volumes), and makes it again, with its CSINode, after the mode's
// NodeDown (at once when the load stops). what says what the node had,
// deleted counts it.
func (d *driver) bounceNode(ctx context.Context, nodes []string, what string, deleted *atomic.Int64) {
	rand.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	var node *corev1.Node
	for _, name := range nodes {
		n := &corev1.Node{}
		if err := d.c.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			d.fail("reading a node", err)
			continue
		}
		if _, ok := nodeIndex(n.Name, n.Labels[corev1.LabelTopologyZone]); !ok {
			d.logf("node %s is not one the cluster can make again; left alone", n.Name)
			continue
		}
		if d.claimNode(n) {
			node = n
			break
		}
	}
	if node == nil {
		return
	}
	defer d.releaseNode(node.Name)
	zone := node.Labels[corev1.LabelTopologyZone]
	i, _ := nodeIndex(node.Name, zone)
	if err := d.c.Delete(ctx, node, client.Preconditions{UID: &node.UID}); err != nil {
		d.fail("deleting a node", err)
		return
	}
	deleted.Add(1)
	d.logf("deleted node %s with %s", node.Name, what)
	pause(ctx, between(d.m.NodeDown))
	bg := context.WithoutCancel(ctx)
	// The garbage collector removes the old node's CSINode (owned by it);
	// one left would be collected after the node is made again.
	err := wait.PollUntilContextTimeout(bg, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := d.c.Get(ctx, client.ObjectKey{Name: node.Name}, &storagev1.CSINode{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		d.logf("the CSINode of node %s was not collected; deleting it", node.Name)
		d.fail("deleting a CSINode", client.IgnoreNotFound(d.c.Delete(bg, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: node.Name}})))
	}
	err = wait.PollUntilContextTimeout(bg, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := d.kc.CreateNodes(ctx, cluster.NodeSet{Zones: []string{zone}, PerZone: 1, First: i}); err != nil {
			return false, nil
		}
		return d.kc.RegisterCSINode(ctx, node.Name) == nil, nil
	})
	if err != nil {
		d.fail("making node "+node.Name+" again", err)
		return
	}
	d.logf("made node %s again, with its CSINode", node.Name)
}

// claimNode marks node n down unless a node of its zone is.
func (d *driver) claimNode(n *corev1.Node) bool {
	zone := n.Labels[corev1.LabelTopologyZone]
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, z := range d.down {
		if z == zone {
			return false
		}
	}
	d.down[n.Name] = zone
	return true
}

func (d *driver) releaseNode(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.down, name)
}

// nodeIndex is the number of node name within zone (cluster.NodeName).
func nodeIndex(name, zone string) (int, bool) {
	prefix := strings.TrimSuffix(cluster.NodeName(zone, 0), "0")
	i, err := strconv.Atoi(strings.TrimPrefix(name, prefix))
	return i, err == nil && cluster.NodeName(zone, i) == name
}
