package chaos

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/zkrecipes/zkrecipes/chaos/record"
)

// Register is the resource the mutex and cached workloads guard: one
// integer, kept in the harness, that clients read and write over TCP on
// 127.0.0.1. It fences: every request carries the holder's fence
// (zklock.Fence: the token, and a CachedMutex's section), and a request
// whose fence is lower than the highest the register has seen is refused
// (REJ) and changes nothing. Reads are fenced too, and raise the highest
// fence seen: a holder that read under a newer fence makes every older
// holder's later write fail, so that a read-modify-write by a stale holder
// (or an earlier section) cannot land between a newer holder's read and
// write. Token 0 means "no token" (the broken client of -unfenced): never
// refused, never recorded.
//
// The wire: "R op fence" answered "OK value" or "REJ"; "W op fence expect
// value" answered "OK" or "REJ" (expect, the value the writer read, is only
// logged). A fence is "tok" or "tok.sec".
//
// The register logs every request it applied or refused, so that a client
// killed or paused before it saw the answer leaves no operation of unknown
// outcome: the log says whether, and with what result, it happened.
type Register struct {
	l  net.Listener
	wg sync.WaitGroup

	mu      sync.Mutex
	value   int64
	highest fence
	log     map[string]applied
	clobber int // accepted writes whose writer had read another value
	conns   map[net.Conn]bool
	closed  bool
}

// applied is what the register did with one request.
type applied struct {
	T   int64 // record.Now() when it was applied
	Rej bool
	V   int64 // the value read
}

// StartRegister listens on a free port of 127.0.0.1.
func StartRegister() (*Register, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: register: %w", err)
	}
	r := &Register{l: l, log: map[string]applied{}, conns: map[net.Conn]bool{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr is the address clients dial.
func (r *Register) Addr() string { return r.l.Addr().String() }

// Close stops the register and waits for its goroutines.
func (r *Register) Close() {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.l.Close()
	r.wg.Wait()
}

// LostUpdates counts the writes the register accepted although the value
// their writer had read was no longer the register's: updates lost, as the
// resource itself sees them.
func (r *Register) LostUpdates() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clobber
}

// Log returns a copy of what the register applied, by operation id.
func (r *Register) Log() map[string]applied {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]applied, len(r.log))
	for k, v := range r.log {
		out[k] = v
	}
	return out
}

func (r *Register) accept() {
	defer r.wg.Done()
	for {
		c, err := r.l.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			c.Close()
			return
		}
		r.conns[c] = true
		r.mu.Unlock()
		r.wg.Add(1)
		go r.serve(c)
	}
}

func (r *Register) serve(c net.Conn) {
	defer r.wg.Done()
	defer func() {
		r.mu.Lock()
		delete(r.conns, c)
		r.mu.Unlock()
		c.Close()
	}()
	rd := bufio.NewReader(c)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return
		}
		reply, err := r.apply(strings.Fields(line))
		if err != nil {
			reply = "ERR " + err.Error()
		}
		if _, err := c.Write([]byte(reply + "\n")); err != nil {
			return
		}
	}
}

func (r *Register) apply(f []string) (string, error) {
	if len(f) < 3 || (f[0] == "R") != (len(f) == 3) || (f[0] == "W") != (len(f) == 5) {
		return "", fmt.Errorf("bad request %q", f)
	}
	op := f[1]
	tok, err := parseFence(f[2])
	if err != nil {
		return "", err
	}
	var expect, v int64
	if f[0] == "W" {
		if expect, err = strconv.ParseInt(f[3], 10, 64); err != nil {
			return "", err
		}
		if v, err = strconv.ParseInt(f[4], 10, 64); err != nil {
			return "", err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if tok.tok != 0 && tok.compare(r.highest) < 0 {
		r.log[op] = applied{T: record.Now(), Rej: true}
		return "REJ", nil
	}
	if tok.compare(r.highest) > 0 {
		r.highest = tok
	}
	if f[0] == "R" {
		r.log[op] = applied{T: record.Now(), V: r.value}
		return "OK " + strconv.FormatInt(r.value, 10), nil
	}
	if expect != r.value {
		r.clobber++
	}
	r.value = v
	r.log[op] = applied{T: record.Now()}
	return "OK", nil
}

// fence is a request's zklock.Fence: the token, then the section.
type fence struct {
	tok int64
	sec uint32
}

// parseFence reads "tok" or "tok.sec".
func parseFence(s string) (fence, error) {
	t, sec, dotted := strings.Cut(s, ".")
	tok, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return fence{}, err
	}
	f := fence{tok: tok}
	if dotted {
		n, err := strconv.ParseUint(sec, 10, 32)
		if err != nil {
			return fence{}, err
		}
		f.sec = uint32(n)
	}
	return f, nil
}

func (f fence) compare(g fence) int {
	if c := cmpInt(f.tok, g.tok); c != 0 {
		return c
	}
	return cmpInt(int64(f.sec), int64(g.sec))
}
