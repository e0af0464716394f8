package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"
)

// Prometheus is a Prometheus server run as a process on 127.0.0.1, which
// scrapes the operator every second and evaluates rule files.
type Prometheus struct {
	// URL is its HTTP API's base.
	URL string
	// LogPath is its log.
	LogPath string
	api     promv1.API
	proc    *process
}

// PrometheusOptions says what a Prometheus server scrapes and evaluates.
type PrometheusOptions struct {
	// Dir holds its configuration, data and log; it must exist.
	Dir string
	// Targets are the host:port of the /metrics endpoints it scrapes, as
	// job fluent-pvc-operator.
	Targets []string
	// RuleFiles are the rule files it evaluates every second.
	RuleFiles []string
}

// StartPrometheus starts bin/prometheus, the server of Debian's prometheus
// package (`make prometheus-bins` takes it out), with o and waits until it
// is ready. Stop ends it.
func (c *Cluster) StartPrometheus(ctx context.Context, o PrometheusOptions) (*Prometheus, error) {
	binary := c.bin("prometheus")
	if _, err := os.Stat(binary); err != nil {
		return nil, fmt.Errorf("%s: %w (make prometheus-bins puts it there)", binary, err)
	}
	config := map[string]any{
		"global":     map[string]any{"scrape_interval": "1s", "evaluation_interval": "1s"},
		"rule_files": o.RuleFiles,
		"scrape_configs": []any{map[string]any{
			"job_name":       "fluent-pvc-operator",
			"static_configs": []any{map[string]any{"targets": o.Targets}},
		}},
	}
	raw, err := yaml.Marshal(config)
	if err != nil {
		return nil, err
	}
	configPath := filepath.Join(o.Dir, "prometheus.yml")
	if err := os.WriteFile(configPath, raw, 0o644); err != nil {
		return nil, err
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	p := &Prometheus{URL: "http://" + addr, LogPath: filepath.Join(o.Dir, "prometheus.log")}
	p.proc, err = startBackground(binary, []string{
		"--config.file=" + configPath,
		"--storage.tsdb.path=" + filepath.Join(o.Dir, "data"),
		"--web.listen-address=" + addr,
		"--log.level=warn",
	}, p.LogPath, filepath.Join(o.Dir, "prometheus.pid"))
	if err != nil {
		return nil, err
	}
	client, err := api.NewClient(api.Config{Address: p.URL})
	if err != nil {
		_ = p.Stop()
		return nil, err
	}
	p.api = promv1.NewAPI(client)
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := p.api.Buildinfo(ctx); err == nil {
			return p, nil
		}
		if !p.proc.alive() {
			return nil, fmt.Errorf("prometheus exited; see %s", p.LogPath)
		}
		if time.Now().After(deadline) {
			_ = p.Stop()
			return nil, fmt.Errorf("prometheus not ready within a minute; see %s", p.LogPath)
		}
		select {
		case <-ctx.Done():
			_ = p.Stop()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop ends the server by its PID.
func (p *Prometheus) Stop() error {
	return p.proc.stop(10 * time.Second)
}

// Query evaluates the instant query expr now and returns how many series
// it gives (a scalar counts as one).
func (p *Prometheus) Query(ctx context.Context, expr string) (int, error) {
	v, _, err := p.api.Query(ctx, expr, time.Now())
	if err != nil {
		return 0, fmt.Errorf("query %q: %w", expr, err)
	}
	switch r := v.(type) {
	case model.Vector:
		return len(r), nil
	case model.Matrix:
		return len(r), nil
	case *model.Scalar, *model.String:
		return 1, nil
	}
	return 0, fmt.Errorf("query %q: unexpected result type %s", expr, v.Type())
}

// FiringAlerts are the names of the alerts firing now, by the server's
// alerts API.
func (p *Prometheus) FiringAlerts(ctx context.Context) ([]string, error) {
	res, err := p.api.Alerts(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, a := range res.Alerts {
		if a.State == promv1.AlertStateFiring {
			out = append(out, string(a.Labels[model.AlertNameLabel]))
		}
	}
	return out, nil
}

// TargetsUp says whether every scrape target is up, and why not.
func (p *Prometheus) TargetsUp(ctx context.Context) error {
	res, err := p.api.Targets(ctx)
	if err != nil {
		return err
	}
	if len(res.Active) == 0 {
		return errors.New("no active scrape target")
	}
	for _, t := range res.Active {
		if t.Health != promv1.HealthGood {
			return fmt.Errorf("target %s is %s: %s", t.ScrapeURL, t.Health, t.LastError)
		}
	}
	return nil
}
