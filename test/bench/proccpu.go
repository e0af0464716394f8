package main

import (
	"fmt"
	"os"

	"github.com/prometheus/procfs"
)

// pfKthread is the kernel's PF_KTHREAD process flag: a kernel thread,
// whose command name changes with the work it does.
const pfKthread = 0x00200000

// cpuByProcess is the CPU time (user and system, in seconds) of the
// machine's processes so far, summed by command name (the kernel's comm:
// up to 15 bytes of the executable's name, such as kube-apiserver or
// kube-controller), the bench's own as "bench". Kernel threads are left
// out. A process that ends between two reads drops out of the second.
func cpuByProcess() (map[string]float64, error) {
	procs, err := procfs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	self := os.Getpid()
	out := map[string]float64{}
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil || st.Flags&pfKthread != 0 {
			continue // gone meanwhile, or a kernel thread
		}
		name := st.Comm
		if p.PID == self {
			name = "bench"
		}
		out[name] += st.CPUTime()
	}
	return out, nil
}

// addCPUDelta adds after − before, by process, to sum: what each process
// spent between the two reads. A process whose time went down (one of
// that name ended) adds nothing.
func addCPUDelta(sum, before, after map[string]float64) {
	for name, t := range after {
		if d := t - before[name]; d > 0 {
			sum[name] += d
		}
	}
}
