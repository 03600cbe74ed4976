package zktest_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes/zktest"
)

// sourceChildEnv makes the test binary, run by TestStartFrom, call
// StartFrom with the Source its value names, then Start, and print what
// each returned. The shared server is per test binary, so each case needs a
// binary of its own.
const sourceChildEnv = "ZKTEST_SOURCE_CHILD"

// errBoom is the error of the failing Source.
var errBoom = errors.New("boom")

func startFromChild(t *testing.T, mode string) {
	called := 0
	src := func() ([]string, string, error) {
		called++
		switch mode {
		case "serves", "zkconnect":
			return []string{"127.0.0.1:1", "127.0.0.1:2"}, "a test source", nil
		case "unavailable":
			return nil, "a test source", fmt.Errorf("nothing here: %w", zktest.ErrUnavailable)
		default:
			return nil, "a test source", errBoom
		}
	}
	srv := zktest.StartFrom(t, src)
	again := zktest.Start(t) // the first call decided: the same server
	fmt.Printf("ZKTEST-SOURCE %s %q %s %d\n", strings.Join(srv.Addrs(), ","), srv.LogFile(), strings.Join(again.Addrs(), ","), called)
}

// StartFrom takes the server from ZK_CONNECT, else from its Source, else
// from a local installation when the Source has none; a Source's other
// errors fail the test; and the first call of a test binary decides for the
// calls after it.
func TestStartFrom(t *testing.T) {
	if mode := os.Getenv(sourceChildEnv); mode != "" {
		startFromChild(t, mode)
		return
	}
	run := func(t *testing.T, mode string, env ...string) (out string, err error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStartFrom$", "-test.v")
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "ZK_CONNECT=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, append(env, sourceChildEnv+"="+mode)...)
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	// result parses the child's line: the addresses of StartFrom, its log
	// file, those of Start, and how many times the Source was called.
	result := func(t *testing.T, out string) (addrs, logFile, again string, called int) {
		t.Helper()
		for line := range strings.Lines(out) {
			if rest, ok := strings.CutPrefix(line, "ZKTEST-SOURCE "); ok {
				_, err := fmt.Sscanf(rest, "%s %q %s %d", &addrs, &logFile, &again, &called)
				require.NoError(t, err, line)
				return addrs, logFile, again, called
			}
		}
		t.Fatalf("the child printed no result:\n%s", out)
		return
	}

	t.Run("serves", func(t *testing.T) {
		out, err := run(t, "serves")
		require.NoError(t, err, out)
		addrs, logFile, again, called := result(t, out)
		assert.Equal(t, "127.0.0.1:1,127.0.0.1:2", addrs)
		assert.Empty(t, logFile, "zktest does not run a Source's server")
		assert.Equal(t, addrs, again, "Start after StartFrom must return the same server")
		assert.Equal(t, 1, called)
	})
	t.Run("zkconnect", func(t *testing.T) {
		out, err := run(t, "zkconnect", "ZK_CONNECT=127.0.0.1:3, 127.0.0.1:4")
		require.NoError(t, err, out)
		addrs, _, again, called := result(t, out)
		assert.Equal(t, "127.0.0.1:3,127.0.0.1:4", addrs)
		assert.Equal(t, addrs, again)
		assert.Zero(t, called, "the Source must not be called when ZK_CONNECT is set")
	})
	t.Run("unavailable", func(t *testing.T) {
		out, err := run(t, "unavailable")
		require.NoError(t, err, out)
		if strings.Contains(out, "--- SKIP") {
			require.Contains(t, out, "nothing here", "the skip must tell the Source's reason")
			t.Skip("no local installation to fall back on")
		}
		addrs, logFile, again, called := result(t, out)
		assert.True(t, strings.HasPrefix(addrs, "127.0.0.1:"), addrs)
		assert.NotEmpty(t, logFile, "the local server zktest runs has a log")
		assert.Equal(t, addrs, again)
		assert.Equal(t, 1, called)
	})
	t.Run("fails", func(t *testing.T) {
		out, err := run(t, "fails")
		require.Error(t, err, "a Source's error must fail the test:\n%s", out)
		assert.Contains(t, out, "zktest: Start: boom")
		assert.NotContains(t, out, "ZKTEST-SOURCE")
	})
}
