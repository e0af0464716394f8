package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/cluster"
	"github.com/st-tech/fluent-pvc-operator/webhook"
)

type machine struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpuModel"`
	MemTotal  string `json:"memTotal"`
	GoVersion string `json:"goVersion"`
	Kernel    string `json:"kernel"`
	OS        string `json:"os"`
}

func describeMachine() machine {
	m := machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if raw, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(raw))
	}
	m.MemTotal = procField("/proc/meminfo", "MemTotal")
	m.CPUModel = procField("/proc/cpuinfo", "model name")
	return m
}

func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

type phaseTime struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
}

// results is everything a run measured.
type results struct {
	Date             string           `json:"date"`
	Machine          machine          `json:"machine"`
	Config           config           `json:"config"`
	ClusterUpSeconds float64          `json:"clusterUpSeconds"`
	PoolFillSeconds  float64          `json:"poolFillSeconds"`
	Startup          startupRuns      `json:"startup"`
	StartupRatios    []startupRatio   `json:"startupRatios"`
	Admission        []admissionLevel `json:"admission"`
	AdmissionStaged  *stagedAdmission `json:"admissionStaged,omitempty"`
	Burst            *burstResult     `json:"burst,omitempty"`
	Cost             []costResult     `json:"cost"`
	Idle             *idleResult      `json:"idle,omitempty"`
	Memory           *memoryResult    `json:"memory,omitempty"`
	Nodes            *nodesResult     `json:"nodes,omitempty"`
	RealNode         *realNodeResult  `json:"realNode,omitempty"`
	CSI              *realNodeResult  `json:"csi,omitempty"`
	Goals            []goal           `json:"goals"`
	PhaseSeconds     []phaseTime      `json:"phaseSeconds"`
	WallSeconds      float64          `json:"wallSeconds"`
	// Notes are facts worth a look that do not void a measurement, e.g.
	// misses where hits were expected.
	Notes  []string `json:"notes,omitempty"`
	Errors []string `json:"errors,omitempty"`
}

// goal is a target reported as PASS or MISS (or n/a if not measured).
type goal struct {
	Name   string  `json:"name"`
	Target string  `json:"target"`
	Value  float64 `json:"-"`
	Shown  string  `json:"shown"`
	Status string  `json:"status"`
}

// realNodeMarkdown renders the real-node tier: its ratios beside the kwok
// tier's, then its runs.
func (r *results) realNodeMarkdown(w func(string, ...any)) {
	rn := r.RealNode
	if rn == nil {
		return
	}
	w("\n## Start-up latency on a real node\n\n")
	if rn.Skipped != "" {
		w("Skipped: %s.\n", rn.Skipped)
		return
	}
	w("A second cluster, brought up after the kwok one is down: the same control plane and test provisioner (L=%s) with a kubelet node, %s, that runs real containers with containerd (busybox, `imagePullPolicy: Never`), beside kwok nodes tainted `%s=fake:NoSchedule`, so that every measured pod, warm PVC and finalizer Job runs on the real node; the operator is again a local process. ", r.Config.Delay, cluster.RealNodeName, cluster.FakeNodeTaintKey)
	w("Each pod has a busybox app container; d's sidecar (and e's, the same) appends a line a second to the claim (`%s`), and d's finalizer Job reads it. ", realSidecarScript)
	w("%d pods per mode, one at a time, the modes taking turns (a pod of a, then of d, then of e, %d rounds, each round starting with the next mode), so that what the node does meanwhile (the kubelet's garbage collection of dead sandboxes, once a minute; d's pool refilling) falls on every mode alike; a mode's wall is the sum of its pods' start-ups. d's pool (%d warm PVCs on the real node, filled in %.1fs) and e's %d Bound PVCs are ready before the runs, and every pod stays until the last has started.\n\n", rn.N, rn.N, rn.N, rn.PoolFillSeconds, rn.N)
	w("Sequential runs, the two tiers side by side:\n\n| ratio | kwok p50 | kwok p99 | real node p50 | real node p99 |\n|---|---|---|---|---|\n")
	for _, pair := range realRatioPairs {
		w("| %s/%s | %s | %s | %s | %s |\n", pair[0], pair[1],
			times(r.Startup.ratio(pair[0], pair[1], false, p50)), times(r.Startup.ratio(pair[0], pair[1], false, p99)),
			times(rn.Startup.ratio(pair[0], pair[1], false, p50)), times(rn.Startup.ratio(pair[0], pair[1], false, p99)))
	}
	w("\n| mode | | run | pods | p50 | p90 | p99 | max | wall | hits / misses | create call p50 / p99 | to scheduled p50 / p99 | to Running (kubelet) p50 / p99 |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range rn.Startup {
		if s.Error != "" {
			w("| %s | %s | %s | | error: %s | | | | | | | | |\n", s.Mode, modeNames[s.Mode], s.kind(), s.Error)
			continue
		}
		checkouts := ""
		if s.Mode == modeHit {
			checkouts = fmt.Sprintf("%d / %d", s.Hits, s.Misses)
		}
		w("| %s | %s | %s | %d | %s | %s | %s | %s | %.1fs | %s | %s / %s | %s / %s | %s / %s |\n", s.Mode, modeNames[s.Mode], s.kind(), s.Stats.N,
			dur(s.Stats.P50), dur(s.Stats.P90), dur(s.Stats.P99), dur(s.Stats.Max), s.Wall, checkouts,
			dur(s.CreateCall.P50), dur(s.CreateCall.P99), dur(s.ToScheduled.P50), dur(s.ToScheduled.P99), dur(s.ToRunning.P50), dur(s.ToRunning.P99))
	}
}

// startupRuns are the start-up runs of one tier.
type startupRuns []startupRun

// run is the successful run of mode and kind, or nil.
func (rs startupRuns) run(mode string, burst bool) *startupRun {
	for i := range rs {
		if rs[i].Mode == mode && rs[i].Burst == burst && rs[i].Error == "" {
			return &rs[i]
		}
	}
	return nil
}

// ratio is pick(num's run) / pick(den's run) of one kind, NaN unless both
// were measured.
func (rs startupRuns) ratio(num, den string, burst bool, pick func(summary) float64) float64 {
	a, b := rs.run(num, burst), rs.run(den, burst)
	if a == nil || b == nil {
		return math.NaN()
	}
	return ratio(pick(a.Stats), pick(b.Stats))
}

// roundsMarkdown writes the p50 of each round of the bursts that ran in
// rounds, and d/e per round, if any ran more than one.
func (rs startupRuns) roundsMarkdown(w func(string, ...any)) {
	var modes []startupRun
	rounds := 0
	for _, s := range rs {
		if s.Burst && s.Error == "" && len(s.RoundP50s) > 1 {
			modes = append(modes, s)
			rounds = max(rounds, len(s.RoundP50s))
		}
	}
	if len(modes) == 0 {
		return
	}
	names := make([]string, len(modes))
	for i, s := range modes {
		names[i] = s.Mode
	}
	w("\nThe bursts of %s ran in %d rounds of %d pods each, the modes interleaved in every round in that order, each burst cleaned up (and d's pool refilled, e's claims made again) before the next; a burst row above pools its rounds' pods. The p50 of each round:\n\n", strings.Join(names, ", "), rounds, modes[0].Stats.N/len(modes[0].RoundP50s))
	w("| | %s |\n|---|%s\n", strings.Join(roundHeads(rounds), " | "), strings.Repeat("---|", rounds))
	gc := false
	for _, s := range modes {
		cells := make([]string, rounds)
		for i, v := range s.RoundP50s {
			cells[i] = dur(v)
			if i < len(s.RoundAPIServerGC) && s.RoundAPIServerGC[i] >= 0.005 {
				cells[i] += fmt.Sprintf(" (GC %.2f s)", s.RoundAPIServerGC[i])
				gc = true
			}
		}
		w("| %s | %s |\n", s.Mode, strings.Join(cells, " | "))
	}
	d, e := rs.run(modeHit, true), rs.run(modeOwnClaim, true)
	if d != nil && e != nil && len(d.RoundP50s) == len(e.RoundP50s) {
		cells := make([]string, rounds)
		for i := range d.RoundP50s {
			cells[i] = times(ratio(d.RoundP50s[i], e.RoundP50s[i]))
		}
		w("| d/e | %s |\n", strings.Join(cells, " | "))
	}
	if gc {
		w("\n(GC x s): kube-apiserver collected garbage during that burst, which took x s of its CPU there (its `GODEBUG=gctrace=1` log: stop-the-world, assist and mark workers' time, idle marking left out; a cycle that ran past the burst counts by its share of wall clock inside it). Which burst a cycle falls in is chance; a mode that allocates more in the API server meets cycles more often.\n")
	}
}

func roundHeads(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("round %d", i+1)
	}
	return out
}

// startupRatio compares two modes' runs of one kind: num/den of their p50s
// and of their p99s, null when not measured.
type startupRatio struct {
	Ratio string   `json:"ratio"` // "d/e"
	Run   string   `json:"run"`   // "sequential" or "burst"
	P50   *float64 `json:"p50"`
	P99   *float64 `json:"p99"`
}

// ratios are pairs' ratios for each kind of run that both modes of a pair
// ran.
func (rs startupRuns) ratios(pairs [][2]string) []startupRatio {
	var out []startupRatio
	for _, pair := range pairs {
		for _, burst := range []bool{false, true} {
			if rs.run(pair[0], burst) == nil || rs.run(pair[1], burst) == nil {
				continue
			}
			out = append(out, startupRatio{
				Ratio: pair[0] + "/" + pair[1], Run: startupRun{Burst: burst}.kind(),
				P50: jsonNum(rs.ratio(pair[0], pair[1], burst, p50)), P99: jsonNum(rs.ratio(pair[0], pair[1], burst, p99)),
			})
		}
	}
	return out
}

// Ratios of start-up modes shown and saved, per tier.
var (
	kwokRatioPairs = [][2]string{{modeHit, modePlain}, {modeHit, modeOwnClaim}, {modeOwnClaim, modePlain}, {modeNoop, modePlain}, {modeHit, modeNoop}, {modeEphemeral, modeHit}, {modeMiss, modeHit}, {modeEphemeral, modePlain}, {modeMiss, modePlain}}
	realRatioPairs = [][2]string{{modeHit, modePlain}, {modeHit, modeOwnClaim}, {modeOwnClaim, modePlain}}
	csiRatioPairs  = pairsOf(csiRatioRows)
)

// ratioRow is a ratio of two modes and what it shows.
type ratioRow struct{ Num, Den, What string }

// csiRatioRows are the CSI tier's ratios: d's staged hits against the
// floor and the alternatives, then the same with f, d's control without
// staging, then g, a hit staged on a node the pod cannot run on.
var csiRatioRows = []ratioRow{
	{modeHit, modePlain, "staged hit / no volume"},
	{modeEphemeral, modeHit, "generic ephemeral / staged hit"},
	{modeOwnClaim, modeHit, "own Bound PVC / staged hit"},
	{modeMiss, modeHit, "miss / staged hit"},
	{modeUnstaged, modePlain, "control: hit without staging / no volume"},
	{modeEphemeral, modeUnstaged, "control: generic ephemeral / hit without staging"},
	{modeOwnClaim, modeUnstaged, "control: own Bound PVC / hit without staging"},
	{modeUnstaged, modeOwnClaim, "control: what the operator costs a pod that attaches anyway"},
	{modeUnstaged, modeHit, "what staging saves: hit without / with staging"},
	{modeMoved, modeUnstaged, "hit staged elsewhere (moved) / hit without staging"},
	{modeMoved, modeHit, "hit staged elsewhere / staged hit"},
	{modeOwnClaim, modePlain, "own Bound PVC / no volume"},
	{modeEphemeral, modePlain, "generic ephemeral / no volume"},
}

// pairsOf are rows' modes.
func pairsOf(rows []ratioRow) [][2]string {
	out := make([][2]string, len(rows))
	for i, r := range rows {
		out[i] = [2]string{r.Num, r.Den}
	}
	return out
}

func (r *results) level(kind string, want int) *admissionLevel {
	// The level at concurrency want, else the highest one below it.
	var best *admissionLevel
	for i := range r.Admission {
		l := &r.Admission[i]
		if l.Checkout != kind || l.Concurrency > want || l.Error != "" {
			continue
		}
		if best == nil || l.Concurrency > best.Concurrency {
			best = l
		}
	}
	return best
}

// vsNoop is how many points level l's share of calls ≤ 25 ms is below
// that of the control (w) at its concurrency, in the same run: what any
// webhook meets on this API server at that concurrency; NaN without a w
// level.
func (r *results) vsNoop(l *admissionLevel) (gap float64, shown string) {
	w := r.level(checkoutNoop, l.Concurrency)
	if w == nil || w.Concurrency != l.Concurrency {
		return math.NaN(), "no w level"
	}
	gap = 100 * (w.APIServerWithin25ms - l.APIServerWithin25ms)
	return gap, fmt.Sprintf("%.0f%% vs w %.0f%% (%+.1f points)", 100*l.APIServerWithin25ms, 100*w.APIServerWithin25ms, -gap)
}

// stagedGoal adds the goal of a hit on a staged pool beside a plain one's:
// its share of calls ≤ 25 ms at c=10 at least w's minus 2 points; not
// measured (or skipped, saying why) without a staged level.
func (r *results) stagedGoal(add func(name, target string, v float64, shown string, pass bool)) {
	const target = "w − 2 points"
	name := func(what string, c int) string {
		return fmt.Sprintf("webhook calls ≤ 25 ms on %s vs the no-op webhook (w), c=%d (API server histogram)", what, c)
	}
	st := r.AdmissionStaged
	l := r.level(checkoutStaged, 10)
	switch {
	case st != nil && st.Skipped != "":
		add(name("a staged hit", 10), target, math.NaN(), "", false)
		r.Goals[len(r.Goals)-1].Shown = "skipped: " + st.Skipped
	case st == nil || l == nil:
		add(name("a staged hit", 10), target, math.NaN(), "", false)
	default:
		what := "a staged hit (reserved ahead)"
		if !st.Reserved {
			what = "a staged hit (not reserved ahead: it writes)"
		}
		gap, shown := r.vsNoop(l)
		add(name(what, l.Concurrency), target, gap, fmt.Sprintf("%s, %d pods", shown, l.Pods), gap <= 2)
	}
}

func p50(s summary) float64 { return s.P50 }
func p99(s summary) float64 { return s.P99 }

func (r *results) evaluateGoals() {
	add := func(name, target string, v float64, shown string, pass bool) {
		g := goal{Name: name, Target: target, Value: v, Shown: shown, Status: "MISS"}
		switch {
		case math.IsNaN(v):
			g.Status, g.Shown = "n/a", "not measured"
		case pass:
			g.Status = "PASS"
		}
		r.Goals = append(r.Goals, g)
	}
	x := func(v float64) string { return fmt.Sprintf("%.2f×", v) }
	for _, burst := range []bool{false, true} {
		kind := "sequential"
		if burst {
			kind = "burst"
		}
		v := r.Startup.ratio(modeHit, modePlain, burst, p50)
		add("start-up d/a p50, "+kind, "≤ 1.10", v, x(v), v <= 1.10)
		v = r.Startup.ratio(modeHit, modePlain, burst, p99)
		add("start-up d/a p99, "+kind, "≤ 1.25", v, x(v), v <= 1.25)
		v = r.Startup.ratio(modeEphemeral, modeHit, burst, p50)
		add(fmt.Sprintf("start-up b/d p50, %s (L=%s)", kind, r.Config.Delay), "≥ 4", v, x(v), v >= 4)
		v = r.Startup.ratio(modeMiss, modeHit, burst, p50)
		add(fmt.Sprintf("start-up c/d p50, %s (L=%s)", kind, r.Config.Delay), "≥ 4", v, x(v), v >= 4)
	}
	// What the operator adds to a pod that needs a volume anyway (e), and
	// beyond what any webhook costs (w), on the simulated tier.
	less := func(num, den string) float64 {
		a, b := r.Startup.run(num, false), r.Startup.run(den, false)
		if a == nil || b == nil {
			return math.NaN()
		}
		return a.Stats.P50 - b.Stats.P50
	}
	v := less(modeHit, modeOwnClaim)
	add("start-up d − e p50, sequential", "≤ 15 ms", v, ms(v), v <= 0.015)
	v = less(modeHit, modeNoop)
	add("start-up d − w p50, sequential", "≤ 10 ms", v, ms(v), v <= 0.010)
	v = r.Startup.ratio(modeHit, modeOwnClaim, true, p50)
	add("start-up d/e p50, burst", "≤ 1.50", v, x(v), v <= 1.5)
	var real startupRuns
	if r.RealNode != nil {
		real = r.RealNode.Startup
	}
	for _, g := range []struct {
		pick   func(summary) float64
		name   string
		target float64
	}{{p50, "p50", 1.05}, {p99, "p99", 1.10}} {
		v := real.ratio(modeHit, modeOwnClaim, false, g.pick)
		add("real node: start-up d/e "+g.name+", sequential", fmt.Sprintf("≤ %.2f", g.target), v, x(v), v <= g.target)
		if rn := r.RealNode; rn != nil && rn.Skipped != "" {
			r.Goals[len(r.Goals)-1].Shown = "skipped: " + rn.Skipped
		}
	}
	var csi startupRuns
	if r.CSI != nil {
		csi = r.CSI.Startup
	}
	csiGoals := len(r.Goals)
	for _, g := range []struct {
		num, den, name string
		pick           func(summary) float64
		target         float64
		atMost         bool
	}{
		{modeHit, modePlain, "p50", p50, 1.3, true},
		{modeHit, modePlain, "p99", p99, 1.5, true},
		{modeEphemeral, modeHit, "p50", p50, 10, false},
		{modeOwnClaim, modeHit, "p50", p50, 10, false},
		{modeUnstaged, modeOwnClaim, "p50", p50, 1.05, true},
	} {
		v := csi.ratio(g.num, g.den, false, g.pick)
		name := fmt.Sprintf("real node, CSI: start-up %s/%s %s, sequential", g.num, g.den, g.name)
		if g.atMost {
			add(name, fmt.Sprintf("≤ %.2f", g.target), v, x(v), v <= g.target)
		} else {
			add(name, fmt.Sprintf("≥ %g", g.target), v, x(v), v >= g.target)
		}
	}
	if c := r.CSI; c != nil && c.Skipped != "" {
		for i := csiGoals; i < len(r.Goals); i++ {
			r.Goals[i].Shown = "skipped: " + c.Skipped
		}
	}
	// A hit as the operator hands it out with the chart's defaults: from
	// a reservation (the reserved levels) when it reserves whole pools.
	hit, hitName := r.level(checkoutReserved, 10), "a hit (reserved ahead, the chart's default)"
	if hit == nil {
		hit, hitName = r.level(webhook.CheckoutHit, 10), "a hit"
	}
	if l := hit; l != nil {
		// The 25 ms bucket bound makes this exact: p99 ≤ 25 ms iff at
		// most 1% of the calls took longer.
		calls := l.APIServer.N
		add(fmt.Sprintf("webhook p99 on %s, c=%d (API server histogram)", hitName, l.Concurrency), "≤ 25 ms", float64(l.APIServerOver25ms),
			fmt.Sprintf("%d of %d calls > 25 ms (%.1f%%); interpolated p99 %s", l.APIServerOver25ms, calls, 100*float64(l.APIServerOver25ms)/float64(max(1, calls)), ms(l.APIServer.P99)),
			float64(l.APIServerOver25ms) <= 0.01*float64(calls))
		gap, shown := r.vsNoop(l)
		add(fmt.Sprintf("webhook calls ≤ 25 ms on %s vs the no-op webhook (w), c=%d (API server histogram)", hitName, l.Concurrency), "w − 2 points", gap, shown, gap <= 2)
		r.stagedGoal(add)
		v := l.Webhook.P99
		add(fmt.Sprintf("webhook p99 on %s, c=%d (operator histogram)", hitName, l.Concurrency), "≤ 50 ms", v, ms(v), v <= 0.050)
		add(fmt.Sprintf("webhook p99 on %s, c=%d (operator histogram), stretch", hitName, l.Concurrency), "≤ 25 ms", v, ms(v), v <= 0.025)
	} else {
		add("webhook p99 on a hit, c=10", "≤ 50 ms", math.NaN(), "", false)
		r.stagedGoal(add)
	}
	if l := r.level(webhook.CheckoutHit, 10); l != nil && hit != l {
		// The hit of a pool that is not reserved from (spec.pool.reserveAhead:
		// 0, a staged pool) or of a replica past its share: one write.
		v := l.Webhook.P99
		add(fmt.Sprintf("webhook p99 on a hit that writes (no reservation), c=%d (operator histogram)", l.Concurrency), "≤ 50 ms", v, ms(v), v <= 0.050)
	}
	for _, kind := range []string{webhook.CheckoutHit, webhook.CheckoutMiss} {
		name := fmt.Sprintf("API writes per pod's life, %s (audit log)", kind)
		v := math.NaN()
		for _, c := range r.Cost {
			if c.Checkout == kind && c.ByResource != nil {
				v = c.ByResource.WriteTotal()
			}
		}
		add(name, "≤ 10", v, fmt.Sprintf("%.2f", v), v <= 10)
	}
	v = math.NaN()
	for _, c := range r.Cost {
		if c.Checkout == webhook.CheckoutHit && c.ByResource != nil {
			v = 0
			for _, n := range c.ByResource.WebhookReads {
				v += n
			}
		}
	}
	add("uncached reads per hit's admission (the webhooks' user agent)", "0", v, fmt.Sprintf("%.2f", v), v == 0)
	if n := r.Nodes; n != nil {
		name := fmt.Sprintf("checkout with %d more nodes / without, c=%d", n.ExtraNodes, nodesConcurrency)
		v := n.ratio(func(l admissionLevel) float64 { return l.CheckoutDur.P50 })
		add(name+", p50", "≤ 1.2", v, x(v), v <= 1.2)
		v = n.ratio(func(l admissionLevel) float64 { return l.CheckoutDur.P99 })
		add(name+", p99", "≤ 1.2", v, x(v), v <= 1.2)
	}
	if m := r.Memory; m != nil && len(m.Samples) == 2 {
		v := m.ratio(func(s memSample) float64 { return s.VmHWM })
		add(fmt.Sprintf("memory: peak RSS with %d unlabelled pods / without", m.Samples[1].UnlabelledPods), "≤ 1.2", v, x(v), v <= 1.2)
		v = m.ratio(func(s memSample) float64 { return s.HeapInuse })
		add("memory: Go heap in use, same ratio", "≤ 1.2", v, x(v), v <= 1.2)
	} else {
		add("memory ratio", "≤ 1.2", math.NaN(), "", false)
	}
	if b := r.Burst; b != nil && b.Claims > 0 {
		add(fmt.Sprintf("burst %d vs pool %d: shared PVCs", b.Pods, b.Pool), "0", float64(b.Shared),
			fmt.Sprintf("%d shared, %d pods without a claim (%d hits, %d misses)", b.Shared, b.NoClaim, b.Hits, b.Misses), b.Shared == 0 && b.NoClaim == 0)
	} else {
		add("burst: shared PVCs", "0", math.NaN(), "", false)
	}
	if b := r.Burst; b != nil && (b.Refilled || b.MinWarm < b.Pool) {
		limit := (r.Config.Delay + 2*time.Second).Seconds()
		v := b.RefillSeconds
		if !b.Refilled {
			v = math.Inf(1)
		}
		add("burst: pool warm again after the burst's end", fmt.Sprintf("≤ L+2s = %.0fs", limit), v, b.refillText(), v <= limit)
	} else {
		add("burst: pool warm again after the burst's end", "", math.NaN(), "", false)
	}
}

// markdown renders the results; chart is the chart's file name.
func (r *results) markdown(chart string) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	title := "fluent-pvc-operator benchmark"
	if r.Config.Smoke {
		title += " (smoke)"
	}
	w("# %s\n\n", title)
	w("| | |\n|---|---|\n")
	w("| date | %s |\n", r.Date)
	w("| machine | %d CPUs (%s), %s memory, kernel %s, %s |\n", r.Machine.CPUs, r.Machine.CPUModel, r.Machine.MemTotal, r.Machine.Kernel, r.Machine.OS)
	w("| go | %s |\n", r.Machine.GoVersion)
	w("| provisioning delay L | %s |\n", r.Config.Delay)
	w("| pods per start-up mode N | %d |\n", r.Config.N)
	w("| cluster | kwok (test/cluster), 6 nodes in 3 zones, operator as a local process |\n")
	w("| operator flags | the chart's defaults that differ from the binary's, then `-operator-args`: `%s` |\n", strings.Join(r.Config.OperatorArgs, " "))
	// Staged pools are reserved from too once the operator does (the
	// admission phase's staged levels tell).
	stagedToo := ", and staged pools"
	if st := r.AdmissionStaged; st != nil && st.Reserved {
		stagedToo = ""
	}
	switch target := operatorReserve(r.Config.OperatorArgs); {
	case target == pool.ReserveShare:
		w("| reservations ahead | the operator reserves whole pools (`--reserve-ahead=share`, one replica) before the pods come and hands them out without an API write at admission, except the pools of the admission phase's hit levels and of the nodes phase (`spec.pool.reserveAhead: 0`), which measure the checkout that writes%s |\n", stagedToo)
	case target > 0:
		w("| reservations ahead | the operator reserves up to %d warm PVCs per pool and namespace (`--reserve-ahead`), except the pools of the admission phase's hit levels and of the nodes phase%s |\n", target, stagedToo)
	default:
		w("| reservations ahead | none by the operator's default (`--reserve-ahead=0`) |\n")
	}
	if r.Config.ReserveAhead > 0 {
		w("| reservations asked | the pools of mode d and the cost phase set `spec.pool.reserveAhead: %d` on the simulated tier |\n", r.Config.ReserveAhead)
	}
	switch rn := r.RealNode; {
	case rn == nil:
		w("| real node | not run |\n")
	case rn.Skipped != "":
		w("| real node | skipped: %s |\n", rn.Skipped)
	default:
		w("| real node | a second cluster with a kubelet node (%s, containerd, busybox containers) beside tainted kwok nodes; N=%d per mode, one at a time; cluster up %.0fs, tier %.0fs |\n", cluster.RealNodeName, rn.N, rn.ClusterUpSeconds, rn.WallSeconds)
	}
	switch c := r.CSI; {
	case c == nil:
		w("| real node, CSI | not run |\n")
	case c.Skipped != "":
		w("| real node, CSI | skipped: %s |\n", c.Skipped)
	default:
		w("| real node, CSI | a cluster of its own: the real node with test/csidriver's storage (%s); N=%d per mode, one at a time; cluster up %.0fs, tier %.0fs |\n", c.CSI.text(), c.N, c.ClusterUpSeconds, c.WallSeconds)
	}
	w("| wall time | %.0fs (cluster up %.0fs; %s) |\n\n", r.WallSeconds, r.ClusterUpSeconds, phaseList(r.PhaseSeconds))

	w("## Goals\n\n| goal | target | measured | |\n|---|---|---|---|\n")
	for _, g := range r.Goals {
		w("| %s | %s | %s | %s |\n", g.Name, g.Target, g.Shown, g.Status)
	}

	w("\n## Start-up latency\n\nFrom the pod's create call to the first informer event with phase Running. Mode e is d's floor: a pod with a PVC of its own, created and Bound before the run (not counted), and the same volumes, mounts and sidecar as d's webhook injects, without the operator (no FluentPVC label); d/e is what the operator costs a pod that needs its own volume anyway. Mode w is a control, not an alternative: plain pods through a mutating webhook that makes no API call and adds one label, served like the operator's (controller-runtime, TLS on 127.0.0.1, `reinvocationPolicy: Never`); w/a is what any webhook costs on this cluster, d/w what the operator costs beyond that.\n\n")
	w("![start-up latency](%s)\n\n", chart)
	w("| mode | | run | pods | p50 | p90 | p99 | max | wall | hits / misses |\n|---|---|---|---|---|---|---|---|---|---|\n")
	runs := append([]startupRun(nil), r.Startup...)
	sort.SliceStable(runs, func(i, j int) bool {
		if runs[i].Mode != runs[j].Mode {
			return runs[i].Mode < runs[j].Mode
		}
		return !runs[i].Burst && runs[j].Burst
	})
	for _, s := range runs {
		if s.Error != "" {
			w("| %s | %s | %s | | error: %s | | | | | |\n", s.Mode, modeNames[s.Mode], s.kind(), s.Error)
			continue
		}
		checkouts := ""
		if s.Mode == modeMiss || s.Mode == modeHit {
			checkouts = fmt.Sprintf("%d / %d", s.Hits, s.Misses)
		}
		w("| %s | %s | %s | %d | %s | %s | %s | %s | %.1fs | %s |\n", s.Mode, modeNames[s.Mode], s.kind(), s.Stats.N,
			dur(s.Stats.P50), dur(s.Stats.P90), dur(s.Stats.P99), dur(s.Stats.Max), s.Wall, checkouts)
	}
	w("\nWhere the time goes (p50 / p99 of each part): the create call (admission included), from its return to the first event with the pod bound to a node (scheduling; for b and c also provisioning), and from there to Running (kwok).\n\n")
	w("| mode | run | create call | to scheduled | to Running |\n|---|---|---|---|---|\n")
	for _, s := range runs {
		if s.Error != "" {
			continue
		}
		w("| %s | %s | %s / %s | %s / %s | %s / %s |\n", s.Mode, s.kind(), dur(s.CreateCall.P50), dur(s.CreateCall.P99),
			dur(s.ToScheduled.P50), dur(s.ToScheduled.P99), dur(s.ToRunning.P50), dur(s.ToRunning.P99))
	}
	w("\n| ratio | sequential p50 | sequential p99 | burst p50 | burst p99 |\n|---|---|---|---|---|\n")
	for _, pair := range kwokRatioPairs {
		w("| %s/%s | %s | %s | %s | %s |\n", pair[0], pair[1],
			times(r.Startup.ratio(pair[0], pair[1], false, p50)), times(r.Startup.ratio(pair[0], pair[1], false, p99)),
			times(r.Startup.ratio(pair[0], pair[1], true, p50)), times(r.Startup.ratio(pair[0], pair[1], true, p99)))
	}
	r.Startup.roundsMarkdown(w)
	r.Startup.cpuMarkdown(w)
	if r.PoolFillSeconds > 0 {
		w("\nFilling the two warm pools of mode d (%d PVCs each, from nothing) took %.1fs.\n", r.Config.N, r.PoolFillSeconds)
	}
	r.realNodeMarkdown(w)
	r.csiMarkdown(w)

	w("\n## Admission latency of the webhook\n\n")
	w("%d pods per level, created `c` at a time (a worker pool of c); hits each from a full warm pool of %d of its own that reserves none (`spec.pool.reserveAhead: 0`: the checkout writes the warm PVC; filled ahead; it refills during its level, as in use, and leaves the FluentPVC after it), reserved hits (when the operator reserves whole pools) the same from a pool left to the operator's `--reserve-ahead`, whose warm PVCs it reserved ahead and hands out without a write, misses with pool size 0, and the control w: as many plain pods at each level through a mutating webhook that makes no API call (the start-up's mode w), read from the same histogram. After each level the bench waits until every pod of the level has its FluentPVCBinding, so that one level's bindings are not written during the next. ", r.Config.AdmissionPods, r.Config.AdmissionPods)
	w("API server: `apiserver_admission_webhook_admission_duration_seconds{name=\"%s\"}`, whose buckets are 5, 25, 100, 500 ms..., so its percentiles are interpolated inside wide buckets; the share of calls ≤ 25 ms is exact. ", webhookName)
	w("Operator: `fluentpvc_webhook_admission_duration_seconds{result=\"mutated\"}` and `fluentpvc_pool_checkout_duration_seconds{result}` (buckets from 0.5 or 1 ms). Client: the bench's create call, end to end.\n\n")
	r.stagedMarkdown(w)
	w("The operator's webhook is registered with `reinvocationPolicy: Never`, so the API server calls it once per pod; the reinvocations column counts the calls that found the pod injected already (none expected). The API server's histogram counts every call; the operator's `result=\"mutated\"` only those that injected.\n\n")
	w("| checkout | c | pods | API server calls (reinvocations) | API server p50 / p90 / p99 | calls ≤ 25 ms | webhook p50 / p90 / p99 | checkout p50 / p90 / p99 | create call p50 / p99 | hits / misses |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, l := range r.Admission {
		if l.Error != "" && l.APIServer.N == 0 {
			w("| %s | %d | %d | error: %s | | | | | | |\n", l.Checkout, l.Concurrency, l.Pods, l.Error)
			continue
		}
		if l.Checkout == checkoutNoop {
			// The control has no operator histogram and no checkout.
			w("| %s | %d | %d | %d (–) | %s | %.0f%% | – | – | %s / %s | – |\n", l.Checkout, l.Concurrency, l.Pods, l.APIServer.N,
				msTriple(l.APIServer), 100*l.APIServerWithin25ms, ms(l.Client.P50), ms(l.Client.P99))
			continue
		}
		staged := ""
		if l.Checkout == checkoutStaged {
			staged = fmt.Sprintf(" (%d staged)", l.StagedHits)
		}
		w("| %s | %d | %d | %d (%d) | %s | %.0f%% | %s | %s | %s / %s | %d / %d%s |\n", l.Checkout, l.Concurrency, l.Pods, l.APIServer.N, l.Reinvocations,
			msTriple(l.APIServer), 100*l.APIServerWithin25ms, msTriple(l.Webhook), msTriple(l.CheckoutDur), ms(l.Client.P50), ms(l.Client.P99), l.Hits, l.Misses, staged)
	}
	w("\nWhat the webhook waits for: the API server's own latency (`apiserver_request_duration_seconds`, buckets 5, 25, 50, 100 ms...) of the one write a webhook call makes (the claim: PUT on a hit, POST on a miss) and of the binding the operator creates right after it, off the admission path; and CPU per pod of the operator and the API server (`process_cpu_seconds_total`).\n\n")
	w("| checkout | c | POST fluentpvcbindings (operator) p50 / p99 | PVC write (webhook: PUT on a hit, POST on a miss) p50 / p99 | operator CPU per pod | API server CPU per pod |\n|---|---|---|---|---|---|\n")
	for _, l := range r.Admission {
		if l.APIServer.N == 0 || l.Checkout == checkoutNoop {
			continue
		}
		w("| %s | %d | %s / %s | %s / %s | %.1f ms | %.1f ms |\n", l.Checkout, l.Concurrency, ms(l.BindingCreate.P50), ms(l.BindingCreate.P99),
			ms(l.PVCWrite.P50), ms(l.PVCWrite.P99), l.OperatorCPU, l.APIServerCPU)
	}

	if n := r.Nodes; n != nil {
		w("\n## Checkout with %d more nodes\n\n", n.ExtraNodes)
		w("The same level twice, hits at c=%d, %d pods, every other one pinned to %s by a nodeSelector (so the checkout works out where each pod can run from the operator's cached nodes and skips the other zones' warm PVCs): first on the cluster's %d nodes, then after adding %d fake nodes over the zones (Ready in %.1fs) and once the API server's writes of nodes stayed below %d a second for two seconds (%.1fs more), so that the level does not run beside the control plane's and kwok's work on the newest nodes. Each from a full pool of %d of its own. Meanwhile, from the first new node to the level, the operator made %.0f reconciles of its FluentPVCs (the pool watches nodes) and used %.2fs of CPU.\n\n",
			nodesConcurrency, r.Config.AdmissionPods, nodesPinnedZone, n.BaseNodes, n.ExtraNodes, n.AddSeconds, quietNodeWrites, n.QuietSeconds, 2*r.Config.AdmissionPods, n.AddReconciles, n.AddOperatorCPU)
		w("| nodes | checkout p50 / p90 / p99 | webhook p50 / p90 / p99 | create call p50 / p99 | operator CPU per pod | hits / misses |\n|---|---|---|---|---|---|\n")
		for _, row := range []struct {
			nodes int
			l     admissionLevel
		}{{n.BaseNodes, n.Base}, {n.BaseNodes + n.ExtraNodes, n.Many}} {
			w("| %d | %s | %s | %s / %s | %.1f ms | %d / %d |\n", row.nodes, msTriple(row.l.CheckoutDur), msTriple(row.l.Webhook), ms(row.l.Client.P50), ms(row.l.Client.P99), row.l.OperatorCPU, row.l.Hits, row.l.Misses)
		}
	}

	if bu := r.Burst; bu != nil {
		w("\n## Burst against a smaller pool\n\n")
		w("All pods created at once (one create call each, concurrently). Hits and misses from the claims' checkout annotation. The pool is warm again when the bench's PVC informer shows %d Bound PVCs of the pool in the namespace, labelled `%s=%s` or reserved ahead and carried by none of the burst's pods (as the pool counts them), counted from the last create's return, waited for at most %s; the pods are waited for at most %s, side by side. Fewest warm PVCs seen after the burst's end: %d.\n\n",
			bu.Pool, v1alpha1.ClaimRoleLabelKey, v1alpha1.ClaimRoleWarm, burstRefillTimeout, burstRunTimeout, bu.MinWarm)
		w("| pods | pool | hits | misses | distinct claims | shared claims | pods without a claim | creates took | pool warm again after the burst's end | start-up p50 / p99 (from the burst's start) |\n|---|---|---|---|---|---|---|---|---|---|\n")
		w("| %d | %d | %d | %d | %d | %d | %d | %.2fs | %s | %s / %s |\n", bu.Pods, bu.Pool, bu.Hits, bu.Misses, bu.Claims, bu.Shared, bu.NoClaim,
			bu.CreateSeconds, bu.refillText(), dur(bu.Startup.P50), dur(bu.Startup.P99))
		if rb := bu.Refill; rb.PVCs > 0 {
			w("\nWhere the refill's time went, over the %d warm PVCs created from the burst's start (p50 / max, from the PVC informer's first sight of each step): created after the burst's start %s / %s; creation to a selected node %s / %s; creation to Bound %s / %s; Bound to zones recorded (a candidate from then) %s / %s.\n",
				rb.PVCs, dur(rb.Created.P50), dur(rb.Created.Max), dur(rb.ToSelected.P50), dur(rb.ToSelected.Max), dur(rb.ToBound.P50), dur(rb.ToBound.Max), dur(rb.ToZones.P50), dur(rb.ToZones.Max))
		}
		if bu.NotRunning > 0 {
			w("\n%d pods were not Running %s after the burst (not counted in the start-up figures), e.g.:\n\n", bu.NotRunning, burstRunTimeout)
			for _, why := range bu.NotRunningWhy {
				w("- %s\n", why)
			}
		}
		if bu.Error != "" {
			w("\nError: %s\n", bu.Error)
		}
	}

	w("\n## API requests of the operator per pod\n\n")
	w("Deltas of the operator's `rest_client_requests_total` over %d pods' whole lifecycles (admitted, Running, deleted, drained by a finalizer Job, claim and binding deleted; for a hit also the pool's refill), divided by the pods. Background work in the same window (status updates) is included.\n\n", r.Config.CostPods)
	w("| checkout | POST | PUT | PATCH | DELETE | writes | GET (uncached reads) | window |\n|---|---|---|---|---|---|---|---|\n")
	for _, c := range r.Cost {
		if c.Error != "" && c.PerPod == nil {
			w("| %s | error: %s | | | | | | |\n", c.Checkout, c.Error)
			continue
		}
		w("| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.0fs |\n", c.Checkout, c.PerPod["POST"], c.PerPod["PUT"], c.PerPod["PATCH"], c.PerPod["DELETE"], c.Writes, c.PerPod["GET"], c.Seconds)
	}
	w("%s", costByResource(r.Cost))

	if i := r.Idle; i != nil {
		w("\n## API requests of the operator while idle\n\n")
		w("%d FluentPVCs, each with a pool of %d warm PVCs in each of %d namespaces, reserved ahead of their pods as `--reserve-ahead` asks, and no pod: deltas of the operator's `rest_client_requests_total` over %.0f s, per minute.\n\n", i.Pools, i.Size, i.Namespaces, i.Seconds)
		if i.Error != "" && i.PerMinute == nil {
			w("Error: %s\n", i.Error)
		} else {
			w("| POST | PUT | PATCH | DELETE | writes | GET (uncached reads) |\n|---|---|---|---|---|---|\n")
			w("| %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", i.PerMinute["POST"], i.PerMinute["PUT"], i.PerMinute["PATCH"], i.PerMinute["DELETE"], i.WritesPerMinute, i.PerMinute["GET"])
		}
	}

	if m := r.Memory; m != nil {
		w("\n## Memory of the operator\n\n")
		w("Each figure after a restart of the operator (`op.Restart`), once its workqueues were empty for two scrapes a second apart, plus %s. ", memorySettle)
		w("Extra pods are created Pending and unscheduled (`schedulerName: %s`), so neither the scheduler nor kwok works on them; ", unscheduledScheduler)
		w("%d of them were created in %.1fs with %d concurrent creates. The phase ends once its namespaces, and their pods, are gone, so that the next phase does not run beside their deletion.\n\n", r.Config.UnlabelledPods, m.CreateSeconds, m.Concurrency)
		w("| labelled pods | unlabelled pods | peak RSS (VmHWM) | RSS (VmRSS) | heap in use | heap alloc |\n|---|---|---|---|---|---|\n")
		for _, s := range m.Samples {
			w("| %d | %d | %s | %s | %s | %s |\n", s.LabelledPods, s.UnlabelledPods, mib(s.VmHWM), mib(s.VmRSS), mib(s.HeapInuse), mib(s.HeapAlloc))
		}
		if len(m.Samples) == 2 {
			w("| ratio | | %s | %s | %s | %s |\n",
				times(m.ratio(func(s memSample) float64 { return s.VmHWM })), times(m.ratio(func(s memSample) float64 { return s.VmRSS })),
				times(m.ratio(func(s memSample) float64 { return s.HeapInuse })), times(m.ratio(func(s memSample) float64 { return s.HeapAlloc })))
		}
		if d := m.Drain; d != nil {
			w("\nDraining: %d more labelled pods in the unlabelled pods' namespace (%d pods in all), their claims made and their bindings recorded, then deleted at once. ", d.DrainPods, d.NamespacePods)
			w("Before each drain Job and each drained claim's deletion the operator lists the namespace's pods live, for several bindings at once. ")
			w("Its peak RSS from the deletion until the last binding was gone (%.1fs; `clear_refs` reset it first): %s, against %s before (%s).\n",
				d.Seconds, mib(d.VmHWM), mib(d.VmRSSBefore), times(ratio(d.VmHWM, d.VmRSSBefore)))
		}
		if m.Error != "" {
			w("\nError: %s\n", m.Error)
		}
	}

	w("\n## Method\n\n")
	w("- One kwok cluster (`test/cluster`, QPS limits disabled) and the operator as a local process (`cluster.RunOperator`), all on this machine: the control plane, kwok, the provisioner, the operator and the bench share its CPUs.\n")
	w("- Start-up: each mode and run in its own namespace; between runs the pods are deleted and the operator's claims drained (bindings gone, claims deleted by the operator; kube-controller-manager may still hold a deleted claim by its PVC protection finalizer) and mode d's pool refilled before the next starts. Mode d's pools (N per namespace) are full before its runs start. The sequential runs of a, w, d and e come first, one mode after another; then their bursts, in `-burst-rounds` rounds of a, w, d and e.\n")
	if r.Config.ParallelSlow {
		w("- Sequential b and c run side by side to save time (each still one pod at a time, ~L per pod); a and d each run alone.\n")
	}
	w("- Percentiles of samples are nearest-rank (p99 of 40 samples is the maximum); of histograms, interpolated as Prometheus' histogram_quantile.\n")
	w("- Admission and memory pods are never scheduled; the burst's and cost's pods run. The bench's FluentPVCs are config/samples' with the sidecar's and finalizer Job's resources cut to requests of 10m CPU and 16Mi, so that the burst's pods fit the cluster; warm PVCs name their node (`--pool-bind-mode=select-node`, the default), so no binder pod runs.\n")
	w("- Mode e's claims (N per namespace, one per pod, from mode d's claim template, each naming a node round-robin as the warm pool's do) are created once d's pools are full and are Bound before e's runs; they are deleted after each run.\n")
	w("- The pools of the cost, burst and admission phases fill, and mode d's FluentPVC and warm PVCs are deleted, while sequential b and c run.\n")
	if len(r.Notes) > 0 {
		w("\n## Notes\n\n")
		for _, n := range r.Notes {
			w("- %s\n", strings.ReplaceAll(n, "\n", " "))
		}
	}
	if len(r.Errors) > 0 {
		w("\n## Errors\n\n")
		for _, e := range r.Errors {
			w("- %s\n", strings.ReplaceAll(e, "\n", " "))
		}
	}
	return b.String()
}

func phaseList(ps []phaseTime) string {
	var parts []string
	for _, p := range ps {
		parts = append(parts, fmt.Sprintf("%s %.0fs", p.Name, p.Seconds))
	}
	return strings.Join(parts, ", ")
}

func dur(s float64) string {
	switch {
	case math.IsNaN(s):
		return "n/a"
	case s < 1:
		return fmt.Sprintf("%.0f ms", s*1000)
	default:
		return fmt.Sprintf("%.2f s", s)
	}
}

func times(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", v)
}

func msTriple(s summary) string {
	return fmt.Sprintf("%s / %s / %s", ms(s.P50), ms(s.P90), ms(s.P99))
}

// latestStem names the pointers to the newest run's files: latest.md,
// latest.json and startup-latest.svg.
const latestStem = "latest"

// write saves the run as <date>.md, <date>.json and startup-<date>.svg in
// dir (a second run on the same date replaces them), then points
// latest.md, latest.json and startup-latest.svg at those files with
// relative symlinks, so that the newest results have one copy. It returns
// the paths it wrote, sorted.
func (r *results) write(dir string, at time.Time) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	date := at.Format("2006-01-02")
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	chart := "startup-" + date + ".svg"
	files := map[string][]byte{
		date + ".md":   []byte(r.markdown(chart)),
		date + ".json": append(raw, '\n'),
	}
	var paths []string
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, 0o644); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	p := filepath.Join(dir, chart)
	if err := r.chart(p); err != nil {
		return nil, fmt.Errorf("drawing %s: %w", p, err)
	}
	paths = append(paths, p)
	for _, link := range []struct{ name, target string }{
		{latestStem + ".md", date + ".md"},
		{latestStem + ".json", date + ".json"},
		{"startup-" + latestStem + ".svg", chart},
	} {
		p := filepath.Join(dir, link.name)
		if err := pointAt(p, link.target); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return paths, nil
}

// pointAt makes path a symlink to target (relative to path's directory),
// replacing whatever path was, in one rename.
func pointAt(path, target string) error {
	tmp := path + ".tmp"
	if err := os.Remove(tmp); err != nil && !os.IsNotExist(err) {
		return err
	}
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// costByResource renders the cost phase's audit tallies: the operator's
// writes per pod by verb and resource, hits and misses side by side, and
// its uncached reads.
func costByResource(cost []costResult) string {
	kinds := []string{webhook.CheckoutHit, webhook.CheckoutMiss}
	tallies := make([]*auditTally, len(kinds))
	var writes []map[string]float64
	for i, kind := range kinds {
		for _, c := range cost {
			if c.Checkout == kind && c.ByResource != nil {
				tallies[i] = c.ByResource
				writes = append(writes, c.ByResource.Writes)
			}
		}
	}
	if len(writes) == 0 {
		return ""
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	cell := func(t *auditTally, key string) string {
		switch {
		case t == nil:
			return "–"
		case t.Writes[key] == 0:
			return ""
		case t.Failed[key] > 0:
			return fmt.Sprintf("%.2f (%.2f failed)", t.Writes[key], t.Failed[key])
		}
		return fmt.Sprintf("%.2f", t.Writes[key])
	}
	w("\n### API writes of the operator per pod, by resource\n\n")
	w("The same windows, from kube-apiserver's audit log (level Metadata): the operator's requests (user agent `%s…`) by Kubernetes verb (create is POST, update PUT, patch PATCH, delete and deletecollection DELETE) and resource, divided by the pods. Failed writes (a response other than 2xx, e.g. a conflict) are counted, and also shown in parentheses.\n\n", operatorUserAgent)
	w("| request | %s |\n|---|%s\n", strings.Join(kinds, " | "), strings.Repeat("---|", len(kinds)))
	for _, key := range auditRows(writes...) {
		w("| %s |", key)
		for _, t := range tallies {
			w(" %s |", cell(t, key))
		}
		w("\n")
	}
	w("| **all writes** |")
	for _, t := range tallies {
		if t == nil {
			w(" – |")
			continue
		}
		w(" **%.2f** |", t.WriteTotal())
	}
	w("\n")
	list := func(m map[string]float64) string {
		var parts []string
		var sum float64
		for _, key := range auditRows(m) {
			parts = append(parts, fmt.Sprintf("%s %.2f", key, m[key]))
			sum += m[key]
		}
		if len(parts) == 0 {
			return "none"
		}
		return fmt.Sprintf("%.2f (%s)", sum, strings.Join(parts, ", "))
	}
	w("\nUncached reads (get, list) per pod:\n\n")
	for i, t := range tallies {
		if t != nil {
			w("- %s: %s\n", kinds[i], list(t.Reads))
		}
	}
	if t := tallies[0]; t != nil {
		w("- of a hit, made by the webhooks (their requests carry their own user agent, `... %s`): %s\n", webhook.UserAgentSuffix, list(t.WebhookReads))
		w("- of a hit, received while one of its pods' create calls was in flight (the webhooks' and any controller's that fell into the same time): %s\n", list(t.AdmissionReads))
	}
	return b.String()
}

// cpuFloor is the CPU time per burst below which cpuMarkdown leaves a
// process out of its rows (not out of the total).
const cpuFloor = 0.01

// cpuMarkdown writes the CPU time the machine's processes spent while the
// bursts ran, per burst (the mean over the rounds), by process, for each
// mode that has it, and d − e.
func (rs startupRuns) cpuMarkdown(w func(string, ...any)) {
	var modes []startupRun
	for _, s := range rs {
		if s.Burst && s.Error == "" && len(s.CPU) > 0 && len(s.RoundP50s) > 0 {
			modes = append(modes, s)
		}
	}
	if len(modes) == 0 {
		return
	}
	per := func(s startupRun, name string) float64 { return s.CPU[name] / float64(len(s.RoundP50s)) }
	totals := map[string]float64{}
	for _, s := range modes {
		for name := range s.CPU {
			totals[name] += per(s, name)
		}
	}
	var names []string
	for name := range totals {
		for _, s := range modes {
			if per(s, name) >= cpuFloor {
				names = append(names, name)
				break
			}
		}
	}
	sort.Slice(names, func(i, j int) bool {
		if totals[names[i]] != totals[names[j]] {
			return totals[names[i]] > totals[names[j]]
		}
		return names[i] < names[j]
	})
	var d, e *startupRun
	heads := make([]string, 0, len(modes)+1)
	for i := range modes {
		heads = append(heads, modes[i].Mode)
		switch modes[i].Mode {
		case modeHit:
			d = &modes[i]
		case modeOwnClaim:
			e = &modes[i]
		}
	}
	if d != nil && e != nil {
		heads = append(heads, "d − e")
	}
	w("\nCPU time of the machine's processes while the bursts ran (from a round's first create call until its last pod was Running), per burst: the mean over the rounds, in seconds, by process name (`bench` is the bench itself; processes under %.2f s in every mode are left out of the rows, not out of the total):\n\n", cpuFloor)
	w("| process | %s |\n|---|%s\n", strings.Join(heads, " | "), strings.Repeat("---|", len(heads)))
	row := func(label string, v func(startupRun) float64) {
		cells := make([]string, 0, len(heads))
		for _, s := range modes {
			cells = append(cells, fmt.Sprintf("%.2f", v(s)))
		}
		if d != nil && e != nil {
			cells = append(cells, fmt.Sprintf("%+.2f", v(*d)-v(*e)))
		}
		w("| %s | %s |\n", label, strings.Join(cells, " | "))
	}
	for _, name := range names {
		row(name, func(s startupRun) float64 { return per(s, name) })
	}
	row("all", func(s startupRun) float64 {
		t := 0.0
		for name := range s.CPU {
			t += per(s, name)
		}
		return t
	})
}
