package webhook

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// TestMapCauses maps the API server's complaints about the objects made
// from a FluentPVC back to the FluentPVC's fields. The sample FluentPVC's
// sidecar and drain container have no mounts of their own; it has one
// common env (FLUENT_PVC_MOUNT_DIR). Here it also has a common volume and
// mount.
func TestMapCauses(t *testing.T) {
	f := fixtures.MakeFluentPVC("f").Mutate(func(f *v1alpha1.FluentPVC) {
		f.Spec.CommonVolumes = []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		f.Spec.CommonVolumeMounts = []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}}
	}).Obj()
	container := f.DeepCopy()
	container.Spec.SidecarMode = v1alpha1.SidecarModeContainer
	cases := map[string]struct {
		fpvc   *v1alpha1.FluentPVC
		object int // 0 pod, 1 Job, 2 claim
		cause  string
		want   string
	}{
		"drain container's image":           {fpvc: f, object: 1, cause: "spec.template.spec.containers[0].image", want: "spec.pvcFinalizerJobSpecTemplate.template.spec.containers[0].image"},
		"drain pod's own field":             {fpvc: f, object: 1, cause: "spec.template.spec.restartPolicy", want: "spec.pvcFinalizerJobSpecTemplate.template.spec.restartPolicy"},
		"Job's own field":                   {fpvc: f, object: 1, cause: "spec.backoffLimit", want: "spec.pvcFinalizerJobSpecTemplate.backoffLimit"},
		"drain: the claim's mount":          {fpvc: f, object: 1, cause: "spec.template.spec.containers[0].volumeMounts[0].mountPath", want: "spec.pvcVolumeMountPath"},
		"drain: a common mount":             {fpvc: f, object: 1, cause: "spec.template.spec.containers[0].volumeMounts[1].name", want: "spec.commonVolumeMounts[0].name"},
		"drain: a common volume":            {fpvc: f, object: 1, cause: "spec.template.spec.volumes[1].emptyDir", want: "spec.commonVolumes[0].emptyDir"},
		"drain: a common env":               {fpvc: f, object: 1, cause: "spec.template.spec.containers[0].env[0].valueFrom", want: "spec.commonEnvs[0].valueFrom"},
		"native sidecar's resources":        {fpvc: f, object: 0, cause: "spec.initContainers[0].resources.requests", want: "spec.sidecarContainerTemplate.resources.requests"},
		"native sidecar: the claim's mount": {fpvc: f, object: 0, cause: "spec.initContainers[0].volumeMounts[0].mountPath", want: "spec.pvcVolumeMountPath"},
		"container sidecar's image":         {fpvc: container, object: 0, cause: "spec.containers[1].image", want: "spec.sidecarContainerTemplate.image"},
		"app container: a common mount":     {fpvc: f, object: 0, cause: "spec.containers[0].volumeMounts[1].name", want: "spec.commonVolumeMounts[0].name"},
		"app container: a common env":       {fpvc: f, object: 0, cause: "spec.containers[0].env[0].name", want: "spec.commonEnvs[0].name"},
		"the claim volume":                  {fpvc: f, object: 0, cause: "spec.volumes[0].name", want: "spec.pvcVolumeName"},
		"a common volume":                   {fpvc: f, object: 0, cause: "spec.volumes[1].name", want: "spec.commonVolumes[0].name"},
		"pod metadata: unmapped":            {fpvc: f, object: 0, cause: "metadata.annotations", want: "spec"},
		"claim spec":                        {fpvc: f, object: 2, cause: "spec.resources.requests[storage]", want: "spec.pvcSpecTemplate.resources.requests[storage]"},
		"claim metadata: unmapped":          {fpvc: f, object: 2, cause: "metadata.labels", want: "spec"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			reps := representatives(tc.fpvc, "ns")
			got := reps[tc.object].mapCause(metav1.StatusCause{Type: metav1.CauseTypeFieldValueInvalid, Field: tc.cause, Message: "bad"})
			if got.Field != tc.want {
				t.Errorf("%s of the %s maps to %s, want %s", tc.cause, reps[tc.object].what, got.Field, tc.want)
			}
		})
	}
}

func TestRepresentatives(t *testing.T) {
	f := fixtures.MakeFluentPVC("f").Obj()
	reps := representatives(f, "ns")
	pod := reps[0].obj.(*corev1.Pod)
	job := reps[1].obj.(*batchv1.Job)
	claim := reps[2].obj.(*corev1.PersistentVolumeClaim)
	for _, o := range []interface {
		GetNamespace() string
		GetName() string
		GetGenerateName() string
		GetFinalizers() []string
		GetOwnerReferences() []metav1.OwnerReference
	}{pod, job, claim} {
		if o.GetNamespace() != "ns" || o.GetName() != "" || o.GetGenerateName() == "" || len(o.GetFinalizers()) > 0 || len(o.GetOwnerReferences()) > 0 {
			t.Errorf("%T: namespace %q, name %q, generateName %q, finalizers %v, owners %v: want ns, a generated name, none", o, o.GetNamespace(), o.GetName(), o.GetGenerateName(), o.GetFinalizers(), o.GetOwnerReferences())
		}
	}
	if _, labelled := pod.Labels[v1alpha1.FluentPVCNameLabelKey]; labelled {
		t.Errorf("the pod opts into the pod webhook")
	}
	if len(pod.Spec.InitContainers) != 1 || pod.Spec.InitContainers[0].Name != f.Spec.SidecarContainerTemplate.Name {
		t.Errorf("no native sidecar in the pod: %+v", pod.Spec.InitContainers)
	}
	if job.Spec.Template.Spec.Containers[0].Image != f.Spec.PVCFinalizerJobSpecTemplate.Template.Spec.Containers[0].Image {
		t.Errorf("the Job is not made from the template")
	}
}

func TestValidateOutcomes(t *testing.T) {
	f := fixtures.MakeFluentPVC("f").Obj()
	gr := schema.GroupResource{Resource: "pods"}
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: "batch", Kind: "Job"}, "x", field.ErrorList{
		field.Required(field.NewPath("spec", "template", "spec", "containers").Index(0).Child("image"), ""),
	})
	cases := map[string]struct {
		err          error
		wantErrs     int
		wantWarnings int
	}{
		"admitted by the API server":                         {},
		"invalid: an error at the FluentPVC's field":         {err: invalid, wantErrs: 3},
		"forbidden by the operator namespace's Pod Security": {err: apierrors.NewForbidden(gr, "x", errors.New("violates PodSecurity \"restricted:latest\""))},
		"the API server unreachable: a warning, admitted":    {err: apierrors.NewServiceUnavailable("down"), wantWarnings: 3},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
				Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error { return tc.err },
			}).Build()
			v := &FluentPVCValidator{Writer: c, Namespace: "ns"}
			errs, warnings := v.Validate(context.Background(), f)
			if len(errs) != tc.wantErrs || len(warnings) != tc.wantWarnings {
				t.Errorf("Validate = %d errors %v, %d warnings %v; want %d and %d", len(errs), errs, len(warnings), warnings, tc.wantErrs, tc.wantWarnings)
			}
		})
	}
}

// TestOwnAdmissionObjections refuses a drain Job template whose pods the
// operator's own pod webhook would deny.
func TestOwnAdmissionObjections(t *testing.T) {
	withDrainLabels := func(labels map[string]string) *v1alpha1.FluentPVC {
		return fixtures.MakeFluentPVC("f").Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.PVCFinalizerJobSpecTemplate.Template.Labels = labels
		}).Obj()
	}
	cases := map[string]struct {
		fpvc     *v1alpha1.FluentPVC
		wantPath []string
	}{
		"no labels":          {fpvc: withDrainLabels(nil)},
		"labels of the user": {fpvc: withDrainLabels(map[string]string{"app": "drain"})},
		"the opt-in label": {
			fpvc:     withDrainLabels(map[string]string{v1alpha1.FluentPVCNameLabelKey: "f"}),
			wantPath: []string{"spec.pvcFinalizerJobSpecTemplate.template.metadata.labels[fluent-pvc-operator.tech.zozo.com/fluent-pvc-name]"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, e := range ownAdmissionObjections(tc.fpvc) {
				got = append(got, e.Field)
			}
			if diff := cmp.Diff(tc.wantPath, got); diff != "" {
				t.Errorf("objections (-want +got):\n%s", diff)
			}
		})
	}
}
