// Package webhook holds the pod admission webhook: it hands every pod that
// opts into a FluentPVC its own claim, the sidecar and the common settings.
package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/checkout"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
)

// Path is where the pod webhook is served.
const Path = "/mutate-v1-pod"

// maxNameTries bounds the retries when a random claim name is taken.
const maxNameTries = 3

// Options configure the webhook.
type Options struct {
	// Clock stamps the admission time; the real clock when nil.
	Clock clock.PassiveClock
	// ServerClock tells the API server's time (package apiclock), on which
	// the pool stamps holder requests; the real clock when nil.
	ServerClock clock.PassiveClock
	// NativeSidecarsUnsupported, when set, says why the cluster cannot run
	// native sidecars (NativeSidecarSupport); pods of FluentPVCs in Native
	// mode are then refused with it.
	NativeSidecarsUnsupported string
	// Namespace is where FluentPVCs' representative objects are dry-run
	// (the operator's own).
	Namespace string
	// Self is the operator's own user name, as the API server knows it
	// (a SelfSubjectReview): pods it creates may be holders. "" when
	// unknown: no pod is taken for a holder.
	Self string
	// ReserveAhead is how many warm PVCs per FluentPVC and namespace this
	// replica reserves ahead of their pods (checkout.Stock), handed out
	// without an API write, for FluentPVCs whose spec.pool.reserveAhead
	// is unset; 0 reserves none for them, pool.ReserveShare its share.
	ReserveAhead int
	// Owner names this replica's process in its stock's Lease, which
	// lives in Namespace (checkout.Stock).
	Owner string
	// Drain, when set, makes the webhooks' answers close their
	// connections once it is started (Drain).
	Drain *Drain
}

// NativeSidecarSupport says why an API server of version gitVersion (its
// /version's gitVersion) cannot run native sidecars, an init container
// with restartPolicy Always, which Kubernetes runs from 1.29; "" when it
// can, or when the version cannot be read (the API server then refuses
// such a pod itself, with its own message).
func NativeSidecarSupport(gitVersion string) string {
	v, err := version.ParseGeneric(gitVersion)
	if err != nil || v.AtLeast(version.MajorMinor(1, 29)) {
		return ""
	}
	return fmt.Sprintf("the API server is %s and native sidecars need Kubernetes 1.29 or later", gitVersion)
}

// Caches are the informers of every kind an admission reads from the
// manager's cache, by kind.
type Caches struct {
	informers map[string]cache.Informer
}

// +kubebuilder:rbac:groups="",resources=pods;persistentvolumeclaims;nodes;namespaces,verbs=list;watch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=volumeattachments,verbs=list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=list;watch
// +kubebuilder:rbac:groups=fluent-pvc-operator.tech.zozo.com,resources=fluentpvcs;fluentpvcbindings,verbs=list;watch

// Watch has mgr's cache watch every kind the webhooks read (and index the
// warm PVCs), from the cache's start rather than from the first admission.
// Call it before the manager starts: it never waits for a list.
func Watch(mgr ctrl.Manager) (*Caches, error) {
	if err := checkout.IndexWarm(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return nil, fmt.Errorf("indexing warm PVCs: %w", err)
	}
	read := map[string]client.Object{
		"Pod": &corev1.Pod{}, "PersistentVolumeClaim": &corev1.PersistentVolumeClaim{}, "Node": &corev1.Node{},
		"Namespace": namespaceMeta(), "VolumeAttachment": &storagev1.VolumeAttachment{},
		"FluentPVC": &v1alpha1.FluentPVC{}, "FluentPVCBinding": &v1alpha1.FluentPVCBinding{}, "Job": &batchv1.Job{},
	}
	c := &Caches{informers: make(map[string]cache.Informer, len(read))}
	for kind, obj := range read {
		i, err := mgr.GetCache().GetInformer(context.Background(), obj, cache.BlockUntilSynced(false))
		if err != nil {
			return nil, fmt.Errorf("watching %s: %w", kind, err)
		}
		c.informers[kind] = i
	}
	// The series of the webhooks' metrics go with their FluentPVC.
	if _, err := c.informers["FluentPVC"].AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if f, ok := obj.(*v1alpha1.FluentPVC); ok {
			forgetMetrics(f.Name)
		}
	}}); err != nil {
		return nil, fmt.Errorf("watching FluentPVC deletions: %w", err)
	}
	return c, nil
}

// Synced is a readiness check that fails, naming them, while any of the
// kinds the webhooks read has not synced: a replica is not sent admissions
// that would wait for its first lists (or for good, where a list is
// forbidden).
func (c *Caches) Synced(*http.Request) error {
	var waiting []string
	for kind, i := range c.informers {
		if !i.HasSynced() {
			waiting = append(waiting, kind)
		}
	}
	if len(waiting) == 0 {
		return nil
	}
	slices.Sort(waiting)
	return fmt.Errorf("the webhooks' cache has not synced %s yet", strings.Join(waiting, ", "))
}

// Setup registers the pod webhook, the FluentPVC validating webhook, the
// claim deletion webhook and the mount webhook with mgr's webhook server;
// caches are mgr's (Watch).
func Setup(mgr ctrl.Manager, opts Options, caches *Caches) error {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	nodes, claims := caches.informers["Node"], caches.informers["PersistentVolumeClaim"]
	// The webhooks' own requests carry their own user agent, so that the API
	// server's audit log tells what an admission costs from what the
	// controllers do meanwhile.
	cfg := rest.CopyConfig(mgr.GetConfig())
	cfg.UserAgent = rest.DefaultKubernetesUserAgent() + " " + UserAgentSuffix
	direct, err := client.New(cfg, client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return fmt.Errorf("making the webhooks' client: %w", err)
	}
	m := NewPodMutator(mgr.GetClient(), direct, direct, admission.NewDecoder(mgr.GetScheme()), opts.Clock)
	m.Pool.Nodes = checkout.NewNodeStore(nodes)
	m.NativeSidecarsUnsupported = opts.NativeSidecarsUnsupported
	m.Self = opts.Self
	// Every replica keeps a stock: a FluentPVC may ask for reservations
	// (spec.pool.reserveAhead) whatever the default.
	serverClock := opts.ServerClock
	if serverClock == nil {
		serverClock = clock.RealClock{}
	}
	m.Pool.Stock = checkout.NewStock(opts.Owner, opts.Namespace, opts.ReserveAhead, m.Pool, serverClock)
	if opts.Drain != nil {
		// A replica told to stop reserves no more: it gives its stock back
		// once stopped.
		m.Pool.Stock.Stopping = opts.Drain.Draining
	}
	if err := mgr.Add(m.Pool.Stock); err != nil {
		return fmt.Errorf("adding the reserved claims' stock: %w", err)
	}
	// The cache's latest resourceVersion comes before any write this
	// admission makes.
	if synced, ok := claims.(interface{ LastSyncResourceVersion() string }); ok {
		m.PodsSince = synced.LastSyncResourceVersion
	}
	for path, h := range map[string]admission.Handler{
		Path: m,
		FluentPVCPath: &FluentPVCValidator{
			Writer: mgr.GetClient(), Decoder: admission.NewDecoder(mgr.GetScheme()), Namespace: opts.Namespace,
		},
		ClaimPath: &ClaimDeletionValidator{Decoder: admission.NewDecoder(mgr.GetScheme()), Reader: mgr.GetClient()},
		MountPath: &MountValidator{
			Decoder: admission.NewDecoder(mgr.GetScheme()), Reader: mgr.GetClient(), APIReader: direct, Self: opts.Self, Clock: opts.ServerClock,
		},
	} {
		handler := detached(&admission.Webhook{Handler: h})
		if opts.Drain != nil {
			handler = opts.Drain.Wrap(handler)
		}
		mgr.GetWebhookServer().Register(path, handler)
	}
	return nil
}

// UserAgentSuffix ends the user agent of the webhooks' requests to the API
// server (after client-go's default, the controllers' own).
const UserAgentSuffix = "webhook"

// NewPodMutator is a PodMutator reading through cache (the manager's
// client) and apiReader (uncached), and writing through w.
func NewPodMutator(cache, apiReader client.Reader, w client.Writer, d admission.Decoder, clk clock.PassiveClock) *PodMutator {
	return &PodMutator{
		Reader: cache, APIReader: apiReader, Writer: w, Decoder: d, Clock: clk,
		Pool: checkout.NewCheckouter(cache, apiReader, w),
	}
}

// +kubebuilder:webhook:path=/mutate-v1-pod,mutating=true,failurePolicy=fail,sideEffects=NoneOnDryRun,groups="",resources=pods,verbs=create,versions=v1,name=pod.fluent-pvc-operator.tech.zozo.com,admissionReviewVersions=v1,reinvocationPolicy=Never,timeoutSeconds=10

// +kubebuilder:rbac:groups=fluent-pvc-operator.tech.zozo.com,resources=fluentpvcs,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=create;update
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get
// +kubebuilder:rbac:groups="",resources=pods,verbs=list
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get
// +kubebuilder:rbac:groups=fluent-pvc-operator.tech.zozo.com,resources=fluentpvcbindings,verbs=get

// PodMutator admits pods that carry the opt-in label: it hands the pod a
// claim, checked out of the warm pool or created, and patches the pod to use
// it. That is its only API write per pod, none on a dry run or for a pod it
// already mutated: the claim carries the orphan record (binding name,
// admission time), from which the operator makes the pod's binding.
type PodMutator struct {
	// Reader reads FluentPVCs, from the manager's cache.
	Reader client.Reader
	// APIReader reads nodes, for pods that name one, what an already
	// injected pod's claim is, and the FluentPVC once a miss created its
	// claim; it bypasses the cache.
	APIReader client.Reader
	// Writer creates and checks out claims.
	Writer  client.Writer
	Decoder admission.Decoder
	Clock   clock.PassiveClock
	// Pool takes warm PVCs.
	Pool *checkout.Checkouter
	// NativeSidecarsUnsupported is Options.NativeSidecarsUnsupported.
	NativeSidecarsUnsupported string
	// PodsSince is a resourceVersion the API server reached before now
	// (the claims cache's latest), recorded on a claim made for a pod;
	// "" when nil.
	PodsSince func() string
	// Self is the operator's own user name, which creates holder pods
	// ("" when unknown).
	Self string
}

// Handle implements admission.Handler.
func (m *PodMutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := m.Clock.Now()
	resp, result, reason := m.handle(ctx, req)
	admissionsTotal.WithLabelValues(result, reason).Inc()
	admissionDuration.WithLabelValues(result).Observe(m.Clock.Since(start).Seconds())
	return resp
}

// handle admits one pod and returns the response with the result and
// reason it is counted under.
func (m *PodMutator) handle(ctx context.Context, req admission.Request) (admission.Response, string, string) {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("not a create"), resultSkipped, reasonNone
	}
	pod := &corev1.Pod{}
	if err := m.Decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the pod: %w", err)), resultDenied, reasonUndecodable
	}
	name := pod.Labels[v1alpha1.FluentPVCNameLabelKey]
	if name == "" {
		return admission.Allowed("the pod does not opt into a FluentPVC"), resultSkipped, reasonNone
	}
	unsetNamespace := pod.Namespace == ""
	if unsetNamespace {
		pod.Namespace = req.Namespace
	}
	if v := m.ownPod(ctx, req, pod); v != nil {
		return v.resp, v.result, v.reason
	}
	fpvc, v := m.fluentPVCOf(ctx, pod, name)
	if v != nil {
		return v.resp, v.result, v.reason
	}
	if v := m.refusal(ctx, req, pod, fpvc); v != nil {
		return v.resp, v.result, v.reason
	}
	v = m.mutate(ctx, req, pod, fpvc, unsetNamespace)
	return v.resp, v.result, v.reason
}

// verdict is an admission's response with the result and reason that
// admissionsTotal counts it under.
type verdict struct {
	resp   admission.Response
	result string
	reason string
}

// errored is the verdict on an admission the API server failed.
func errored(err error) *verdict {
	return &verdict{admission.Errored(http.StatusInternalServerError, err), resultError, reasonNone}
}

// denied is the verdict on a pod refused for reason.
func denied(resp admission.Response, reason string) *verdict {
	return &verdict{resp, resultDenied, reason}
}

// ownPod allows the operator's own pods, which carry the opt-in label but
// need no claim of their own: its holder pods, and the drain and binder
// pods of its Jobs. It returns nil for any other pod.
func (m *PodMutator) ownPod(ctx context.Context, req admission.Request, pod *corev1.Pod) *verdict {
	if objects.IsHolder(pod) && m.Self != "" && req.UserInfo.Username == m.Self {
		// The pool's own holder pod (the mount webhook checks the rest).
		return &verdict{admission.Allowed("the operator's own holder pod"), resultSkipped, reasonNone}
	}
	if c := pod.Labels[v1alpha1.ComponentLabelKey]; c == v1alpha1.ComponentDrain || c == v1alpha1.ComponentBinder {
		// A drain or binder pod of the operator's, which a namespace policy
		// labelled: it mounts the claim it serves, and needs none of its own
		// (a drain pod would be denied as a copy of the claim's pod). Only
		// its controlling Job proves it the operator's; a pod that merely
		// carries these labels is handled as any other.
		job, err := controllingJob(ctx, m.Reader, m.APIReader, pod)
		if err != nil {
			return errored(err)
		}
		if objects.DrainPodOf(pod, job, pod.Labels[v1alpha1.BindingNameLabelKey]) || objects.BinderPodOf(pod, job, pod.Labels[v1alpha1.WarmClaimLabelKey]) {
			return &verdict{admission.Allowed("the operator's own " + c + " pod"), resultSkipped, reasonNone}
		}
	}
	return nil
}

// fluentPVCOf checks the pod's labels and reads the FluentPVC, name, that
// the pod opts into. It returns the verdict instead when the labels can
// name no object or the FluentPVC is missing or being deleted.
func (m *PodMutator) fluentPVCOf(ctx context.Context, pod *corev1.Pod, name string) (*v1alpha1.FluentPVC, *verdict) {
	// Labels are validated after the mutating webhooks: a value that can
	// name no object is a user's error, not the operator's.
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, denied(admission.Denied(fmt.Sprintf("the pod's label %s=%q cannot name a FluentPVC: %s", v1alpha1.FluentPVCNameLabelKey, name, strings.Join(errs, "; "))), reasonFluentPVCNotFound)
	}
	if b, ok := pod.Labels[v1alpha1.BindingNameLabelKey]; ok && len(validation.IsDNS1123Subdomain(b)) > 0 {
		return nil, denied(admission.Denied(fmt.Sprintf("the pod's label %s=%q names no claim: remove it, so that the pod gets a claim of its own", v1alpha1.BindingNameLabelKey, b)), reasonCopied)
	}

	fpvc := &v1alpha1.FluentPVC{}
	err := m.Reader.Get(ctx, client.ObjectKey{Name: name}, fpvc)
	if apierrors.IsNotFound(err) {
		// A FluentPVC applied together with its pods may not be cached yet:
		// deny only what a live read does not find either.
		err = m.APIReader.Get(ctx, client.ObjectKey{Name: name}, fpvc)
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, denied(admission.Denied(fmt.Sprintf("FluentPVC %q does not exist: create it, or fix the pod's label %s", name, v1alpha1.FluentPVCNameLabelKey)), reasonFluentPVCNotFound)
		}
		return nil, errored(fmt.Errorf("reading FluentPVC %q: %w", name, err))
	}
	if !fpvc.DeletionTimestamp.IsZero() {
		return nil, denied(deletingDenial(name), reasonFluentPVCDeleting)
	}
	return fpvc, nil
}

// refusal is the verdict on a pod that fpvc may not admit: a copy of an
// admitted pod's manifest, a pod that clashes with what fpvc injects, a
// Native sidecar the cluster cannot run, or a namespace or user fpvc
// leaves out. It returns nil for a pod that may be admitted.
func (m *PodMutator) refusal(ctx context.Context, req admission.Request, pod *corev1.Pod, fpvc *v1alpha1.FluentPVC) *verdict {
	name := fpvc.Name
	if objects.PodInjected(pod, &fpvc.Spec) {
		// The webhook is never reinvoked (reinvocationPolicy Never), so a
		// pod that already carries a claim was not admitted by it: it is a
		// copy of an admitted pod's manifest, which would share its claim.
		why, err := m.claimTaken(ctx, pod, ptr.Deref(req.DryRun, false))
		if err != nil {
			return errored(err)
		}
		return denied(admission.Denied(fmt.Sprintf("the pod looks like a copy of another pod's manifest: it carries claim %s, which %s. "+
			"Remove the label %s and the volume %q%s, so that the pod gets a claim of its own",
			pod.Labels[v1alpha1.BindingNameLabelKey], why, v1alpha1.BindingNameLabelKey, fpvc.Spec.PVCVolumeName, copiedFinalizer(pod))), reasonCopied)
	}
	if errs := objects.PodConflicts(pod, &fpvc.Spec); len(errs) > 0 {
		return denied(admission.Denied(fmt.Sprintf("the pod clashes with what FluentPVC %q injects: %s", name, errs.ToAggregate())), reasonConflict)
	}
	if fpvc.Spec.NativeSidecar() && m.NativeSidecarsUnsupported != "" {
		return denied(admission.Denied(fmt.Sprintf("FluentPVC %q has sidecarMode Native, but %s: set its sidecarMode to Container", name, m.NativeSidecarsUnsupported)), reasonNativeSidecarUnsupported)
	}
	why, reason, err := m.accessDenied(ctx, fpvc, pod.Namespace, req)
	if err != nil {
		return errored(err)
	}
	if why != "" {
		return denied(admission.Denied(why), reason)
	}
	return nil
}

// mutate hands the pod a claim of fpvc (none on a dry run) and answers
// with the patch that injects it.
func (m *PodMutator) mutate(ctx context.Context, req admission.Request, pod *corev1.Pod, fpvc *v1alpha1.FluentPVC, unsetNamespace bool) *verdict {
	// The API server sends JSON. The decoder would also take YAML, or
	// numbers beyond float64, against which no JSON patch can be made once
	// a claim was provisioned: refuse them before the claim is written.
	// Only pods about to be mutated pay for this parse, which podPatch
	// reads too.
	var doc map[string]any
	if err := json.Unmarshal(req.Object.Raw, &doc); err != nil {
		return &verdict{admission.Errored(http.StatusBadRequest, fmt.Errorf("the pod is not a JSON object: %w", err)), resultDenied, reasonUndecodable}
	}
	claimName, stagedOn := claim.Name(fpvc.Name), ""
	if !ptr.Deref(req.DryRun, false) {
		var v *verdict
		if claimName, stagedOn, v = m.claimFor(ctx, pod, fpvc); v != nil {
			return v
		}
	}

	mutated := pod.DeepCopy()
	objects.InjectPod(mutated, &fpvc.Spec, claimName)
	if stagedOn != "" {
		objects.PreferNode(mutated, stagedOn)
	}
	resp := podPatch(ctx, req.Object.Raw, doc, pod, mutated, unsetNamespace)
	if resp.Result != nil {
		return &verdict{resp, resultError, reasonNone}
	}
	return &verdict{resp, resultMutated, reasonNone}
}

// claimFor provisions the pod's claim and returns its name and the node a
// staged warm PVC is on, or the verdict instead when that fails or fpvc
// turns out to be going away.
func (m *PodMutator) claimFor(ctx context.Context, pod *corev1.Pod, fpvc *v1alpha1.FluentPVC) (string, string, *verdict) {
	claimName, stagedOn, hit, err := m.provision(ctx, fpvc, pod)
	if err != nil {
		return "", "", errored(err)
	}
	// This replica's cache may not have seen the FluentPVC's deletion
	// yet. A pod admitted after the FluentPVC is gone could never be
	// drained. The operator lets a deleting FluentPVC go once live
	// reads find none of its claims and every warm PVC being deleted.
	// A hit's write, conditioned on the warm PVC's resourceVersion,
	// fails once its deletion began, so the claim it made is in that
	// list. A miss creates its claim: a live read made after it closes
	// the gap, since either that list sees the claim or this read sees
	// the deletion. The claim written is reclaimed as an orphan once no
	// pod appears.
	if !hit {
		switch deleting, err := m.deletingLive(ctx, fpvc.Name); {
		case err != nil:
			return "", "", errored(err)
		case deleting:
			return "", "", denied(deletingDenial(fpvc.Name), reasonFluentPVCDeleting)
		}
	}
	return claimName, stagedOn, nil
}

// copiedFinalizer names, for the denial of a copied manifest, the
// pod-protection finalizer that pods admitted by earlier versions carry,
// when pod carries it too.
func copiedFinalizer(pod *corev1.Pod) string {
	if slices.Contains(pod.Finalizers, v1alpha1.PodProtectionFinalizer) {
		return " and the finalizer " + v1alpha1.PodProtectionFinalizer
	}
	return ""
}

// deletingDenial denies a pod of FluentPVC name, which is being deleted.
func deletingDenial(name string) admission.Response {
	return admission.Denied(fmt.Sprintf("FluentPVC %q is being deleted and admits no new pods: point the pod's label %s at another FluentPVC", name, v1alpha1.FluentPVCNameLabelKey))
}

// deletingLive is true when a live read finds FluentPVC name being
// deleted, or gone.
func (m *PodMutator) deletingLive(ctx context.Context, name string) (bool, error) {
	f := &v1alpha1.FluentPVC{}
	switch err := m.APIReader.Get(ctx, client.ObjectKey{Name: name}, f); {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading FluentPVC %q: %w", name, err)
	}
	return !f.DeletionTimestamp.IsZero(), nil
}

// claimTaken says what became of the claim that pod, a copy of an
// admitted pod's manifest, carries, for its denial. Everything is read
// live: a claim made moments ago may not be cached yet, and the cache
// holds no pod whose opt-in label was removed.
func (m *PodMutator) claimTaken(ctx context.Context, pod *corev1.Pod, dryRun bool) (string, error) {
	name := pod.Labels[v1alpha1.BindingNameLabelKey]
	var pods corev1.PodList
	if err := m.APIReader.List(ctx, &pods, client.InNamespace(pod.Namespace), client.MatchingLabels{v1alpha1.BindingNameLabelKey: name}); err != nil {
		return "", fmt.Errorf("listing the pods of claim %s: %w", name, err)
	}
	if len(pods.Items) > 0 {
		return fmt.Sprintf("pod %s already uses", pods.Items[0].Name), nil
	}
	b := &v1alpha1.FluentPVCBinding{}
	switch err := m.APIReader.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: name}, b); {
	case err == nil && b.Spec.Pod.UID != "":
		return fmt.Sprintf("was used by pod %s", b.Spec.Pod.Name), nil
	case err != nil && !apierrors.IsNotFound(err):
		return "", fmt.Errorf("reading binding %s: %w", name, err)
	}
	if dryRun {
		return "was handed to another pod's admission", nil
	}
	pvc := &corev1.PersistentVolumeClaim{}
	switch err := m.APIReader.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: name}, pvc); {
	case apierrors.IsNotFound(err):
		return "does not exist in this namespace", nil
	case err != nil:
		return "", fmt.Errorf("reading claim %s: %w", name, err)
	}
	if by, _, reserved := claim.Reservation(pvc); reserved {
		return fmt.Sprintf("is reserved by webhook replica %s for a pod that replica admits", by), nil
	}
	if used, _ := claim.PodOf(pvc); used.UID != "" {
		return fmt.Sprintf("was used by pod %s", used.Name), nil
	}
	return "was handed to another pod's admission", nil
}

// provision hands the pod a claim, from the warm pool when one fits (a hit)
// or created now (a miss), and returns the claim's name, for a warm PVC
// staged on a node the pod can run on that node, and whether it was a hit.
// Either way it makes one API write.
func (m *PodMutator) provision(ctx context.Context, fpvc *v1alpha1.FluentPVC, pod *corev1.Pod) (string, string, bool, error) {
	start := m.Clock.Now()
	if fpvc.Spec.Pool.Size > 0 {
		got, err := m.Pool.Checkout(ctx, fpvc, pod, start)
		if err != nil {
			return "", "", false, err
		}
		if got.PVC != nil {
			countCheckout(fpvc.Name, true, got.Holder != "", m.Clock.Since(start))
			return got.PVC.Name, got.StagedOn, true, nil
		}
	}
	name, err := m.create(ctx, fpvc, pod, start)
	if err == nil {
		countCheckout(fpvc.Name, false, false, m.Clock.Since(start))
	}
	return name, "", false, err
}

// create creates the claim under a fresh name and returns that name.
func (m *PodMutator) create(ctx context.Context, fpvc *v1alpha1.FluentPVC, pod *corev1.Pod, now time.Time) (string, error) {
	hash := pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate)
	for try := 1; ; try++ {
		name := claim.Name(fpvc.Name)
		err := claim.Execute(ctx, m.Writer, claim.NewClaimed(fpvc, pod.Namespace, name, hash, v1alpha1.CheckoutMiss, claim.NewCheckoutID(), m.podsSince(), now))
		if apierrors.IsAlreadyExists(err) && try < maxNameTries {
			continue
		}
		if err != nil {
			return "", err
		}
		return name, nil
	}
}

func (m *PodMutator) podsSince() string {
	if m.PodsSince == nil {
		return ""
	}
	return m.PodsSince()
}

// detached serves an admission to its end when the replica is told to
// stop. The webhook server's requests carry the manager's context, which
// SIGTERM cancels while the server still drains them: an admission in
// flight on a replica that a rolling upgrade stops would fail ("context
// canceled") although the server finishes it. The API server tells each
// call how long it waits for the answer (the timeout query parameter,
// from the webhook's timeoutSeconds): that bounds the admission instead.
// A request that names no timeout (not the API server's) keeps the
// server's context.
func detached(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		timeout, err := time.ParseDuration(r.URL.Query().Get("timeout"))
		if err != nil || timeout <= 0 {
			h.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), timeout)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

var _ admission.Handler = &PodMutator{}
