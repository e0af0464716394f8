package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Faults of the CSI storage (StartCSI), for tests of what the sidecars
// and kube-controller-manager do when the driver fails.

// csiControllerSidecars are the sidecars of the driver's controller: they
// share its socket, as containers share a pod's volume.
var csiControllerSidecars = []string{"csi-provisioner", "csi-attacher"}

// KillCSIController sends SIGKILL to the driver's controller, found by
// the PID file StartCSI writes, and waits until it has exited. It returns
// the PID it killed. The controller's socket and state file stay behind,
// as after a crash.
func (c *Cluster) KillCSIController() (int, error) {
	p := processFromPIDFile(c.csiPIDFile("csi-driver"), c.csiBin("csi-driver"))
	if p == nil {
		return 0, errors.New("the CSI driver's controller does not run")
	}
	return p.pid, p.kill()
}

// RestartCSIController starts the driver's controller again, after it has
// exited, with the arguments StartCSI gave it, so on the same socket and
// state dir, and waits until it serves its socket. The sidecars exit when
// they lose their connection to the driver (csi-lib-utils'
// ExitOnConnectionLoss), at their first call after the loss: the
// external-attacher at once if a call was in flight, the
// external-provisioner whenever it next calls. RestartCSIController
// therefore stops those still running and starts them again once the
// driver serves, as the kubelet restarts the exited containers of a
// driver's pod.
func (c *Cluster) RestartCSIController(ctx context.Context) error {
	procs, err := c.readCSIProcesses()
	if err != nil {
		return err
	}
	if p := processFromPIDFile(c.csiPIDFile("csi-driver"), c.csiBin("csi-driver")); p != nil {
		return fmt.Errorf("the CSI driver's controller still runs (PID %d)", p.pid)
	}
	var errs []error
	for _, name := range csiControllerSidecars {
		if p := processFromPIDFile(c.csiPIDFile(name), c.csiBin(name)); p != nil {
			errs = append(errs, p.stop(10*time.Second))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, name := range append([]string{"csi-driver"}, csiControllerSidecars...) {
		i := slices.IndexFunc(procs, func(p csiProcess) bool { return p.Name == name })
		if i < 0 {
			return fmt.Errorf("%s lists no process %s", c.csiProcessesFile(), name)
		}
		if err := c.startCSIProcess(ctx, procs[i]); err != nil {
			return err
		}
	}
	return nil
}

// CSIAttachments reads the driver's state file: for each volume ID, the
// phase (Attaching, Attached or Detaching) of its attachment to each node.
// A volume without attachments is left out.
func (c *Cluster) CSIAttachments() (map[string]map[string]string, error) {
	// The fields of test/csidriver's state file that this reads.
	var st struct {
		Volumes map[string]struct {
			Attachments map[string]struct {
				Phase string `json:"phase"`
			} `json:"attachments"`
		} `json:"volumes"`
	}
	path := filepath.Join(c.csiDir(), "state", "state.json")
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	out := map[string]map[string]string{}
	for id, v := range st.Volumes {
		for node, a := range v.Attachments {
			if out[id] == nil {
				out[id] = map[string]string{}
			}
			out[id][node] = a.Phase
		}
	}
	return out, nil
}
