package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is a background process of ours, known by its PID. done is closed
// once it has exited and been reaped; it is nil for a process that this Go
// process did not start (found through a PID file).
type process struct {
	pid  int
	path string // the executable, to recognise the PID
	done chan struct{}
}

// startBackground starts path with args in its own process group (so that a
// terminal's Ctrl-C does not reach it and it outlives a CLI), appending its
// output to logPath and writing its PID to pidPath.
func startBackground(path string, args []string, logPath, pidPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", filepath.Base(path), err)
	}
	p := &process{pid: cmd.Process.Pid, path: path, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	if err := os.WriteFile(pidPath, []byte(strconv.Itoa(p.pid)+"\n"), 0o644); err != nil {
		_ = p.stop(5 * time.Second)
		return nil, err
	}
	return p, nil
}

// processFromPIDFile returns the process of a PID file if it still runs the
// executable path, or nil.
func processFromPIDFile(pidPath, path string) *process {
	raw, err := os.ReadFile(pidPath)
	if err != nil {
		return nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 0 {
		return nil
	}
	p := &process{pid: pid, path: path}
	if !p.alive() {
		return nil
	}
	return p
}

// alive says whether the process runs: it exists, is not a zombie, and (for
// a PID from a file, which may have been reused) runs the same executable.
func (p *process) alive() bool {
	if p.done != nil {
		select {
		case <-p.done:
			return false
		default:
			return true
		}
	}
	return pidAlive(p.pid, p.path)
}

// pidAlive says whether pid runs and is not a zombie; if path is not empty,
// the process must also run that executable.
func pidAlive(pid int, path string) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	if i := bytes.LastIndexByte(stat, ')'); i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' {
		return false
	}
	if path == "" {
		return true
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	argv0, _, _ := bytes.Cut(cmdline, []byte{0})
	return string(argv0) == path || filepath.Base(string(argv0)) == filepath.Base(path)
}

// stop sends SIGTERM and waits for the process to exit; after timeout it
// sends SIGKILL and waits a little more.
func (p *process) stop(timeout time.Duration) error {
	if !p.alive() {
		return nil
	}
	if err := syscall.Kill(p.pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling PID %d: %w", p.pid, err)
	}
	if p.waitExit(timeout) {
		return nil
	}
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	if p.waitExit(5 * time.Second) {
		return fmt.Errorf("PID %d (%s) ignored SIGTERM for %s and was killed", p.pid, filepath.Base(p.path), timeout)
	}
	return fmt.Errorf("PID %d (%s) is still running after SIGKILL", p.pid, filepath.Base(p.path))
}

// kill sends SIGKILL and waits for the process to exit.
func (p *process) kill() error {
	if !p.alive() {
		return nil
	}
	if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing PID %d: %w", p.pid, err)
	}
	if p.waitExit(5 * time.Second) {
		return nil
	}
	return fmt.Errorf("PID %d (%s) is still running after SIGKILL", p.pid, filepath.Base(p.path))
}

func (p *process) waitExit(timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	if p.done != nil {
		select {
		case <-p.done:
			return true
		case <-deadline.C:
			return false
		}
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if !p.alive() {
			return true
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return !p.alive()
		}
	}
}

// ensureBuilt builds the Go package pkg (relative to root) into out unless
// out is newer than every .go file, go.mod and go.sum under srcDirs. The
// binary is written under a temporary name and renamed, so that concurrent
// callers never see half a binary.
func ensureBuilt(ctx context.Context, root, out, pkg string, srcDirs ...string) (bool, error) {
	if info, err := os.Stat(out); err == nil {
		newest, err := newestSource(srcDirs)
		if err != nil {
			return false, err
		}
		if !newest.After(info.ModTime()) {
			return false, nil
		}
	}
	tmp := fmt.Sprintf("%s.tmp-%d", out, os.Getpid())
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", tmp, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if outb, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return false, fmt.Errorf("go build %s: %w\n%s", pkg, err, outb)
	}
	return true, os.Rename(tmp, out)
}

// skippedDirs hold no sources of the manager (test/ holds the test
// tooling, which is walked on its own for the provisioner).
var skippedDirs = map[string]bool{"test": true, "_output": true, "tmp": true, ".git": true, ".kwok": true, "bin": true, "config": true, "examples": true, "testdata": true}

func newestSource(dirs []string) (time.Time, error) {
	var newest time.Time
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if path != dir && skippedDirs[d.Name()] {
					return filepath.SkipDir
				}
				return nil
			}
			if name := d.Name(); strings.HasSuffix(name, ".go") || name == "go.mod" || name == "go.sum" {
				info, err := d.Info()
				if err != nil {
					return err
				}
				if info.ModTime().After(newest) {
					newest = info.ModTime()
				}
			}
			return nil
		})
		if err != nil {
			return time.Time{}, err
		}
	}
	return newest, nil
}
