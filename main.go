// Command manager runs fluent-pvc-operator: the pod admission webhook that
// hands each labelled pod its own PVC and sidecar, and the controllers that
// drain every PVC with a finalizer Job once its pod is gone.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/st-tech/fluent-pvc-operator/apiclock"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/checkout"
	"github.com/st-tech/fluent-pvc-operator/controllers"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/webhook"
)

// Certificate management modes of --cert-management.
const (
	certSelf     = "self"     // the operator issues its own certificate and injects the caBundle
	certExternal = "external" // cert-manager or a test provides tls.crt/tls.key in --cert-dir
)

// The certificate rotator keeps its CA and serving certificate in one Secret
// of the operator's namespace and injects the CA into the webhook
// configuration. These are its only Secret permissions, and namespaced.
// +kubebuilder:rbac:groups="",namespace=fluent-pvc-operator-system,resources=secrets,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations;validatingwebhookconfigurations,verbs=get;list;watch;update
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

type options struct {
	reserveAhead reserveAhead
	metricsAddr  string
	pprofAddr    string
	probeAddr    string
	leaderElect  bool
	// webhookHost and webhookPort are --webhook-bind-address, split.
	webhookHost    string
	webhookPort    int
	certDir        string
	certManagement string
	namespace      string
	// namePrefix names the webhook Service, the webhook configurations
	// and the certificate Secret (see objectName).
	namePrefix    string
	shutdownDrain time.Duration
	controllers   controllers.Options
}

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:]); errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "fluent-pvc-operator:", err)
		os.Exit(1)
	}
}

// run runs the operator with the command-line arguments args until ctx
// ends, or until the manager or the webhooks' registration fails.
func run(ctx context.Context, args []string) error {
	opts, zapOpts, err := parseFlags(args)
	if err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	// Grace periods and the age of holder requests are counted on the API
	// server's clock.
	serverClock := apiclock.New(nil)
	serverClock.Wrap(cfg)
	opts.controllers.Clock = serverClock
	nativeUnsupported, err := nativeSidecarsUnsupported(ctx, log, cfg)
	if err != nil {
		return err
	}
	self, err := setupHolders(ctx, log, cfg, scheme, &opts.controllers)
	if err != nil {
		return err
	}

	if opts.pprofAddr != "" {
		// The mutex and block profiles record nothing unless sampled.
		goruntime.SetMutexProfileFraction(10)
		goruntime.SetBlockProfileRate(int(100 * time.Microsecond))
	}
	// Told to stop, the replica first drains its webhook connections for
	// --shutdown-drain: the manager's context ends that long after ctx.
	drain := &webhook.Drain{}
	ctx, stop := drain.Stopping(ctx, opts.shutdownDrain)
	defer stop()
	mgr, err := newManager(cfg, scheme, opts)
	if err != nil {
		return err
	}
	certsReady, err := manageCerts(ctx, mgr, opts)
	if err != nil {
		return err
	}

	if err := controllers.Setup(mgr, opts.controllers); err != nil {
		return fmt.Errorf("setting up controllers: %w", err)
	}
	caches, err := webhook.Watch(mgr)
	if err != nil {
		return fmt.Errorf("setting up the webhooks' caches: %w", err)
	}
	webhookSetupErr, webhooksRegistered := registerWebhooks(ctx, mgr, certsReady, caches, webhook.Options{
		NativeSidecarsUnsupported: nativeUnsupported, Namespace: opts.namespace, Self: self, ServerClock: serverClock,
		ReserveAhead: int(opts.reserveAhead), Owner: owner(), Drain: drain,
	})
	if err := addHealthChecks(mgr, caches, certsReady, webhooksRegistered); err != nil {
		return err
	}

	log.Info("starting manager", "leaderElection", opts.leaderElect, "certManagement", opts.certManagement)
	return runManager(ctx, mgr, webhookSetupErr)
}

// nativeSidecarsUnsupported says why the API server cannot run native
// sidecars, which need Kubernetes 1.29 (webhook.NativeSidecarSupport); ""
// when it can. The version is read once, not per pod.
func nativeSidecarsUnsupported(ctx context.Context, log logr.Logger, cfg *rest.Config) (string, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return "", fmt.Errorf("creating a discovery client: %w", err)
	}
	var gitVersion string
	if err := wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 6}, func(context.Context) (bool, error) {
		v, err := dc.ServerVersion()
		if err != nil {
			log.V(1).Info("reading the API server's version", "error", err.Error())
			return false, nil
		}
		gitVersion = v.GitVersion
		return true, nil
	}); err != nil {
		// The API server then refuses a native sidecar itself, in its words.
		log.Error(err, "could not read the API server's version; native sidecars are assumed to be supported")
	}
	nativeUnsupported := webhook.NativeSidecarSupport(gitVersion)
	if nativeUnsupported != "" {
		log.Info("FluentPVCs in sidecarMode Native will admit no pods", "reason", nativeUnsupported)
	}
	return nativeUnsupported, nil
}

// setupHolders learns the operator's own user name, by which holder pods
// are known as their creator's, and makes sure the holders' PriorityClass
// exists when warm PVCs are staged. Without a user name no warm PVC is
// staged, and "" is returned.
func setupHolders(ctx context.Context, log logr.Logger, cfg *rest.Config, scheme *runtime.Scheme, opts *controllers.Options) (string, error) {
	self, err := selfUser(ctx, cfg, scheme)
	if err != nil {
		log.Error(err, "could not learn the operator's own user name; warm PVCs are not staged")
		opts.StagePerNode = 0
	} else if opts.StagePerNode > 0 {
		c, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return "", fmt.Errorf("creating a client: %w", err)
		}
		if err := controllers.EnsureHolderPriorityClass(ctx, c, opts.HolderPriorityClass); err != nil {
			log.Error(err, "holder pods may be refused until the PriorityClass exists")
		}
	}
	return self, nil
}

// newManager makes the manager of the controllers and the webhook server,
// its cache also holding the stocks' Leases (checkout.StockLeases).
func newManager(cfg *rest.Config, scheme *runtime.Scheme, opts options) (ctrl.Manager, error) {
	cacheOptions := controllers.CacheOptions()
	cacheOptions.ByObject[&coordinationv1.Lease{}] = checkout.StockLeases(opts.namespace)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Cache:                         cacheOptions,
		Metrics:                       metricsserver.Options{BindAddress: opts.metricsAddr},
		HealthProbeBindAddress:        opts.probeAddr,
		PprofBindAddress:              opts.pprofAddr,
		LeaderElection:                opts.leaderElect,
		LeaderElectionID:              "fluent-pvc-operator.tech.zozo.com",
		LeaderElectionNamespace:       opts.namespace,
		LeaderElectionReleaseOnCancel: true,
		WebhookServer: ctrlwebhook.NewServer(ctrlwebhook.Options{
			Host:    opts.webhookHost,
			Port:    opts.webhookPort,
			CertDir: opts.certDir,
			TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }},
		}),
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	return mgr, nil
}

// manageCerts arranges the webhook's serving certificate as
// --cert-management says, and returns a channel closed once the
// certificate is in --cert-dir: with "self", the rotator issues it and
// injects the caBundle; with "external", it is there already.
func manageCerts(ctx context.Context, mgr ctrl.Manager, opts options) (<-chan struct{}, error) {
	certsReady := make(chan struct{})
	switch opts.certManagement {
	case certSelf:
		rotatorReady := make(chan struct{})
		dnsName := fmt.Sprintf("%s.%s.svc", opts.objectName(webhookServiceSuffix), opts.namespace)
		mutating, validating := opts.objectName(mutatingConfigSuffix), opts.objectName(validatingConfigSuffix)
		go servingCertReady(ctx, mgr.GetAPIReader(), filepath.Join(opts.certDir, "tls.crt"), dnsName, mutating, validating, rotatorReady, certsReady)
		if err := rotator.AddRotator(mgr, &rotator.CertRotator{
			SecretKey:      types.NamespacedName{Namespace: opts.namespace, Name: opts.objectName(certSecretSuffix)},
			CertDir:        opts.certDir,
			CAName:         "fluent-pvc-operator-ca",
			CAOrganization: "fluent-pvc-operator",
			DNSName:        dnsName,
			IsReady:        rotatorReady,
			Webhooks: []rotator.WebhookInfo{
				{Name: mutating, Type: rotator.Mutating},
				{Name: validating, Type: rotator.Validating},
			},
			// Every replica serves the webhook, so every replica keeps its
			// certificate in step with the shared Secret; only the leader
			// rotates it.
			RequireLeaderElection: false,
		}); err != nil {
			return nil, fmt.Errorf("setting up certificate rotation: %w", err)
		}
	case certExternal:
		close(certsReady)
	}
	return certsReady, nil
}

// registerWebhooks registers the webhooks, with webhookOpts, once
// certificates exist, so that the server never starts without them, and
// once the caches have synced: the manager holds its lock until then, and
// registering adds the server to the manager, which fails (a panic) once
// the manager has stopped. The channel returned receives the
// registration's error, nil when it succeeded or the manager stopped
// first; the flag returned is set once the webhooks are registered.
func registerWebhooks(ctx context.Context, mgr ctrl.Manager, certsReady <-chan struct{}, caches *webhook.Caches, webhookOpts webhook.Options) (<-chan error, *atomic.Bool) {
	webhookSetupErr := make(chan error, 1)
	var webhooksRegistered atomic.Bool
	go func() {
		select {
		case <-certsReady:
			if !mgr.GetCache().WaitForCacheSync(ctx) {
				webhookSetupErr <- nil // stopping
				return
			}
			err := webhook.Setup(mgr, webhookOpts, caches)
			webhooksRegistered.Store(err == nil)
			webhookSetupErr <- err
		case <-ctx.Done():
			webhookSetupErr <- nil
		}
	}()
	return webhookSetupErr, &webhooksRegistered
}

// addHealthChecks serves /healthz, and /readyz, which a replica passes
// once its caches have synced, its certificates exist and its webhooks are
// registered and served.
func addHealthChecks(mgr ctrl.Manager, caches *webhook.Caches, certsReady <-chan struct{}, webhooksRegistered *atomic.Bool) error {
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding health check: %w", err)
	}
	// The webhooks are registered, and so served, only once the caches have
	// synced (and, with --cert-management=self, the rotator that makes the
	// certificates starts only then), so a cache that cannot sync is named
	// first.
	if err := mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
		if err := caches.Synced(req); err != nil {
			return err
		}
		select {
		case <-certsReady:
		default:
			return errors.New("webhook certificates are not ready")
		}
		if !webhooksRegistered.Load() {
			return errors.New("the webhooks are not registered yet")
		}
		return mgr.GetWebhookServer().StartedChecker()(req)
	}); err != nil {
		return fmt.Errorf("adding readiness check: %w", err)
	}
	return nil
}

// runManager runs mgr until ctx ends, and returns early when the webhooks
// could not be registered.
func runManager(ctx context.Context, mgr ctrl.Manager, webhookSetupErr <-chan error) error {
	runErr := make(chan error, 1)
	go func() { runErr <- mgr.Start(ctx) }()
	select {
	case err := <-webhookSetupErr:
		if err != nil {
			return fmt.Errorf("setting up webhook: %w", err)
		}
	case err := <-runErr:
		return err
	}
	return <-runErr
}

// reserveAhead is --reserve-ahead: a number of claims, 0 or more, or
// pool.ReserveShare, written "share".
type reserveAhead int

func (r *reserveAhead) String() string {
	if int(*r) == pool.ReserveShare {
		return "share"
	}
	return strconv.Itoa(int(*r))
}

func (r *reserveAhead) Set(s string) error {
	if s == "share" {
		*r = reserveAhead(pool.ReserveShare)
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("want a number of claims, 0 or more, or \"share\", not %q", s)
	}
	*r = reserveAhead(n)
	return nil
}

func parseFlags(args []string) (options, zap.Options, error) {
	var o options
	fs := flag.NewFlagSet("fluent-pvc-operator", flag.ContinueOnError)
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint; \"0\" disables it.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", "Address of the Go profiler's /debug/pprof endpoints; empty disables them. Serve it on localhost only: it is not authenticated.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	fs.BoolVar(&o.leaderElect, "leader-elect", inCluster(), "Elect a leader so that only one replica runs the controllers. On by default in a cluster.")
	webhookAddr := fs.String("webhook-bind-address", ":9443", "Address of the admission webhook server, host:port; an empty host means all addresses.")
	fs.StringVar(&o.certDir, "cert-dir", "/tmp/k8s-webhook-server/serving-certs", "Directory of the webhook serving certificate (tls.crt, tls.key).")
	fs.StringVar(&o.certManagement, "cert-management", certSelf, "Who provides the webhook certificate: \"self\" (the operator issues it and injects the caBundle) or \"external\" (cert-manager or you write it into --cert-dir).")
	fs.StringVar(&o.namespace, "namespace", envOr("POD_NAMESPACE", "fluent-pvc-operator-system"), "The operator's namespace, where its certificate Secret, its leader-election Lease and its stocks' Leases live, and where FluentPVCs are checked by dry runs.")
	fs.StringVar(&o.namePrefix, "name-prefix", "fluent-pvc-operator", "Prefix of the names of the operator's objects that config/default and the chart make: <prefix>"+webhookServiceSuffix+" (the Service the certificate is issued for), <prefix>"+mutatingConfigSuffix+" and <prefix>"+validatingConfigSuffix+" (whose caBundle the operator injects), and <prefix>"+certSecretSuffix+" (the Secret of its own CA and certificate).")
	fs.Var(&o.reserveAhead, "reserve-ahead", "How many warm PVCs per FluentPVC and namespace each replica reserves ahead of their pods, so that it hands them out without an API write at admission, for FluentPVCs whose spec.pool.reserveAhead is unset: a number, or \"share\" for the replica's share of the pool (its size divided by the replicas whose stock Leases are live, rounded up). Whatever is asked, a replica reserves at most its share. They count in the pool's size. 0 reserves none. Pools that stage their warm PVCs are not reserved from.")
	fs.DurationVar(&o.shutdownDrain, "shutdown-drain", 0, "How long a replica told to stop keeps serving webhooks before it stops, answering each request with Connection: close, so that the API server moves its connections to other replicas rather than have them cut under a request. 0 stops at once. The pod's terminationGracePeriodSeconds must cover it, any preStop hook and the 30s the manager then waits for running reconciles and requests.")
	o.controllers.BindFlags(fs)
	config.RegisterFlags(fs) // --kubeconfig
	var zapOpts zap.Options
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, zapOpts, err
	}
	host, port, err := net.SplitHostPort(*webhookAddr)
	if err == nil {
		o.webhookHost = host
		o.webhookPort, err = strconv.Atoi(port)
	}
	if err != nil || o.webhookPort < 0 || o.webhookPort > 65535 {
		return o, zapOpts, fmt.Errorf("--webhook-bind-address must be host:port, not %q", *webhookAddr)
	}
	if o.certManagement != certSelf && o.certManagement != certExternal {
		return o, zapOpts, fmt.Errorf("--cert-management must be %q or %q, not %q", certSelf, certExternal, o.certManagement)
	}
	if o.shutdownDrain < 0 {
		return o, zapOpts, fmt.Errorf("--shutdown-drain must be 0 or more, not %s", o.shutdownDrain)
	}
	if err := o.controllers.Validate(); err != nil {
		return o, zapOpts, err
	}
	return o, zapOpts, nil
}

// selfUser is the user name the API server knows the operator by (a
// SelfSubjectReview).
func selfUser(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme) (string, error) {
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return "", err
	}
	review := &authenticationv1.SelfSubjectReview{}
	var lastErr error
	if err := wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 6}, func(ctx context.Context) (bool, error) {
		lastErr = c.Create(ctx, review)
		return lastErr == nil, nil
	}); err != nil {
		return "", fmt.Errorf("reviewing the operator's own user: %w", errors.Join(err, lastErr))
	}
	if review.Status.UserInfo.Username == "" {
		return "", errors.New("the API server names no user for the operator")
	}
	return review.Status.UserInfo.Username, nil
}

func inCluster() bool {
	_, err := rest.InClusterConfig()
	return err == nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// owner names this process in its stock's Lease: its host (the pod's
// name in a cluster).
func owner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "fluent-pvc-operator"
	}
	return host
}

// The names of the operator's objects that the webhook's certificate
// involves, after --name-prefix.
const (
	webhookServiceSuffix   = "-webhook-service"
	mutatingConfigSuffix   = "-mutating-webhook-configuration"
	validatingConfigSuffix = "-validating-webhook-configuration"
	certSecretSuffix       = "-webhook-server-cert"
)

// objectName is the name of the operator's object with suffix.
func (o options) objectName(suffix string) string {
	return o.namePrefix + suffix
}
