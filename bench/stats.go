package main

import (
	"slices"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in microseconds, from 1 µs to 10 minutes, at three
// significant digits.
func newHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)
}

func record(h *hdrhistogram.Histogram, d time.Duration) {
	us := d.Microseconds()
	if us < 1 {
		us = 1
	}
	_ = h.RecordValue(min(us, h.HighestTrackableValue()))
}

// quantileMs is the q-th percentile (0-100) in milliseconds.
func quantileMs(h *hdrhistogram.Histogram, q float64) float64 {
	return float64(h.ValueAtQuantile(q)) / 1000
}

// median of xs; the middle pair's mean when even.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// inversions counts grants out of arrival order: a grant that went to any waiter
// other than the earliest-arrived one still waiting. order holds arrival indexes
// 0..n-1 in grant order.
func inversions(order []int) int {
	n := 0
	waiting := make([]bool, len(order))
	for i := range waiting {
		waiting[i] = true
	}
	next := 0
	for _, idx := range order {
		for next < len(waiting) && !waiting[next] {
			next++
		}
		if idx != next {
			n++
		}
		if idx >= 0 && idx < len(waiting) {
			waiting[idx] = false
		}
	}
	return n
}
