// Command lockclient is one client process of the lock comparison (see
// fencing_test.go): it takes a lock, reads the fenced register of package
// chaos, works, checks that its lock still looks held, then writes back
// the value it read plus one, and releases the lock, over and over. It
// reports what it did as chaos/record events on its standard output, and
// exits when its standard input ends.
//
// -impl chooses the lock:
//
//	redsync     go-redsync/redsync on one Redis (SET NX PX; no token)
//	redlock     go-redsync/redsync over three Redis servers: Redlock
//	ephemeral   the seeds' ZooKeeper lock: one ephemeral node, everyone
//	            watches it; released only if still ours; no token
//	zklock      zklock.Mutex, its token not shown to the register
//	zklock+token zklock.Mutex, every request carrying Lease.Token
//
// "Looks held" is each lock's own answer: redsync's Until (the lock's
// validity, measured from before the acquire, less clock drift), the
// go-zookeeper session of the ephemeral lock still being connected, and
// zklock's Lease.Err. After that check the client emits "checked" and
// takes a moment to send its write: the moment the harness stops it with
// SIGSTOP, as in Kleppmann's figure of the client paused between its check
// and its write.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/go-zookeeper/zk"
	goredislib "github.com/redis/go-redis/v9"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/chaos/record"
	"github.com/zkrecipes/zkrecipes/zklock"
)

// Checked is the event a holder emits between its check and its write.
const Checked = "checked"

var (
	impl    = flag.String("impl", "zklock+token", "redsync, redlock, ephemeral, zklock or zklock+token")
	redisA  = flag.String("redis", "", "Redis servers, comma-separated")
	zkA     = flag.String("zk", "", "ZooKeeper servers, comma-separated")
	regA    = flag.String("register", "", "address of the fenced register")
	slot    = flag.Int("slot", 0, "this client's slot")
	inc     = flag.Int("inc", 0, "incarnation of the slot")
	ttl     = flag.Duration("ttl", 3*time.Second, "lock expiry (Redis) or session timeout (ZooKeeper)")
	hold    = flag.Duration("hold", 200*time.Millisecond, "work between the read and the check")
	lockKey = flag.String("key", "/fencing-lock", "lock name (a znode path for ZooKeeper)")
)

// locker is one lock implementation: lock returns a check ("does the lock
// still look held?"), the token to show (0: none) and an unlock.
type locker interface {
	lock(ctx context.Context) (held func() bool, token int64, unlock func(), err error)
}

var out *record.Writer

func main() {
	flag.Parse()
	out = record.NewWriter(os.Stdout, *slot, *inc)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
		}
		cancel()
	}()
	var l locker
	switch *impl {
	case "redsync", "redlock":
		var pools []redis.Pool
		for a := range strings.SplitSeq(*redisA, ",") {
			pools = append(pools, goredis.NewPool(goredislib.NewClient(&goredislib.Options{
				Addr: a, DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
				MaxRetries: -1,
			})))
		}
		l = &redisLock{m: redsync.New(pools...).NewMutex(*lockKey, redsync.WithExpiry(*ttl), redsync.WithTries(1<<30))}
	case "ephemeral":
		conn, ev, err := zk.Connect(strings.Split(*zkA, ","), *ttl, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
		if err != nil {
			fail(err)
		}
		go func() {
			for range ev {
			}
		}()
		l = &ephemeral{conn: conn, path: *lockKey}
	case "zklock", "zklock+token":
		l = &zkLock{token: *impl == "zklock+token"}
	default:
		fail(fmt.Errorf("unknown -impl %q", *impl))
	}
	out.Emit(record.Event{K: record.Ready})
	reg := &register{addr: *regA}
	var ops atomic.Int64
	opID := func() string { return fmt.Sprintf("%d.%d.%d", *slot, *inc, ops.Add(1)) }
	for ctx.Err() == nil {
		out.Emit(record.Event{W: record.Mutex, K: record.Acquiring})
		held, tok, unlock, err := l.lock(ctx)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		out.Emit(record.Event{W: record.Mutex, K: record.Grant, Tok: tok})
		if v, ok := reg.read(opID(), tok); ok {
			time.Sleep(*hold/2 + rand.N(*hold))
			if held() {
				out.Emit(record.Event{W: record.Mutex, K: Checked, Tok: tok})
				time.Sleep(20 * time.Millisecond) // the write on its way
				reg.write(opID(), tok, v, v+1)
			}
		}
		out.Emit(record.Event{W: record.Mutex, K: record.Release, Tok: tok})
		unlock()
		out.Emit(record.Event{W: record.Mutex, K: record.Unlocked, Tok: tok})
		time.Sleep(rand.N(30 * time.Millisecond))
	}
}

type redisLock struct{ m *redsync.Mutex }

func (r *redisLock) lock(ctx context.Context) (func() bool, int64, func(), error) {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.m.LockContext(lctx); err != nil {
		return nil, 0, nil, err
	}
	until := r.m.Until()
	return func() bool { return time.Now().Before(until) }, 0, func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = r.m.UnlockContext(uctx)
	}, nil
}

// ephemeral is the seeds' lock: create one ephemeral node; if it exists,
// watch it and try again when it changes. Every waiter is woken by every
// release.
type ephemeral struct {
	conn *zk.Conn
	path string
}

func (e *ephemeral) lock(ctx context.Context) (func() bool, int64, func(), error) {
	for ctx.Err() == nil {
		_, err := e.conn.Create(e.path, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
		if errors.Is(err, zk.ErrNodeExists) {
			// Ours already: a create whose reply was lost, or a release
			// that did not go through.
			if ok, st, serr := e.conn.Exists(e.path); serr == nil && ok && st.EphemeralOwner == e.conn.SessionID() {
				err = nil
			}
		}
		if err == nil {
			sid := e.conn.SessionID()
			held := func() bool { return e.conn.State() == zk.StateHasSession && e.conn.SessionID() == sid }
			// Delete the node only if it is still ours (the Lua
			// compare-and-delete of the Redis locks): after a pause past
			// the session timeout it may be the next holder's.
			unlock := func() {
				for range 50 { // through a reconnect
					ok, st, err := e.conn.Exists(e.path)
					if err == nil && !(ok && st.EphemeralOwner == sid) {
						return
					}
					if err == nil && e.conn.Delete(e.path, st.Version) == nil {
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
			return held, 0, unlock, nil
		}
		if !errors.Is(err, zk.ErrNodeExists) {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		ok, _, ch, err := e.conn.ExistsW(e.path)
		if err != nil || !ok {
			continue
		}
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
		case <-ctx.Done():
		}
	}
	return nil, 0, nil, ctx.Err()
}

// zkLock is zklock.Mutex on a session it replaces when it ends.
type zkLock struct {
	token bool
	s     *zkrecipes.Session
	m     *zklock.Mutex
}

func (z *zkLock) lock(ctx context.Context) (func() bool, int64, func(), error) {
	if z.s == nil || z.s.Err() != nil {
		if z.s != nil {
			z.s.Close()
			z.s = nil
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s, err := zkrecipes.Connect(cctx, strings.Split(*zkA, ","), zkrecipes.WithSessionTimeout(*ttl))
		cancel()
		if err != nil {
			return nil, 0, nil, err
		}
		m, err := zklock.NewMutex(s, *lockKey)
		if err != nil {
			fail(err)
		}
		z.s, z.m = s, m
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := z.m.Lock(lctx)
	if err != nil {
		return nil, 0, nil, err
	}
	tok := int64(0)
	if z.token {
		tok = l.Token()
	}
	return func() bool { return l.Err() == nil }, tok, func() {
		uctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = l.Unlock(uctx)
	}, nil
}

// register is the client side of chaos.Register.
type register struct {
	addr string
	conn net.Conn
	rd   *bufio.Reader
}

func (r *register) read(op string, tok int64) (int64, bool) {
	out.Emit(record.Event{W: record.Mutex, K: record.Call, Op: op, F: "r", Tok: tok})
	reply, err := r.do(fmt.Sprintf("R %s %d\n", op, tok))
	if err != nil {
		return 0, false
	}
	if reply == "REJ" {
		out.Emit(record.Event{W: record.Mutex, K: record.Ret, Op: op, F: "r", Rej: true})
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimPrefix(reply, "OK "), 10, 64)
	if err != nil {
		fail(fmt.Errorf("register: %q", reply))
	}
	out.Emit(record.Event{W: record.Mutex, K: record.Ret, Op: op, F: "r", V: v})
	return v, true
}

func (r *register) write(op string, tok, expect, v int64) {
	out.Emit(record.Event{W: record.Mutex, K: record.Call, Op: op, F: "w", Tok: tok, X: expect, V: v})
	reply, err := r.do(fmt.Sprintf("W %s %d %d %d\n", op, tok, expect, v))
	if err != nil {
		return
	}
	out.Emit(record.Event{W: record.Mutex, K: record.Ret, Op: op, F: "w", Rej: reply == "REJ"})
}

func (r *register) do(req string) (string, error) {
	if r.conn == nil {
		c, err := net.DialTimeout("tcp", r.addr, 5*time.Second)
		if err != nil {
			return "", err
		}
		r.conn, r.rd = c, bufio.NewReader(c)
	}
	r.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := r.conn.Write([]byte(req)); err != nil {
		r.conn.Close()
		r.conn = nil
		return "", err
	}
	line, err := r.rd.ReadString('\n')
	if err != nil {
		r.conn.Close()
		r.conn = nil
		return "", err
	}
	return strings.TrimSpace(line), nil
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "lockclient:", err)
	os.Exit(1)
}
