package queue

import (
	"encoding/csv"
	"io"
	"strconv"
	"time"
)

// WriteCSV writes the consumer-scaling curve, one row per consumer count.
func WriteCSV(w io.Writer, pts []Point) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"impl", "consumers", "producers", "backlog", "work_ms", "rounds", "acked_per_s", "acked_per_s_min",
		"acked_per_s_max", "ideal_per_s", "take_p50_ms", "take_p99_ms", "min_backlog", "refused_writes_per_item",
		"reads_per_item", "writes_per_item"})
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 3, 64) }
	for _, p := range pts {
		_ = cw.Write([]string{string(p.Impl), strconv.Itoa(p.Consumers), strconv.Itoa(p.Producers), strconv.Itoa(p.Backlog), ms(p.Work), strconv.Itoa(p.Rounds),
			f(p.PerSec), f(p.Min), f(p.Max), f(p.Ideal), ms(p.TakeP50), ms(p.TakeP99), strconv.FormatInt(p.MinBacklog, 10),
			strconv.FormatFloat(p.RefusedPerItem, 'f', 3, 64), strconv.FormatFloat(p.ReadsPerItem, 'f', 2, 64),
			strconv.FormatFloat(p.WritesPerItem, 'f', 2, 64)})
	}
	cw.Flush()
	return cw.Error()
}
