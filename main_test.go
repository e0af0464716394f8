package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// gracefulShutdownTimeout is passed to the manager and bounds how long it may
// take to exit after SIGTERM.
const gracefulShutdownTimeout = fixtures.Timeout

var (
	managerBin string // the manager built from this package
	kubeconfig string // a cluster-admin kubeconfig for the envtest API server
	certDir    string // a self-signed tls.crt and tls.key for the webhook server
)

func TestIntegration(t *testing.T) {
	RegisterFailHandler(Fail)
	fixtures.SetEnvtestDefaults()
	RunSpecs(t, "Manager Suite")
}

var _ = BeforeSuite(func() {
	dir, err := os.MkdirTemp("", "manager-test-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, dir)

	managerBin = filepath.Join(dir, "manager")
	build, err := gexec.Start(exec.Command("go", "build", "-o", managerBin, "."), GinkgoWriter, GinkgoWriter)
	Expect(err).NotTo(HaveOccurred())
	Eventually(build, fixtures.LongTimeout).Should(gexec.Exit(0), "go build failed: %s", build.Err.Contents())

	testEnv := fixtures.NewEnvtest()
	_, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(testEnv.Stop)
	kubeconfig, err = fixtures.WriteKubeconfig(testEnv, dir)
	Expect(err).NotTo(HaveOccurred())

	certDir = filepath.Join(dir, "certs")
	Expect(writeSelfSignedCert(certDir)).To(Succeed())
})

var _ = Describe("manager", func() {
	It("serves health, readiness and metrics, and exits 0 on SIGTERM", func() {
		probe, metrics, webhook := freePort(), freePort(), freePort()
		session := startManager(
			"--leader-elect=false",
			"--cert-management=external",
			"--cert-dir", certDir,
			"--health-probe-bind-address", probe,
			"--metrics-bind-address", metrics,
			"--webhook-port", strings.TrimPrefix(webhook, "127.0.0.1:"),
			"--graceful-shutdown-timeout", gracefulShutdownTimeout.String(),
		)

		Eventually(statusOf).WithArguments("http://" + probe + "/healthz").Should(Equal(http.StatusOK))
		Eventually(statusOf).WithArguments("http://" + probe + "/readyz").Should(Equal(http.StatusOK))
		Eventually(func(g Gomega) {
			resp, err := http.Get("http://" + metrics + "/metrics")
			g.Expect(err).NotTo(HaveOccurred())
			defer resp.Body.Close()
			g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
			g.Expect(resp.Header.Get("Content-Type")).To(HavePrefix("text/plain"))
			parser := expfmt.NewTextParser(model.UTF8Validation)
			families, err := parser.TextToMetricFamilies(resp.Body)
			g.Expect(err).NotTo(HaveOccurred(), "the metrics endpoint must serve the Prometheus text format")
			g.Expect(families).To(HaveKey("controller_runtime_webhook_requests_in_flight"),
				"the pod webhook must be registered and instrumented")
			g.Expect(families).To(HaveKey("rest_client_requests_total"))
			g.Expect(families["rest_client_requests_total"].GetMetric()).To(ContainElement(
				WithTransform(labelsOf, HaveKeyWithValue("code", "200"))),
				"the manager must have reached the API server")
		}).Should(Succeed())
		Expect(session).NotTo(gexec.Exit(), "the manager must keep running")

		session.Terminate()
		Eventually(session, gracefulShutdownTimeout).Should(gexec.Exit(0))
	})

	It("reads the kubeconfig given with --kubeconfig", func() {
		probe := freePort()
		session := startManagerWithEnv(managerEnv(),
			"--kubeconfig", kubeconfig,
			"--leader-elect=false",
			"--cert-management=external",
			"--cert-dir", certDir,
			"--health-probe-bind-address", probe,
			"--metrics-bind-address", "0",
			"--webhook-port", strings.TrimPrefix(freePort(), "127.0.0.1:"),
		)
		Eventually(statusOf).WithArguments("http://" + probe + "/readyz").Should(Equal(http.StatusOK))
		session.Terminate()
		Eventually(session, gracefulShutdownTimeout).Should(gexec.Exit(0))
	})

	It("exits non-zero and says why when --cert-management is unknown", func() {
		session := startManager("--cert-management=bogus", "--leader-elect=false")
		Eventually(session).Should(gexec.Exit())
		Expect(session.ExitCode()).NotTo(BeZero())
		Expect(string(session.Err.Contents())).To(ContainSubstring(`--cert-management must be "self" or "external", not "bogus"`))
	})
})

// startManager runs the manager with args against the envtest API server,
// which it finds through $KUBECONFIG, and kills it when the spec ends.
func startManager(args ...string) *gexec.Session {
	GinkgoHelper()
	return startManagerWithEnv(managerEnv("KUBECONFIG="+kubeconfig), args...)
}

// managerEnv is the test's environment without any kubeconfig the manager
// could find by itself (no $KUBECONFIG, an empty $HOME), plus extra.
func managerEnv(extra ...string) []string {
	GinkgoHelper()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	return append(append(env, "HOME="+GinkgoT().TempDir()), extra...)
}

func startManagerWithEnv(env []string, args ...string) *gexec.Session {
	GinkgoHelper()
	cmd := exec.Command(managerBin, args...)
	cmd.Env = env
	session, err := gexec.Start(cmd, GinkgoWriter, GinkgoWriter)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { session.Kill().Wait() })
	return session
}

// labelsOf is a metric's labels as a map.
func labelsOf(m *dto.Metric) map[string]string {
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	return labels
}

// statusOf is the HTTP status of a GET of url, or 0 if it failed.
func statusOf(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	return resp.StatusCode
}

// freePort is a 127.0.0.1:port address nothing listens on right now.
func freePort() string {
	GinkgoHelper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	return l.Addr().String()
}

// writeSelfSignedCert writes a self-signed serving certificate for 127.0.0.1
// and localhost to dir/tls.crt and dir/tls.key.
func writeSelfSignedCert(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fluent-pvc-operator-test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("writing tls.crt: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return fmt.Errorf("writing tls.key: %w", err)
	}
	return nil
}
