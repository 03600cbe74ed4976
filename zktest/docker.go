package zktest

import (
	"context"
	"fmt"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// dockerImage is the official ZooKeeper image used when Docker is available.
const dockerImage = "zookeeper:3.8"

// dockerAvailable reports whether a Docker engine answers, within 5 seconds.
// Without an engine (no socket, no DOCKER_HOST) it returns at once.
func dockerAvailable() bool {
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.Health(ctx) == nil // Health closes the provider
}

// startDocker starts the shared server as a container and returns its
// client address once it serves. The container is configured like the local
// server (see the package doc) and is never terminated by zktest:
// testcontainers' reaper (Ryuk) removes it after the test binary exits.
func startDocker() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // includes pulling the image
	defer cancel()
	ctr, err := testcontainers.Run(ctx, dockerImage,
		testcontainers.WithExposedPorts("2181/tcp"),
		testcontainers.WithEnv(map[string]string{
			"ZOO_4LW_COMMANDS_WHITELIST": "*",
			"ZOO_ADMINSERVER_ENABLED":    "false",
			"ZOO_MAX_CLIENT_CNXNS":       "0",
			"ZOO_CFG_EXTRA":              "minSessionTimeout=1000 maxSessionTimeout=60000 forceSync=no",
		}),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("2181/tcp")),
	)
	if err != nil {
		return "", fmt.Errorf("zktest: start Docker container %s: %w", dockerImage, err)
	}
	addr, err := ctr.PortEndpoint(ctx, "2181/tcp", "")
	if err != nil {
		return "", fmt.Errorf("zktest: Docker container %s: %w", dockerImage, err)
	}
	for {
		mode, err := serverMode(addr, time.Second)
		if err == nil && isStandalone(mode) {
			return addr, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("zktest: Docker container %s at %s not ready: %w", dockerImage, addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
