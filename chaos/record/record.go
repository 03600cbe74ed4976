// Package record is what the chaos suite's client processes tell the
// harness: one JSON event per line on their standard output, stamped with
// the machine's monotonic clock, which every process on the machine shares.
//
// The harness receives the lines of several processes through as many
// pipes, so the order in which they arrive is not the order in which things
// happened; T is. Each process stamps its events in the order it writes
// them (T never decreases within one process, and Seq counts up), so
// sorting by (T, then the process and Seq) gives one order that is both
// the clock's and every process's own.
package record

import (
	"cmp"
	"encoding/json"
	"io"
	"sync"

	"golang.org/x/sys/unix"
)

// Now is CLOCK_MONOTONIC in nanoseconds: the same clock in every process on
// the machine, unaffected by changes of the wall clock, and running while a
// process is stopped.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// Workloads.
const (
	Mutex = "mutex"
	// Cached is the CachedMutex workload, on the mutex's path and
	// register: its leases are critical sections, told apart by Sec.
	Cached    = "cached"
	Election  = "election"
	Observe   = "observe"
	Semaphore = "semaphore"
	Queue     = "queue"
)

// Kinds of events.
const (
	// A lease of a lock, a permit or a leadership (Mutex, Semaphore,
	// Election).
	Acquiring = "acquiring" // about to call Lock, Acquire or Campaign
	Grant     = "grant"     // it returned a lease: Tok, Sid, Srv (a lock's: Sec, and ID its node)
	Lost      = "lost"      // the lease's Done closed without a release: Tok, Err (a Job's: ID, D)
	Freed     = "freed"     // the lease's Done closed with its release confirmed: Tok
	Release   = "release"   // about to call Unlock or Resign: Tok
	Unlocked  = "unlocked"  // Unlock or Resign returned: Tok, Err; F "lost" for ErrLockLost

	// Operations on the fenced register (Mutex).
	Call = "call" // Op, F ("r" or "w"), Tok; for a write X (value read) and V (value written)
	Ret  = "ret"  // Op, F, Rej, V (value read)

	// An election observer's news (Observe): Tok (term), ID (leader's node, "" for none), Sid,
	// Srv (the server its session was connected to just after: the one that told it, unless the
	// session moved in between).
	Obs = "obs"

	// The queue (Queue).
	Put    = "put"    // about to Put: D (payload)
	PutOK  = "putok"  // D, ID
	PutErr = "puterr" // D, Err, Unknown
	Take   = "take"   // ID, D, N (attempt), Sid, Srv
	// About to call Take: Sid, Srv (the server its session is connected
	// to). The consumer waits for a hand-out from then until its Take or
	// TakeErr: what the check of hand-out stalls reads.
	Taking  = "taking"
	TakeErr = "takeerr" // Take returned an error: Sid, Err
	// A consumer's session began: Sid, Srv. Its Queue stands for election
	// as the queue's dispatcher; the nemesis finds the dispatcher's
	// process by the session that owns the election's lowest node.
	Consumer = "consumer"
	Acking   = "acking" // about to Ack: ID, D
	Ack      = "ack"    // ID, D
	AckErr   = "ackerr" // ID, D, Err, Unknown

	// A session of the process ended other than by its own Close: Sid, Err.
	Ended = "ended"

	// The process.
	Ready  = "ready"  // connected and working
	Frozen = "frozen" // its connections are frozen for N milliseconds
	Thawed = "thawed"
	Quiet  = "quiet" // quiesced: no new acquires or puts
)

// Event is one line a client process writes.
type Event struct {
	P       int    `json:"p"`           // the client's slot
	Inc     int    `json:"i"`           // which incarnation of the slot (restarts count up)
	W       string `json:"w,omitempty"` // workload
	K       string `json:"k"`           // kind
	T       int64  `json:"t"`           // Now() when it happened
	Sid     int64  `json:"s,omitempty"`
	Tok     int64  `json:"tok,omitempty"`
	Sec     uint32 `json:"sec,omitempty"` // a CachedMutex lease's section: its Fence is {Tok, Sec}
	Op      string `json:"op,omitempty"`
	F       string `json:"f,omitempty"`
	X       int64  `json:"x,omitempty"`
	V       int64  `json:"v,omitempty"`
	Rej     bool   `json:"rej,omitempty"`
	ID      string `json:"id,omitempty"`
	D       string `json:"d,omitempty"`
	N       int    `json:"n,omitempty"`
	Err     string `json:"err,omitempty"`
	Unknown bool   `json:"unk,omitempty"`
	Srv     string `json:"srv,omitempty"` // the server the session was connected to
	Seq     int64  `json:"q,omitempty"`   // the process's count of events written, from 1
}

// Writer writes events as lines, one write per event, so that a process
// killed with SIGKILL loses at most the event it was writing.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	seq int64
	P   int
	Inc int
}

// NewWriter writes events of slot p, incarnation inc to w.
func NewWriter(w io.Writer, p, inc int) *Writer { return &Writer{w: w, P: p, Inc: inc} }

// Emit stamps e with the slot, the incarnation, the next Seq and Now(),
// and writes it. The stamp is taken under the lock that orders the writes,
// so that T and Seq follow the order of the lines: an event stamped before
// another of the same process is written before it.
func (w *Writer) Emit(e Event) {
	e.P, e.Inc = w.P, w.Inc
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq++
	e.Seq, e.T = w.seq, Now()
	b, err := json.Marshal(e)
	if err != nil {
		panic(err)
	}
	b = append(b, '\n')
	_, _ = w.w.Write(b)
}

// Compare orders events as they happened: by T, then (for the same T) by
// process and Seq. For events of one process it is the order they were
// written in.
func Compare(a, b Event) int {
	switch {
	case a.T != b.T:
		return cmp.Compare(a.T, b.T)
	case a.P != b.P:
		return cmp.Compare(a.P, b.P)
	case a.Inc != b.Inc:
		return cmp.Compare(a.Inc, b.Inc)
	}
	return cmp.Compare(a.Seq, b.Seq)
}
