package main

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/kubernetes"

	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

// scrape is one parsed Prometheus text exposition, with the bench's sums
// and histogram deltas.
type scrape fixtures.Metrics

func parseScrape(raw []byte) (scrape, error) {
	m, err := fixtures.ParseMetrics(raw)
	return scrape(m), err
}

// scrapeURL reads a /metrics endpoint over plain HTTP (the operator's).
func scrapeURL(ctx context.Context, url string) (scrape, error) {
	m, err := fixtures.ScrapeMetrics(ctx, url)
	return scrape(m), err
}

// scrapeAPIServer reads the API server's /metrics with the admin client.
func scrapeAPIServer(ctx context.Context, cs kubernetes.Interface) (scrape, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("scraping the API server's /metrics: %w", err)
	}
	return parseScrape(raw)
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// sum adds the counter, gauge or untyped values of family name over the
// series whose labels include want.
func (s scrape) sum(name string, want map[string]string) float64 {
	f, ok := s[name]
	if !ok {
		return 0
	}
	total := 0.0
	for _, m := range f.GetMetric() {
		if !fixtures.HasLabels(m, want) {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Untyped != nil:
			total += m.GetUntyped().GetValue()
		}
	}
	return total
}

// requestsByMethod is rest_client_requests_total summed by method.
func (s scrape) requestsByMethod() map[string]float64 {
	const name, by = "rest_client_requests_total", "method"
	out := map[string]float64{}
	f, ok := s[name]
	if !ok {
		return out
	}
	for _, m := range f.GetMetric() {
		v := 0.0
		switch {
		case m.Counter != nil:
			v = m.GetCounter().GetValue()
		case m.Gauge != nil:
			v = m.GetGauge().GetValue()
		case m.Untyped != nil:
			v = m.GetUntyped().GetValue()
		}
		out[label(m, by)] += v
	}
	return out
}

// hist is a cumulative histogram: counts[i] observations ≤ bounds[i], and
// count in all (the +Inf bucket).
type hist struct {
	bounds []float64
	counts []float64
	count  float64
	sum    float64
}

// histogram adds up the series of histogram family name whose labels
// include want. ok is false if the family is absent.
func (s scrape) histogram(name string, want map[string]string) (hist, bool) {
	f, ok := s[name]
	if !ok {
		return hist{}, false
	}
	h := hist{}
	idx := map[float64]int{}
	for _, m := range f.GetMetric() {
		if m.Histogram == nil || !fixtures.HasLabels(m, want) {
			continue
		}
		for _, b := range m.GetHistogram().GetBucket() {
			ub := b.GetUpperBound()
			if math.IsInf(ub, +1) {
				continue
			}
			i, seen := idx[ub]
			if !seen {
				i = len(h.bounds)
				idx[ub] = i
				h.bounds = append(h.bounds, ub)
				h.counts = append(h.counts, 0)
			}
			h.counts[i] += float64(b.GetCumulativeCount())
		}
		h.count += float64(m.GetHistogram().GetSampleCount())
		h.sum += m.GetHistogram().GetSampleSum()
	}
	// Sort bounds and counts together.
	order := make([]int, len(h.bounds))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return h.bounds[order[a]] < h.bounds[order[b]] })
	sorted := hist{count: h.count, sum: h.sum}
	for _, i := range order {
		sorted.bounds = append(sorted.bounds, h.bounds[i])
		sorted.counts = append(sorted.counts, h.counts[i])
	}
	return sorted, true
}

// minus is the histogram of the observations made between before and h.
func (h hist) minus(before hist) hist {
	out := hist{bounds: h.bounds, count: h.count - before.count, sum: h.sum - before.sum}
	prev := map[float64]float64{}
	for i, b := range before.bounds {
		prev[b] = before.counts[i]
	}
	for i, b := range h.bounds {
		out.counts = append(out.counts, h.counts[i]-prev[b])
	}
	return out
}

// quantile is Prometheus' histogram_quantile: linear interpolation inside
// the bucket that holds the q-th observation; the highest finite bound if
// it lies in the +Inf bucket. NaN without observations.
func (h hist) quantile(q float64) float64 {
	if h.count <= 0 || len(h.bounds) == 0 {
		return math.NaN()
	}
	rank := q * h.count
	lowerBound, lowerCount := 0.0, 0.0
	for i, ub := range h.bounds {
		if h.counts[i] >= rank {
			inBucket := h.counts[i] - lowerCount
			if inBucket <= 0 {
				return ub
			}
			return lowerBound + (ub-lowerBound)*(rank-lowerCount)/inBucket
		}
		lowerBound, lowerCount = ub, h.counts[i]
	}
	return h.bounds[len(h.bounds)-1]
}

// fractionAtMost is the share of observations ≤ bound, if bound is one of
// the bucket bounds (exact), else 0.
func (h hist) fractionAtMost(bound float64) float64 {
	for i, ub := range h.bounds {
		if math.Abs(ub-bound) < 1e-12 && h.count > 0 {
			return h.counts[i] / h.count
		}
	}
	return 0
}
