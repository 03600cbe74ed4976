package docker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/zkrecipes/zkrecipes/zktest"
)

// dockerImage is the official ZooKeeper image used when Docker is available:
// zookeeper:3.8, or zookeeper:3.9 with ZKTEST_VERSION=3.9, as zktest's
// local servers (any other value fails the tests there).
var dockerImage = "zookeeper:" + cmp.Or(os.Getenv("ZKTEST_VERSION"), "3.8")

// dockerOwnerLabel marks the containers this package starts. Its value
// names the process (a test binary) that owns the container:
// "BOOTID/PIDNS/PID" (see ownerID).
const dockerOwnerLabel = "org.zkrecipes.zktest.owner"

// dockerStartTimeout bounds the start of a container, pulling the
// image included.
const dockerStartTimeout = 5 * time.Minute

// logTailLines is how much of a container's output an error quotes.
const logTailLines = 60

// containers are the containers this process started, with their
// watchdogs' pipes.
var containers struct {
	mu sync.Mutex
	// names, in the order started; the last is the one a test binary's
	// shared server runs in.
	names []string
	// watchdogs are the write ends of the pipes the containers' watchdogs
	// read; keeping them referenced keeps them open (an unreachable
	// *os.File is closed by its finalizer) until the process exits.
	watchdogs []*os.File
	// unavailable is why Source last had no server to offer, or nil.
	unavailable error
}

// Start returns the ZooKeeper shared by every test of this test binary, as
// [zktest.Start] does, but from a container when ZK_CONNECT is not set and
// a Docker engine answers (see [Source]); else from a local installation,
// else the test is skipped. It is [zktest.StartFrom] with [Source]: the
// first call of the binary decides, so call it, not zktest.Start, from
// every test of a binary, or call [Main] from TestMain.
func Start(t testing.TB) *zktest.Server {
	t.Helper()
	return zktest.StartFrom(t, Source)
}

// Main is [zktest.Main] with [Source]: call it from TestMain, as
// os.Exit(docker.Main(m)). It starts the shared server before the tests,
// from ZK_CONNECT, else a container, else a local installation, puts its
// address in ZK_CONNECT for the examples, and runs the tests. Every
// zktest.Start and [Start] of the binary then returns that server.
func Main(m *testing.M) int { return zktest.MainFrom(m, Source) }

// Source is a [zktest.Source]: when a Docker engine answers (DOCKER_HOST,
// or the default socket) and has the zookeeper:3.8 image (zookeeper:3.9
// with ZKTEST_VERSION=3.9) or can pull it, it
// starts a container of it, configured like zktest's local server, and
// returns its address once it serves; else it returns an error wrapping
// [zktest.ErrUnavailable] that says why, and zktest falls back to a local
// installation. Each call starts a container, which lives until this
// process exits, however it exits: see startDocker for how it is removed
// and where its port is reached.
//
// DOCKER_HOST, when set, is the only engine Source uses, as for Docker's
// own command: testcontainers-go would go on to the default socket when
// the engine it names does not answer.
//
// Source asks for no image it does not use: it removes its containers
// itself (with the docker command), so unless TESTCONTAINERS_RYUK_DISABLED
// is set it sets it to true for this process, before testcontainers-go
// reads it, and testcontainers' reaper, whose image (testcontainers/ryuk)
// air-gapped machines do not have, is not started. Without the docker
// command the reaper must run, and must be there or pullable.
func Source() ([]string, string, error) {
	if dockerImage != "zookeeper:3.8" && dockerImage != "zookeeper:3.9" {
		return nil, "", fmt.Errorf("zktest/docker: ZKTEST_VERSION=%s: want 3.8 or 3.9", os.Getenv("ZKTEST_VERSION"))
	}
	reaperOff()
	daemon, err := engine()
	if err == nil {
		var addr string
		if addr, err = startDocker(daemon); err == nil {
			return []string{addr}, "Docker image " + dockerImage, nil
		}
	}
	if errors.Is(err, zktest.ErrUnavailable) {
		containers.mu.Lock()
		containers.unavailable = err
		containers.mu.Unlock()
		return nil, "Docker", err
	}
	return nil, "", err
}

// reaperOff sets TESTCONTAINERS_RYUK_DISABLED=true for this process when
// it is not set and the docker command, which removes the containers of
// this package, is on PATH (see Source). It has no effect once
// testcontainers-go has read its configuration in this process.
func reaperOff() {
	if _, set := os.LookupEnv(ryukDisabledEnv); set {
		return
	}
	if _, err := exec.LookPath("docker"); err == nil {
		os.Setenv(ryukDisabledEnv, "true")
	}
}

// ryukDisabledEnv is testcontainers-go's switch for its reaper.
const ryukDisabledEnv = "TESTCONTAINERS_RYUK_DISABLED"

// unavailable wraps zktest.ErrUnavailable with why.
func unavailable(format string, args ...any) error {
	return fmt.Errorf("zktest/docker: %s: %w", fmt.Sprintf(format, args...), zktest.ErrUnavailable)
}

// engine returns the engine testcontainers-go uses, as a DOCKER_HOST URL
// ("unix:///var/run/docker.sock", "tcp://host:2376"), once it has answered
// within 5 seconds; else an error wrapping zktest.ErrUnavailable. Without
// an engine (no socket, no DOCKER_HOST) it returns at once.
func engine() (string, error) {
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		if env := os.Getenv("DOCKER_HOST"); env != "" {
			return "", unavailable("DOCKER_HOST=%s does not answer (%v)", env, err)
		}
		return "", unavailable("no Docker engine answers (%v)", err)
	}
	defer p.Close()
	daemon := p.Client().DaemonHost()
	if env := os.Getenv("DOCKER_HOST"); env != "" && env != daemon {
		return "", unavailable("DOCKER_HOST=%s does not answer (testcontainers-go would use %s instead; the docker command would not, nor does zktest/docker)", env, daemon)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := p.Client().Info(ctx, client.InfoOptions{}); err != nil {
		return "", unavailable("the Docker engine at %s does not answer: %v", daemon, err)
	}
	return daemon, nil
}

// needImage returns nil when the engine has image, pulling it once if it
// has not; else an error wrapping zktest.ErrUnavailable (no registry, no
// such image). One attempt, not testcontainers-go's retries for minutes.
func needImage(ctx context.Context, image, why string) error {
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return unavailable("%v", err)
	}
	defer p.Close()
	cli := p.Client()
	if _, err := cli.ImageInspect(ctx, image); err == nil {
		return nil
	}
	pull, err := cli.ImagePull(ctx, image, client.ImagePullOptions{})
	if err == nil {
		err = pull.Wait(ctx)
		pull.Close()
	}
	if _, ierr := cli.ImageInspect(ctx, image); ierr == nil {
		return nil
	}
	return unavailable("no image %s here (%s), and it could not be pulled: %v", image, why, err)
}

// startDocker starts a server as a container and returns its client
// address once it serves. The container is configured like the local
// server (see zktest's package doc).
//
// # Removal
//
// This package removes the container itself, as zktest kills its local JVM:
// a watchdog process (containerWatchdogScript) holds the read end of a pipe
// whose write end only the test binary holds, and runs `docker rm -f -v` on
// the container when it reads EOF, that is when the test binary has exited,
// however it exited (kill -9 included). The watchdog is started before the
// container, under the container's name, so no moment exists at which the
// container runs unwatched. Testcontainers' reaper (Ryuk) is not needed,
// and may be disabled with TESTCONTAINERS_RYUK_DISABLED=true (it must be
// where its image cannot be pulled); when it runs, it removes the container
// too. At start, containers left by earlier test binaries of this machine
// that are gone (their watchdog was killed too) are removed.
//
// # Where the container's port is reached
//
// Not where testcontainers-go says. Its host (Container.Host, which its
// wait.ForListeningPort strategy and PortEndpoint dial) is "localhost" on a
// plain machine, but whenever the file /.dockerenv exists it assumes that
// the tests run inside a container that talks to the host's engine through
// a mounted socket, and takes the gateway of the default bridge network
// instead; when that network shows no gateway in its IPAM configuration
// (Docker 20.10's, Debian's docker.io, shows only the subnet) it falls back
// to the default route's gateway (`ip route`). On a machine whose root file
// system was made as a Docker image, /.dockerenv is there even though the
// engine and the tests run side by side: the strategy then dialled the
// machine's upstream router, which does not answer, until "external check:
// dial: context deadline exceeded", while the published port answered on
// 127.0.0.1 all along. IPv6 was not the cause: where "localhost" is the
// host and resolves to ::1 first, a port published on 0.0.0.0 only refuses
// ::1 at once and the dial goes on to 127.0.0.1. And that check proved
// little anyway: Docker's proxy accepts connections on a published port
// before the server listens.
//
// So startDocker waits only for the port to be published, then finds the
// host itself: with a local engine (a unix socket), the loopback address,
// 127.0.0.1 then ::1, at which the published port accepts a connection;
// only if neither does (the tests run in a container of their own, beside
// the engine) testcontainers' host. With a remote engine
// (DOCKER_HOST=tcp://) it is that engine's host;
// TESTCONTAINERS_HOST_OVERRIDE, when set, wins. Then it waits until the
// server answers srvr as a standalone server.
func startDocker(daemon string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dockerStartTimeout)
	defer cancel()
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("zktest/docker: container of %s: %w", dockerImage, err)
	}

	cli, cliErr := exec.LookPath("docker")
	ryukOff := testcontainers.ReadConfig().RyukDisabled
	if cliErr != nil && ryukOff {
		return "", unavailable("no docker command on PATH, and %s=true: nothing could remove the container once the test binary exits (%v)", ryukDisabledEnv, cliErr)
	}
	if !ryukOff {
		// The reaper's image, which testcontainers-go would otherwise try
		// to pull for minutes: the deprecated name still holds the value
		// it uses (v0.45), and no other exported name does.
		//lint:ignore SA1019 the image testcontainers-go's reaper runs
		if err := needImage(ctx, testcontainers.ReaperDefaultImage, "testcontainers' reaper; "+ryukDisabledEnv+"=true does without it"); err != nil {
			return "", err
		}
	}
	if err := needImage(ctx, dockerImage, "scripts/zk-image.sh builds a local stand-in"); err != nil {
		return "", err
	}
	owner := ownerID()
	name, err := newContainerName()
	if err != nil {
		return fail(err)
	}
	if cliErr == nil {
		removeStaleContainers(ctx, cli, daemon, owner)
		w, err := startContainerWatchdog(cli, daemon, name)
		if err != nil {
			return fail(err)
		}
		containers.mu.Lock()
		containers.watchdogs = append(containers.watchdogs, w)
		containers.mu.Unlock()
	}
	containers.mu.Lock()
	containers.names = append(containers.names, name)
	containers.mu.Unlock()

	ctr, err := testcontainers.Run(ctx, dockerImage,
		testcontainers.WithName(name),
		testcontainers.WithLabels(map[string]string{dockerOwnerLabel: owner}),
		testcontainers.WithExposedPorts("2181/tcp"),
		testcontainers.WithEnv(map[string]string{
			"ZOO_4LW_COMMANDS_WHITELIST": "*",
			"ZOO_ADMINSERVER_ENABLED":    "false",
			"ZOO_MAX_CLIENT_CNXNS":       "0",
			"ZOO_CFG_EXTRA":              "minSessionTimeout=1000 maxSessionTimeout=60000 forceSync=no",
		}),
		// Only that the port is published: no dial (see above).
		testcontainers.WithWaitStrategy(wait.ForMappedPort("2181/tcp").WithStartupTimeout(time.Minute)),
	)
	if err != nil {
		if ctr != nil {
			_ = testcontainers.TerminateContainer(ctr)
		}
		return fail(fmt.Errorf("start: %w", err))
	}
	port, err := ctr.MappedPort(ctx, "2181/tcp")
	if err != nil {
		return fail(err)
	}
	host, err := containerHost(ctx, ctr, daemon, port.Port())
	if err != nil {
		return fail(err)
	}
	addr := net.JoinHostPort(host, port.Port())
	for {
		err := standalone(addr)
		if err == nil {
			return addr, nil
		}
		if st, serr := ctr.State(ctx); serr == nil && !st.Running {
			return fail(fmt.Errorf("%s exited (status %d) before serving at %s; end of its log:\n%s", name, st.ExitCode, addr, containerLogTail(ctr)))
		}
		select {
		case <-ctx.Done():
			return fail(fmt.Errorf("%s not ready at %s: %w; end of its log:\n%s", name, addr, err, containerLogTail(ctr)))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// standalone returns nil when the server at addr serves as a standalone
// server; else why not.
func standalone(addr string) error {
	reply, err := zktest.FourLetter(addr, "srvr")
	if err != nil {
		return err
	}
	for line := range strings.Lines(reply) {
		if mode, ok := strings.CutPrefix(line, "Mode:"); ok {
			if mode = strings.TrimSpace(mode); mode != "standalone" {
				return fmt.Errorf("%s is a %s", addr, mode)
			}
			return nil
		}
	}
	return fmt.Errorf("srvr to %s: no Mode in reply %q", addr, reply)
}

// containerHost returns the host at which the container's published port
// is reached from here (see startDocker).
func containerHost(ctx context.Context, ctr testcontainers.Container, daemon, port string) (string, error) {
	if h := os.Getenv("TESTCONTAINERS_HOST_OVERRIDE"); h != "" {
		return h, nil
	}
	u, err := url.Parse(daemon)
	if err == nil && (u.Scheme == "unix" || u.Scheme == "npipe") {
		for _, h := range []string{"127.0.0.1", "::1"} {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(h, port), 2*time.Second)
			if err == nil {
				c.Close()
				return h, nil
			}
		}
	}
	return ctr.Host(ctx) // the engine's host, or the guess for a container
}

// containerLogTail returns the last lines of the container's output.
func containerLogTail(ctr testcontainers.Container) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := ctr.Logs(ctx)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	lines := strings.SplitAfter(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, "")
}

// newContainerName returns a name for a container, unique to this process.
func newContainerName() (string, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return fmt.Sprintf("zktest-%d-%s", os.Getpid(), hex.EncodeToString(b)), nil
}

// containerWatchdogScript waits until fd 3 reaches EOF, i.e. until the test
// binary, the only holder of the pipe's write end, has exited, however it
// exited; then it removes the container $2 (and its anonymous volumes) with
// the docker command $1. A container that was never created makes docker
// rm fail, harmlessly. Its output goes nowhere: the binary is gone.
const containerWatchdogScript = `docker=$1 name=$2
read -r _ <&3
exec 3<&-
"$docker" rm -f -v "$name"
`

// startContainerWatchdog starts the watchdog of container name and returns
// the write end of its pipe, which the caller must keep open as long as the
// container may live.
func startContainerWatchdog(cli, daemon, name string) (*os.File, error) {
	r, w, err := os.Pipe() // both ends close-on-exec: no other child inherits w
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", containerWatchdogScript, "zktest-container-watchdog", cli, name)
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+daemon)
	cmd.ExtraFiles = []*os.File{r} // fd 3; stdin, stdout, stderr: /dev/null
	// Own process group: a ^C meant for `go test` reaches the test binary,
	// whose exit then removes the container through the pipe.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("start container watchdog: %w", err)
	}
	// Never waited for (no goroutine may outlive a test): it lives as long
	// as this process, and init reaps it after.
	return w, nil
}

// ownerID names this test binary among all processes that may share a
// Docker engine: boot id, pid namespace and pid. "" when /proc does not
// tell (then no stale container is ever removed on its behalf).
func ownerID() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	ns, err := os.Readlink("/proc/self/ns/pid") // "pid:[4026531836]"
	if err != nil {
		return ""
	}
	ns = strings.TrimSuffix(strings.TrimPrefix(ns, "pid:["), "]")
	return strings.TrimSpace(string(boot)) + "/" + ns + "/" + strconv.Itoa(os.Getpid())
}

// removeStaleContainers removes the containers zktest started for test
// binaries of this machine and pid namespace that are gone, which their
// watchdogs should have removed (a watchdog killed with its test binary, an
// engine that was down). Best effort: errors are ignored.
func removeStaleContainers(ctx context.Context, cli, daemon, owner string) {
	if owner == "" {
		return
	}
	self := owner[:strings.LastIndexByte(owner, '/')+1] // "BOOTID/PIDNS/"
	docker := func(args ...string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, cli, args...)
		cmd.Env = append(os.Environ(), "DOCKER_HOST="+daemon)
		return cmd.Output()
	}
	out, err := docker("ps", "-a", "--filter", "label="+dockerOwnerLabel,
		"--format", `{{.ID}} {{.Label "`+dockerOwnerLabel+`"}}`)
	if err != nil {
		return
	}
	var stale []string
	for line := range strings.Lines(string(out)) {
		id, o, ok := strings.Cut(strings.TrimSpace(line), " ")
		rest, found := strings.CutPrefix(o, self)
		if !ok || !found {
			continue // another machine's, or another pid namespace's
		}
		pid, err := strconv.Atoi(rest)
		if err == nil && pid > 0 && pid != os.Getpid() && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			stale = append(stale, id)
		}
	}
	if len(stale) > 0 {
		_, _ = docker(append([]string{"rm", "-f", "-v"}, stale...)...)
	}
}
