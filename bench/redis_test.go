package bench

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// redisServer is a redis-server started by the test, on 127.0.0.1, with
// the persistence Debian's /etc/redis/redis.conf ships: no append-only file
// (appendonly no; appendfsync everysec would apply only with one), and RDB
// snapshots at most every minute (save 3600 1 300 100 60 10000). A kill -9
// therefore loses every key written since the last snapshot: the "Redis
// that restarts without fsync" of the Redlock debate.
type redisServer struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	pid  int
	done chan struct{}
}

// redisBinary returns the path of redis-server, or skips the test.
func redisBinary(t testing.TB) string {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not installed: apt-get install redis-server (make redis-compare does)")
	}
	return bin
}

func startRedis(t testing.TB, bin string) *redisServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	r := &redisServer{t: t, bin: bin, dir: t.TempDir(), port: port}
	r.start()
	t.Cleanup(r.kill)
	return r
}

func (r *redisServer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

// start runs the server and waits until it answers PING. Like zktest's
// servers, it is forked from a goroutine that keeps its thread locked, so
// that Pdeathsig kills it if the test binary dies.
func (r *redisServer) start() {
	r.t.Helper()
	logf, err := os.OpenFile(filepath.Join(r.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(r.bin,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(r.port), "--dir", r.dir,
		"--daemonize", "no", "--protected-mode", "yes",
		"--appendonly", "no", "--appendfsync", "everysec", "--save", "3600 1 300 100 60 10000")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
	}()
	if err := <-started; err != nil {
		r.t.Fatalf("redis-server: %v", err)
	}
	r.pid, r.done = cmd.Process.Pid, done
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", r.addr(), time.Second); err == nil {
			c.SetDeadline(time.Now().Add(time.Second))
			fmt.Fprint(c, "PING\r\n")
			buf := make([]byte, 16)
			n, _ := c.Read(buf)
			c.Close()
			if string(buf[:n]) == "+PONG\r\n" {
				return
			}
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server on %s does not answer PING", r.addr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill kills the server with SIGKILL and waits until it is gone.
func (r *redisServer) kill() {
	if r.done == nil {
		return
	}
	select {
	case <-r.done:
	default:
		_ = syscall.Kill(-r.pid, syscall.SIGKILL)
		<-r.done
	}
}

// restart is kill -9, then start at once, with the same port and
// directory: what it had not snapshotted is gone.
func (r *redisServer) restart() {
	r.kill()
	r.start()
}
