package wire

import (
	"encoding/binary"
	"fmt"
)

// Request and reply frames are a 4-byte length and a body. A request body
// starts with its xid and opcode; a reply body with its xid, zxid and error.
// The first frame each way is the connect handshake, which has no xid.
const (
	xidWatchEvent = -1
	xidAuth       = -4 // answered outside the request pipeline; not a touch
)

// The largest frames a ZooKeeper server sends: a connect response is 37
// bytes (40 with a read-only flag and padding); a reply is bounded by the
// server's jute.maxbuffer (1 MiB by default), which operators raise, but
// not to anything near the gigabyte that a port answering HTTP announces
// ("HTTP" read as a length).
const (
	maxHandshake = 1 << 10
	maxReply     = 256 << 20
)

// frameParser splits a byte stream into frames and hands on the first bytes
// of each body: 16 of the first frame (the handshake), 8 of later requests,
// 16 of later replies. on may ask for more of the same body by returning a
// larger count, or 0 for no more.
type frameParser struct {
	replies bool
	frames  int
	lenBuf  [4]byte
	lenN    int
	body    int // body bytes still to come in the current frame
	head    []byte
	need    int
}

// feed parses p. For replies, it refuses a frame longer than any ZooKeeper
// server sends, before the client reads (and allocates) it.
func (f *frameParser) feed(p []byte, on func(first bool, head []byte) int) error {
	for len(p) > 0 {
		if f.body == 0 {
			k := copy(f.lenBuf[f.lenN:], p)
			f.lenN += k
			p = p[k:]
			if f.lenN < 4 {
				return nil
			}
			f.lenN = 0
			n := binary.BigEndian.Uint32(f.lenBuf[:])
			if err := f.check(n); err != nil {
				return err
			}
			f.body = int(n)
			f.head = f.head[:0]
			f.need = 8
			if f.frames == 0 || f.replies {
				f.need = 16
			}
			if f.body == 0 {
				f.frames++
				continue
			}
		}
		k := min(len(p), f.body)
		if len(f.head) < f.need {
			take := min(k, f.need-len(f.head))
			f.head = append(f.head, p[:take]...)
			for f.need > 0 && len(f.head) == f.need {
				f.need = on(f.frames == 0, f.head)
				if f.need > len(f.head) {
					more := min(k-take, f.need-len(f.head))
					f.head = append(f.head, p[take:take+more]...)
					take += more
				}
			}
		}
		f.body -= k
		p = p[k:]
		if f.body == 0 {
			f.frames++
		}
	}
	return nil
}

func (f *frameParser) check(n uint32) error {
	switch {
	case !f.replies:
		return nil
	case f.frames == 0 && (n > maxHandshake || n < 16):
		return fmt.Errorf("not a ZooKeeper server: its first frame announces %d bytes (%q), a connect response has 36 to 40", n, printable(f.lenBuf[:]))
	case n > maxReply:
		return fmt.Errorf("not a ZooKeeper server: a frame announces %d bytes, more than any reply", n)
	}
	return nil
}

// printable shows the length bytes as text when they are, as "HTTP" is.
func printable(b []byte) string {
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return fmt.Sprintf("% x", b)
		}
	}
	return string(b)
}
