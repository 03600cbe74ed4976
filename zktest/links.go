package zktest

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// StartLinkedCluster is [StartCluster] with every connection between two
// members going through a TCP proxy on 127.0.0.1 that the test can cut:
// [Cluster.Isolate] partitions one server from the others, for real, and
// [Cluster.Heal] joins them again. Clients reach the servers directly, as
// with StartCluster.
//
// How: each server's zoo.cfg names the other members at addresses of
// proxies of its own (server i reaches server j, on both the quorum and
// the election port, through a proxy that forwards to j), so that every
// member-to-member connection, whoever opened it, passes through the proxy
// of one pair of servers. Reconfiguration is off (as for every zktest
// ensemble), so no server adopts another's view of the addresses.
//
// A cut link behaves like a network that drops packets and keeps
// retransmitting: nothing crosses it in either direction, neither data nor
// the close of a connection, and a connection opened across it stays
// unanswered. Whatever was held back is delivered once the link heals, if
// the connection is still open by then; the servers' own timeouts
// (syncLimit, the election's connect timeout) decide when they give up on
// each other. The proxies are closed at t.Cleanup, after the servers are
// killed.
func StartLinkedCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	ln := &links{t: t, isolated: map[int]bool{}}
	ln.cond = sync.NewCond(&ln.mu)
	t.Cleanup(ln.close) // registered first: runs after the servers are killed
	return startCluster(t, n, ln)
}

// Isolate cuts every link between server i and the other servers (a
// partition of i from the rest; clients still reach i). It needs a cluster
// made by [StartLinkedCluster]. Isolating a second server keeps the first
// isolated.
func (c *Cluster) Isolate(i int) {
	c.t.Helper()
	c.mu.Lock()
	c.node(i)
	c.mu.Unlock()
	if c.links == nil {
		c.t.Fatalf("zktest: Isolate(%d) needs a cluster from StartLinkedCluster", i)
	}
	c.links.mu.Lock()
	defer c.links.mu.Unlock()
	c.links.isolated[i] = true
}

// Heal restores every link cut by [Cluster.Isolate]. Connections held back
// carry on where they stopped.
func (c *Cluster) Heal() {
	c.t.Helper()
	if c.links == nil {
		c.t.Fatalf("zktest: Heal needs a cluster from StartLinkedCluster")
	}
	c.links.mu.Lock()
	defer c.links.mu.Unlock()
	clear(c.links.isolated)
	c.links.cond.Broadcast()
}

// Isolated returns, in increasing order, the servers that [Cluster.Isolate]
// has cut off and [Cluster.Heal] has not joined again.
func (c *Cluster) Isolated() []int {
	if c.links == nil {
		return nil
	}
	c.links.mu.Lock()
	defer c.links.mu.Unlock()
	var out []int
	for i := range c.links.isolated {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// view returns the peers as server self must see them: itself at its real
// ports, the others at proxies. Without links it is peers unchanged.
func (c *Cluster) view(self int, peers []peer) ([]peer, error) {
	if c.links == nil {
		return peers, nil
	}
	return c.links.view(self, peers)
}

// links are the proxies between the members of one linked cluster.
type links struct {
	t        testing.TB
	mu       sync.Mutex
	cond     *sync.Cond   // signalled when links heal or close
	isolated map[int]bool // servers whose links to all others are cut
	closed   bool
	proxies  []*proxy
	wg       sync.WaitGroup
}

// view starts the proxies server self uses to reach the others. Called for
// server 0 first at each start attempt: the proxies of an earlier attempt
// are closed then.
func (ln *links) view(self int, peers []peer) ([]peer, error) {
	if self == 0 {
		ln.closeProxies()
	}
	out := append([]peer(nil), peers...)
	for j := range peers {
		if j == self {
			continue
		}
		q, err := ln.listen(self, j, peers[j].quorumPort, false)
		if err != nil {
			return nil, err
		}
		e, err := ln.listen(self, j, peers[j].electionPort, true)
		if err != nil {
			return nil, err
		}
		out[j].quorumPort, out[j].electionPort = q, e
	}
	return out, nil
}

// listen starts a proxy on a free port that forwards to 127.0.0.1:target
// over the link between servers from and to; election says target is an
// election port.
func (ln *links) listen(from, to, target int, election bool) (int, error) {
	ports, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])))
	if err != nil {
		return 0, fmt.Errorf("zktest: proxy: %w", err)
	}
	p := &proxy{ln: ln, l: l, link: [2]int{from, to}, election: election, target: net.JoinHostPort("127.0.0.1", strconv.Itoa(target)), conns: map[net.Conn]bool{}}
	ln.mu.Lock()
	ln.proxies = append(ln.proxies, p)
	ln.mu.Unlock()
	ln.wg.Add(1)
	go p.accept()
	return ports[0], nil
}

// waitOpen blocks while link is cut; false once the links are closed.
func (ln *links) waitOpen(link [2]int) bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	for (ln.isolated[link[0]] || ln.isolated[link[1]]) && !ln.closed {
		ln.cond.Wait()
	}
	return !ln.closed
}

func (ln *links) closeProxies() {
	ln.mu.Lock()
	ps := ln.proxies
	ln.proxies = nil
	ln.mu.Unlock()
	for _, p := range ps {
		p.close()
	}
}

// close stops every proxy and waits for their goroutines.
func (ln *links) close() {
	ln.mu.Lock()
	ln.closed = true
	ln.cond.Broadcast()
	ln.mu.Unlock()
	ln.closeProxies()
	ln.wg.Wait()
}

// proxy forwards the connections made to one listener over one link.
type proxy struct {
	ln       *links
	l        net.Listener
	link     [2]int // the two servers it joins
	target   string
	election bool // target is an election port: see serve

	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
}

func (p *proxy) accept() {
	defer p.ln.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(c) {
			return
		}
		p.ln.wg.Add(1)
		go p.serve(c)
	}
}

// serve connects c to the target once the link is open (a cut link leaves
// the connect unanswered) and copies both ways.
func (p *proxy) serve(c net.Conn) {
	defer p.ln.wg.Done()
	if !p.ln.waitOpen(p.link) {
		c.Close()
		return
	}
	d, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close() // the server is down: refuse, as its host would
		return
	}
	if !p.track(d) {
		c.Close()
		return
	}
	if p.election {
		if err := stripElectionAddr(d, c); err != nil {
			c.Close()
			d.Close()
			return
		}
	}
	p.ln.wg.Add(2)
	go p.pipe(d, c)
	go p.pipe(c, d)
}

// stripElectionAddr passes on the first message of an election connection
// (from src to dst) without the election address the connecting server
// advertises in it. A server that receives a connection from a lower id
// drops it and connects back, to the advertised address when there is one:
// its real port, past the proxies. Without one (the message then has the
// format of ZooKeeper before 3.5: the id alone), it connects back to the
// address its own zoo.cfg gives, a proxy. Quorum authentication, which
// would follow the message, is off in zktest's ensembles.
func stripElectionAddr(dst, src net.Conn) error {
	src.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer src.SetReadDeadline(time.Time{})
	var head [8]byte
	if _, err := io.ReadFull(src, head[:]); err != nil {
		return err
	}
	if int64(binary.BigEndian.Uint64(head[:])) >= 0 {
		_, err := dst.Write(head[:]) // the old format already: the id
		return err
	}
	var rest [12]byte // the id, then the length of the address list
	if _, err := io.ReadFull(src, rest[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(rest[8:])
	if n > 4096 {
		return fmt.Errorf("zktest: proxy: election address of %d bytes", n)
	}
	if _, err := io.CopyN(io.Discard, src, int64(n)); err != nil {
		return err
	}
	_, err := dst.Write(rest[:8])
	return err
}

// pipe copies src to dst. Both what it reads and the end of src wait until
// the link is open before they are passed on.
func (p *proxy) pipe(dst, src net.Conn) {
	defer p.ln.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if !p.ln.waitOpen(p.link) {
			break
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	src.Close()
	dst.Close()
	p.mu.Lock()
	delete(p.conns, src)
	delete(p.conns, dst)
	p.mu.Unlock()
}

// track records c so that close can close it; false (and c closed) when
// the proxy is closed already.
func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[net.Conn]bool{}
	p.mu.Unlock()
	p.l.Close()
	for c := range conns {
		c.Close()
	}
}
