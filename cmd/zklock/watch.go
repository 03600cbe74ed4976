package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
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
	w, err := newLineWatcher(s, path, !*once)
	if err != nil {
		return exitFailure, err
	}
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

// The kinds of line watch knows, told apart by their nodes' names.
const (
	kindLock      = "lock"      // a Mutex's or RWMutex's (or Curator's, kazoo's, zk.Lock's)
	kindSemaphore = "semaphore" // "-sem-" nodes
	kindElection  = "election"  // "-elect-" nodes
)

// lineWatcher reads a line and keeps ZooKeeper watches on what changes it:
// the directory's children, and the holder's node (for its data: an
// election's leader may Proclaim a new value). A watch is set again only
// once it has fired, so that none piles up.
type lineWatcher struct {
	s     *zkrecipes.Session
	path  string
	live  bool // set watches
	mutex *zklock.Mutex
	kind  string // the last kind seen, kept while the line is empty

	dirEv   <-chan zk.Event // the directory's children (or existence)
	nodeEv  <-chan zk.Event // the holder's node
	nodeFor string          // the node nodeEv is about
}

func newLineWatcher(s *zkrecipes.Session, path string, live bool) (*lineWatcher, error) {
	m, err := zklock.NewMutex(s, path)
	if err != nil {
		return nil, err
	}
	return &lineWatcher{s: s, path: path, live: live, mutex: m}, nil
}

// wait returns once a watch has fired, ctx has ended, or the session is
// over.
func (w *lineWatcher) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-w.s.Done():
		return w.s.Err()
	case <-w.dirEv:
		w.dirEv = nil
	case <-w.nodeEv:
		w.nodeEv, w.nodeFor = nil, ""
	}
	return nil
}

// frame is one look at the line.
type frame struct {
	path       string
	kind       string // "" when the line is empty and was never seen otherwise
	permits    int    // a semaphore's; 0 if unknown
	at         time.Time
	contenders []member // holders first, then the waiters in order
}

// member is one contender, with its node's creation time.
type member struct {
	zklock.Contender
	created time.Time
}

// read reads the line, setting the watches that are not set (when live).
// The directory's watch is set before anything is read, so that no change
// after the reads goes unseen.
func (w *lineWatcher) read(ctx context.Context) (frame, error) {
	conn := w.s.Conn()
	children, err := w.children()
	if err != nil {
		return frame{}, err
	}
	f := frame{path: w.path, at: time.Now()}
	switch {
	case slices.ContainsFunc(children, func(n string) bool { return isSeqNode(n, "-elect-") }):
		f.kind = kindElection
		f.contenders, err = w.candidates(ctx, children)
	case slices.ContainsFunc(children, func(n string) bool { return isSeqNode(n, "-sem-") }):
		f.kind = kindSemaphore
		f.contenders, f.permits, err = w.permitHolders(ctx)
	default:
		var cs []zklock.Contender
		if cs, err = w.mutex.Contenders(ctx); err == nil {
			if len(cs) > 0 {
				f.kind = kindLock
			}
			f.contenders, err = created(ctx, conn, cs)
		}
	}
	if err != nil {
		return frame{}, err
	}
	if f.kind == "" {
		f.kind = w.kind
	}
	w.kind = f.kind

	if w.live && len(f.contenders) > 0 {
		holder := &f.contenders[0]
		if w.nodeEv == nil || w.nodeFor != holder.Path {
			data, _, ev, err := conn.GetW(holder.Path)
			switch {
			case errors.Is(err, zk.ErrNoNode):
				// Gone since the listing: the directory's watch has fired.
			case err != nil:
				return frame{}, err
			default:
				holder.Data = data // as of the watch
				w.nodeEv, w.nodeFor = ev, holder.Path
			}
		}
	}
	return f, nil
}

// children lists the directory, setting its watch if live and not set: on
// its children, or on its creation if it does not exist. No directory is an
// empty line.
func (w *lineWatcher) children() ([]string, error) {
	conn := w.s.Conn()
	for {
		if !w.live || w.dirEv != nil {
			names, _, err := conn.Children(w.path)
			if errors.Is(err, zk.ErrNoNode) {
				return nil, nil
			}
			return names, err
		}
		names, _, ev, err := conn.ChildrenW(w.path)
		if err == nil {
			w.dirEv = ev
			return names, nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return nil, err
		}
		ok, _, ev, err := conn.ExistsW(w.path)
		if err != nil {
			return nil, err
		}
		if !ok {
			w.dirEv = ev
			return nil, nil
		}
		// Created between the two: list it. (The watch set by ExistsW
		// fires on the next change and is then dropped.)
	}
}

// candidates reads an election's candidates, in order: the leader first.
func (w *lineWatcher) candidates(ctx context.Context, children []string) ([]member, error) {
	type cand struct {
		name string
		seq  int64
	}
	var cands []cand
	for _, n := range children {
		if seq, ok := seqOf(n, "-elect-"); ok {
			cands = append(cands, cand{n, seq})
		}
	}
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Or(cmp.Compare(a.seq, b.seq), strings.Compare(a.name, b.name)) })
	type read struct {
		data []byte
		st   *zk.Stat
		err  error
	}
	reads := make([]read, len(cands))
	var wg sync.WaitGroup
	for i, cd := range cands {
		wg.Go(func() {
			r := &reads[i]
			r.data, r.st, r.err = w.s.Conn().Get(w.path + "/" + cd.name)
		})
	}
	wg.Wait()
	out := make([]member, 0, len(cands))
	for i, cd := range cands {
		r := reads[i]
		switch {
		case errors.Is(r.err, zk.ErrNoNode):
			continue // gone since the listing
		case r.err != nil:
			return nil, r.err
		}
		out = append(out, member{
			Contender: zklock.Contender{Path: w.path + "/" + cd.name, Data: r.data, SessionID: r.st.EphemeralOwner, Token: r.st.Czxid},
			created:   time.UnixMilli(r.st.Ctime),
		})
	}
	return out, ctx.Err()
}

// permitHolders reads a semaphore's line, and its number of permits (the
// directory's data) if it records one.
func (w *lineWatcher) permitHolders(ctx context.Context) ([]member, int, error) {
	data, _, err := w.s.Conn().Get(w.path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	permits, perr := strconv.Atoi(strings.TrimSpace(string(data)))
	if perr != nil || permits < 1 {
		permits = 0
	}
	sm, err := zklock.NewSemaphore(w.s, w.path, max(permits, 1))
	if err != nil {
		return nil, 0, err
	}
	cs, err := sm.Contenders(ctx)
	if err != nil {
		return nil, 0, err
	}
	ms, err := created(ctx, w.s.Conn(), cs)
	return ms, permits, err
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

// isSeqNode reports whether name is a contender's node with marker.
func isSeqNode(name, marker string) bool {
	_, ok := seqOf(name, marker)
	return ok
}

// seqOf reads the sequence number of a node "<anything><marker><seq>",
// seq being ZooKeeper's "%010d" of a signed 32-bit counter.
func seqOf(name, marker string) (int64, bool) {
	i := strings.LastIndex(name, marker)
	if i < 0 {
		return 0, false
	}
	digits := name[i+len(marker):]
	if len(digits) < 10 && !strings.HasPrefix(digits, "-") {
		return 0, false
	}
	seq, err := strconv.ParseInt(digits, 10, 32)
	return seq, err == nil
}

// holders is how many of the frame's first contenders hold.
func (f frame) holders() int {
	switch {
	case len(f.contenders) == 0:
		return 0
	case f.kind == kindSemaphore && f.permits > 0:
		return min(f.permits, len(f.contenders))
	case f.kind == kindSemaphore:
		return 0 // unknown
	}
	return 1
}

// roles names a holder and a waiter in the frame's kind of line.
func (f frame) roles() (holder, waiter string) {
	if f.kind == kindElection {
		return "leader", "candidate"
	}
	return "holder", "waiter"
}

// inLine is how long a contender had been in line when the frame was read,
// by the server's clock for its start and ours for the end.
func (f frame) inLine(m member) time.Duration { return max(0, f.at.Sub(m.created)) }

// print prints the frame as text.
func (f frame) print(w io.Writer) error {
	holders := f.holders()
	holder, waiter := f.roles()
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
	for i, m := range f.contenders {
		role := holder
		if i >= holders {
			role = waiter + " " + strconv.Itoa(i-holders+1)
		}
		node := m.Path[strings.LastIndex(m.Path, "/")+1:]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%v\t%s\n", role, node, sessionID(m.SessionID), m.Token,
			f.inLine(m).Round(100*time.Millisecond), printable(m.Data))
	}
	return tw.Flush()
}

// key is what the frame shows, but for the times.
func (f frame) key() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d\n", f.kind, f.permits)
	for _, m := range f.contenders {
		fmt.Fprintf(&b, "%s %x %q\n", m.Path, m.SessionID, m.Data)
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
	holders := f.holders()
	holder, waiter := f.roles()
	out := jsonWatch{Path: f.path, Kind: f.kind, Permits: f.permits, Time: f.at.Format(time.RFC3339Nano), Contenders: []jsonContender{}}
	for i, m := range f.contenders {
		j := contenderJSON(m.Contender, i, holders)
		j.Role = holder
		if i >= holders {
			j.Role = waiter
		}
		created := m.created.UTC().Format(time.RFC3339Nano)
		inLine := f.inLine(m).Seconds()
		j.Created, j.InLine = &created, &inLine
		out.Contenders = append(out.Contenders, j)
	}
	return out
}
