package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"github.com/zkrecipes/zkrecipes/chaos/record"
)

// Proc is one client process: one incarnation of a slot.
type Proc struct {
	slot, inc int
	pid       int
	stdin     io.WriteCloser
	done      chan struct{} // closed once reaped and its output read to the end
	mu        sync.Mutex
	stopped   bool // SIGSTOP sent, SIGCONT not yet
}

// Clients starts and tracks client processes that write record events on
// their standard output, and hands every event to a sink. Each slot runs
// one process at a time; a slot's next process is its next incarnation.
type Clients struct {
	bin  string
	args func(slot, inc int) []string
	logs string // directory for the processes' standard error
	sink func(record.Event)

	mu    sync.Mutex
	procs []*Proc // current incarnation of each slot; nil while dead
	incs  []int
	wg    sync.WaitGroup
}

// NewClients prepares n slots for processes of the program bin, started
// with args(slot, incarnation); their standard error goes to
// logs/client<slot>.log and their events to sink.
func NewClients(bin string, n int, logs string, args func(slot, inc int) []string, sink func(record.Event)) *Clients {
	return &Clients{bin: bin, args: args, logs: logs, sink: sink, procs: make([]*Proc, n), incs: make([]int, n)}
}

// N is the number of slots.
func (cs *Clients) N() int { return len(cs.procs) }

// Start starts the next incarnation of slot. Like zktest's servers, the
// process gets SIGKILL if the thread that forked it exits (Pdeathsig), so
// it is forked from a goroutine that keeps its thread locked until the
// process is reaped: no client outlives the harness, stopped or not.
func (cs *Clients) Start(slot int) (*Proc, error) {
	cs.mu.Lock()
	inc := cs.incs[slot]
	cs.incs[slot]++
	cs.mu.Unlock()

	errf, err := os.OpenFile(fmt.Sprintf("%s/client%d.log", cs.logs, slot), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer errf.Close()
	cmd := exec.Command(cs.bin, cs.args(slot, inc)...)
	cmd.Stderr = errf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &Proc{slot: slot, inc: inc, stdin: stdin, done: make(chan struct{})}
	started := make(chan error, 1)
	cs.wg.Add(1)
	go func() {
		defer cs.wg.Done()
		runtime.LockOSThread() // never unlocked: see above
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var e record.Event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				cs.sink(e)
			}
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("chaos: start client %d: %w", slot, err)
	}
	cs.mu.Lock()
	cs.procs[slot] = p
	cs.mu.Unlock()
	return p, nil
}

// Get returns the live process of slot, or nil.
func (cs *Clients) Get(slot int) *Proc {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.procs[slot]
}

// Inc is the process's incarnation of its slot.
func (p *Proc) Inc() int { return p.inc }

// Send writes a command line to the process; errors (it died) are ignored.
func (p *Proc) Send(cmd string) { _, _ = io.WriteString(p.stdin, cmd+"\n") }

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch sig {
	case syscall.SIGSTOP:
		p.stopped = true
	case syscall.SIGCONT:
		p.stopped = false
	}
	_ = syscall.Kill(p.pid, sig)
}

// Kill kills the process of slot with SIGKILL and waits until it is
// reaped; it returns the incarnation killed, or -1 if none ran.
func (cs *Clients) Kill(slot int) int {
	cs.mu.Lock()
	p := cs.procs[slot]
	cs.procs[slot] = nil
	cs.mu.Unlock()
	if p == nil {
		return -1
	}
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	<-p.done
	return p.inc
}

// KillAll kills every process and waits for every goroutine.
func (cs *Clients) KillAll() {
	for slot := range cs.procs {
		cs.Kill(slot)
	}
	cs.wg.Wait()
}

func itoa(i int) string { return strconv.Itoa(i) }
