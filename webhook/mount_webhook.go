package webhook

import (
	"context"
	"fmt"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
)

// MountPath is where the mount webhook is served.
const MountPath = "/validate-v1-pod"

// Every pod with a PVC volume reaches the mount webhook, whatever its
// labels: a copy made with `kubectl debug --copy-to` has none. A
// matchCondition keeps pods without PVC volumes (most pods) off it, at no
// cost to their admission.
//
// Two webhooks serve it. For pods not labelled as holders the failure
// policy is Ignore. With Fail, every pod with a PVC in the cluster, the
// operator's or not, could not be created while the operator is down. A
// pod let through then is caught by the binding controller, which lists
// the namespace's pods live before it starts a drain or deletes a drained
// claim, and waits, saying so (DrainBlocked, MountedByOtherPod), while
// another pod mounts the claim.
//
// Pods labelled as holders (component=holder, the selectors of
// config/webhook/claim_webhook_selectors_patch.yaml) reach the second
// webhook, whose failure policy is Fail: a holder is created only once the
// webhook has read its PVC live and found it warm. The pool decides to
// create a holder from its cache, which may not have seen the PVC's
// checkout yet; letting such a holder through whenever the webhook cannot
// answer (the operator restarting, its live read failing) would put it
// beside the pod the PVC went to. Refusing one costs nothing but a retry of
// the pool's.
//
// A pod that opts into a FluentPVC and mounts no PVC but the claim its
// binding label names is not sent to the mount webhook either: the pod
// webhook (failure policy Fail) judged it already, handing it that claim
// or refusing it as a copy of another pod's manifest. This spares every
// labelled pod's admission a call. Any other PVC volume, or a pod without
// the opt-in label, still reaches the mount webhook.
// +kubebuilder:webhook:path=/validate-v1-pod,mutating=false,failurePolicy=ignore,sideEffects=None,groups="",resources=pods,verbs=create,versions=v1,name=mounts.fluent-pvc-operator.tech.zozo.com,admissionReviewVersions=v1,timeoutSeconds=10,patch=`{"matchConditions":[{"name":"mounts-a-pvc-not-its-own-claim","expression":"has(object.spec.volumes) && object.spec.volumes.exists(v, has(v.persistentVolumeClaim) && !(has(object.metadata.labels) && 'fluent-pvc-operator.tech.zozo.com/fluent-pvc-name' in object.metadata.labels && 'fluent-pvc-operator.tech.zozo.com/fluent-pvc-binding-name' in object.metadata.labels && object.metadata.labels['fluent-pvc-operator.tech.zozo.com/fluent-pvc-binding-name'] == v.persistentVolumeClaim.claimName))"}]}`
// +kubebuilder:webhook:path=/validate-v1-pod,mutating=false,failurePolicy=fail,sideEffects=None,groups="",resources=pods,verbs=create,versions=v1,name=holders.fluent-pvc-operator.tech.zozo.com,admissionReviewVersions=v1,timeoutSeconds=10,patch=`{"matchConditions":[{"name":"mounts-a-pvc","expression":"has(object.spec.volumes) && object.spec.volumes.exists(v, has(v.persistentVolumeClaim))"}]}`

// MountValidator refuses a pod that mounts a PVC the operator holds for
// another pod, or a warm PVC of a pool (claim.MountObjection): two pods
// writing one claim share their data, and a drain under another writer
// misses what it writes next.
type MountValidator struct {
	Decoder admission.Decoder
	// Reader reads claims from the manager's cache, which holds every PVC
	// of the operator's.
	Reader client.Reader
	// APIReader reads a claim live before a refusal: the cache may not
	// have seen yet the checkout of the very pod being admitted.
	APIReader client.Reader
	// Self is the operator's own user name: a pod it creates may be a
	// holder ("" when unknown: no pod is).
	Self string
	// Clock tells how old a holder's request is; the real clock when nil.
	Clock clock.PassiveClock
}

// Handle implements admission.Handler.
func (v *MountValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("")
	}
	pod := &corev1.Pod{}
	if err := v.Decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	for _, vol := range pod.Spec.Volumes {
		if vol.PersistentVolumeClaim == nil {
			continue
		}
		why, fpvc, err := v.objection(ctx, pod, vol.PersistentVolumeClaim.ClaimName, v.Self != "" && req.UserInfo.Username == v.Self)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		if why != "" {
			mountsRefused.WithLabelValues(fpvc).Inc()
			return admission.Denied(why)
		}
	}
	return admission.Allowed("")
}

// objection says why pod may not mount PVC name, and the PVC's FluentPVC.
// A PVC the cache does not hold is not the operator's (or is a claim made
// for this very pod, which the cache has not seen yet). byOperator says
// the operator itself creates pod. A holder is judged on a live read
// only, whether the cache holds its PVC or not: the cache may not have
// seen its PVC handed out.
func (v *MountValidator) objection(ctx context.Context, pod *corev1.Pod, name string, byOperator bool) (string, string, error) {
	key := client.ObjectKey{Namespace: pod.Namespace, Name: name}
	pvc := &corev1.PersistentVolumeClaim{}
	now := v.now()
	holder := objects.IsHolder(pod)
	switch err := v.Reader.Get(ctx, key, pvc); {
	case apierrors.IsNotFound(err) && !holder:
		return "", "", nil
	case err != nil && !apierrors.IsNotFound(err):
		return "", "", fmt.Errorf("reading PVC %s: %w", key, err)
	}
	if !holder && (claim.MountObjection(pod, pvc, nil, false, now) == "" || checkedOutNow(pod, pvc)) {
		return "", "", nil
	}
	job, err := controllingJob(ctx, v.Reader, v.APIReader, pod)
	if err != nil {
		return "", "", err
	}
	if !holder && claim.MountObjection(pod, pvc, job, false, now) == "" {
		return "", "", nil
	}
	switch err := v.APIReader.Get(ctx, key, pvc); {
	case apierrors.IsNotFound(err):
		return "", "", nil
	case err != nil:
		return "", "", fmt.Errorf("reading PVC %s: %w", key, err)
	}
	return claim.MountObjection(pod, pvc, job, byOperator, now), pvc.Labels[v1alpha1.FluentPVCNameLabelKey], nil
}

func (v *MountValidator) now() time.Time {
	if v.Clock == nil {
		return time.Now()
	}
	return v.Clock.Now()
}

// controllingJob reads the Job that pod's controller reference names:
// from the cache, which holds the operator's Jobs and, since a Job exists
// before its pods, almost always shows it; else live (a Job that is not
// the operator's, or a cache a watch event behind). It is nil when pod
// names no controlling Job or none of that name exists; which Job it is,
// and whether it is the operator's, the caller checks
// (objects.DrainPodOf, objects.BinderPodOf).
func controllingJob(ctx context.Context, cached, live client.Reader, pod *corev1.Pod) (*batchv1.Job, error) {
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil || ref.Kind != "Job" || ref.APIVersion != batchv1.SchemeGroupVersion.String() {
		return nil, nil
	}
	key := client.ObjectKey{Namespace: pod.Namespace, Name: ref.Name}
	job := &batchv1.Job{}
	// Any error of the cache (one not synced yet too) leaves the live read
	// to decide.
	if err := cached.Get(ctx, key, job); err == nil && job.UID == ref.UID {
		return job, nil
	}
	switch err := live.Get(ctx, key, job); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading Job %s, the controller of the pod: %w", key, err)
	}
	return job, nil
}

// checkedOutNow is true when warm PVC pvc, as cached, is the one the pod
// webhook has just checked out for pod, and the cache has not seen the
// checkout yet: pod carries its opt-in and binding labels. Every pod with
// the opt-in label passes the pod webhook first (failure policy Fail),
// which hands it a claim or denies a pod that names one not handed out
// for it; a pod admitted with a warm PVC's name therefore got it now. This
// spares a pool hit the live read.
func checkedOutNow(pod *corev1.Pod, pvc *corev1.PersistentVolumeClaim) bool {
	return claim.StateOf(pvc) == claim.Warm && pod.Labels[v1alpha1.BindingNameLabelKey] == pvc.Name &&
		pod.Labels[v1alpha1.FluentPVCNameLabelKey] == pvc.Labels[v1alpha1.FluentPVCNameLabelKey]
}

var _ admission.Handler = &MountValidator{}
