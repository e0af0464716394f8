package csidriver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// Mounter makes and undoes the node service's bind mounts.
type Mounter interface {
	// BindMount mounts the directory source onto the existing directory
	// target, read-only if readOnly.
	BindMount(source, target string, readOnly bool) error
	// Unmount unmounts target.
	Unmount(target string) error
	// IsMountPoint says whether a mount sits on path.
	IsMountPoint(path string) (bool, error)
}

// bindMounter is the Mounter of a real node: it needs CAP_SYS_ADMIN.
type bindMounter struct{}

func (bindMounter) BindMount(source, target string, readOnly bool) error {
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s onto %s: %w", source, target, err)
	}
	if !readOnly {
		return nil
	}
	// MS_RDONLY takes effect on a bind mount only through a remount.
	if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		_ = unix.Unmount(target, 0)
		return fmt.Errorf("remounting %s read-only: %w", target, err)
	}
	return nil
}

func (bindMounter) Unmount(target string) error {
	if err := unix.Unmount(target, 0); err != nil {
		return fmt.Errorf("unmounting %s: %w", target, err)
	}
	return nil
}

// IsMountPoint asks the kernel whether a mount sits on path
// (moby/sys/mountinfo): a bind mount within one filesystem keeps the
// device number, so comparing devices with the parent does not tell.
func (bindMounter) IsMountPoint(path string) (bool, error) {
	p, err := filepath.EvalSymlinks(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return mountinfo.Mounted(p)
}

// MountPointsUnder are the mount points at or under dir, deepest first,
// as /proc/self/mountinfo lists them (moby/sys/mountinfo unescapes them).
func MountPointsUnder(dir string) ([]string, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil, err
	}
	points := make([]string, 0, len(mounts))
	for _, m := range mounts {
		points = append(points, m.Mountpoint)
	}
	slices.Sort(points)
	slices.Reverse(points)
	return points, nil
}
