package claim_test

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apitypes "k8s.io/apimachinery/pkg/types"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

func TestMountObjection(t *testing.T) {
	fpvc := fixtures.MakeFluentPVC("f").Obj()
	handedOut := newClaimed()
	used := with(handedOut, func(c *corev1.PersistentVolumeClaim) {
		c.Annotations[v1alpha1.UsedByPodAnnotationKey] = "app/app-uid"
	})
	warm := fixtures.Returned(handedOut)
	released := with(used, func(c *corev1.PersistentVolumeClaim) {
		c.Finalizers = nil
		c.DeletionTimestamp = &metav1.Time{Time: fixtures.Epoch}
	})
	kept := with(used, func(c *corev1.PersistentVolumeClaim) { c.Finalizers = nil })
	other := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data"}}

	pod := func(name string, uid string, labels map[string]string) *corev1.Pod {
		p := fixtures.MakePod(name, "ns").Claim("f-abc").Obj()
		p.UID, p.Labels = apitypes.UID(uid), map[string]string{}
		for k, v := range labels {
			p.Labels[k] = v
		}
		return p
	}
	own := pod("app", "app-uid", map[string]string{v1alpha1.FluentPVCNameLabelKey: fpvc.Name, v1alpha1.BindingNameLabelKey: "f-abc"})
	admitted := pod("app", "new-uid", map[string]string{v1alpha1.FluentPVCNameLabelKey: fpvc.Name, v1alpha1.BindingNameLabelKey: "f-abc"})
	debugCopy := pod("app-debug", "copy-uid", nil)
	otherFluentPVC := pod("app", "new-uid", map[string]string{v1alpha1.FluentPVCNameLabelKey: "g", v1alpha1.BindingNameLabelKey: "f-abc"})

	// The operator's Jobs, and pods they control or that only look so.
	binding := claim.Binding(handedOut, fpvc.UID)
	binding.UID = "binding-uid"
	drainJob := objects.DrainJob(fpvc, binding, 2)
	drainJob.UID = "drain-job-uid"
	otherBinding := binding.DeepCopy()
	otherBinding.Name, otherBinding.UID = "f-xyz", "other-binding-uid"
	otherDrainJob := objects.DrainJob(fpvc, otherBinding, 1)
	otherDrainJob.UID = "other-drain-job-uid"
	// A Job named as the claim's drain Job, made by someone else: no
	// binding controls it.
	lookalikeJob := drainJob.DeepCopy()
	lookalikeJob.UID, lookalikeJob.OwnerReferences = "lookalike-uid", nil
	binderJob := pool.BinderJob(fpvc, warm, "pause")
	binderJob.UID = "binder-job-uid"
	podOf := func(name string, job *batchv1.Job) *corev1.Pod {
		p := pod(name, name+"-uid", job.Spec.Template.Labels)
		p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}
		return p
	}
	drain := podOf("f-abc-drain-2-x", drainJob)
	otherDrain := podOf("f-xyz-drain-1-x", otherDrainJob)
	lookalikeDrain := podOf("f-abc-drain-2-y", lookalikeJob)
	// Labels copied from a drain pod, with no controller.
	forgedDrain := pod("forged", "forged-uid", drainJob.Spec.Template.Labels)
	binder := podOf("f-abc-bind-x", binderJob)
	forgedBinder := pod("forged", "forged-uid", binderJob.Spec.Template.Labels)
	warm.UID = "warm-uid"
	unrequested := warm.DeepCopy()
	requested := time.Date(2024, 1, 1, 0, 0, 1, 5e8, time.UTC)
	metav1.SetMetaDataAnnotation(&warm.ObjectMeta, v1alpha1.HolderRequestAnnotationKey, requested.Format(time.RFC3339Nano))
	holder := objects.HolderPod(fpvc.Name, warm, "node-1", "pause", "")
	rerequested := warm.DeepCopy()
	metav1.SetMetaDataAnnotation(&rerequested.ObjectMeta, v1alpha1.HolderRequestAnnotationKey, "2024-01-01T00:00:02.5Z")
	writingHolder := holder.DeepCopy()
	writingHolder.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly = false
	otherWarm := warm.DeepCopy()
	otherWarm.UID = "other-warm-uid"
	staleHolder := objects.HolderPod(fpvc.Name, otherWarm, "node-1", "pause", "")

	cases := map[string]struct {
		pod *corev1.Pod
		pvc *corev1.PersistentVolumeClaim
		// job is the pod's controlling Job as the webhook reads it.
		job *batchv1.Job
		// byOperator is true when the operator creates the pod.
		byOperator bool
		// late: the pod is admitted HolderAdmitWindow after the holder
		// request; else a second after it.
		late bool
		// want is part of the objection; "" when the pod may mount the PVC.
		want string
	}{
		"a warm PVC, by its holder":                       {pod: holder, pvc: warm, byOperator: true},
		"a warm PVC, by a holder someone else creates":    {pod: holder, pvc: warm, want: "is a warm PVC"},
		"a warm PVC, by a holder of an earlier request":   {pod: holder, pvc: rerequested, byOperator: true, want: "does not carry a holder request"},
		"a warm PVC that records no request, by a holder": {pod: holder, pvc: unrequested, byOperator: true, want: "does not carry a holder request"},
		"a warm PVC, by its holder past the admit window": {pod: holder, pvc: warm, byOperator: true, late: true, want: "does not carry a holder request"},
		"a warm PVC, by a holder that would write":        {pod: writingHolder, pvc: warm, byOperator: true, want: "is a warm PVC"},
		"a warm PVC, by the holder of an earlier PVC":     {pod: staleHolder, pvc: warm, byOperator: true, want: "is a warm PVC"},
		"a claim handed out, by its holder":               {pod: holder, pvc: handedOut, byOperator: true, want: "no other pod may mount it"},
		"a used claim, by its holder":                     {pod: holder, pvc: used, byOperator: true, want: "no other pod may mount it"},
		"a pod the operator creates that is no holder":    {pod: debugCopy, pvc: warm, byOperator: true, want: "is a warm PVC"},
		"not the operator's PVC":                          {pod: debugCopy, pvc: other},
		"the pod a claim was handed to, being admitted":   {pod: admitted, pvc: handedOut},
		"an unlabelled copy of a pod being admitted":      {pod: debugCopy, pvc: handedOut, want: "the claim of the pod being admitted with it"},
		"a pod of another FluentPVC naming the claim":     {pod: otherFluentPVC, pvc: handedOut, want: "no other pod may mount it"},
		"the recorded pod":                                {pod: own, pvc: used},
		"kubectl debug --copy-to of the recorded pod":     {pod: debugCopy, pvc: used, want: "PVC f-abc is the claim of pod app"},
		"a labelled copy of the recorded pod":             {pod: admitted, pvc: used, want: "the claim of pod app"},
		"the claim's drain pod":                           {pod: drain, pvc: used, job: drainJob},
		"the claim's drain pod, its Job not found":        {pod: drain, pvc: used, want: "no other pod may mount it"},
		"a pod with a drain pod's labels, no controller":  {pod: forgedDrain, pvc: used, want: "no other pod may mount it"},
		"a pod naming the drain Job with another UID":     {pod: lookalikeDrain, pvc: used, job: drainJob, want: "no other pod may mount it"},
		"a pod of a drain-named Job no binding controls":  {pod: lookalikeDrain, pvc: used, job: lookalikeJob, want: "no other pod may mount it"},
		"another claim's drain pod":                       {pod: otherDrain, pvc: used, job: otherDrainJob, want: "no other pod may mount it"},
		"a warm PVC, by its binder pod":                   {pod: binder, pvc: warm, job: binderJob},
		"a warm PVC, by a pod with binder labels":         {pod: forgedBinder, pvc: warm, want: "is a warm PVC of FluentPVC \"f\""},
		"a warm PVC, by the claim's drain pod":            {pod: drain, pvc: warm, job: drainJob, want: "is a warm PVC"},
		"a warm PVC, by name":                             {pod: debugCopy, pvc: warm, want: "is a warm PVC of FluentPVC \"f\""},
		"a drained claim being deleted":                   {pod: debugCopy, pvc: released},
		"a claim let go of and kept: a person drains it":  {pod: debugCopy, pvc: kept},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			now := requested.Add(time.Second)
			if tc.late {
				now = requested.Add(claim.HolderAdmitWindow)
			}
			got := claim.MountObjection(tc.pod, tc.pvc, tc.job, tc.byOperator, now)
			switch {
			case tc.want == "" && got != "":
				t.Errorf("objection %q, want none", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("objection %q, want one with %q", got, tc.want)
			}
		})
	}
}
