// Package docker gives zktest's shared server a source in Docker: a
// container of the official zookeeper:3.8 image, started with
// testcontainers-go when a Docker engine answers (DOCKER_HOST, or the
// default socket).
//
// It is a module of its own, github.com/zkrecipes/zkrecipes/zktest/docker,
// so that the recipes and zktest bring no Docker module into their
// importers' builds: only the tests that import this package do.
//
// Call [Main] from TestMain, as os.Exit(docker.Main(m)), and every
// zktest.Start of the test binary returns a server that comes from
// ZK_CONNECT when it is set, else from a container, else from a local
// installation (see zktest's package doc); without any, the tests are
// skipped. Tests without a TestMain call [Start] instead of zktest.Start.
// zktest.StartCluster and zktest.StartPrivate always run local servers.
//
// The container is configured like zktest's local server (sessions of 1 s
// to 60 s, every four-letter word allowed, no fsync) and lives as long as
// the process that started it: a watchdog process removes it when the
// process exits, however it exits (kill -9 too). This needs the docker
// command on PATH; with it, testcontainers' reaper (Ryuk) is not needed,
// and is not started (TESTCONTAINERS_RYUK_DISABLED=true unless set), so
// that no image is asked for but ZooKeeper's. Containers whose process is
// gone are swept at the next start.
//
// What cannot run says so and falls back to a local installation: no
// engine at DOCKER_HOST (the default socket is not tried when DOCKER_HOST
// names another, as with the docker command), no image and no registry to
// pull it from (one attempt), no docker command and no reaper.
//
// The command zkcontainer (cmd/zkcontainer) runs any command with
// ZK_CONNECT set to such a container, for test binaries that do not import
// this package.
package docker
