// Command test-provisioner is a test-only dynamic provisioner for kwok
// clusters (see package hostpath): it serves the StorageClasses whose
// provisioner is test.fluent-pvc-operator.tech.zozo.com/hostpath.
//
// Usage:
//
//	test-provisioner --kubeconfig PATH [--delay 5s] [--metrics-bind-address 0]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/st-tech/fluent-pvc-operator/test/provisioner/hostpath"
)

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:]); errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "test-provisioner:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("test-provisioner", flag.ContinueOnError)
	delay := fs.Duration("delay", 5*time.Second, "How long each volume takes to provision; volumes wait concurrently.")
	metricsAddr := fs.String("metrics-bind-address", "0", "Address of the metrics endpoint; \"0\" disables it.")
	config.RegisterFlags(fs) // --kubeconfig
	zapOpts := zap.Options{Development: true}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: *metricsAddr},
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if err := hostpath.Setup(mgr, hostpath.Options{Delay: *delay}); err != nil {
		return err
	}
	ctrl.Log.WithName("setup").Info("starting", "provisioner", hostpath.ProvisionerName, "delay", delay.String())
	return mgr.Start(ctx)
}
