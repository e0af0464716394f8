package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
)

// FluentPVCPath is where the FluentPVC validating webhook is served.
const FluentPVCPath = "/validate-fluent-pvc-operator-tech-zozo-com-v1alpha1-fluentpvc"

// validationName names the representative objects a FluentPVC is checked
// with; dry runs persist nothing, so names never collide for long.
const validationName = "fluentpvc-validation"

// representativeImage is the app container's image in the representative
// pod: any valid reference; a dry run pulls nothing.
const representativeImage = "registry.k8s.io/pause:3.10"

// +kubebuilder:webhook:path=/validate-fluent-pvc-operator-tech-zozo-com-v1alpha1-fluentpvc,mutating=false,failurePolicy=ignore,sideEffects=None,groups=fluent-pvc-operator.tech.zozo.com,resources=fluentpvcs,verbs=create;update,versions=v1alpha1,name=fluentpvc.fluent-pvc-operator.tech.zozo.com,admissionReviewVersions=v1,timeoutSeconds=10
// Dry runs of the representative objects, in the operator's namespace only.
// +kubebuilder:rbac:groups="",namespace=fluent-pvc-operator-system,resources=pods,verbs=create

// FluentPVCValidator refuses a FluentPVC whose objects the API server would
// refuse later, once per pod: it builds a representative pod (a minimal pod
// with everything the FluentPVC injects), the finalizer Job and a claim,
// submits each as a server-side dry run in Namespace, so that the API
// server's own validation and defaulting judge them, and maps the errors
// back to the FluentPVC's fields. A refusal by a policy or quota of
// Namespace (Forbidden, which the API server checks after validation) says
// nothing of the users' namespaces and is ignored; any other error (the API
// server unreachable) becomes a warning: the CRD's schema still applies.
type FluentPVCValidator struct {
	// Writer makes the dry runs.
	Writer    client.Writer
	Decoder   admission.Decoder
	Namespace string
}

// Handle implements admission.Handler.
func (v *FluentPVCValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	f := &v1alpha1.FluentPVC{}
	if err := v.Decoder.Decode(req, f); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if !f.DeletionTimestamp.IsZero() {
		return admission.Allowed("being deleted")
	}
	errs, warnings := v.Validate(ctx, f)
	if len(errs) > 0 {
		status := apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind("FluentPVC").GroupKind(), f.Name, errs).ErrStatus
		resp := admission.Denied(status.Message)
		resp.Result = &status
		resp.Warnings = warnings
		return resp
	}
	return admission.Allowed("").WithWarnings(warnings...)
}

// Validate dry-runs f's representative objects and returns the API
// server's objections as errors on f's fields, and what it could not
// check as warnings.
func (v *FluentPVCValidator) Validate(ctx context.Context, f *v1alpha1.FluentPVC) (field.ErrorList, []string) {
	ctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	errs := ownAdmissionObjections(f)
	var warnings []string
	for _, o := range representatives(f, v.Namespace) {
		err := v.Writer.Create(ctx, o.obj, client.DryRunAll)
		var status apierrors.APIStatus
		switch {
		case err == nil:
		case apierrors.IsInvalid(err) && errors.As(err, &status) && status.Status().Details != nil && len(status.Status().Details.Causes) > 0:
			for _, c := range status.Status().Details.Causes {
				errs = append(errs, o.mapCause(c))
			}
		case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
			errs = append(errs, field.Invalid(field.NewPath("spec"), nil, fmt.Sprintf("the %s made from this FluentPVC is refused: %v", o.what, err)))
		case apierrors.IsForbidden(err):
			// Validation passed: only a policy or quota of the operator's
			// namespace (its Pod Security level is restricted) refused
			// it, which says nothing of the users' namespaces.
		default:
			warnings = append(warnings, fmt.Sprintf("the %s made from this FluentPVC could not be checked in namespace %s: %v", o.what, v.Namespace, err))
		}
	}
	return errs, warnings
}

// ownAdmissionObjections are the parts of f that the operator's own pod
// webhook would refuse once they are in use. A drain Job's pod template
// that carries the opt-in label sends every drain pod through the pod
// webhook, which denies it as a copy of the claim's pod (it mounts the
// claim and carries its binding label): no drain could ever run.
func ownAdmissionObjections(f *v1alpha1.FluentPVC) field.ErrorList {
	var errs field.ErrorList
	labels := f.Spec.PVCFinalizerJobSpecTemplate.Template.Labels
	if v, ok := labels[v1alpha1.FluentPVCNameLabelKey]; ok {
		path := field.NewPath("spec", "pvcFinalizerJobSpecTemplate", "template", "metadata", "labels").Key(v1alpha1.FluentPVCNameLabelKey)
		errs = append(errs, field.Invalid(path, v, "the drain Job's pods must not carry the opt-in label: the pod webhook would deny each of them as a second pod of the claim, and the claim could never be drained"))
	}
	return errs
}

// representative is one object made from a FluentPVC, and how its error
// causes map back to the FluentPVC's fields.
type representative struct {
	what     string
	obj      client.Object
	mapCause func(metav1.StatusCause) *field.Error
}

// representatives are a pod with everything f injects (in f's sidecar
// mode), f's finalizer Job and a claim, in namespace.
func representatives(f *v1alpha1.FluentPVC, namespace string) []representative {
	spec := &f.Spec
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: validationName + "-", Namespace: namespace},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: representativeImage}}},
	}
	objects.InjectPod(pod, spec, validationName)
	pod.Finalizers = nil
	delete(pod.Labels, v1alpha1.BindingNameLabelKey)

	b := &v1alpha1.FluentPVCBinding{ObjectMeta: metav1.ObjectMeta{Name: validationName, Namespace: namespace}}
	b.Spec.PVC.Name = validationName
	job := objects.DrainJob(f, b, 1)
	job.Name, job.GenerateName, job.OwnerReferences = "", validationName+"-", nil

	pvc := claim.NewClaimed(f, namespace, "", pool.TemplateHash(&spec.PVCSpecTemplate), v1alpha1.CheckoutMiss, "", "", time.Now()).Object
	pvc.GenerateName, pvc.Finalizers = validationName+"-", nil

	return []representative{
		{what: "pod", obj: pod, mapCause: func(c metav1.StatusCause) *field.Error { return mapPodCause(c, spec, pod) }},
		{what: "finalizer Job", obj: job, mapCause: func(c metav1.StatusCause) *field.Error { return mapJobCause(c, spec, job) }},
		{what: "claim", obj: pvc, mapCause: func(c metav1.StatusCause) *field.Error {
			return causeAt(c, "spec.pvcSpecTemplate", strings.TrimPrefix(c.Field, "spec"), strings.HasPrefix(c.Field, "spec."))
		}},
	}
}

// indexed matches a field path's list step and what follows it.
var indexed = regexp.MustCompile(`^\.?([A-Za-z]+)\[(\d+)\](.*)$`)

// step splits ".name[i]rest" into name, i and rest; ok is false otherwise.
func step(path string) (name string, i int, rest string, ok bool) {
	m := indexed.FindStringSubmatch(path)
	if m == nil {
		return "", 0, "", false
	}
	i, err := strconv.Atoi(m[2])
	return m[1], i, m[3], err == nil
}

// causeAt is c as an error at prefix+rest of the FluentPVC when mapped, or
// on spec, naming the field of the made object, when not.
func causeAt(c metav1.StatusCause, prefix, rest string, mapped bool) *field.Error {
	p := prefix + rest
	detail := c.Message
	if !mapped {
		p = "spec"
		detail = fmt.Sprintf("%s (%s of the object made from this FluentPVC)", c.Message, c.Field)
	}
	return &field.Error{Type: field.ErrorType(c.Type), Field: p, Detail: detail, BadValue: field.OmitValueType{}}
}

// mapInjected maps the rest of a path inside container c, made from a
// template container at tmpl (nil for the pod's own app container), whose
// own volumeMounts come first and the injected ones (the claim's, then the
// common ones) after.
func mapInjected(cause metav1.StatusCause, spec *v1alpha1.FluentPVCSpec, rest, tmpl string, tmplMounts int, c corev1.Container) *field.Error {
	if tmpl == "" && strings.HasPrefix(rest, ".volumeMounts.") {
		// The API server names some mount errors without the index (a
		// subPath's); the app container has only the injected mounts, and
		// only common ones have more than a name and a path.
		return causeAt(cause, "spec.commonVolumeMounts", "", true)
	}
	name, i, after, ok := step(rest)
	switch {
	case ok && name == "volumeMounts" && i >= tmplMounts:
		switch j := i - tmplMounts; {
		case j == 0 && after == ".name":
			return causeAt(cause, "spec.pvcVolumeName", "", true)
		case j == 0:
			return causeAt(cause, "spec.pvcVolumeMountPath", "", true)
		default:
			return causeAt(cause, fmt.Sprintf("spec.commonVolumeMounts[%d]", j-1), after, true)
		}
	case ok && name == "env" && i < len(c.Env):
		if j := slices.IndexFunc(spec.CommonEnvs, func(e corev1.EnvVar) bool { return e.Name == c.Env[i].Name }); j >= 0 {
			return causeAt(cause, fmt.Sprintf("spec.commonEnvs[%d]", j), after, true)
		}
	}
	return causeAt(cause, tmpl, rest, tmpl != "")
}

// mapPodCause maps an error cause of the representative pod: the claim
// volume, the common volumes, the sidecar and what is injected into the
// app container and the sidecar.
func mapPodCause(c metav1.StatusCause, spec *v1alpha1.FluentPVCSpec, pod *corev1.Pod) *field.Error {
	rest, ok := strings.CutPrefix(c.Field, "spec")
	if !ok {
		return causeAt(c, "", "", false)
	}
	name, i, after, ok := step(rest)
	if !ok {
		return causeAt(c, "", "", false)
	}
	sidecarTmpl := "spec.sidecarContainerTemplate"
	tmplMounts := len(spec.SidecarContainerTemplate.VolumeMounts)
	switch {
	case name == "volumes" && i == 0:
		return causeAt(c, "spec.pvcVolumeName", "", true)
	case name == "volumes":
		return causeAt(c, fmt.Sprintf("spec.commonVolumes[%d]", i-1), after, true)
	case name == "initContainers" && spec.NativeSidecar() && i == len(pod.Spec.InitContainers)-1:
		return mapInjected(c, spec, after, sidecarTmpl, tmplMounts, pod.Spec.InitContainers[i])
	case name == "containers" && !spec.NativeSidecar() && i == len(pod.Spec.Containers)-1:
		return mapInjected(c, spec, after, sidecarTmpl, tmplMounts, pod.Spec.Containers[i])
	case name == "containers" && i == 0:
		return mapInjected(c, spec, after, "", 0, pod.Spec.Containers[0])
	}
	return causeAt(c, "", "", false)
}

// mapJobCause maps an error cause of the finalizer Job: its template's own
// fields, and the claim volume, common volumes, mounts and envs injected
// into it.
func mapJobCause(c metav1.StatusCause, spec *v1alpha1.FluentPVCSpec, job *batchv1.Job) *field.Error {
	const tmpl = "spec.pvcFinalizerJobSpecTemplate"
	rest, ok := strings.CutPrefix(c.Field, "spec")
	if !ok {
		return causeAt(c, "", "", false)
	}
	podRest, inPod := strings.CutPrefix(rest, ".template.spec")
	if !inPod {
		return causeAt(c, tmpl, rest, true)
	}
	own := spec.PVCFinalizerJobSpecTemplate.Template.Spec
	name, i, after, ok := step(podRest)
	switch {
	case ok && name == "volumes" && i == len(own.Volumes):
		return causeAt(c, "spec.pvcVolumeName", "", true)
	case ok && name == "volumes" && i > len(own.Volumes):
		return causeAt(c, fmt.Sprintf("spec.commonVolumes[%d]", i-len(own.Volumes)-1), after, true)
	case ok && name == "containers" && i < len(own.Containers) && i < len(job.Spec.Template.Spec.Containers):
		return mapInjected(c, spec, after, fmt.Sprintf("%s.template.spec.containers[%d]", tmpl, i), len(own.Containers[i].VolumeMounts), job.Spec.Template.Spec.Containers[i])
	}
	return causeAt(c, tmpl, rest, true)
}

var _ admission.Handler = &FluentPVCValidator{}
