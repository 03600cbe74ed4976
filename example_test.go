package zkrecipes_test

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
)

// servers is where the examples find ZooKeeper: ZK_CONNECT (a
// comma-separated list), else 127.0.0.1:2181.
func servers() []string {
	return strings.Split(cmp.Or(os.Getenv("ZK_CONNECT"), "127.0.0.1:2181"), ",")
}

// Hold a fair lock, do the work under the lease's context so it stops when
// the lease is lost, and release it.
func Example() {
	ctx := context.Background()
	s, err := zkrecipes.Connect(ctx, servers(), zkrecipes.WithSessionTimeout(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	host, _ := os.Hostname()
	m, err := zklock.NewMutex(s, "/myapp/locks/report", zklock.WithData([]byte(host)))
	if err != nil {
		log.Fatal(err)
	}
	lease, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// Work under lease.Context(): it is cancelled, with the cause, the moment
	// the lease is lost, before anyone else can be granted the lock.
	if err := generateReport(lease.Context(), lease.Token()); err != nil {
		log.Print(err, context.Cause(lease.Context()))
	}
	if err := lease.Unlock(ctx); err != nil {
		log.Print(err)
	}
	fmt.Println("report written; lease:", lease.Err())
	// Output: report written; lease: lease released
}

func generateReport(ctx context.Context, token int64) error { return ctx.Err() }

// A Session ends for good (expiry, loss, Close) and says why; a short
// disconnect is not an end.
func ExampleSession_Done() {
	ctx := context.Background()
	s, err := zkrecipes.Connect(ctx, servers())
	if err != nil {
		log.Fatal(err)
	}
	go s.Close() // elsewhere, say at shutdown
	<-s.Done()
	fmt.Println(errors.Is(s.Err(), zkrecipes.ErrClosed))
	// Output: true
}

// Pause work while the connection is suspended (the session may or may not
// live on), carry on once it is back, and stop for good once the session is
// lost.
func ExampleSession_StateChanges() {
	s, err := zkrecipes.Connect(context.Background(), servers())
	if err != nil {
		log.Fatal(err)
	}
	changes := s.StateChanges() // then State: no change falls between
	paused := s.State() != zkrecipes.Connected

	work := time.NewTicker(10 * time.Millisecond)
	defer work.Stop()
	for done := 0; ; {
		select {
		case c := <-changes:
			switch {
			case c.To == zkrecipes.Suspended:
				paused = true // hold off; what the session holds may still be ours
			case c.Reconnected():
				paused = false // the same session: carry on
			case c.To == zkrecipes.Lost:
				fmt.Println("session over:", c.Err)
				return
			}
		case <-work.C:
			if paused {
				continue
			}
			if _, _, err := s.Conn().Exists("/"); err != nil { // a unit of work
				continue // a connection error: the changes say what comes next
			}
			if done++; done == 3 {
				s.Close() // elsewhere, say at shutdown
			}
		}
	}
	// Output: session over: session closed
}

// A fenced write to ZooKeeper itself: it commits only while the lease is
// held, whatever pause the holder went through.
func ExampleSession_Conn() {
	ctx := context.Background()
	s, err := zkrecipes.Connect(ctx, servers())
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	m, _ := zklock.NewMutex(s, "/myapp/locks/config")
	lease, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)

	_, err = s.Conn().Multi(lease.Guard(),
		&zk.SetDataRequest{Path: "/", Data: nil, Version: -1})
	fmt.Println("written while held:", err == nil)
	// Output: written while held: true
}

// Wait at most a second; a lock held elsewhere is not an error to retry
// blindly.
func Example_tryLock() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := zkrecipes.Connect(ctx, servers())
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	m, _ := zklock.NewMutex(s, "/myapp/locks/cron")
	lease, err := m.TryLock(ctx)
	switch {
	case errors.Is(err, zklock.ErrLocked):
		fmt.Println("another instance runs the job")
		return
	case err != nil:
		log.Fatal(err)
	}
	defer lease.Unlock(context.Background())
	fmt.Println("running the job")
	// Output: running the job
}

// A leader candidate that campaigns again after every session loss:
// Supervise makes a new Session whenever the old one ends, and Election.Run
// campaigns on it. Here the lead function steps down once and the program
// stops.
func ExampleSupervise() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	err := zkrecipes.Supervise(ctx, servers(), func(ctx context.Context, s *zkrecipes.Session) error {
		el, err := zklock.NewElection(s, "/myapp/leader")
		if err != nil {
			return err
		}
		return el.Run(ctx, []byte("worker-1"), func(lctx context.Context) error {
			fmt.Println("leading")
			stop() // in a real service: lead until lctx ends
			return nil
		})
	}, zkrecipes.WithSessionTimeout(10*time.Second))
	fmt.Println(errors.Is(err, context.Canceled))
	// Output:
	// leading
	// true
}

// Connect with credentials: the nodes the recipes create on this session
// are then for this identity only (the digest scheme's "auth" ACL), so a
// session without them cannot delete a contender's node or join the line.
func ExampleConnect() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := zkrecipes.Connect(ctx, servers(),
		zkrecipes.WithSessionTimeout(10*time.Second),
		zkrecipes.WithAuth("digest", []byte("reporter:s3cret")))
	if err != nil {
		log.Fatal(err) // says which servers were tried, and why each failed
	}
	defer s.Close()

	m, _ := zklock.NewMutex(s, "/reports/locks/daily") // made for reporter only
	lease, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)

	stranger, err := zkrecipes.Connect(ctx, servers())
	if err != nil {
		log.Fatal(err)
	}
	defer stranger.Close()
	err = stranger.Conn().Delete(lease.Path(), -1)
	fmt.Println("a stranger deletes the holder's node:", err)
	// Output: a stranger deletes the holder's node: zk: not authenticated
}

// Connect over TLS to the servers' secureClientPort, with a client
// certificate (which a server with ssl.clientAuth=need asks for; the
// session is then also authenticated as x509 with its subject). A server
// whose certificate is not trusted, or that refuses ours, fails Connect at
// once; so does a plaintext port, named as such.
func ExampleWithTLS() {
	ca, err := os.ReadFile("/etc/zookeeper/ca.pem")
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair("/etc/myapp/client.pem", "/etc/myapp/client-key.pem")
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := zkrecipes.Connect(ctx, []string{"zk1:2281", "zk2:2281", "zk3:2281"},
		zkrecipes.WithTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}}))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
}

// Follow a configuration node: its state now, then every state it settles
// in, in order, the last one never missed.
func ExampleWatch() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := zkrecipes.Connect(ctx, servers())
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	const path = "/myapp-config"
	if _, err := s.Conn().Create(path, []byte("workers=4"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		log.Fatal(err)
	}

	// Elsewhere, an operator changes the node, then removes it.
	changes := []func(){
		func() { _, _ = s.Conn().Set(path, []byte("workers=8"), -1) },
		func() { _ = s.Conn().Delete(path, -1) },
	}
	for st, err := range zkrecipes.Watch(ctx, s, path) {
		if err != nil {
			log.Fatal(err) // the session is over, or the node cannot be read
		}
		if !st.Exists {
			fmt.Println("gone")
			break
		}
		fmt.Println("config:", string(st.Data))
		changes[0]()
		changes = changes[1:]
	}
	// Output:
	// config: workers=4
	// config: workers=8
	// gone
}
