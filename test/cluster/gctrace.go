package cluster

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
)

// GCCycle is one garbage collection of a Go process, as its gctrace line
// (GODEBUG=gctrace=1) tells it.
type GCCycle struct {
	// Start and End bound the cycle on the wall clock.
	Start, End time.Time
	// CPU is the CPU time the cycle took: the stop-the-world phases, the
	// allocators' assists and the dedicated and fractional mark workers;
	// not the idle workers', which run only on CPUs nothing else wanted.
	CPU time.Duration
}

// gcLine matches a gctrace line: its number, its start in seconds since the
// program started, its three wall-clock phases and its CPU times (sweep
// termination, assist/background/idle marking, mark termination), in ms.
var gcLine = regexp.MustCompile(`^gc (\d+) @([0-9.]+)s [0-9]+%: ([0-9.]+)\+([0-9.]+)\+([0-9.]+) ms clock, ([0-9.]+)\+([0-9.]+)/([0-9.]+)/([0-9.]+)\+([0-9.]+) ms cpu`)

// ParseGCTrace reads the gctrace lines among a log's other lines, of a
// process that started at start, and counts the cycles whose line it could
// not read: the runtime writes a line in several writes, and another line
// of the process's log can land in between. Should the log hold the lines
// of several processes in turn (kwokctl truncates it at each start), only
// the last run of numbered cycles, the one started at start, is returned.
func ParseGCTrace(r io.Reader, start time.Time) (cycles []GCCycle, unread int, err error) {
	var out []GCCycle
	last := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		m := gcLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		f := make([]float64, len(m))
		for i := 1; i < len(m); i++ {
			v, err := strconv.ParseFloat(m[i], 64)
			if err != nil {
				return nil, 0, fmt.Errorf("parsing %q: %w", m[0], err)
			}
			f[i] = v
		}
		switch n := int(f[1]); {
		case n <= last:
			out, unread = out[:0], n-1 // a later process's cycles, numbered from 1 again
		default:
			unread += n - last - 1
		}
		last = int(f[1])
		begin := start.Add(seconds(f[2]))
		out = append(out, GCCycle{
			Start: begin,
			End:   begin.Add(seconds((f[3] + f[4] + f[5]) / 1000)),
			CPU:   seconds((f[6] + f[7] + f[8] + f[10]) / 1000),
		})
	}
	return out, unread, sc.Err()
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// APIServerGCs are the garbage collections of the cluster's kube-apiserver
// so far, read from its log, and how many of them had a line it could not
// read (ParseGCTrace); it logs them when the cluster was brought up with
// Options.TraceGC.
func (c *Cluster) APIServerGCs() ([]GCCycle, int, error) {
	raw, err := os.ReadFile(filepath.Join(c.KwokctlDir(), "pids", "kube-apiserver.pid"))
	if err != nil {
		return nil, 0, fmt.Errorf("reading kube-apiserver's PID: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return nil, 0, fmt.Errorf("reading kube-apiserver's PID: %w", err)
	}
	start, err := processStart(pid)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.Open(filepath.Join(c.KwokctlDir(), "logs", "kube-apiserver.log"))
	if err != nil {
		return nil, 0, fmt.Errorf("opening kube-apiserver's log: %w", err)
	}
	defer func() { _ = f.Close() }()
	return ParseGCTrace(f, start)
}

// processStart is when process pid started, to the kernel's clock tick:
// now less the system's uptime, plus the process's start after boot
// (/proc's boot time counts whole seconds only).
func processStart(pid int) (time.Time, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return time.Time{}, fmt.Errorf("reading process %d: %w", pid, err)
	}
	st, err := p.Stat()
	if err != nil {
		return time.Time{}, fmt.Errorf("reading process %d: %w", pid, err)
	}
	now := time.Now()
	raw, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return time.Time{}, fmt.Errorf("reading the uptime: %w", err)
	}
	fields := strings.Fields(string(raw))
	if len(fields) == 0 {
		return time.Time{}, fmt.Errorf("reading the uptime: %q", raw)
	}
	up, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("reading the uptime: %w", err)
	}
	return now.Add(-seconds(up)).Add(seconds(float64(st.Starttime) / userHZ)), nil
}

// userHZ is the kernel's clock tick for /proc's times (USER_HZ), 100 on
// Linux.
const userHZ = 100
