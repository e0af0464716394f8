package webhook_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
	"github.com/st-tech/fluent-pvc-operator/webhook"
)

var _ = Describe("Who may use a FluentPVC", func() {
	ctx := context.Background()
	// claimsIn lists the claims in ns: a denied pod leaves none.
	claimsIn := func(ns string) []corev1.PersistentVolumeClaim {
		var l corev1.PersistentVolumeClaimList
		Expect(k8sClient.List(ctx, &l, client.InNamespace(ns))).To(Succeed())
		return l.Items
	}
	labelledNamespace := func(labels map[string]string) string {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "access-", Labels: labels}}
		Expect(k8sClient.Create(ctx, ns)).To(Succeed())
		return ns.Name
	}
	create := func(f *v1alpha1.FluentPVC) {
		Expect(k8sClient.Create(ctx, f)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(context.Background(), f))).To(Succeed()) })
		Eventually(func() error { return mgrClient.Get(ctx, client.ObjectKeyFromObject(f), &v1alpha1.FluentPVC{}) }).Should(Succeed())
	}

	It("admits pods only in the namespaces its namespaceSelector selects", func() {
		f := fixtures.MakeFluentPVC("selective").Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"logs": "shipped"}}
		}).Obj()
		create(f)
		in := labelledNamespace(map[string]string{"logs": "shipped"})
		out := labelledNamespace(map[string]string{"logs": "kept"})
		// The webhook reads namespaces' labels from its cache.
		Eventually(func() error {
			return mgrClient.Get(ctx, client.ObjectKey{Name: out}, &corev1.Namespace{})
		}).Should(Succeed())

		Expect(k8sClient.Create(ctx, fixtures.MakePod("allowed", in).FluentPVC(f.Name).Obj())).To(Succeed())
		Expect(claimsIn(in)).To(HaveLen(1))

		err := k8sClient.Create(ctx, fixtures.MakePod("denied", out).FluentPVC(f.Name).Obj())
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "denied: %v", err)
		Expect(err.Error()).To(And(ContainSubstring(`FluentPVC "selective"`), ContainSubstring("logs=shipped"), ContainSubstring("namespace "+out)))
		Expect(claimsIn(out)).To(BeEmpty())
	})

	It("with usePermission Required, admits a pod only if its creator may use the FluentPVC", func() {
		f := fixtures.MakeFluentPVC("guarded").Mutate(func(f *v1alpha1.FluentPVC) {
			f.Spec.UsePermission = v1alpha1.UsePermissionRequired
		}).Obj()
		create(f)
		ns := labelledNamespace(nil)
		// alice may create pods in ns, nothing more.
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pods"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}}}}
		Expect(k8sClient.Create(ctx, role)).To(Succeed())
		Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "alice-pods"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}})).To(Succeed())
		aliceCfg := rest.CopyConfig(cfg)
		aliceCfg.Impersonate = rest.ImpersonationConfig{UserName: "alice"}
		alice, err := client.New(aliceCfg, client.Options{Scheme: k8sClient.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() error {
			return alice.Create(ctx, fixtures.MakePod("probe", ns).Obj(), client.DryRunAll)
		}).Should(Succeed(), "alice may create pods")

		err = alice.Create(ctx, fixtures.MakePod("denied", ns).FluentPVC(f.Name).Obj())
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "denied: %v", err)
		Expect(err.Error()).To(And(ContainSubstring("alice"), ContainSubstring(`verb "`+webhook.UseVerb+`"`), ContainSubstring("guarded")))
		Expect(claimsIn(ns)).To(BeEmpty())

		// Granted the verb on this FluentPVC, alice's pod is admitted.
		user := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "use-guarded-" + ns},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"fluentpvcs"}, ResourceNames: []string{f.Name}, Verbs: []string{webhook.UseVerb}}}}
		Expect(k8sClient.Create(ctx, user)).To(Succeed())
		DeferCleanup(func() { Expect(k8sClient.Delete(context.Background(), user)).To(Succeed()) })
		Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "alice-uses"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}})).To(Succeed())
		Eventually(func() error {
			return alice.Create(ctx, fixtures.MakePod("allowed", ns).FluentPVC(f.Name).Obj())
		}).Should(Succeed())
		Expect(claimsIn(ns)).To(HaveLen(1))
	})
})
