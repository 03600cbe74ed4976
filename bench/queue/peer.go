package queue

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// message is one JSON line of a peer: {"ready":true}, a Report, or
// {"done":true}.
type message struct {
	Ready bool `json:"ready"`
	Done  bool `json:"done"`
	Report
}

// proc is one peer process, driven over stdin and stdout.
type proc struct {
	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	msgs    chan message
	readErr error // why msgs was closed; read once it is
	stderr  lockedBuffer
}

func startProc(name, dir string, argv ...string) (*proc, error) {
	p := &proc{name: name, msgs: make(chan message, 64)}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Dir = dir
	p.cmd.Stderr = &p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	go func() {
		defer close(p.msgs)
		dec := json.NewDecoder(stdout)
		for {
			var m message
			if err := dec.Decode(&m); err != nil {
				if !errors.Is(err, io.EOF) {
					p.readErr = fmt.Errorf("%s: bad output: %w", name, err)
					_, _ = io.Copy(io.Discard, stdout)
				}
				return
			}
			p.msgs <- m
		}
	}()
	return p, nil
}

// next returns the peer's next message.
func (p *proc) next(deadline time.Time) (message, error) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case m, ok := <-p.msgs:
		if !ok {
			err := p.readErr
			if err == nil {
				err = fmt.Errorf("%s: exited early", p.name)
			}
			return message{}, fmt.Errorf("%w; stderr: %s", err, p.stderr.tail())
		}
		return m, nil
	case <-t.C:
		return message{}, fmt.Errorf("%s: no answer in time; stderr: %s", p.name, p.stderr.tail())
	}
}

// close lets the peer exit on its own for a while, then kills it.
func (p *proc) close() {
	p.stdin.Close()
	done := make(chan struct{})
	go func() {
		for range p.msgs {
		}
		_ = p.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// runProcs drives started peers through one round: it waits until all are
// ready, tells them all to go, and collects their reports.
func runProcs(procs []*proc, l Loop) ([]Report, error) {
	defer func() {
		var wg sync.WaitGroup
		for _, p := range procs {
			wg.Go(p.close)
		}
		wg.Wait()
	}()
	ready := time.Now().Add(90 * time.Second)
	for _, p := range procs {
		m, err := p.next(ready)
		if err != nil {
			return nil, err
		}
		if !m.Ready {
			return nil, fmt.Errorf("%s: want {\"ready\":true} first", p.name)
		}
	}
	for _, p := range procs {
		if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
	}
	var reports []Report
	done := time.Now().Add(l.Warmup + l.Duration + 60*time.Second)
	for _, p := range procs {
		for {
			m, err := p.next(done)
			if err != nil {
				return nil, err
			}
			if m.Done {
				break
			}
			reports = append(reports, m.Report)
		}
	}
	return reports, nil
}

// lockedBuffer keeps what a peer writes on stderr.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// tail is the last 2 KiB written.
func (b *lockedBuffer) tail() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.b.String()
	if len(s) > 2048 {
		s = "..." + s[len(s)-2048:]
	}
	return strings.TrimSpace(s)
}
