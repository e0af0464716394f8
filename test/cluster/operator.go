package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// WebhookConfigurationName names the Mutating- and
// ValidatingWebhookConfiguration that RunOperator registers for the local
// manager. It differs from the deployed names so that
// DryRunDeployManifests does not collide with them.
const WebhookConfigurationName = "fluent-pvc-operator-local"

// operatorStopTimeout exceeds the manager's default
// graceful shutdown timeout of 30s.
const operatorStopTimeout = 40 * time.Second

// OperatorOptions configure RunOperator.
type OperatorOptions struct {
	// Args are extra flags of the manager, e.g. "--drain-backoff-base=1s".
	Args []string
	// ReadyTimeout bounds the wait for /readyz; 60s if zero.
	ReadyTimeout time.Duration
	// AsServiceAccount runs the manager as the ServiceAccount of
	// config/default, with only the RBAC that config/default grants it (the
	// admin kubeconfig impersonates the ServiceAccount), which proves the
	// deploy manifests grant everything the operator does.
	AsServiceAccount bool
	// Instance names this manager's log and PID files
	// (operator-<Instance>.log), so that several replicas run side by
	// side; empty for the one operator (operator.log).
	Instance string
	// CertDir holds the serving certificate; <cluster>/certs if empty.
	// A certificate already there is reused, so that replicas share it.
	CertDir string
	// Kubeconfig is the manager's kubeconfig instead of the admin one, e.g.
	// one that goes through a proxy.
	Kubeconfig string
	// WebhookPort is the port on 127.0.0.1 that the webhook configuration
	// points at instead of this manager's own, e.g. a load balancer in
	// front of several replicas. -1 leaves the configuration alone.
	WebhookPort int
}

// ChartArgs are the flags of the chart's (and config/default's) operator
// whose values differ from the binary's defaults and change how it serves
// pods: a run that shows or measures the operator as installed passes
// them (RunOperator does not).
var ChartArgs = []string{"--reserve-ahead=share"}

// ServiceAccount is the operator's identity in config/default.
const ServiceAccount = "system:serviceaccount:fluent-pvc-operator-system:fluent-pvc-operator-controller-manager"

// Operator is the manager (bin/manager) running as a local process against
// the cluster, serving the webhook on 127.0.0.1.
type Operator struct {
	// WebhookPort, MetricsPort and ProbePort are the manager's ports on
	// 127.0.0.1; they stay the same across Restart.
	WebhookPort, MetricsPort, ProbePort int
	// CertDir holds tls.crt, tls.key and ca.crt.
	CertDir string
	// LogPath is the manager's log, appended to across restarts.
	LogPath string

	cluster    *Cluster
	opts       OperatorOptions
	proc       *process
	kubeconfig string
}

// RunOperator builds bin/manager if it is missing or older than a Go source,
// writes a serving certificate for 127.0.0.1, applies the CRDs, starts the
// manager in the background (--leader-elect=false, --cert-management=external,
// the admin kubeconfig, so no RBAC), waits for /readyz and registers
// WebhookConfigurationName pointing at it with the selectors of
// config/webhook/webhook_selectors_patch.yaml.
func RunOperator(ctx context.Context, c *Cluster, opts OperatorOptions) (*Operator, error) {
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 60 * time.Second
	}
	start := time.Now()
	built, err := ensureBuilt(ctx, c.RepoRoot, c.bin("manager"), ".", c.RepoRoot)
	if err != nil {
		return nil, err
	}
	if built {
		c.progress("built bin/manager in %s", since(start))
	}
	start = time.Now()
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	o := &Operator{
		WebhookPort: ports[0], MetricsPort: ports[1], ProbePort: ports[2],
		CertDir: opts.CertDir,
		LogPath: filepath.Join(c.Dir, instanceFile(opts.Instance)+".log"),
		cluster: c, opts: opts,
	}
	if o.CertDir == "" {
		o.CertDir = filepath.Join(c.Dir, "certs")
	}
	caPEM, err := os.ReadFile(filepath.Join(o.CertDir, "ca.crt"))
	if opts.CertDir == "" || err != nil {
		if caPEM, err = WriteServingCert(o.CertDir); err != nil {
			return nil, err
		}
	}
	if err := c.InstallCRDs(ctx); err != nil {
		return nil, err
	}
	o.kubeconfig = c.Kubeconfig
	if opts.Kubeconfig != "" {
		o.kubeconfig = opts.Kubeconfig
	}
	if opts.AsServiceAccount {
		if o.kubeconfig, err = c.installRBAC(ctx); err != nil {
			return nil, err
		}
	}
	if err := o.start(ctx); err != nil {
		return nil, err
	}
	if opts.WebhookPort >= 0 {
		port := o.WebhookPort
		if opts.WebhookPort > 0 {
			port = opts.WebhookPort
		}
		if err := c.registerWebhook(ctx, port, caPEM); err != nil {
			return nil, errors.Join(err, o.Stop())
		}
	}
	c.progress("operator is ready: %s from its start to its webhook answering (webhook https://127.0.0.1:%d, metrics %s, log %s)", since(start), o.WebhookPort, o.MetricsURL(), o.LogPath)
	return o, nil
}

// MetricsURL is the manager's Prometheus endpoint.
func (o *Operator) MetricsURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/metrics", o.MetricsPort)
}

// PID is the manager's process ID, or 0 if it is stopped.
func (o *Operator) PID() int {
	if o.proc == nil || !o.proc.alive() {
		return 0
	}
	return o.proc.pid
}

func (o *Operator) pidFile() string {
	return filepath.Join(o.cluster.Dir, instanceFile(o.opts.Instance)+".pid")
}

// instanceFile is the base name of an operator instance's log and PID files.
func instanceFile(instance string) string {
	if instance == "" {
		return "operator"
	}
	return "operator-" + instance
}

func (o *Operator) args() []string {
	return append([]string{
		"--kubeconfig", o.kubeconfig,
		"--leader-elect=false",
		"--cert-management=external",
		"--cert-dir", o.CertDir,
		fmt.Sprintf("--webhook-bind-address=127.0.0.1:%d", o.WebhookPort),
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", o.MetricsPort),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", o.ProbePort),
	}, o.opts.Args...)
}

func (o *Operator) start(ctx context.Context) error {
	p, err := startBackground(o.cluster.bin("manager"), o.args(), o.LogPath, o.pidFile())
	if err != nil {
		return err
	}
	o.proc = p
	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", o.ProbePort)
	ctx, cancel := context.WithTimeout(ctx, o.opts.ReadyTimeout)
	defer cancel()
	err = wait.PollUntilContextCancel(ctx, poll, true, func(ctx context.Context) (bool, error) {
		if !p.alive() {
			return false, fmt.Errorf("the manager exited; see %s:\n%s", o.LogPath, tail(o.LogPath, 20))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, readyz, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return errors.Join(fmt.Errorf("waiting for %s: %w", readyz, err), o.Stop())
	}
	return nil
}

// Stop sends the manager SIGTERM and waits for it to exit (SIGKILL after
// 40s). The webhook stays registered with failurePolicy Fail, so creating a
// selected pod fails until the manager runs again, as in a real outage.
func (o *Operator) Stop() error {
	if o.proc == nil {
		return nil
	}
	err := o.proc.stop(operatorStopTimeout)
	o.proc = nil
	_ = os.Remove(o.pidFile())
	return err
}

// Kill ends the manager with SIGKILL, as a node failure or an OOM kill
// would, and waits for it to exit; Restart starts it again.
func (o *Operator) Kill() error {
	if o.proc == nil {
		return nil
	}
	err := o.proc.kill()
	o.proc = nil
	_ = os.Remove(o.pidFile())
	return err
}

// Restart stops the manager and starts it again with the same ports,
// certificate and flags, waiting for /readyz.
func (o *Operator) Restart(ctx context.Context) error {
	if err := o.Stop(); err != nil {
		return err
	}
	return o.start(ctx)
}

// InstallCRDs applies config/crd/bases client-side (`kubectl apply -f`, the
// documented install path) and waits for the CRDs to be Established.
func (c *Cluster) InstallCRDs(ctx context.Context) error {
	crds := filepath.Join(c.RepoRoot, "config", "crd", "bases")
	if _, err := c.Kubectl(ctx, nil, "apply", "-f", crds); err != nil {
		return err
	}
	// kubectl wait fails at once while a new CRD has no status yet.
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, poll, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, lastErr = c.Kubectl(ctx, nil, "wait", "--for=condition=Established", "--timeout=30s", "-f", crds)
		return lastErr == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the CRDs to be Established: %w (last: %v)", err, lastErr)
	}
	return nil
}

// Kubectl runs bin/kubectl with the cluster's kubeconfig, its cache under
// Dir, and stdin, and returns its standard output.
func (c *Cluster) Kubectl(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	// --cache-dir keeps kubectl's discovery cache out of ~/.kube.
	cmd := exec.CommandContext(ctx, c.bin("kubectl"), append([]string{
		"--kubeconfig", c.Kubeconfig, "--cache-dir", filepath.Join(c.Dir, "kubectl-cache"),
	}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("kubectl %s: %w\n%s%s", strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

// DefaultKustomize is the kustomize command of the Makefile. The KUSTOMIZE
// environment variable replaces it (a command line, split on spaces).
const DefaultKustomize = "go run sigs.k8s.io/kustomize/kustomize/v5@v5.8.1"

// installRBAC applies the Namespace, ServiceAccount and RBAC objects of
// config/default and returns a kubeconfig that impersonates ServiceAccount.
func (c *Cluster) installRBAC(ctx context.Context) (string, error) {
	manifests, err := c.renderDefault(ctx)
	if err != nil {
		return "", err
	}
	var rbac []string
	for _, doc := range strings.Split(string(manifests), "\n---\n") {
		var meta struct {
			Kind string `json:"kind"`
		}
		if yaml.Unmarshal([]byte(doc), &meta) != nil {
			continue
		}
		switch meta.Kind {
		case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			rbac = append(rbac, doc)
		}
	}
	if _, err := c.Kubectl(ctx, []byte(strings.Join(rbac, "\n---\n")), "apply", "-f", "-"); err != nil {
		return "", err
	}
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		return "", err
	}
	for _, user := range cfg.AuthInfos {
		user.Impersonate = ServiceAccount
	}
	path := filepath.Join(c.Dir, "operator.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", err
	}
	return path, nil
}

// renderDefault renders config/default with kustomize (KUSTOMIZE or
// DefaultKustomize).
func (c *Cluster) renderDefault(ctx context.Context) ([]byte, error) {
	kustomize := strings.Fields(os.Getenv("KUSTOMIZE"))
	if len(kustomize) == 0 {
		kustomize = strings.Fields(DefaultKustomize)
	}
	render := exec.CommandContext(ctx, kustomize[0], append(kustomize[1:], "build", "config/default")...)
	render.Dir = c.RepoRoot
	var manifests, stderr bytes.Buffer
	render.Stdout, render.Stderr = &manifests, &stderr
	if err := render.Run(); err != nil {
		return nil, fmt.Errorf("kustomize build config/default: %w\n%s", err, stderr.Bytes())
	}
	return manifests.Bytes(), nil
}

// DryRunDeployManifests renders config/default with kustomize (KUSTOMIZE or
// DefaultKustomize) and applies it
// with `kubectl apply --server-side --dry-run=server`, proving that the
// deploy manifests are valid against the API server. The CRDs are installed
// first, since the dry run does not persist the CRDs it contains; likewise
// the operator's Namespace is created for real, since the dry run of the
// namespaced objects needs it to exist. It returns kubectl's output.
func (c *Cluster) DryRunDeployManifests(ctx context.Context) ([]byte, error) {
	if err := c.InstallCRDs(ctx); err != nil {
		return nil, err
	}
	manifests, err := c.renderDefault(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.ensureNamespaces(ctx, manifests); err != nil {
		return nil, err
	}
	return c.Kubectl(ctx, manifests, "apply", "--server-side", "--dry-run=server", "-f", "-")
}

// ensureNamespaces creates the Namespaces among the manifests.
func (c *Cluster) ensureNamespaces(ctx context.Context, manifests []byte) error {
	for _, doc := range strings.Split(string(manifests), "\n---\n") {
		var meta struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil || meta.Kind != "Namespace" {
			continue
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: meta.Metadata.Name}}
		if _, err := c.Clientset.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", ns.Name, err)
		}
	}
	return nil
}

// registerWebhook creates or updates the webhook configurations named
// WebhookConfigurationName from config/webhook (manifests.yaml and the
// selector patches), with URL client configs: every webhook the installed
// operator has.
// RegisterWebhook points WebhookConfigurationName at port on 127.0.0.1,
// trusting the CA in certDir/ca.crt: for a load balancer in front of
// replicas started with OperatorOptions.WebhookPort -1.
func (c *Cluster) RegisterWebhook(ctx context.Context, port int, certDir string) error {
	caPEM, err := os.ReadFile(filepath.Join(certDir, "ca.crt"))
	if err != nil {
		return err
	}
	return c.registerWebhook(ctx, port, caPEM)
}

func (c *Cluster) registerWebhook(ctx context.Context, port int, caPEM []byte) error {
	clientConfig := func(service *admissionregistrationv1.ServiceReference) admissionregistrationv1.WebhookClientConfig {
		path := "/mutate-v1-pod"
		if service != nil && service.Path != nil {
			path = *service.Path
		}
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(fmt.Sprintf("https://127.0.0.1:%d%s", port, path)), CABundle: caPEM}
	}
	mutating, err := fixtures.WebhookConfiguration()
	if err != nil {
		return err
	}
	for i := range mutating.Webhooks {
		mutating.Webhooks[i].ClientConfig = clientConfig(mutating.Webhooks[i].ClientConfig.Service)
	}
	mutating.ObjectMeta = metav1.ObjectMeta{Name: WebhookConfigurationName}
	validating, err := fixtures.FluentPVCWebhookConfiguration()
	if err != nil {
		return err
	}
	for i := range validating.Webhooks {
		validating.Webhooks[i].ClientConfig = clientConfig(validating.Webhooks[i].ClientConfig.Service)
	}
	validating.ObjectMeta = metav1.ObjectMeta{Name: WebhookConfigurationName}
	// The FluentPVC webhook dry-runs in the operator's namespace.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OperatorNamespace}}
	if _, err := c.Clientset.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", OperatorNamespace, err)
	}
	if err := apply(ctx, c.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations(), mutating); err != nil {
		return fmt.Errorf("registering the pod webhook: %w", err)
	}
	if err := apply(ctx, c.Clientset.AdmissionregistrationV1().ValidatingWebhookConfigurations(), validating); err != nil {
		return fmt.Errorf("registering the validating webhooks: %w", err)
	}
	return nil
}

// OperatorNamespace is the namespace of the operator started by
// RunOperator (its --namespace default), where the FluentPVC webhook makes
// its dry runs.
const OperatorNamespace = "fluent-pvc-operator-system"

// webhookConfigurations is the client of one kind of webhook configuration.
type webhookConfigurations[T metav1.Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// apply creates wh, or updates it in place when it exists.
func apply[T metav1.Object](ctx context.Context, c webhookConfigurations[T], wh T) error {
	current, err := c.Get(ctx, wh.GetName(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = c.Create(ctx, wh, metav1.CreateOptions{})
	case err == nil:
		wh.SetResourceVersion(current.GetResourceVersion())
		_, err = c.Update(ctx, wh, metav1.UpdateOptions{})
	}
	return err
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func tail(path string, lines int) string {
	raw, _ := os.ReadFile(path)
	all := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
