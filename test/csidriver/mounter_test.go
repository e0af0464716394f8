package csidriver

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func TestUnescapeMountinfo(t *testing.T) {
	cases := map[string]struct {
		in, want string
	}{
		"plain":           {in: "/var/lib/kubelet", want: "/var/lib/kubelet"},
		"a space":         {in: `/tmp/a\040b`, want: "/tmp/a b"},
		"a backslash":     {in: `/tmp/a\134b`, want: `/tmp/a\b`},
		"a short escape":  {in: `/tmp/a\04`, want: `/tmp/a\04`},
		"not octal":       {in: `/tmp/a\999`, want: `/tmp/a\999`},
		"at the very end": {in: `/tmp/a\011`, want: "/tmp/a\t"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, unescapeMountinfo(tc.in)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

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
		})
	}
	if _, err := os.Stat(filepath.Join(source, "f")); err != nil {
		t.Errorf("the read-write mount did not write to the source: %v", err)
	}
}
