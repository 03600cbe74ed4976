package zktest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// ErrNotServing is returned (wrapped) by [FourLetter] when the server
// answers that it is not currently serving requests, e.g. a member of an
// ensemble that has no quorum or is still electing a leader.
var ErrNotServing = errors.New("zktest: server is not currently serving requests")

// ErrNotWhitelisted is returned (wrapped) by [FourLetter] when the server
// refuses the command because it is not in 4lw.commands.whitelist.
var ErrNotWhitelisted = errors.New("zktest: four-letter word not in the server's whitelist")

// fourLetterTimeout bounds one exchange of [FourLetter].
const fourLetterTimeout = 5 * time.Second

// FourLetter sends the four-letter-word command cmd ("ruok", "srvr",
// "mntr", "wchp", "cons", ...) to the ZooKeeper server at addr (host:port)
// and returns its whole reply. The exchange takes at most 5 seconds.
//
// A reply saying that the server is not serving requests is returned
// together with an error wrapping [ErrNotServing]; a reply refusing a
// command that is not whitelisted, with one wrapping [ErrNotWhitelisted].
// Servers started by this package whitelist every command.
func FourLetter(addr, cmd string) (string, error) {
	return fourLetter(addr, cmd, fourLetterTimeout)
}

func fourLetter(addr, cmd string, timeout time.Duration) (string, error) {
	if len(cmd) != 4 {
		return "", fmt.Errorf("zktest: four-letter word %q does not have four letters", cmd)
	}
	d := net.Dialer{Timeout: timeout}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("zktest: %s to %s: %w", cmd, addr, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", fmt.Errorf("zktest: %s to %s: %w", cmd, addr, err)
	}
	if _, err := io.WriteString(conn, cmd); err != nil {
		return "", fmt.Errorf("zktest: %s to %s: %w", cmd, addr, err)
	}
	b, err := io.ReadAll(conn)
	reply := string(b)
	if err != nil {
		return reply, fmt.Errorf("zktest: %s to %s: %w", cmd, addr, err)
	}
	switch {
	case strings.Contains(reply, "not currently serving requests"):
		return reply, fmt.Errorf("%w (%s)", ErrNotServing, addr)
	case strings.Contains(reply, "not in the whitelist"):
		return reply, fmt.Errorf("%w: %s (%s)", ErrNotWhitelisted, cmd, addr)
	}
	return reply, nil
}

// serverMode asks the server at addr with `srvr` and returns its mode:
// "standalone", "leader", "follower" or "observer". It fails when the server
// does not answer or does not serve requests.
func serverMode(addr string, timeout time.Duration) (string, error) {
	mode, _, err := serverInfo(addr, timeout)
	return mode, err
}

// serverInfo is serverMode, with the version the server reports ("3.9.3";
// "" when the reply names none).
func serverInfo(addr string, timeout time.Duration) (mode, version string, err error) {
	reply, err := fourLetter(addr, "srvr", timeout)
	if err != nil {
		return "", "", err
	}
	version = replyVersion(reply)
	for line := range strings.Lines(reply) {
		if m, ok := strings.CutPrefix(line, "Mode:"); ok {
			return strings.TrimSpace(m), version, nil
		}
	}
	return "", version, fmt.Errorf("zktest: srvr to %s: no Mode in reply %q", addr, reply)
}

// replyVersion returns the release a srvr reply names ("Zookeeper version:
// 3.9.3-<commit>, built on ..." gives "3.9.3"), or "".
func replyVersion(reply string) string {
	for line := range strings.Lines(reply) {
		if v, ok := strings.CutPrefix(line, "Zookeeper version:"); ok {
			v = strings.TrimSpace(v)
			if i := strings.IndexAny(v, "-, "); i >= 0 {
				v = v[:i]
			}
			return v
		}
	}
	return ""
}

// ServerVersion asks the server at addr with `srvr` which ZooKeeper release
// it runs and returns it ("3.8.0", "3.9.3").
func ServerVersion(addr string) (string, error) { return serverVersion(addr, fourLetterTimeout) }

func serverVersion(addr string, timeout time.Duration) (string, error) {
	reply, err := fourLetter(addr, "srvr", timeout)
	if err != nil {
		return "", err
	}
	if v := replyVersion(reply); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("zktest: srvr to %s: no version in reply %q", addr, reply)
}
