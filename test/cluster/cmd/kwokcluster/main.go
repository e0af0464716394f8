// Command kwokcluster brings the simulated multi-zone kwok cluster of
// package cluster up and down, and runs the operator against it.
//
// Usage:
//
//	go run ./test/cluster/cmd/kwokcluster [flags] up
//	go run ./test/cluster/cmd/kwokcluster [flags] operator [-- MANAGER-FLAGS...]
//	go run ./test/cluster/cmd/kwokcluster [flags] dry-run-deploy
//	go run ./test/cluster/cmd/kwokcluster [flags] down
//
// up replaces any cluster of the same name and leaves it running with the
// test provisioner in the background; operator starts bin/manager in the
// background against it (stop it with down); dry-run-deploy validates
// config/default with a server-side dry run; down ends every process and
// removes the state. See package cluster for the flags' meaning.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/st-tech/fluent-pvc-operator/test/cluster"
)

func main() {
	fs := flag.NewFlagSet("kwokcluster", flag.ExitOnError)
	name := fs.String("name", cluster.DefaultName, "Name of the cluster; state lives in .kwok/NAME and .kwok/clusters/NAME.")
	delay := fs.Duration("delay", 5*time.Second, "up: how long the test provisioner takes per volume.")
	zones := fs.String("zones", strings.Join(cluster.DefaultZones, ","), "up: comma-separated zones of the nodes.")
	perZone := fs.Int("nodes-per-zone", 2, "up: nodes in each zone.")
	e2eStages := fs.Bool("e2e-stages", true, "up: add the e2e kwok stages (sidecar-fail and job-fail labels) to kwok's defaults.")
	realNode := fs.Bool("real-node", false, "up: add a real kubelet node with containerd (needs root; make real-node-bins images first).")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: kwokcluster [flags] up|operator [-- MANAGER-FLAGS...]|dry-run-deploy|down")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	cluster.SetCommandLogger(os.Stderr)
	if fs.NArg() < 1 {
		fs.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := cluster.Options{Name: *name, RealNode: *realNode}
	if err := run(ctx, fs.Arg(0), fs.Args()[1:], opts, *delay, *zones, *perZone, *e2eStages); err != nil {
		fmt.Fprintln(os.Stderr, "kwokcluster:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, command string, rest []string, opts cluster.Options, delay time.Duration, zones string, perZone int, e2eStages bool) error {
	switch command {
	case "up":
		opts.ProvisionerDelay = delay
		opts.Zones = strings.Split(zones, ",")
		opts.NodesPerZone = perZone
		if e2eStages {
			opts.ExtraStages = cluster.E2EStages()
		}
		_, err := cluster.Up(ctx, opts)
		return err
	case "operator":
		c, err := cluster.Open(opts)
		if err != nil {
			return err
		}
		if len(rest) > 0 && rest[0] == "--" {
			rest = rest[1:]
		}
		_, err = cluster.RunOperator(ctx, c, cluster.OperatorOptions{Args: rest})
		return err
	case "dry-run-deploy":
		c, err := cluster.Open(opts)
		if err != nil {
			return err
		}
		out, err := c.DryRunDeployManifests(ctx)
		os.Stdout.Write(out)
		return err
	case "down":
		return cluster.Named(opts).Down()
	}
	return fmt.Errorf("unknown command %q; want up, operator, dry-run-deploy or down", command)
}
