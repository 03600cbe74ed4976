package main

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zkrecipes/zkrecipes/zktest"
)

// listen serves each connection to a port of the test's with serve, and
// returns the port's address.
func listen(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { defer c.Close(); serve(c) })
		}
	})
	return ln.Addr().String()
}

// A connection that cannot be had fails soon, naming what was tried and
// why each address failed: at once when no redial could help (a peer that
// is not ZooKeeper; TLS to a plaintext port), else after -connect-timeout
// (nothing listening; a port that never answers).
func TestConnectFailure(t *testing.T) {
	t.Parallel()
	srv := zktest.StartPrivate(t)
	http := listen(t, func(c net.Conn) {
		_, _ = c.Read(make([]byte, 512))
		_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
	})
	silent := listen(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) }) // reads, never answers

	for _, tc := range []struct {
		name   string
		args   []string
		within time.Duration
		says   []string
	}{
		{"nothing listens", []string{"-zk", "127.0.0.1:1", "-connect-timeout", "1s"}, 5 * time.Second,
			[]string{"-connect-timeout 1s passed", "127.0.0.1:1: connect: connection refused"}},
		{"not ZooKeeper", []string{"-zk", http, "-connect-timeout", "1m"}, 10 * time.Second,
			[]string{"server " + http + ": not a ZooKeeper server"}},
		{"TLS to a plaintext port", []string{"-zk", srv.Addr(), "-tls", "-connect-timeout", "1m"}, 10 * time.Second,
			[]string{"TLS handshake with " + srv.Addr(), "answers ZooKeeper in plaintext", "secureClientPort"}},
		{"a port that never answers, and one with nothing", []string{"-zk", silent + ",127.0.0.1:1", "-connect-timeout", "5s", "-session-timeout", "3s"}, 15 * time.Second,
			[]string{"-connect-timeout 5s passed", "server " + silent + ": no answer to the connect request", "127.0.0.1:1: connect: connection refused"}},
	} {
		cmd := zklockCmd(t, "", append(tc.args, "holders", "/x")...)
		begin := time.Now()
		code := status(t, cmd)
		took := time.Since(begin)
		t.Logf("%s: %v: %s", tc.name, took.Round(time.Millisecond), stderr(cmd))
		if code != exitFailure {
			t.Errorf("%s: status %d, want %d; stderr:\n%s", tc.name, code, exitFailure, stderr(cmd))
		}
		if took > tc.within {
			t.Errorf("%s: took %v, want at most %v", tc.name, took.Round(time.Millisecond), tc.within)
		}
		for _, s := range tc.says {
			if !strings.Contains(stderr(cmd), s) {
				t.Errorf("%s: stderr does not say %q:\n%s", tc.name, s, stderr(cmd))
			}
		}
		if n := strings.Count(stderr(cmd), "\n"); n != 1 {
			t.Errorf("%s: %d lines on stderr, want one:\n%s", tc.name, n, stderr(cmd))
		}
	}
}
