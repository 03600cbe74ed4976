package bench

import (
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// What an idle holder costs (issue 17). TestIdleCost holds N locks, one
// per session and path, and lets them sit for a window, on a private
// 3-server ensemble and on a private standalone server, both at
// ZooKeeper's default tickTime of 2 s with 10 s sessions unless told
// otherwise; then it reads what was sent: on the client, every request by
// opcode (a dialer that parses the frames the sessions write), and on the
// servers, their own counters (srst before the window, mntr after; the
// leader's srvr Zxid for the writes committed) and the JVMs' CPU time from
// /proc. go-zookeeper's zk.Lock holders on the same servers are the
// sessions without proof of contact: their only traffic is pings, every
// third of the timeout. A first window with no holder gives the servers'
// own background.
//
//	cd bench && go test -run '^TestIdleCost$' -v -timeout 60m . -idle \
//		-idle.holders 1,100,1000 -idle.for 30s -idle.out results/idle-cost.csv
//
// or make bench-idle. It fails if a holder lost its lock during a window.
var (
	idle        = flag.Bool("idle", false, "run TestIdleCost (make bench-idle)")
	idleHolders = flag.String("idle.holders", "1,100,1000", "idle holder counts, comma-separated")
	idleFor     = flag.Duration("idle.for", 30*time.Second, "how long each count sits idle while measured")
	idleSettle  = flag.Duration("idle.settle", 5*time.Second, "how long holders sit idle before the window")
	idleTick    = flag.Duration("idle.tick", 2*time.Second, "the servers' tickTime")
	idleTimeout = flag.Duration("idle.timeout", 10*time.Second, "the session timeout the holders ask for")
	idleSetups  = flag.String("idle.setups", "ensemble,standalone", "where to measure: ensemble (3 servers), standalone")
	idleOut     = flag.String("idle.out", "", "CSV file for the figures (none: only the log)")
)

// idleParallel is how many holders connect and lock at once.
const idleParallel = 16

func TestIdleCost(t *testing.T) {
	if !*idle {
		t.Skip("go test ./bench -run TestIdleCost -idle (make bench-idle)")
	}
	counts, err := ParseCounts(*idleHolders, "idle.holders", "count")
	if err != nil {
		t.Fatal(err)
	}
	zktest.CheckGoroutines(t)
	var rows []idleRow
	for setup := range strings.SplitSeq(*idleSetups, ",") {
		t.Run(setup, func(t *testing.T) {
			var srv idleServers
			switch setup {
			case "ensemble":
				c := zktest.StartCluster(t, 3, zktest.WithTickTime(*idleTick))
				srv = idleServers{addrs: c.Addrs()}
				for i := range srv.addrs {
					srv.cfgs = append(srv.cfgs, filepath.Join(filepath.Dir(c.LogFile(i)), "zoo.cfg"))
				}
			case "standalone":
				s := zktest.StartPrivate(t, zktest.WithTickTime(*idleTick))
				srv = idleServers{addrs: s.Addrs(), cfgs: []string{filepath.Join(filepath.Dir(s.LogFile()), "zoo.cfg")}}
			default:
				t.Fatalf("-idle.setups: unknown setup %q", setup)
			}
			rows = append(rows, idleWindow(t, setup, srv, "none", 0))
			for _, n := range counts {
				for _, impl := range []Impl{Ours, Theirs} {
					rows = append(rows, idleWindow(t, setup, srv, impl, n))
				}
			}
		})
	}
	var b strings.Builder
	writeIdleTable(&b, rows)
	fmt.Print("\n" + b.String())
	if *idleOut != "" {
		if err := writeIdleCSV(*idleOut, rows); err != nil {
			t.Error(err)
		}
	}
}

// idleServers are the servers of one setup: their client addresses and
// the zoo.cfg each JVM was started with (how its process is found).
type idleServers struct {
	addrs []string
	cfgs  []string
}

// idleRow is what one window measured.
type idleRow struct {
	setup   string
	impl    Impl // "none": the servers alone
	holders int
	window  time.Duration
	ops     map[int32]int64 // requests the holders sent, by opcode
	// The servers': packets received, writes committed (the leader's zxid),
	// CPU seconds of all JVMs, connections to the leader and to the others,
	// and the largest request latency.
	packets      int64
	writes       int64
	serverCPU    time.Duration
	leaderConns  int
	otherConns   int
	leaderPkts   int64
	otherPkts    int64
	maxLatencyMs int64
	clientCPU    time.Duration // this process: every holder's client
	lost         int           // holders that lost their lock during the window
}

// perHolder is a count per holder per second.
func (r idleRow) perHolder(n int64) float64 {
	if r.holders == 0 {
		return 0
	}
	return float64(n) / float64(r.holders) / r.window.Seconds()
}

func (r idleRow) requests() int64 {
	var n int64
	for _, c := range r.ops {
		n += c
	}
	return n
}

// idleWindow sets up n holders of impl on srv, lets them settle, measures
// one window and closes them.
func idleWindow(t *testing.T, setup string, srv idleServers, impl Impl, n int) idleRow {
	t.Helper()
	ctx := context.Background()
	admin, err := Connect(ctx, srv.addrs, *idleTimeout)
	if err != nil {
		t.Fatal(err)
	}
	root, err := CreateRoot(admin, "/zkrecipes-idle-")
	admin.Close() // its pings would count in the window
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		admin, err := Connect(ctx, srv.addrs, *idleTimeout)
		if err != nil {
			t.Error(err)
			return
		}
		defer admin.Close()
		if err := DeleteTree(admin, root, 100); err != nil {
			t.Error(err)
		}
	}()

	counter := &zktest.Counter{}
	begin := time.Now()
	holders, err := holdIdle(ctx, srv.addrs, impl, n, root, counter)
	defer func() {
		for _, h := range holders {
			h.close()
		}
	}()
	if err != nil {
		t.Fatal(err)
	}
	if n > 0 {
		t.Logf("%s: %d %s holders set up in %v", setup, n, impl, time.Since(begin).Round(time.Millisecond))
	}
	time.Sleep(*idleSettle)

	for _, a := range srv.addrs {
		if _, err := zktest.FourLetter(a, "srst"); err != nil {
			t.Fatal(err)
		}
	}
	before := readServers(t, srv)
	ops0, cpu0 := counter.ByOp(), selfCPU()
	t0 := time.Now()
	time.Sleep(*idleFor)
	after := readServers(t, srv)
	row := idleRow{setup: setup, impl: impl, holders: n, window: time.Since(t0), clientCPU: selfCPU() - cpu0,
		ops: map[int32]int64{}}
	for op, c := range counter.ByOp() {
		if d := c - ops0[op]; d > 0 {
			row.ops[op] = d
		}
	}
	for i := range srv.addrs {
		b, a := before[i], after[i]
		pkts := a.packets - b.packets
		row.packets += pkts
		row.serverCPU += a.cpu - b.cpu
		row.maxLatencyMs = max(row.maxLatencyMs, a.maxLatency)
		conns := a.conns - 1 // the mntr asking
		if a.mode == "leader" || a.mode == "standalone" {
			row.writes = a.zxid - b.zxid
			row.leaderConns, row.leaderPkts = conns, pkts
		} else {
			row.otherConns += conns
			row.otherPkts += pkts
		}
	}
	for _, h := range holders {
		if !h.holding() {
			row.lost++
		}
	}
	if row.lost > 0 {
		t.Errorf("%s: %d of %d %s holders lost their lock while idle", setup, row.lost, n, impl)
	}
	t.Logf("%s %s %d: %.3f requests/s per holder (%s), %d packets, %.1f writes/s, server CPU %.1f%%, client CPU %.1f%%",
		setup, impl, n, row.perHolder(row.requests()), opsString(row.ops, row.window, n), row.packets,
		float64(row.writes)/row.window.Seconds(), 100*row.serverCPU.Seconds()/row.window.Seconds(),
		100*row.clientCPU.Seconds()/row.window.Seconds())
	return row
}

// idleHolder is one session holding its own lock.
type idleHolder struct {
	close   func()
	holding func() bool
}

// holdIdle connects n sessions of impl, each taking a lock of its own under
// root, idleParallel at a time. On error it returns those set up so far.
func holdIdle(ctx context.Context, servers []string, impl Impl, n int, root string, counter *zktest.Counter) ([]idleHolder, error) {
	var (
		mu      sync.Mutex
		holders []idleHolder
		errs    []error
		wg      sync.WaitGroup
		slots   = make(chan struct{}, idleParallel)
	)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for i := range n {
		path := fmt.Sprintf("%s/h%d", root, i)
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			h, err := holdOne(ctx, servers, impl, path, counter)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("holder %d: %w", i, err))
				return
			}
			holders = append(holders, h)
		})
	}
	wg.Wait()
	return holders, errors.Join(errs...)
}

func holdOne(ctx context.Context, servers []string, impl Impl, path string, counter *zktest.Counter) (idleHolder, error) {
	switch impl {
	case Ours:
		s, err := zkrecipes.Connect(ctx, servers, zkrecipes.WithSessionTimeout(*idleTimeout), zkrecipes.WithDialer(counter.Dial))
		if err != nil {
			return idleHolder{}, err
		}
		m, err := zklock.NewMutex(s, path)
		if err != nil {
			s.Close()
			return idleHolder{}, err
		}
		lease, err := m.Lock(ctx)
		if err != nil {
			s.Close()
			return idleHolder{}, err
		}
		return idleHolder{close: func() { s.Close() }, holding: func() bool { return lease.Err() == nil }}, nil
	case Theirs:
		c, events, err := zk.Connect(servers, *idleTimeout, zk.WithDialer(counter.Dial), zk.WithLogger(discard{}), zk.WithLogInfo(false))
		if err != nil {
			return idleHolder{}, err
		}
		// zk.Lock has no lease: it holds while the session does. The
		// channel is drained so that the client never blocks on it.
		expired := make(chan struct{})
		go func() {
			for ev := range events {
				if ev.State == zk.StateExpired {
					select {
					case <-expired:
					default:
						close(expired)
					}
				}
			}
		}()
		if err := zk.NewLock(c, path, zk.WorldACL(zk.PermAll)).Lock(); err != nil {
			c.Close()
			return idleHolder{}, err
		}
		holding := func() bool {
			select {
			case <-expired:
				return false
			default:
				return c.State() == zk.StateHasSession
			}
		}
		return idleHolder{close: c.Close, holding: holding}, nil
	}
	return idleHolder{}, fmt.Errorf("unknown implementation %q", impl)
}

// opNames are the opcodes an idle holder sends.
var opNames = map[int32]string{3: "exists", 9: "sync", 11: "ping", 14: "multi"}

// opsString is a holder's requests per second by opcode.
func opsString(ops map[int32]int64, window time.Duration, n int) string {
	if n == 0 || len(ops) == 0 {
		return "none"
	}
	var parts []string
	var other int64
	for _, op := range []int32{11, 3, 9, 14} {
		parts = append(parts, fmt.Sprintf("%s %.3f", opNames[op], float64(ops[op])/float64(n)/window.Seconds()))
	}
	for op, c := range ops {
		if _, ok := opNames[op]; !ok {
			other += c
		}
	}
	parts = append(parts, fmt.Sprintf("other %.3f", float64(other)/float64(n)/window.Seconds()))
	return strings.Join(parts, ", ")
}

// serverSample is one server's counters at one moment.
type serverSample struct {
	mode       string
	packets    int64 // since srst
	conns      int
	maxLatency int64 // ms, since srst
	zxid       int64 // the last committed, low 32 bits: its count in the epoch
	cpu        time.Duration
}

func readServers(t *testing.T, srv idleServers) []serverSample {
	t.Helper()
	out := make([]serverSample, len(srv.addrs))
	for i, a := range srv.addrs {
		mntr, err := zktest.FourLetter(a, "mntr")
		if err != nil {
			t.Fatal(err)
		}
		srvr, err := zktest.FourLetter(a, "srvr")
		if err != nil {
			t.Fatal(err)
		}
		s := serverSample{mode: field(mntr, "zk_server_state\t")}
		s.packets, _ = strconv.ParseInt(field(mntr, "zk_packets_received\t"), 10, 64)
		s.maxLatency, _ = strconv.ParseInt(field(mntr, "zk_max_latency\t"), 10, 64)
		conns, _ := strconv.Atoi(field(mntr, "zk_num_alive_connections\t"))
		s.conns = conns
		zxid, err := strconv.ParseInt(strings.TrimPrefix(field(srvr, "Zxid: "), "0x"), 16, 64)
		if err != nil {
			t.Fatalf("srvr of %s: no Zxid: %q", a, srvr)
		}
		s.zxid = zxid & 0xffffffff
		if s.cpu, err = jvmCPU(srv.cfgs[i]); err != nil {
			t.Fatal(err)
		}
		out[i] = s
	}
	return out
}

// field is the rest of the line of a four-letter answer that starts with
// prefix, trimmed.
func field(answer, prefix string) string {
	for line := range strings.Lines(answer) {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// jvmCPU is the user and system CPU time of the process started with the
// zoo.cfg cfg, from /proc (Linux's clock ticks of 10 ms).
func jvmCPU(cfg string) (time.Duration, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, err
	}
	for _, d := range dirs {
		cmd, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !strings.HasSuffix(strings.TrimRight(string(cmd), "\x00"), "\x00"+cfg) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			return 0, err
		}
		// The fields after the command's closing parenthesis: state is
		// the 3rd field of stat, utime the 14th, stime the 15th.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) < 13 {
			return 0, fmt.Errorf("%s/stat: too few fields", d)
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		return time.Duration(utime+stime) * 10 * time.Millisecond, nil
	}
	return 0, fmt.Errorf("no process runs %s", cfg)
}

// selfCPU is this process's user and system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var idleColumns = []string{
	"setup", "tick_ms", "timeout_ms", "impl", "holders", "window_s",
	"req_per_s_per_holder", "ping", "exists", "sync", "multi", "other",
	"server_packets_per_s", "writes_per_s", "writes_per_s_per_holder",
	"leader_conns", "other_conns", "leader_pkts_per_conn_s", "other_pkts_per_conn_s",
	"server_cpu_pct", "client_cpu_pct", "max_latency_ms", "lost",
}

func (r idleRow) record() []string {
	sec := r.window.Seconds()
	rate := func(n int64) string { return strconv.FormatFloat(float64(n)/sec, 'f', 1, 64) }
	per := func(n int64) string { return strconv.FormatFloat(r.perHolder(n), 'f', 3, 64) }
	perConn := func(n int64, conns int) string {
		if conns <= 0 {
			return ""
		}
		return strconv.FormatFloat(float64(n)/float64(conns)/sec, 'f', 3, 64)
	}
	var other int64
	for op, c := range r.ops {
		if _, ok := opNames[op]; !ok {
			other += c
		}
	}
	return []string{
		r.setup, strconv.FormatInt(idleTick.Milliseconds(), 10), strconv.FormatInt(idleTimeout.Milliseconds(), 10),
		string(r.impl), strconv.Itoa(r.holders), strconv.FormatFloat(sec, 'f', 1, 64),
		per(r.requests()), per(r.ops[11]), per(r.ops[3]), per(r.ops[9]), per(r.ops[14]), per(other),
		rate(r.packets), rate(r.writes), per(r.writes),
		strconv.Itoa(r.leaderConns), strconv.Itoa(r.otherConns),
		perConn(r.leaderPkts, r.leaderConns), perConn(r.otherPkts, r.otherConns),
		strconv.FormatFloat(100*r.serverCPU.Seconds()/sec, 'f', 1, 64),
		strconv.FormatFloat(100*r.clientCPU.Seconds()/sec, 'f', 1, 64),
		strconv.FormatInt(r.maxLatencyMs, 10), strconv.Itoa(r.lost),
	}
}

func writeIdleCSV(path string, rows []idleRow) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(idleColumns)
	for _, r := range rows {
		_ = w.Write(r.record())
	}
	w.Flush()
	return errors.Join(w.Error(), f.Close())
}

func writeIdleTable(b *strings.Builder, rows []idleRow) {
	fmt.Fprintf(b, "tickTime %v, session timeout %v; windows of %v after %v idle; per holder: requests/s the client sent; writes: the leader's zxid advance\n",
		*idleTick, *idleTimeout, *idleFor, *idleSettle)
	fmt.Fprintf(b, "%-10s  %-12s  %7s  %10s  %-44s  %9s  %8s  %12s  %10s  %10s  %4s\n",
		"setup", "impl", "holders", "req/s/hold", "by op: ping, exists, sync, multi (/s/holder)", "writes/s", "w/s/hold", "srv pkts/s", "srv CPU %", "cli CPU %", "lost")
	for _, r := range rows {
		c := r.record()
		fmt.Fprintf(b, "%-10s  %-12s  %7d  %10s  %-44s  %9s  %8s  %12s  %10s  %10s  %4d\n",
			r.setup, r.impl, r.holders, c[6], strings.Join(c[7:11], ", "), c[13], c[14], c[12], c[19], c[20], r.lost)
	}
}
