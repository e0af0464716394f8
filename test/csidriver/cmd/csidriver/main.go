// Command csidriver runs the test CSI driver of package csidriver, which
// behaves like a cloud disk: the controller service (for
// external-provisioner and external-attacher), the node service (for the
// kubelet), or both, in one process.
//
// Usage:
//
//	csidriver --data-dir DIR --state-dir DIR \
//	  [--controller-socket PATH] [--zones zone-a,zone-b,zone-c] [--known-nodes ID=ZONE,...] \
//	  [--node-socket PATH --node-id ID --zone ZONE] [--registration-dir KUBELET_ROOT/plugins_registry] \
//	  [--create-delay 5s] [--attach-delay 8s] [--format-delay 2s] [--max-volumes-per-node 16]
//
// A socket flag left empty disables its service; one path for both
// serves them on one socket. SIGTERM or SIGINT stops the driver, which
// then removes its sockets.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/st-tech/fluent-pvc-operator/test/csidriver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:]); errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "csidriver:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	var o csidriver.Options
	fs := flag.NewFlagSet("csidriver", flag.ContinueOnError)
	fs.StringVar(&o.Name, "name", csidriver.DefaultName, "The driver's name.")
	fs.StringVar(&o.TopologyKey, "topology-key", csidriver.DefaultTopologyKey, "The topology key of the zone.")
	fs.StringVar(&o.ControllerSocket, "controller-socket", "", "Unix socket of the identity and controller services; empty runs no controller.")
	fs.StringVar(&o.NodeSocket, "node-socket", "", "Unix socket of the identity and node services; empty runs no node service.")
	fs.StringVar(&o.RegistrationDir, "registration-dir", "", "The kubelet's plugin-registration directory (<kubelet root dir>/plugins_registry); empty registers nothing.")
	fs.StringVar(&o.RegistrationSocket, "registration-socket", "", "The registration socket's file name in --registration-dir; <name>-reg.sock when empty.")
	fs.StringVar(&o.DataDir, "data-dir", "", "Directory of the volumes' data (required).")
	fs.StringVar(&o.StateDir, "state-dir", "", "Directory of the controller's state file and the node records (required).")
	fs.StringVar(&o.NodeID, "node-id", "", "The node service's node ID, the Kubernetes node name (required with --node-socket).")
	fs.StringVar(&o.Zone, "zone", "", "The node's zone (required with --node-socket).")
	fs.Int64Var(&o.MaxVolumesPerNode, "max-volumes-per-node", 16, "How many volumes a node takes; 0 is no limit.")
	zones := fs.String("zones", "zone-a,zone-b,zone-c", "Comma-separated zones the controller creates volumes in; the first is the default.")
	knownNodes := fs.String("known-nodes", "", "Comma-separated ID=ZONE of nodes without a node service (fake nodes) that the controller attaches to.")
	fs.DurationVar(&o.CreateDelay, "create-delay", 5*time.Second, "How long CreateVolume and DeleteVolume take.")
	fs.DurationVar(&o.AttachDelay, "attach-delay", 8*time.Second, "How long ControllerPublishVolume and ControllerUnpublishVolume take.")
	fs.DurationVar(&o.FormatDelay, "format-delay", 2*time.Second, "How long the first NodeStageVolume of a volume takes.")
	zapOpts := zap.Options{Development: true}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *zones != "" {
		o.Zones = strings.Split(*zones, ",")
	}
	if *knownNodes != "" {
		o.KnownNodes = map[string]string{}
		for _, kv := range strings.Split(*knownNodes, ",") {
			id, zone, ok := strings.Cut(kv, "=")
			if !ok || id == "" || zone == "" {
				return fmt.Errorf("--known-nodes: %q is not ID=ZONE", kv)
			}
			o.KnownNodes[id] = zone
		}
	}
	ctx = logr.NewContext(ctx, zap.New(zap.UseFlagOptions(&zapOpts)))
	return csidriver.Run(ctx, o)
}
