package docker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"

	"github.com/zkrecipes/zkrecipes/zktest"
)

// zkConnectOutside is set when ZK_CONNECT was set before Main set it: the
// shared server is then not a container.
var zkConnectOutside bool

// TestMain starts the shared server as users' tests would: from a
// container when a Docker engine answers.
func TestMain(m *testing.M) {
	zkConnectOutside = os.Getenv("ZK_CONNECT") != ""
	os.Exit(Main(m))
}

// With an engine, Start's server is this binary's container, configured
// like zktest's local server, and Main put its address in ZK_CONNECT.
func TestStartRunsContainer(t *testing.T) {
	cli, daemon := needDockerCLI(t)
	if zkConnectOutside {
		t.Skip("ZK_CONNECT is set: the shared server is not a container")
	}
	srv := Start(t)
	name := lastContainer()
	if why := lastUnavailable(); name == "" && why != nil {
		t.Skipf("Source had no container to offer, and said why: %v", why)
	}
	require.NotEmpty(t, name, "Start's server must run in a container of this binary")
	assert.Equal(t, srv.Addr(), os.Getenv("ZK_CONNECT"), "Main must give the examples the shared server")
	assert.Empty(t, srv.LogFile())
	assert.Equal(t, "true", dockerCmd(t, cli, daemon, "inspect", "-f", "{{.State.Running}}", name))

	conf, err := zktest.FourLetter(srv.Addr(), "conf")
	require.NoError(t, err)
	for _, want := range []string{"minSessionTimeout=1000", "maxSessionTimeout=60000", "maxClientCnxns=0"} {
		assert.Contains(t, conf, want)
	}
	require.NoError(t, standalone(srv.Addr()))
}

// noEngineChildEnv makes the test binary, run by TestSourceWithoutEngine,
// call Source with no engine to answer and print what it returned.
const noEngineChildEnv = "ZKTEST_DOCKER_NO_ENGINE"

// With no engine at DOCKER_HOST, Source says it has nothing to offer, and
// why, so that zktest falls back to a local installation; it starts
// nothing, even where an engine answers at the default socket (to which
// testcontainers-go would go on). In a child process: testcontainers reads
// DOCKER_HOST once per process.
func TestSourceWithoutEngine(t *testing.T) {
	if os.Getenv(noEngineChildEnv) != "" {
		addrs, _, err := Source()
		fmt.Printf("ZKTEST-NO-ENGINE %v %t %q\n", addrs, errors.Is(err, zktest.ErrUnavailable), lastContainer())
		fmt.Printf("ZKTEST-NO-ENGINE-WHY %v\n", err)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSourceWithoutEngine$", "-test.v")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ZK_CONNECT=") && !strings.HasPrefix(kv, "DOCKER_HOST=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// A ZK_CONNECT for the child's Main, which then starts nothing (it
	// does not dial it); an engine at a socket that does not exist.
	cmd.Env = append(cmd.Env, noEngineChildEnv+"=1", "ZK_CONNECT=127.0.0.1:1",
		"DOCKER_HOST=unix://"+filepath.Join(t.TempDir(), "no-engine.sock"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), `ZKTEST-NO-ENGINE [] true ""`)
	assert.Contains(t, string(out), "DOCKER_HOST=unix://", "the reason names the engine asked for")
}

// reaperChildEnv makes the test binary, run by TestSourceTurnsReaperOff,
// call Source and print whether testcontainers' reaper is disabled.
const reaperChildEnv = "ZKTEST_DOCKER_REAPER"

// Source starts no reaper, whose image air-gapped machines do not have,
// when it removes its containers itself (the docker command is on PATH),
// unless told otherwise; without the docker command it leaves the reaper
// on. Whether or not an engine answers: the setting is made first. In
// child processes: testcontainers reads its configuration once per process.
func TestSourceTurnsReaperOff(t *testing.T) {
	if os.Getenv(reaperChildEnv) != "" {
		_, _, err := Source()
		fmt.Printf("ZKTEST-REAPER-DISABLED %t %v\n", testcontainers.ReadConfig().RyukDisabled, err)
		return
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "docker") // a docker command that fails
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\nexit 1\n"), 0o755))
	for _, c := range []struct {
		name, path, env string
		disabled        bool
	}{
		{"docker command, unset", dir, "", true},
		{"docker command, set to false", dir, "false", false},
		{"no docker command", t.TempDir(), "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestSourceTurnsReaperOff$", "-test.v")
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "ZK_CONNECT=") && !strings.HasPrefix(kv, "DOCKER_HOST=") &&
					!strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, ryukDisabledEnv+"=") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			cmd.Env = append(cmd.Env, reaperChildEnv+"=1", "ZK_CONNECT=127.0.0.1:1", "PATH="+c.path,
				"DOCKER_HOST=unix://"+filepath.Join(t.TempDir(), "no-engine.sock"))
			if c.env != "" {
				cmd.Env = append(cmd.Env, ryukDisabledEnv+"="+c.env)
			}
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			assert.Contains(t, string(out), fmt.Sprintf("ZKTEST-REAPER-DISABLED %t ", c.disabled))
		})
	}
}

// An image that is not here and cannot be pulled makes Source unavailable
// (zktest then falls back), after one attempt, not an error that fails
// the tests after minutes of retries.
func TestNeedImageThatCannotBeHad(t *testing.T) {
	needDockerCLI(t)
	ctx, cancel := context.WithTimeout(t.Context(), dockerStartTimeout)
	defer cancel()
	begin := time.Now()
	err := needImage(ctx, "127.0.0.1:1/zkrecipes/no-such-image:0", "a test")
	require.ErrorIs(t, err, zktest.ErrUnavailable)
	assert.Contains(t, err.Error(), "no-such-image")
	t.Logf("unavailable after %v: %v", time.Since(begin).Round(time.Millisecond), err)
}

// dockerChildEnv makes the test binary, run by TestDockerContainerRemovedOnKill,
// start the shared server from Docker, print where, and wait to be killed.
const dockerChildEnv = "ZKTEST_DOCKER_CHILD"

// needDockerCLI skips the test unless a Docker engine answers and the docker
// command is on PATH; it returns the command and the engine's DOCKER_HOST.
func needDockerCLI(t *testing.T) (cli, daemon string) {
	t.Helper()
	daemon, err := engine()
	if err != nil {
		t.Skipf("no Docker engine: %v", err)
	}
	cli, err = exec.LookPath("docker")
	if err != nil {
		t.Skip("no docker command")
	}
	return cli, daemon
}

// needZKImage skips the test unless the engine has the ZooKeeper image or
// can pull it.
func needZKImage(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), dockerStartTimeout)
	defer cancel()
	if err := needImage(ctx, dockerImage, "a test"); err != nil {
		t.Skip(err)
	}
}

// lastUnavailable returns why Source last had no server to offer, or nil.
func lastUnavailable() error {
	containers.mu.Lock()
	defer containers.mu.Unlock()
	return containers.unavailable
}

// lastContainer returns the name of the container this process started
// last ("" when none).
func lastContainer() string {
	containers.mu.Lock()
	defer containers.mu.Unlock()
	if len(containers.names) == 0 {
		return ""
	}
	return containers.names[len(containers.names)-1]
}

// dockerCmd runs the docker command against the engine testcontainers uses.
func dockerCmd(t *testing.T, cli, daemon string, args ...string) string {
	t.Helper()
	cmd := exec.Command(cli, args...)
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+daemon)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// The shared container must go when its test binary is killed with
// SIGKILL, with no help from testcontainers' reaper: a child test binary
// starts it, with TESTCONTAINERS_RYUK_DISABLED=true, and is killed.
func TestDockerContainerRemovedOnKill(t *testing.T) {
	if os.Getenv(dockerChildEnv) == "1" {
		srv := Start(t)
		fmt.Printf("ZKTEST-CONTAINER %s %s\n", lastContainer(), srv.Addr())
		time.Sleep(3 * time.Minute) // until killed
		t.Fatal("not killed")
	}
	cli, daemon := needDockerCLI(t)
	needZKImage(t)

	cmd := exec.Command(os.Args[0], "-test.run=^TestDockerContainerRemovedOnKill$", "-test.v")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ZK_CONNECT=") && !strings.HasPrefix(kv, "TESTCONTAINERS_RYUK_DISABLED=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, dockerChildEnv+"=1", "TESTCONTAINERS_RYUK_DISABLED=true", "DOCKER_HOST="+daemon)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var childErr strings.Builder
	cmd.Stderr = &childErr // copied by a goroutine that Wait ends
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	kill := func() {
		if !killed {
			killed = true
			_ = cmd.Process.Kill() // SIGKILL
			_ = cmd.Wait()
		}
	}
	defer kill()
	timer := time.AfterFunc(dockerStartTimeout, func() { _ = cmd.Process.Kill() })
	var name, addr string
	var output []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		output = append(output, sc.Text())
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "ZKTEST-CONTAINER" {
			name, addr = f[1], f[2]
			break
		}
	}
	timer.Stop()
	if name == "" {
		kill()
		t.Fatalf("the child printed no container; its output:\n%s\n%s", strings.Join(output, "\n"), childErr.String())
	}
	t.Logf("child %d runs container %s at %s", cmd.Process.Pid, name, addr)
	if got := dockerCmd(t, cli, daemon, "inspect", "-f", "{{.State.Running}}", name); got != "true" {
		t.Fatalf("container %s running: %s", name, got)
	}
	if reply, err := zktest.FourLetter(addr, "ruok"); err != nil || reply != "imok" {
		t.Fatalf("ruok at %s: %q, %v", addr, reply, err)
	}

	kill()
	begin := time.Now()
	for {
		if dockerCmd(t, cli, daemon, "ps", "-aq", "--filter", "name=^/"+name+"$") == "" {
			break
		}
		if time.Since(begin) > time.Minute {
			t.Fatalf("container %s still there a minute after its test binary was killed", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("container %s removed %v after its test binary was killed", name, time.Since(begin).Round(time.Millisecond))
	if _, err := zktest.FourLetter(addr, "ruok"); err == nil {
		t.Errorf("%s still answers", addr)
	}
}

// A container of a test binary that is gone, left behind by a watchdog that
// died with it, is removed when another test binary starts one; a
// container whose owner lives is not.
func TestRemoveStaleContainers(t *testing.T) {
	cli, daemon := needDockerCLI(t)
	owner := ownerID()
	if owner == "" {
		t.Skip("no /proc: no owner ids")
	}
	if err := exec.Command(cli, "-H", daemon, "image", "inspect", dockerImage).Run(); err != nil {
		t.Skipf("no image %s here", dockerImage)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	self := owner[:strings.LastIndexByte(owner, '/')+1]
	create := func(owner string) string {
		id := dockerCmd(t, cli, daemon, "create", "--label", dockerOwnerLabel+"="+owner, dockerImage)
		t.Cleanup(func() {
			c := exec.Command(cli, "rm", "-f", "-v", id)
			c.Env = append(os.Environ(), "DOCKER_HOST="+daemon)
			_ = c.Run()
		})
		return id
	}
	dead := create(fmt.Sprintf("%s%d", self, gone.Process.Pid))
	live := create(owner)
	elsewhere := create(fmt.Sprintf("another-boot/%d", gone.Process.Pid))

	removeStaleContainers(t.Context(), cli, daemon, owner)
	exists := func(id string) bool {
		return dockerCmd(t, cli, daemon, "ps", "-aq", "--no-trunc", "--filter", "id="+id) != ""
	}
	if exists(dead) {
		t.Errorf("the container of dead pid %d is still there", gone.Process.Pid)
	}
	if !exists(live) {
		t.Error("the container of a live test binary was removed")
	}
	if !exists(elsewhere) {
		t.Error("the container of another machine's test binary was removed")
	}
}
