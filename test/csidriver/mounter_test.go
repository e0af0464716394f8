package csidriver

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestBindMounter makes real mounts: it needs root.
func TestBindMounter(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
	dir := t.TempDir()
	source, target := filepath.Join(dir, "source"), filepath.Join(dir, "with space")
	for _, d := range []string{source, target} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var m bindMounter
	cases := map[string]struct {
		readOnly  bool
		wantWrite bool
	}{
		"read-write": {wantWrite: true},
		"read-only":  {readOnly: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if err := m.BindMount(source, target, tc.readOnly); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
			if mounted, err := m.IsMountPoint(target); err != nil || !mounted {
				t.Fatalf("IsMountPoint after the mount: %v, %v", mounted, err)
			}
			if points, err := MountPointsUnder(dir); err != nil || !slices.Equal(points, []string{target}) {
				t.Errorf("MountPointsUnder(%s) after the mount = %q, %v; want %q", dir, points, err, target)
			}
			err := os.WriteFile(filepath.Join(target, "f"), []byte("x"), 0o644)
			if wrote := err == nil; wrote != tc.wantWrite {
				t.Errorf("wrote through the mount: %v (%v), want %v", wrote, err, tc.wantWrite)
			}
			if err := m.Unmount(target); err != nil {
				t.Fatal(err)
			}
			if mounted, err := m.IsMountPoint(target); err != nil || mounted {
				t.Errorf("IsMountPoint after the unmount: %v, %v", mounted, err)
			}
			if points, err := MountPointsUnder(dir); err != nil || len(points) != 0 {
				t.Errorf("MountPointsUnder(%s) after the unmount = %q, %v; want none", dir, points, err)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(source, "f")); err != nil {
		t.Errorf("the read-write mount did not write to the source: %v", err)
	}
}
