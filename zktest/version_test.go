package zktest

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lookFor returns the installation ZKTEST_VERSION=version names, with
// ZK_HOME and ZOOKEEPER_JAR unset, or skips when it cannot be had.
func lookFor(t *testing.T, version string) *localInstall {
	t.Helper()
	t.Setenv("ZK_HOME", "")
	t.Setenv("ZOOKEEPER_JAR", "")
	t.Setenv(versionEnv, version)
	li, err := lookLocal()
	switch {
	case errors.Is(err, errNoLocal):
		t.Skipf("no local ZooKeeper %s: %v", version, err)
	case version == "3.9" && errors.Is(err, errBadInstall):
		t.Skipf("ZooKeeper 3.9 was not fetched (scripts/zk39-fetch.sh): %v", err)
	}
	require.NoError(t, err)
	return li
}

// startFor starts a standalone server of li, killed at t.Cleanup.
func startFor(t *testing.T, li *localInstall) (*node, error) {
	t.Helper()
	n, err := startStandalone(li, filepath.Join(t.TempDir(), "zk"), standaloneConfig())
	if n != nil {
		t.Cleanup(n.kill)
	}
	return n, err
}

func TestVersionChosenByEnvironment(t *testing.T) {
	for _, version := range []string{"3.8", "3.9"} {
		t.Run(version, func(t *testing.T) {
			li := lookFor(t, version)
			assert.Equal(t, version, li.want)
			n, err := startFor(t, li)
			require.NoError(t, err)
			assert.True(t, strings.HasPrefix(n.version, version+"."), "ZKTEST_VERSION=%s started ZooKeeper %q (%s)", version, n.version, li.from)
			reported, err := ServerVersion(n.addr)
			require.NoError(t, err)
			assert.Equal(t, n.version, reported)
			t.Logf("ZKTEST_VERSION=%s: ZooKeeper %s from %s", version, reported, li.from)
		})
	}
}

// A server of another release than the one asked for fails the start: a
// run meant to prove 3.9 never passes on 3.8.
func TestVersionOtherReleaseFails(t *testing.T) {
	li := lookFor(t, "")
	n, err := startFor(t, li)
	require.NoError(t, err)
	other := "3.9"
	if strings.HasPrefix(n.version, "3.9.") {
		other = "3.8"
	}
	asked := *li
	asked.want = other
	_, err = startFor(t, &asked)
	require.ErrorIs(t, err, errWrongVersion)
	assert.Contains(t, err.Error(), versionEnv+"="+other)
	assert.Contains(t, err.Error(), n.version)
}

func TestVersionBadSettings(t *testing.T) {
	t.Setenv("ZK_HOME", "")
	t.Setenv("ZOOKEEPER_JAR", "")
	t.Run("unknown release", func(t *testing.T) {
		t.Setenv(versionEnv, "3.7")
		_, err := lookLocal()
		require.ErrorIs(t, err, errBadInstall)
		assert.Contains(t, err.Error(), "want 3.8 or 3.9")
	})
	t.Run("3.9 not fetched", func(t *testing.T) {
		t.Setenv(versionEnv, "3.9")
		t.Setenv(cacheEnv, t.TempDir())
		_, err := lookLocal()
		if errors.Is(err, errNoLocal) {
			t.Skipf("no java: %v", err)
		}
		require.ErrorIs(t, err, errBadInstall)
		assert.Contains(t, err.Error(), "scripts/zk39-fetch.sh")
	})
}

func TestReplyVersion(t *testing.T) {
	for reply, want := range map[string]string{
		"Zookeeper version: 3.9.3-${mvngit.commit.id}, built on 2026-03-08 16:19 UTC\nMode: standalone\n": "3.9.3",
		"Zookeeper version: 3.8.0-5a02a05eddb59aee6ac762f7ea82e92a68eb9c0f, built on 2022-02-25\n":        "3.8.0",
		"Zookeeper version: 3.9.3, built on x\n":                                                          "3.9.3",
		"Mode: leader\n":                                                                                  "",
	} {
		assert.Equal(t, want, replyVersion(reply), "%q", reply)
	}
}
