package chaos

import (
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/zkrecipes/zkrecipes/zktest"
)

// keepServers stops every server and copies its directory (zoo.cfg, the
// data directory with its transaction logs and snapshots, zookeeper.log)
// to out/servers/server<i>: the evidence of a failed run, which the
// cluster's clean-up would remove.
func keepServers(t *testing.T, cluster *zktest.Cluster, out string) {
	for i := range cluster.Addrs() {
		cluster.Stop(i)
	}
	for i := range cluster.Addrs() {
		src := filepath.Dir(cluster.LogFile(i))
		dst := filepath.Join(out, "servers", "server"+itoa(i))
		if err := os.RemoveAll(dst); err != nil {
			t.Errorf("chaos: keep server %d: %v", i, err)
			continue
		}
		if err := copyTree(src, dst); err != nil {
			t.Errorf("chaos: keep server %d: %v", i, err)
		}
	}
	t.Logf("chaos: the servers' logs and data directories are in %s", filepath.Join(out, "servers"))
}

// copyTree copies the directory src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return copySparse(p, to)
	})
}

// copySparse copies a file, leaving holes where src has blocks of zeros:
// ZooKeeper preallocates its transaction logs (64 MB of zeros each).
func copySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	zero := make([]byte, len(buf))
	var size int64
	for {
		n, rerr := io.ReadFull(in, buf)
		if n > 0 {
			if bytes.Equal(buf[:n], zero[:n]) {
				if _, err := out.Seek(int64(n), io.SeekCurrent); err != nil {
					out.Close()
					return err
				}
			} else if _, err := out.Write(buf[:n]); err != nil {
				out.Close()
				return err
			}
			size += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			out.Close()
			return rerr
		}
	}
	if err := out.Truncate(size); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
