package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/controllers"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
	"github.com/st-tech/fluent-pvc-operator/webhook"
)

// Short timers so that grace periods and backoffs pass within a spec.
var testOptions = controllers.Options{
	OrphanGracePeriod:       3 * time.Second,
	DrainBackoffBase:        time.Second,
	DrainBackoffMax:         4 * time.Second,
	FluentPVCMissingTimeout: 5 * time.Second,
	BinderImage:             "registry.k8s.io/pause:3.10",
	PoolBindMode:            controllers.PoolBindSelectNode,
	PoolIdleNamespaceTTL:    time.Hour,
}

var (
	testEnv   *envtest.Environment
	cfg       *rest.Config
	k8sClient client.Client
	scheme    = runtime.NewScheme()
)

func TestIntegration(t *testing.T) {
	RegisterFailHandler(Fail)
	fixtures.SetEnvtestDefaults()
	RunSpecs(t, "Lifecycle controllers suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())

	whc, err := fixtures.WebhookConfiguration()
	Expect(err).NotTo(HaveOccurred())
	testEnv = fixtures.NewEnvtest()
	testEnv.WebhookInstallOptions.MutatingWebhooks = []*admissionregistrationv1.MutatingWebhookConfiguration{whc}
	vwhc, err := fixtures.FluentPVCWebhookConfiguration()
	Expect(err).NotTo(HaveOccurred())
	testEnv.WebhookInstallOptions.ValidatingWebhooks = []*admissionregistrationv1.ValidatingWebhookConfiguration{vwhc}
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// startOperator runs the webhook and the controllers, as main.go does, until
// the returned function stops them.
func startOperator() (manager.Manager, func()) {
	wh := testEnv.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     scheme,
		Cache:      controllers.CacheOptions(),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		WebhookServer: ctrlwebhook.NewServer(ctrlwebhook.Options{
			Host: wh.LocalServingHost, Port: wh.LocalServingPort, CertDir: wh.LocalServingCertDir,
		}),
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(controllers.Setup(mgr, testOptions)).To(Succeed())
	Expect(webhook.Setup(mgr, webhook.Options{Namespace: "default"})).To(Succeed())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	Expect(mgr.GetCache().WaitForCacheSync(ctx)).To(BeTrue())
	// The webhook serves once the server is up.
	Eventually(func() error {
		return mgr.GetWebhookServer().StartedChecker()(nil)
	}).Should(Succeed())
	return mgr, func() {
		cancel()
		Eventually(done).Should(BeClosed())
	}
}

// newNamespace creates a fresh namespace for one spec.
func newNamespace() string {
	ns := &corev1.Namespace{}
	ns.GenerateName = "lc-"
	Expect(k8sClient.Create(context.Background(), ns)).To(Succeed())
	return ns.Name
}
