package csidriver

import (
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
)

// TestSanity runs csi-sanity, the CSI spec's conformance suite, against the
// controller and node services on one socket with the fake mounter.
func TestSanity(t *testing.T) {
	opts := testOptions(t)
	start(t, opts)
	dir := t.TempDir()
	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + opts.ControllerSocket
	cfg.TargetPath = filepath.Join(dir, "target")
	cfg.StagingPath = filepath.Join(dir, "staging")
	sanity.Test(t, cfg)
}
