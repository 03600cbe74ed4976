package fairqueue

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// TEMPORARY: a timeline of tickets, for tuning.
var traceMu sync.Mutex
var traceT = map[string]map[string]time.Time{}

func tr(ticket, ev string) {
	if !debugTrace {
		return
	}
	traceMu.Lock()
	defer traceMu.Unlock()
	m := traceT[ticket]
	if m == nil {
		m = map[string]time.Time{}
		traceT[ticket] = m
	}
	if _, ok := m[ev]; !ok {
		m[ev] = time.Now()
	}
}

var debugTrace = false

func TraceOn() { debugTrace = true }

func TraceReport(evs ...string) string {
	traceMu.Lock()
	defer traceMu.Unlock()
	sums := make([]time.Duration, len(evs))
	ns := make([]int, len(evs))
	for _, m := range traceT {
		for i := 1; i < len(evs); i++ {
			a, aok := m[evs[i-1]]
			b, bok := m[evs[i]]
			if aok && bok {
				sums[i] += b.Sub(a)
				ns[i]++
			}
		}
	}
	var out []string
	for i := 1; i < len(evs); i++ {
		if ns[i] > 0 {
			out = append(out, fmt.Sprintf("%s->%s %v (%d)", evs[i-1], evs[i], sums[i]/time.Duration(ns[i]), ns[i]))
		}
	}
	sort.Strings(nil)
	return fmt.Sprint(out)
}
