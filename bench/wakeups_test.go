package bench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
)

// wakeCounter is a zk.Dialer that counts the watch notifications the
// servers send to the connections it made: every time a client is woken.
// byType counts them by event type: 1 created, 2 deleted, 3 data changed,
// 4 children changed.
type wakeCounter struct {
	events atomic.Int64
	byType [5]atomic.Int64
}

func (w *wakeCounter) Dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &countConn{Conn: c, w: w}, nil
}

// countConn reads the server's frames as they go by: a 4-byte length, then,
// after the first frame (the connect response), a reply header whose xid
// is -1 for a watch notification.
type countConn struct {
	net.Conn
	w       *wakeCounter
	buf     []byte
	started bool
}

func (c *countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.buf = append(c.buf, p[:n]...)
	for len(c.buf) >= 4 {
		size := int(binary.BigEndian.Uint32(c.buf))
		if len(c.buf) < 4+size {
			break
		}
		frame := c.buf[4 : 4+size]
		if c.started && len(frame) >= 4 && int32(binary.BigEndian.Uint32(frame)) == -1 {
			c.w.events.Add(1)
			// Reply header (xid, zxid, err: 16 bytes), then the event's type.
			if len(frame) >= 20 {
				if typ := binary.BigEndian.Uint32(frame[16:]); typ < 5 {
					c.w.byType[typ].Add(1)
				}
			}
		}
		c.started = true
		c.buf = c.buf[4+size:]
	}
	if len(c.buf) == 0 {
		c.buf = nil
	}
	return n, err
}

// wakeups runs n contenders of one lock for d, each on its own session,
// locking and unlocking as fast as they can, and returns the hand-offs (grants)
// and the watch notifications all of them received.
func wakeups(t *testing.T, servers []string, impl string, n int, d time.Duration) (grants int64, counter *wakeCounter) {
	var b [4]byte
	rand.Read(b[:])
	path := "/wakeups-" + hex.EncodeToString(b[:])
	counter = &wakeCounter{}
	var g atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	var start sync.WaitGroup
	start.Add(n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lock func(context.Context) (func(), error)
			switch impl {
			case "zklock":
				cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
				s, err := zkrecipes.Connect(cctx, servers, zkrecipes.WithDialer(counter.Dial))
				ccancel()
				if err != nil {
					t.Error(err)
					start.Done()
					return
				}
				defer s.Close()
				m, err := zklock.NewMutex(s, path)
				if err != nil {
					t.Error(err)
					start.Done()
					return
				}
				lock = func(ctx context.Context) (func(), error) {
					l, err := m.Lock(ctx)
					if err != nil {
						return nil, err
					}
					return func() {
						uctx, ucancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer ucancel()
						_ = l.Unlock(uctx)
					}, nil
				}
			case "ephemeral":
				conn, ev, err := zk.Connect(servers, 10*time.Second, zk.WithDialer(counter.Dial), zk.WithLogInfo(false), zk.WithLogger(quietLog{}))
				if err != nil {
					t.Error(err)
					start.Done()
					return
				}
				defer conn.Close()
				go func() {
					for range ev {
					}
				}()
				lock = func(ctx context.Context) (func(), error) {
					for ctx.Err() == nil {
						_, err := conn.Create(path, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
						if err == nil {
							return func() { _ = conn.Delete(path, -1) }, nil
						}
						if !errors.Is(err, zk.ErrNodeExists) {
							return nil, err
						}
						ok, _, ch, err := conn.ExistsW(path)
						if err != nil {
							return nil, err
						}
						if !ok {
							continue
						}
						select {
						case <-ch:
						case <-ctx.Done():
						}
					}
					return nil, ctx.Err()
				}
			}
			start.Done()
			start.Wait()
			for ctx.Err() == nil {
				unlock, err := lock(ctx)
				if err != nil {
					continue
				}
				g.Add(1)
				unlock()
			}
		}()
	}
	wg.Wait()
	return g.Load(), counter
}

type quietLog struct{}

func (quietLog) Printf(string, ...any) {}

// wakeupTable measures both locks at 8 and 32 contenders, side by side.
func wakeupTable(t *testing.T, servers []string) string {
	var b strings.Builder
	b.WriteString("| contenders | lock | hand-offs in 5 s | watch notifications | per hand-off | of which node created / deleted / data changed / children changed |\n")
	b.WriteString("| ---: | --- | ---: | ---: | ---: | --- |\n")
	for _, n := range []int{8, 32} {
		for _, impl := range []string{"ephemeral", "zklock"} {
			grants, c := wakeups(t, servers, impl, n, 5*time.Second)
			name := map[string]string{"ephemeral": "plain ephemeral znode, everyone watches it", "zklock": "zklock.Mutex"}[impl]
			per := func(v int64) float64 {
				if grants == 0 {
					return 0
				}
				return float64(v) / float64(grants)
			}
			fmt.Fprintf(&b, "| %d | %s | %d | %d | %.2f | %.2f / %.2f / %.2f / %.2f |\n", n, name, grants, c.events.Load(), per(c.events.Load()),
				per(c.byType[1].Load()), per(c.byType[2].Load()), per(c.byType[3].Load()), per(c.byType[4].Load()))
		}
	}
	return b.String()
}
