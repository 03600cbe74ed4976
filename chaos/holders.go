package chaos

import (
	"fmt"
	"sync"

	"github.com/zkrecipes/zkrecipes/chaos/record"
)

// Holding is one lease or Job a client holds, as the harness last heard:
// what the nemesis aims at.
type Holding struct {
	Slot, Inc int
	W         string
	Tok       int64
	ID        string // a Job's item
	Srv       string // the server its session was on when granted
}

// holders follows, from the clients' events as they arrive, who holds
// what, and signals the moments the nemesis waits for: a grant of the
// mutex, a read of the register under it.
type holders struct {
	mu     sync.Mutex
	by     map[int]map[string]Holding // slot -> key -> holding
	reads  chan int                   // slots that just read the register under the mutex
	grants chan int                   // slots just granted the mutex
	idle   chan int                   // slots that just ended a CachedMutex section
	leases chan Holding               // leases (of any kind) just granted
	// consumers are the queue consumers' sessions: session -> slot and
	// incarnation.
	consumers map[int64][2]int
}

func newHolders() *holders {
	return &holders{by: map[int]map[string]Holding{}, reads: make(chan int, 1), grants: make(chan int, 1), idle: make(chan int, 1), leases: make(chan Holding, 1), consumers: map[int64][2]int{}}
}

// note takes one event in.
func (h *holders) note(e record.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	key := fmt.Sprintf("%s %d.%d", e.W, e.Tok, e.Sec)
	if e.W == record.Queue {
		key = "queue " + e.ID
	}
	slot := h.by[e.P]
	switch {
	case e.K == record.Consumer:
		h.consumers[e.Sid] = [2]int{e.P, e.Inc}
	case e.K == record.Ready:
		for k, x := range slot {
			if x.Inc != e.Inc {
				delete(slot, k)
			}
		}
	case e.K == record.Grant || (e.W == record.Queue && e.K == record.Take):
		if slot == nil {
			slot = map[string]Holding{}
			h.by[e.P] = slot
		}
		x := Holding{Slot: e.P, Inc: e.Inc, W: e.W, Tok: e.Tok, ID: e.ID, Srv: e.Srv}
		slot[key] = x
		if e.W == record.Mutex {
			signal(h.grants, e.P)
		}
		if e.W != record.Queue {
			select {
			case h.leases <- x:
			default:
			}
		}
	case e.K == record.Release, e.K == record.Unlocked, e.K == record.Lost, e.K == record.Freed,
		e.K == record.Acking, e.K == record.Ack, e.K == record.AckErr:
		delete(slot, key)
		if e.W == record.Cached && e.K == record.Unlocked && e.Err == "" {
			signal(h.idle, e.P) // its holding is likely kept idle now
		}
	case e.W == record.Mutex && e.K == record.Ret && e.F == "r" && !e.Rej:
		for _, x := range slot {
			if x.W == record.Mutex {
				signal(h.reads, e.P)
				break
			}
		}
	}
}

func signal(ch chan int, slot int) {
	select {
	case ch <- slot:
	default:
	}
}

// latest empties ch of what it signalled before now, and returns it.
func latest[T any](ch chan T) chan T {
	for {
		select {
		case <-ch:
		default:
			return ch
		}
	}
}

// of returns what slot holds.
func (h *holders) of(slot int) []Holding {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Holding
	for _, x := range h.by[slot] {
		out = append(out, x)
	}
	return out
}

// on returns what the clients whose sessions sit on server addr hold.
func (h *holders) on(addr string) []Holding {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Holding
	for _, s := range h.by {
		for _, x := range s {
			if x.Srv == addr {
				out = append(out, x)
			}
		}
	}
	return out
}

// slot returns a slot that holds a lease of workload w ("": anything), or
// -1.
func (h *holders) slot(w string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	for slot, s := range h.by {
		for _, x := range s {
			if w == "" || x.W == w {
				return slot
			}
		}
	}
	return -1
}

// forget drops what slot held: its process was killed.
func (h *holders) forget(slot int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.by, slot)
}

// consumer returns the slot and incarnation of the process whose queue
// consumer has session sid.
func (h *holders) consumer(sid int64) (slot, inc int, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	x, ok := h.consumers[sid]
	return x[0], x[1], ok
}
