package checkout_test

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

var (
	testEnv   *envtest.Environment
	cfg       *rest.Config
	k8sClient client.Client
	scheme    = runtime.NewScheme()
)

func TestIntegration(t *testing.T) {
	RegisterFailHandler(Fail)
	fixtures.SetEnvtestDefaults()
	RunSpecs(t, "Checkout suite")
}

var _ = BeforeSuite(func() {
	testEnv, cfg, k8sClient = fixtures.StartEnvtest(fixtures.EnvtestOptions{Scheme: scheme})
	DeferCleanup(testEnv.Stop)
})

// newNamespace creates a fresh namespace for one spec.
func newNamespace() string {
	return fixtures.NewNamespace(context.Background(), k8sClient, "checkout", nil)
}
