package v1alpha1_test

import (
	"context"
	"os"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

var (
	ctx        context.Context
	testEnv    *envtest.Environment
	k8sClient  client.Client
	kubeconfig string // a cluster-admin kubeconfig for bin/kubectl
)

func TestIntegration(t *testing.T) {
	RegisterFailHandler(Fail)
	fixtures.SetEnvtestDefaults()
	RunSpecs(t, "v1alpha1 API Suite")
}

var _ = BeforeSuite(func() {
	ctx = context.Background()
	testEnv, _, k8sClient = fixtures.StartEnvtest(fixtures.EnvtestOptions{AddToScheme: []func(*runtime.Scheme) error{apiextensionsv1.AddToScheme}})
	DeferCleanup(testEnv.Stop)

	dir, err := os.MkdirTemp("", "v1alpha1-envtest-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, dir)
	kubeconfig, err = fixtures.WriteKubeconfig(testEnv, dir)
	Expect(err).NotTo(HaveOccurred())
})
