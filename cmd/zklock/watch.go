package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
)

// watch is `zklock watch`: show a lock's, semaphore's or election's line,
// and show it again on every change.
func (c *cli) watch(args []string) (int, error) {
	c.listing = true
	fs := c.flagSet("watch")
	once := fs.Bool("once", false, "print the line once and exit")
	if err := c.parse(fs, args, "watch [-once] PATH"); err != nil {
		return exitUsage, err
	}
	if fs.NArg() != 1 {
		return exitUsage, usagef("watch: want one PATH, got %d arguments", fs.NArg())
	}
	path := fs.Arg(0)
	if err := checkPath(path); err != nil {
		return exitUsage, usagef("watch: %v", err)
	}

	// SIGINT and SIGTERM are the way to stop watching: status 0.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	s, err := c.connect(ctx, c.log)
	if err != nil {
		if ctx.Err() != nil {
			return exitOK, nil
		}
		return exitFailure, err
	}
	defer s.Close()
	u := use{name: "watch", kinds: []string{kindLock, kindSemaphore, kindElection}, create: true}
	if err := u.check(s, path); err != nil {
		return failed(err)
	}
	w := newLineWatcher(ctx, s, path, !*once)
	defer w.stop()
	tty := !*once && !c.json && isTerminal(c.stdout)
	backoff := 50 * time.Millisecond
	last := "" // what the last frame showed, but for the times
	for n := 0; ; {
		f, err := w.read(ctx)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return exitOK, nil
		case s.Err() != nil:
			return exitFailure, fmt.Errorf("watch %s: %w", path, s.Err())
		case !*once && zkrecipes.IsAmbiguous(err):
			// Cut off by a disconnect the session may survive: read
			// again once the client has reconnected.
			c.log.Info("reading the line again", "err", err, "after", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return exitOK, nil
			case <-s.Done():
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		default:
			return exitFailure, err
		}
		backoff = 50 * time.Millisecond
		switch key := f.key(); {
		case n > 0 && key == last:
			// Two watches fired for one change (a release writes its
			// node, then deletes it): nothing new to show.
			err = nil
		case c.json:
			err = writeJSON(c.stdout, f.json())
		case tty:
			_, err = io.WriteString(c.stdout, "\x1b[H\x1b[2J")
			if err == nil {
				err = f.print(c.stdout)
			}
		default:
			if n > 0 {
				_, err = io.WriteString(c.stdout, "\n")
			}
			if err == nil {
				err = f.print(c.stdout)
			}
		}
		if err != nil {
			return exitFailure, err
		}
		n, last = n+1, f.key()
		if *once {
			return exitOK, nil
		}
		if err := w.wait(ctx); err != nil {
			if ctx.Err() != nil {
				return exitOK, nil
			}
			return exitFailure, fmt.Errorf("watch %s: %w", path, err)
		}
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// lineWatcher reads a line, and follows with zkrecipes.Watch what changes
// it: the directory (its children, and its data, a semaphore's permits),
// and the holder's node (for its data: an election's leader may Proclaim a
// new value). Watch reads again after every reconnect, so a change made
// while the client was away is not missed.
type lineWatcher struct {
	s    *zkrecipes.Session
	path string
	live bool   // follow the line
	kind string // the last kind seen, kept while the line is empty

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	changed chan struct{} // a followed node changed: read the line again
	failed  chan error    // a Watch ended with this error
	holder  string        // the node followed besides the directory
	unhold  context.CancelFunc
}

func newLineWatcher(ctx context.Context, s *zkrecipes.Session, path string, live bool) *lineWatcher {
	w := &lineWatcher{s: s, path: path, live: live,
		changed: make(chan struct{}, 1), failed: make(chan error, 1), unhold: func() {}}
	w.ctx, w.cancel = context.WithCancel(ctx)
	if live {
		w.follow(w.ctx, path, zkrecipes.WithChildren())
	}
	return w
}

// follow runs a Watch of path until ctx ends, telling of each state.
func (w *lineWatcher) follow(ctx context.Context, path string, opts ...zkrecipes.WatchOption) {
	w.wg.Go(func() {
		for _, err := range zkrecipes.Watch(ctx, w.s, path, opts...) {
			if err != nil {
				select {
				case w.failed <- err:
				default:
				}
				return
			}
			select {
			case w.changed <- struct{}{}:
			default:
			}
		}
	})
}

// followHolder follows the holder's node, once it is another than the one
// followed.
func (w *lineWatcher) followHolder(path string) {
	if !w.live || path == w.holder {
		return
	}
	w.unhold()
	w.holder, w.unhold = path, func() {}
	if path != "" {
		ctx, cancel := context.WithCancel(w.ctx)
		w.unhold = cancel
		w.follow(ctx, path)
	}
}

// stop ends the Watches and waits for them.
func (w *lineWatcher) stop() {
	w.cancel()
	w.wg.Wait()
}

// wait returns once a followed node has changed, ctx has ended, or the
// session is over.
func (w *lineWatcher) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-w.s.Done():
		return w.s.Err()
	case err := <-w.failed:
		return err
	case <-w.changed:
	}
	return nil
}

// frame is one look at the line.
type frame struct {
	path       string
	kind       string // "" when the line is empty and was never seen otherwise
	permits    int    // a semaphore's; 0 if unknown
	at         time.Time
	contenders []member // holders first, then the waiters in order, as the recipe's Contenders says
}

// member is one contender, with its node's creation time.
type member struct {
	zklock.Contender
	created time.Time
}

// read reads the line, and follows its holder's node (when live). Who
// holds is the recipe's Contenders' answer.
func (w *lineWatcher) read(ctx context.Context) (frame, error) {
	conn := w.s.Conn()
	children, _, err := conn.Children(w.path)
	if errors.Is(err, zk.ErrNoNode) {
		children, err = nil, nil // no directory: an empty line
	}
	if err != nil {
		return frame{}, err
	}
	f := frame{path: w.path, at: time.Now()}
	l, err := readLine(ctx, w.s, w.path, children)
	if err != nil {
		return frame{}, err
	}
	if f.contenders, err = created(ctx, conn, l.contenders); err != nil {
		return frame{}, err
	}
	f.kind, f.permits = l.kind, l.permits
	if f.kind == "" {
		f.kind = w.kind
	}
	w.kind = f.kind
	holder := ""
	if len(f.contenders) > 0 {
		holder = f.contenders[0].Path
	}
	w.followHolder(holder)
	return f, nil
}

// created adds each contender's creation time, from its node's Stat (a
// Contender has its czxid, not its ctime). Nodes gone meanwhile are left
// out.
func created(ctx context.Context, conn *zk.Conn, cs []zklock.Contender) ([]member, error) {
	stats := make([]*zk.Stat, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			var ok bool
			if ok, stats[i], errs[i] = conn.Exists(c.Path); errs[i] == nil && !ok {
				stats[i] = nil
			}
		})
	}
	wg.Wait()
	out := make([]member, 0, len(cs))
	for i, c := range cs {
		switch {
		case errs[i] != nil:
			return nil, errs[i]
		case stats[i] == nil || stats[i].Czxid != c.Token:
			continue // gone since the listing
		}
		out = append(out, member{Contender: c, created: time.UnixMilli(stats[i].Ctime)})
	}
	return out, ctx.Err()
}

// cs is the frame's contenders, without their times.
func (f frame) cs() []zklock.Contender {
	cs := make([]zklock.Contender, len(f.contenders))
	for i, m := range f.contenders {
		cs[i] = m.Contender
	}
	return cs
}

// inLine is how long a contender had been in line when the frame was read,
// by the server's clock for its start and ours for the end.
func (f frame) inLine(m member) time.Duration { return max(0, f.at.Sub(m.created)) }

// print prints the frame as text.
func (f frame) print(w io.Writer) error {
	holders := countHolders(f.cs())
	holder, waiter := roles(f.kind)
	var head string
	switch f.kind {
	case kindElection:
		head = "election"
		if len(f.contenders) == 0 {
			head += ", no leader"
		}
	case kindSemaphore:
		head = "semaphore"
		if f.permits > 0 {
			head += fmt.Sprintf(" of %d permits", f.permits)
		}
	case kindLock:
		head = "lock"
	default:
		head = "no contenders"
	}
	switch {
	case len(f.contenders) > 0:
		head += fmt.Sprintf(", %s, %s", plural(holders, holder), plural(len(f.contenders)-holders, waiter))
	case f.kind == kindLock || f.kind == kindSemaphore:
		head += ", no holder, no waiters"
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s: %s, at %s\n", f.path, head, f.at.Format("15:04:05.000"))
	if len(f.contenders) > 0 {
		fmt.Fprintln(tw, "ROLE\tNODE\tSESSION\tTOKEN\tIN LINE\tDATA")
	}
	role, pos := positions(f.kind, f.cs())
	for i, m := range f.contenders {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%v\t%s\n", roleText(role[i], pos[i], m.Cached), m.Path, sessionID(m.SessionID), m.Token,
			f.inLine(m).Round(100*time.Millisecond), printable(m.Data))
	}
	return tw.Flush()
}

// key is what the frame shows, but for the times.
func (f frame) key() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d\n", f.kind, f.permits)
	for _, m := range f.contenders {
		fmt.Fprintf(&b, "%s %x %q %t\n", m.Path, m.SessionID, m.Data, m.Holds)
	}
	return b.String()
}

// plural is "n thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// jsonWatch is a frame of watch in JSON.
type jsonWatch struct {
	Path       string          `json:"path"`
	Kind       string          `json:"kind,omitempty"`    // lock, semaphore, election; none if never seen
	Permits    int             `json:"permits,omitempty"` // a semaphore's
	Time       string          `json:"time"`              // when the line was read
	Contenders []jsonContender `json:"contenders"`
}

func (f frame) json() jsonWatch {
	out := jsonWatch{Path: f.path, Kind: f.kind, Permits: f.permits, Time: f.at.Format(time.RFC3339Nano), Contenders: []jsonContender{}}
	role, pos := positions(f.kind, f.cs())
	for i, m := range f.contenders {
		j := contenderJSON(m.Contender, role[i], pos[i])
		created := m.created.UTC().Format(time.RFC3339Nano)
		inLine := f.inLine(m).Seconds()
		j.Created, j.InLine = &created, &inLine
		out.Contenders = append(out.Contenders, j)
	}
	return out
}
