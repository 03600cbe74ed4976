package bench

import (
	"fmt"
	"slices"
	"time"
)

// Millis formats a latency for the commands' tables, in milliseconds with
// microseconds shown.
func Millis(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d)/1e6) }

// MedianRange formats per-round ratios as the tables show them, "median
// (min-max)" with prec decimals: the spread says how far to trust the
// median.
func MedianRange(xs []float64, prec int) string {
	return fmt.Sprintf("%.*f (%.*f-%.*f)", prec, Median(xs), prec, slices.Min(xs), prec, slices.Max(xs))
}
