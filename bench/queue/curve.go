package queue

import (
	"slices"
	"time"

	"github.com/zkrecipes/zkrecipes/bench"
)

// Point is one point of the consumer-scaling curve: a consumer count's
// rounds, summed up.
type Point struct {
	Impl                 Impl
	Consumers, Producers int
	Backlog              int // the producers' target of pending items
	Work                 time.Duration
	Rounds               int
	PerSec               float64 // acked items/s, median over rounds
	Min, Max             float64 // acked items/s, lowest and highest round
	Ideal                float64 // Consumers jobs per Work
	TakeP50, TakeP99     time.Duration
	MinBacklog           int64 // the lowest over all rounds
	// RefusedPerItem: the consumers' writes the server refused per item
	// acked, over all rounds' windows (see Requests).
	RefusedPerItem float64
	// ReadsPerItem, WritesPerItem: the consumers' requests per item acked,
	// over all rounds' windows (see Claims).
	ReadsPerItem, WritesPerItem float64
}

// Summarize makes the point of one consumer count's rounds (at least one).
func Summarize(rs []ScaleResult) Point {
	p := Point{Impl: rs[0].Impl, Consumers: rs[0].Consumers, Producers: rs[0].Producers, Backlog: rs[0].Backlog, Work: rs[0].Work,
		Rounds: len(rs), Ideal: rs[0].Ideal(), MinBacklog: rs[0].MinBacklog}
	var perSec []float64
	var take []time.Duration
	var n Counts
	var acked int64
	for _, r := range rs {
		n.Refused += r.Refused
		n.Reads += r.Reads
		n.Writes += r.Writes
		acked += r.Acked
		perSec = append(perSec, r.PerSec())
		take = append(take, r.Take...)
		p.MinBacklog = min(p.MinBacklog, r.MinBacklog)
	}
	p.PerSec, p.Min, p.Max = bench.Median(perSec), slices.Min(perSec), slices.Max(perSec)
	p.RefusedPerItem, p.ReadsPerItem, p.WritesPerItem = perItem(n.Refused, acked), perItem(n.Reads, acked), perItem(n.Writes, acked)
	p.TakeP50, p.TakeP99 = bench.Percentile(take, 50), bench.Percentile(take, 99)
	return p
}
