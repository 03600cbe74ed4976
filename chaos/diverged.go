package chaos

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/zkrecipes/zkrecipes/chaos/record"
)

// Divergence is one tree a server loaded that, by the server's own check,
// differed from the leader's. ZooKeeper (3.6 and later, with
// zookeeper.digest.enabled, the default) keeps a digest of its whole tree;
// the leader sends its digest with every transaction, and each server
// compares its own after applying it. The first mismatch of each tree a
// server loads is logged ("First digest mismatch on txn: <session>,<cxid>,
// <zxid>,<time>,<type>, ..."). The server serves that tree until it loads
// another: when it starts again, or when a leader sends it a snapshot or
// has it truncate its log.
type Divergence struct {
	Server int
	From   int64  // when the mismatch was logged, on the shared clock
	Until  int64  // when the server loaded another tree (0: it served this one to the end)
	Zxid   int64  // the transaction after which the digests differed
	Line   string // the log line
}

// Covers reports whether the tree was the server's at moment t.
func (d Divergence) Covers(t int64) bool {
	return d.From <= t && (d.Until == 0 || t < d.Until)
}

// Clock ties the machine's wall clock, in which the servers log (the time
// of day, local time), to the shared monotonic clock of the records.
type Clock struct {
	Wall time.Time
	Mono int64
}

// NewClock reads both clocks now.
func NewClock() Clock { return Clock{Wall: time.Now().Round(0), Mono: record.Now()} }

// Lines in a server's log that mark a new tree: a start, a snapshot from the
// leader, a truncation (which reloads the database).
var newTree = []string{
	"QuorumPeerMain - Starting quorum peer",
	"Learner - Getting a snapshot from leader",
	"Learner - Truncating log to get in sync with the leader",
}

const mismatch = "First digest mismatch on txn: "

// ReadDivergences reads the log of server (its whole life: the log is
// appended to across restarts) and returns the trees it served that its
// digest check found differing from the leader's, in order.
func ReadDivergences(path string, server int, c Clock) ([]Divergence, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Divergence
	open := -1 // index in out of the tree being served, if it diverged
	days := c.dayReader()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		t, ok := days(line)
		if !ok {
			continue // a stack trace's line, say
		}
		switch {
		case slices.ContainsFunc(newTree, func(m string) bool { return strings.Contains(line, m) }):
			if open >= 0 {
				out[open].Until = t
				open = -1
			}
		case strings.Contains(line, mismatch):
			if open >= 0 {
				continue
			}
			zxid, err := mismatchZxid(line)
			if err != nil {
				return out, fmt.Errorf("%s: %w", path, err)
			}
			out = append(out, Divergence{Server: server, From: t, Zxid: zxid, Line: line})
			open = len(out) - 1
		}
	}
	return out, sc.Err()
}

// dayReader returns a function that reads the time at the start of a log
// line ("15:04:05.000 ...") as a moment on the shared clock: the day is
// c's, and a line whose time of day falls more than 12 hours before the
// previous one's is taken to be on the next day.
func (c Clock) dayReader() func(line string) (int64, bool) {
	wall := c.Wall.Local()
	y, m, d := wall.Date()
	day := 0
	var prev time.Duration = -1
	return func(line string) (int64, bool) {
		if len(line) < 12 {
			return 0, false
		}
		tod, err := time.Parse("15:04:05.000", line[:12])
		if err != nil {
			return 0, false
		}
		since := time.Duration(tod.Hour())*time.Hour + time.Duration(tod.Minute())*time.Minute +
			time.Duration(tod.Second())*time.Second + time.Duration(tod.Nanosecond())
		if prev < 0 {
			// The first line: on the clock's day, or the day before if that
			// puts it more than 12 hours after the clock was read.
			if time.Date(y, m, d, tod.Hour(), tod.Minute(), tod.Second(), tod.Nanosecond(), time.Local).Sub(wall) > 12*time.Hour {
				day = -1
			}
		} else if since < prev-12*time.Hour {
			day++
		}
		prev = since
		at := time.Date(y, m, d+day, tod.Hour(), tod.Minute(), tod.Second(), tod.Nanosecond(), time.Local)
		return c.Mono + int64(at.Sub(wall)), true
	}
}

// mismatchZxid reads the zxid from a digest mismatch's line: the third
// field of the transaction's header.
func mismatchZxid(line string) (int64, error) {
	_, rest, _ := strings.Cut(line, mismatch)
	f := strings.SplitN(rest, ",", 4)
	if len(f) < 4 {
		return 0, fmt.Errorf("digest mismatch without a transaction header: %q", line)
	}
	z, err := strconv.ParseInt(strings.TrimSpace(f[2]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("digest mismatch's zxid: %q: %w", line, err)
	}
	return z, nil
}
