package webhook_test

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/st-tech/fluent-pvc-operator/controllers"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
	"github.com/st-tech/fluent-pvc-operator/webhook"
)

var (
	testEnv   *envtest.Environment
	cfg       *rest.Config
	k8sClient client.Client
	scheme    = runtime.NewScheme()
	// mgrClient is the manager's own client, reading from its caches.
	mgrClient client.Client
	// self is the suite's user, which the webhooks take for the operator.
	self    string
	mutator *webhook.PodMutator
)

func TestIntegration(t *testing.T) {
	RegisterFailHandler(Fail)
	fixtures.SetEnvtestDefaults()
	RunSpecs(t, "Pod webhook suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	testEnv, cfg, k8sClient = fixtures.StartEnvtest(fixtures.EnvtestOptions{Scheme: scheme, Webhooks: true})
	DeferCleanup(testEnv.Stop)

	opts := fixtures.ManagerOptions(testEnv, scheme)
	opts.Cache = controllers.CacheOptions()
	mgr, err := ctrl.NewManager(cfg, opts)
	Expect(err).NotTo(HaveOccurred())
	// The suite's own user creates pods as the operator would: holders.
	review := &authenticationv1.SelfSubjectReview{}
	Expect(k8sClient.Create(context.Background(), review)).To(Succeed())
	self = review.Status.UserInfo.Username
	Expect(self).NotTo(BeEmpty())
	caches, err := webhook.Watch(mgr)
	Expect(err).NotTo(HaveOccurred())
	Expect(webhook.Setup(mgr, webhook.Options{Namespace: "default", Self: self}, caches)).To(Succeed())
	mgrClient = mgr.GetClient()
	mutator = webhook.NewPodMutator(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetClient(), admission.NewDecoder(scheme), clock.RealClock{})
	DeferCleanup(fixtures.StartManager(mgr))
})

// newNamespace creates a fresh namespace for one spec.
func newNamespace() string {
	return fixtures.NewNamespace(context.Background(), k8sClient, "wh", nil)
}
