package csidriver

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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

// IsMountPoint looks path up in /proc/self/mountinfo: a bind mount within
// one filesystem keeps the device number, so comparing devices with the
// parent does not tell.
func (bindMounter) IsMountPoint(path string) (bool, error) {
	p, err := filepath.EvalSymlinks(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// ID parentID major:minor root mountpoint options ...
		fields := strings.Fields(sc.Text())
		if len(fields) >= 5 && unescapeMountinfo(fields[4]) == p {
			return true, nil
		}
	}
	return false, sc.Err()
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
