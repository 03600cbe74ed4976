package queue

import (
	"errors"
	"fmt"
	"time"
)

// Loop is the loop every implementation runs.
type Loop struct {
	Producers, Consumers int           // each its own session (client)
	Warmup               time.Duration // run, but not counted
	Duration             time.Duration // the measured window, after the warm-up
	Payload              int           // bytes per item
	Work                 time.Duration // simulated work per job, between take and ack
	// For fairqueue: consumers run Work with Handlers handlers (Work1: one)
	// instead of Take and Ack, holding Prefetch items ahead (WithPrefetch;
	// DefaultPrefetch: Work's default), and producers put Batch items per
	// PutMany (0: one per Put).
	Work1    bool
	Handlers int
	Prefetch int
	Batch    int
}

// DefaultPrefetch, as a Loop's or a ScaleLoop's Prefetch, leaves Work's
// prefetch at its default (fairqueue.WithPrefetch is not given).
const DefaultPrefetch = -1

// window is the measured part of a run: from the end of the warm-up to the
// end. A worker stops once it is over.
type window struct{ start, end time.Time }

func newWindow(t0 time.Time, l Loop) window {
	return window{start: t0.Add(l.Warmup), end: t0.Add(l.Warmup + l.Duration)}
}

func (w window) in(t time.Time) bool { return !t.Before(w.start) && t.Before(w.end) }

// Report is what one worker (a producer or a consumer) counted: the JSON
// line a peer prints for it. Puts and Acked count what completed within the
// window; PutsAll and AckedAll count the whole run, warm-up included, so
// that their difference is what was left in the queue. TakeUS holds the
// take latency (take call to item in hand, microseconds) of every item in
// hand within the window. Acked counts consumed items where the queue has
// no ack (at most once).
type Report struct {
	Worker   string  `json:"worker"`
	Puts     int64   `json:"puts"`
	Acked    int64   `json:"acked"`
	PutsAll  int64   `json:"puts_all"`
	AckedAll int64   `json:"acked_all"`
	TakeUS   []int64 `json:"take_us"`
	Error    string  `json:"error,omitempty"`
}

// Result is one implementation's round: its workers' reports added up.
type Result struct {
	Impl     Impl
	Duration time.Duration // the measured window
	Puts     int64
	Acked    int64
	PutsAll  int64
	AckedAll int64
	Take     []time.Duration // unsorted
	// Counted: the consumers' requests were counted (in-process
	// implementations, see Requests): in the window, the reads, the writes
	// and the writes refused.
	Counted bool
	Counts
}

// RefusedPerItem is the writes the server refused per item consumed, in
// the window.
func (r Result) RefusedPerItem() float64 { return perItem(r.Refused, r.Acked) }

// ReadsPerItem and WritesPerItem are the consumers' requests per item
// consumed, in the window.
func (r Result) ReadsPerItem() float64 { return perItem(r.Reads, r.Acked) }

func (r Result) WritesPerItem() float64 { return perItem(r.Writes, r.Acked) }

func perItem(n, items int64) float64 {
	if items == 0 {
		return 0
	}
	return float64(n) / float64(items)
}

// PerSec is the throughput: items consumed (acked) per second.
func (r Result) PerSec() float64 { return float64(r.Acked) / r.Duration.Seconds() }

// PutsPerSec is the producers' rate in the window.
func (r Result) PutsPerSec() float64 { return float64(r.Puts) / r.Duration.Seconds() }

// Left is the number of items put in the round and not consumed by its end.
func (r Result) Left() int64 { return r.PutsAll - r.AckedAll }

// sum adds up the reports; any worker's error is an error of the round.
func sum(impl Impl, d time.Duration, reports []Report) (Result, error) {
	r := Result{Impl: impl, Duration: d}
	var errs []error
	for _, rep := range reports {
		r.Puts += rep.Puts
		r.Acked += rep.Acked
		r.PutsAll += rep.PutsAll
		r.AckedAll += rep.AckedAll
		for _, us := range rep.TakeUS {
			r.Take = append(r.Take, time.Duration(us)*time.Microsecond)
		}
		if rep.Error != "" {
			errs = append(errs, fmt.Errorf("%s: %s: %s", impl, rep.Worker, rep.Error))
		}
	}
	return r, errors.Join(errs...)
}
