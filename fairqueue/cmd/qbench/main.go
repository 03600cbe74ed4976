// Command qbench measures fairqueue's Take latency with a large backlog.
//
//	go run ./fairqueue/cmd/qbench -addr 127.0.0.1:2581 -pending 1000000
//
// It loads -pending items with concurrent puts (the client pipelines them),
// then times -samples Takes (each followed by an untimed Ack and a Put, so
// the backlog stays the same) and prints p50/p99. It is not part of the
// tests: a million items take a while to load. Use a throwaway server.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:2581", "ZooKeeper servers, comma separated")
	pending := flag.Int("pending", 1000, "items in the queue while Take is timed")
	samples := flag.Int("samples", 2000, "Takes to time")
	workers := flag.Int("workers", 64, "concurrent puts while loading")
	path := flag.String("path", "", "queue path (default /qbench-<pending>-<time>)")
	flag.Parse()
	if *path == "" {
		*path = fmt.Sprintf("/qbench-%d-%d", *pending, time.Now().Unix())
	}
	ctx := context.Background()
	s, err := zkrecipes.Connect(ctx, strings.Split(*addr, ","), zkrecipes.WithSessionTimeout(20*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	q, err := fairqueue.New(s, *path)
	if err != nil {
		log.Fatal(err)
	}

	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	payload := []byte("0123456789abcdef")
	for range *workers {
		wg.Go(func() {
			for next.Add(1) <= int64(*pending) {
				if _, err := q.Put(ctx, payload); err != nil {
					log.Fatal(err)
				}
			}
		})
	}
	wg.Wait()
	load := time.Since(start)
	n, err := q.Len(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("loaded %d items in %v (%.0f puts/s); Len=%d\n", *pending, load.Round(time.Millisecond),
		float64(*pending)/load.Seconds(), n)

	lat := make([]time.Duration, 0, *samples)
	for range *samples {
		t0 := time.Now()
		j, err := q.Take(ctx)
		if err != nil {
			log.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		if err := j.Ack(ctx); err != nil {
			log.Fatal(err)
		}
		if _, err := q.Put(ctx, payload); err != nil {
			log.Fatal(err)
		}
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))] }
	fmt.Printf("pending=%d take latency over %d samples: p50=%v p99=%v max=%v\n",
		*pending, len(lat), pct(0.50).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
}
