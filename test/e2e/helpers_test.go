package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// newNamespace creates a namespace for one spec and, when the spec ends,
// checks that nothing of the operator is left in it: no PVC, Job or binding.
func newNamespace(prefix string) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	Expect(k8s.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			return // keep the evidence
		}
		Eventually(func(g Gomega) {
			var pvcs corev1.PersistentVolumeClaimList
			g.Expect(k8s.List(ctx, &pvcs, client.InNamespace(ns.Name))).To(Succeed())
			g.Expect(names(pvcs.Items)).To(BeEmpty(), "PVCs left in %s", ns.Name)
			var jobs batchv1.JobList
			g.Expect(k8s.List(ctx, &jobs, client.InNamespace(ns.Name))).To(Succeed())
			g.Expect(names(jobs.Items)).To(BeEmpty(), "Jobs left in %s", ns.Name)
			var bs v1alpha1.FluentPVCBindingList
			g.Expect(k8s.List(ctx, &bs, client.InNamespace(ns.Name))).To(Succeed())
			g.Expect(names(bs.Items)).To(BeEmpty(), "bindings left in %s", ns.Name)
		}).Should(Succeed())
		Expect(k8s.Delete(ctx, ns)).To(Succeed())
	})
	return ns.Name
}

func names[T any, PT interface {
	*T
	client.Object
}](items []T) []string {
	var out []string
	for i := range items {
		out = append(out, PT(&items[i]).GetName())
	}
	return out
}

// createFluentPVC creates f and deletes it when the spec ends, waiting until
// it is gone (its drains finished, its warm PVCs deleted).
func createFluentPVC(f *v1alpha1.FluentPVC) *v1alpha1.FluentPVC {
	Expect(k8s.Create(ctx, f)).To(Succeed())
	DeferCleanup(func() {
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, f))).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(f), &v1alpha1.FluentPVC{}))
		},
			timeout, interval).Should(BeTrue(), "FluentPVC %s is deleted", f.Name)
	})
	return f
}

// e2eFluentPVC is the sample FluentPVC named name, with a finalizer Job that
// fails fast when its pod fails.
func e2eFluentPVC(name string) *fixtures.FluentPVCWrapper {
	return fixtures.MakeFluentPVC(name).Mutate(func(f *v1alpha1.FluentPVC) {
		f.Spec.PVCFinalizerJobSpecTemplate.BackoffLimit = new(int32)
	})
}

func getPod(ns, name string) func(Gomega) *corev1.Pod {
	return func(g Gomega) *corev1.Pod {
		p := &corev1.Pod{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p)).To(Succeed())
		return p
	}
}

// running waits until pod ns/name is Running and returns it.
func running(ns, name string) *corev1.Pod {
	var pod *corev1.Pod
	EventuallyWithOffset(1, func(g Gomega) {
		pod = getPod(ns, name)(g)
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
	}).Should(Succeed())
	return pod
}

func claimOf(pod *corev1.Pod) string {
	c := pod.Labels[v1alpha1.BindingNameLabelKey]
	ExpectWithOffset(1, c).NotTo(BeEmpty(), "pod %s has no claim", pod.Name)
	return c
}

func getPVC(ns, name string) func(Gomega) *corev1.PersistentVolumeClaim {
	return func(g Gomega) *corev1.PersistentVolumeClaim {
		c := &corev1.PersistentVolumeClaim{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, c)).To(Succeed())
		return c
	}
}

// drained waits until claim ns/name and its binding are gone.
func drained(ns, name string) {
	EventuallyWithOffset(1, func(g Gomega) {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.PersistentVolumeClaim{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "PVC %s/%s is gone: %v", ns, name, err)
		err = k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &v1alpha1.FluentPVCBinding{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "binding %s/%s is gone: %v", ns, name, err)
	}).WithTimeout(longTimeout).Should(Succeed())
}

// podsOf lists the pods of ns with label app=app.
func podsOf(g Gomega, ns, app string) []corev1.Pod {
	var l corev1.PodList
	g.Expect(k8s.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{"app": app})).To(Succeed())
	return l.Items
}

// kubectl runs bin/kubectl against the cluster.
func kubectl(args ...string) {
	_, err := kc.Kubectl(ctx, nil, args...)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
}
