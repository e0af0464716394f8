package cluster

import "path/filepath"

// CSIDataDir is the CSI driver's data directory: the volumes' data, one
// directory per volume (csidriver.VolumeData).
func (c *Cluster) CSIDataDir() string { return filepath.Join(c.csiDir(), "data") }

// CSIStateDir is the CSI driver's state directory (csidriver.DeleteCalls).
func (c *Cluster) CSIStateDir() string { return filepath.Join(c.csiDir(), "state") }
