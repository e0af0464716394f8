package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"

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
	testEnv, cfg, k8sClient = fixtures.StartEnvtest(fixtures.EnvtestOptions{Scheme: scheme, Webhooks: true})
	DeferCleanup(testEnv.Stop)
})

// startOperator runs the webhook and the controllers, as main.go does, until
// the returned function stops them.
func startOperator() (manager.Manager, func()) {
	opts := fixtures.ManagerOptions(testEnv, scheme)
	opts.Cache = controllers.CacheOptions()
	opts.Controller = config.Controller{SkipNameValidation: ptr.To(true)}
	mgr, err := ctrl.NewManager(cfg, opts)
	Expect(err).NotTo(HaveOccurred())
	Expect(controllers.Setup(mgr, testOptions)).To(Succeed())
	caches, err := webhook.Watch(mgr)
	Expect(err).NotTo(HaveOccurred())
	Expect(webhook.Setup(mgr, webhook.Options{Namespace: "default"}, caches)).To(Succeed())
	return mgr, fixtures.StartManager(mgr)
}

// newNamespace creates a fresh namespace for one spec.
func newNamespace() string {
	return fixtures.NewNamespace(context.Background(), k8sClient, "lc", nil)
}
