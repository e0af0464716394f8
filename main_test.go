package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// exitTimeout bounds how long the manager may take to exit after SIGTERM.
const exitTimeout = fixtures.Timeout

var (
	managerBin string // the manager built from this package
	kubeconfig string // a cluster-admin kubeconfig for the envtest API server
	certDir    string // a self-signed tls.crt and tls.key for the webhook server
	testEnv    *envtest.Environment
	admin      kubernetes.Interface // cluster-admin, for the specs' RBAC
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

	testEnv = fixtures.NewEnvtest()
	cfg, err := testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	admin, err = kubernetes.NewForConfig(cfg)
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
			"--webhook-bind-address", webhook,
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
		Eventually(session, exitTimeout).Should(gexec.Exit(0))
	})

	It("reads the kubeconfig given with --kubeconfig", func() {
		probe := freePort()
		session := startManagerWithEnv(managerEnv(), append([]string{"--kubeconfig", kubeconfig}, standaloneArgs(probe)...)...)
		Eventually(statusOf).WithArguments("http://" + probe + "/readyz").Should(Equal(http.StatusOK))
		session.Terminate()
		Eventually(session, exitTimeout).Should(gexec.Exit(0))
	})

	It("is not ready while a cache the webhooks read cannot sync, says which, and is ready once it can", func(ctx SpecContext) {
		const user = "manager-readiness"
		role := managerClusterRole()
		var withheld []rbacv1.PolicyRule
		role.Rules = slices.DeleteFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
			if slices.Contains(r.Resources, "fluentpvcbindings") {
				withheld = append(withheld, r)
				return true
			}
			return false
		})
		Expect(withheld).NotTo(BeEmpty(), "config/rbac/role.yaml grants the bindings")
		role.Name = user
		_, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) {
			Expect(admin.RbacV1().ClusterRoles().Delete(ctx, user, metav1.DeleteOptions{})).To(Succeed())
		})
		_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) {
			Expect(admin.RbacV1().ClusterRoleBindings().Delete(ctx, user, metav1.DeleteOptions{})).To(Succeed())
		})
		limited, err := fixtures.WriteUserKubeconfig(testEnv, envtest.User{Name: user}, GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())

		probe := freePort()
		startManagerWithEnv(managerEnv("KUBECONFIG="+limited), standaloneArgs(probe)...)
		Eventually(statusOf).WithArguments("http://" + probe + "/healthz").Should(Equal(http.StatusOK))
		By("reading the readiness check's reason while the bindings cannot be listed")
		Eventually(bodyOf).WithArguments("http://" + probe + "/readyz/readyz").
			Should(ContainSubstring("the webhooks' cache has not synced FluentPVCBinding yet"))
		Expect(statusOf("http://" + probe + "/readyz")).To(Equal(http.StatusInternalServerError))

		By("granting them: ready without a restart")
		role.Rules = append(role.Rules, withheld...)
		_, err = admin.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
		// The informer lists again after its backoff, which grows from under
		// a second while the list is refused, so is short this soon.
		Eventually(statusOf).WithArguments("http://" + probe + "/readyz").WithTimeout(fixtures.LongTimeout).Should(Equal(http.StatusOK))
	})

	It("exits non-zero and says why when --cert-management is unknown", func() {
		session := startManager("--cert-management=bogus", "--leader-elect=false")
		Eventually(session).Should(gexec.Exit())
		Expect(session.ExitCode()).NotTo(BeZero())
		Expect(string(session.Err.Contents())).To(ContainSubstring(`--cert-management must be "self" or "external", not "bogus"`))
	})
})

// standaloneArgs run the manager as one replica with the test's
// certificate, its probes on probe and no metrics.
func standaloneArgs(probe string) []string {
	GinkgoHelper()
	return []string{
		"--leader-elect=false",
		"--cert-management=external",
		"--cert-dir", certDir,
		"--health-probe-bind-address", probe,
		"--metrics-bind-address", "0",
		"--webhook-bind-address", freePort(),
	}
}

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

// managerClusterRole is the operator's ClusterRole, as config/rbac/role.yaml
// has it.
func managerClusterRole() *rbacv1.ClusterRole {
	GinkgoHelper()
	raw, err := os.ReadFile(fixtures.Path("config", "rbac", "role.yaml"))
	Expect(err).NotTo(HaveOccurred())
	for doc := range strings.SplitSeq(string(raw), "\n---\n") {
		role := &rbacv1.ClusterRole{}
		Expect(yaml.Unmarshal([]byte(doc), role)).To(Succeed())
		if role.Kind == "ClusterRole" {
			return role
		}
	}
	Fail("config/rbac/role.yaml has no ClusterRole")
	return nil
}

// bodyOf is the body of a GET of url, or "" if it failed.
func bodyOf(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
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

// TestParseFlagsReservations: the reservation and shutdown flags take
// what the stock and the drain can do, and refuse the rest with the bounds.
func TestParseFlagsReservations(t *testing.T) {
	for name, tc := range map[string]struct {
		args    []string
		wantErr string
		// reserve is the stock's target parsed, when there is no error.
		reserve int
	}{
		"the defaults":        {},
		"a number":            {args: []string{"--reserve-ahead=2"}, reserve: 2},
		"the replica's share": {args: []string{"--reserve-ahead=share"}, reserve: pool.ReserveShare},
		"a negative count":    {args: []string{"--reserve-ahead=-1"}, wantErr: `invalid value "-1" for flag -reserve-ahead: want a number of claims, 0 or more, or "share", not "-1"`},
		"a word":              {args: []string{"--reserve-ahead=all"}, wantErr: `want a number of claims, 0 or more, or "share", not "all"`},
		"a drain":             {args: []string{"--shutdown-drain=5s"}},
		"a negative drain":    {args: []string{"--shutdown-drain=-1s"}, wantErr: "--shutdown-drain must be 0 or more, not -1s"},
		"a webhook address":   {args: []string{"--webhook-bind-address=127.0.0.1:9443"}},
		"a webhook port only": {args: []string{"--webhook-bind-address=9443"}, wantErr: `--webhook-bind-address must be host:port, not "9443"`},
	} {
		t.Run(name, func(t *testing.T) {
			o, _, err := parseFlags(tc.args)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("parseFlags(%v): %v", tc.args, err)
			case tc.wantErr == "" && int(o.reserveAhead) != tc.reserve:
				t.Fatalf("parseFlags(%v): --reserve-ahead %d, want %d", tc.args, o.reserveAhead, tc.reserve)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("parseFlags(%v) = %v, want an error with %q", tc.args, err, tc.wantErr)
			}
		})
	}
}
