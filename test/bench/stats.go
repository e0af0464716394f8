package main

import (
	"encoding/json"
	"math"
	"sort"
	"time"
)

// summary holds the percentiles of a sample of durations, in seconds.
type summary struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// summarize takes nearest-rank percentiles: the p-th percentile of n
// samples is the ceil(p*n)-th smallest, so p99 of 40 samples is the maximum.
func summarize(ds []time.Duration) summary {
	if len(ds) == 0 {
		return summary{P50: math.NaN(), P90: math.NaN(), P99: math.NaN(), Max: math.NaN()}
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		i = max(0, min(i, len(s)-1))
		return s[i].Seconds()
	}
	return summary{N: len(s), P50: rank(.50), P90: rank(.90), P99: rank(.99), Max: s[len(s)-1].Seconds()}
}

// histSummary takes the percentiles of a histogram delta.
func histSummary(h hist) summary {
	return summary{N: int(math.Round(h.count)), P50: h.quantile(.50), P90: h.quantile(.90), P99: h.quantile(.99), Max: math.NaN()}
}

func ratio(a, b float64) float64 {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return a / b
}

// jsonNum is v, or nil for NaN and infinities, which JSON cannot hold.
func jsonNum(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// MarshalJSON writes null for percentiles that were not measured.
func (s summary) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		N   int      `json:"n"`
		P50 *float64 `json:"p50"`
		P90 *float64 `json:"p90"`
		P99 *float64 `json:"p99"`
		Max *float64 `json:"max"`
	}{s.N, jsonNum(s.P50), jsonNum(s.P90), jsonNum(s.P99), jsonNum(s.Max)})
}
