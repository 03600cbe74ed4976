package queue

import (
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The peers' sources travel inside the binary, so that it runs from any
// directory; they are written out (and the Java one compiled) on first use.
//
//go:embed peers/CuratorQueue.java peers/kazoo_queue.py
var peerSources embed.FS

// Debian's jars, as for interop/: Curator, its dependencies, and slf4j-nop
// to keep its logging quiet (stdout carries the JSON lines).
const javaDir = "/usr/share/java"

var javaJars = []string{
	"curator-recipes.jar", "curator-framework.jar", "curator-client.jar",
	"zookeeper.jar", "zookeeper-jute.jar", "guava.jar",
	"slf4j-api.jar", "slf4j-nop.jar",
}

// python is Debian's, where python3-kazoo installs.
const python = "/usr/bin/python3"

// peers is a directory holding the peers' programs, ready to run.
type peers struct {
	dir       string
	classpath string // set once CuratorQueue is compiled
}

// peerDir writes the peers' sources into a temporary directory.
func (b *Bench) peerDir() (*peers, error) {
	if b.peers != nil {
		return b.peers, nil
	}
	dir, err := os.MkdirTemp("", "queuebench-peers-")
	if err != nil {
		return nil, err
	}
	entries, err := peerSources.ReadDir("peers")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		data, err := peerSources.ReadFile("peers/" + e.Name())
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o755); err != nil {
			return nil, err
		}
	}
	b.peers = &peers{dir: dir}
	return b.peers, nil
}

// java compiles CuratorQueue.java (once) and returns the classpath to run
// it with.
func (p *peers) java() (string, error) {
	if p.classpath != "" {
		return p.classpath, nil
	}
	cp := []string{p.dir}
	for _, j := range javaJars {
		jar := filepath.Join(javaDir, j)
		if _, err := os.Stat(jar); err != nil {
			return "", fmt.Errorf("%w (run interop/install.sh)", err)
		}
		cp = append(cp, jar)
	}
	classpath := strings.Join(cp, string(os.PathListSeparator))
	cmd := exec.Command("javac", "-d", p.dir, "-cp", classpath, "CuratorQueue.java")
	cmd.Dir = p.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("javac CuratorQueue.java: %w: %s", err, out)
	}
	p.classpath = classpath
	return classpath, nil
}

// kazoo checks that Debian's python3 has kazoo and returns the script's path.
func (p *peers) kazoo() (string, error) {
	if out, err := exec.Command(python, "-c", "import kazoo").CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s has no kazoo (run interop/install.sh): %v: %s", python, err, out)
	}
	return filepath.Join(p.dir, "kazoo_queue.py"), nil
}
