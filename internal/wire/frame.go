package wire

import "encoding/binary"

// Request and reply frames are a 4-byte length and a body. A request body
// starts with its xid and opcode; a reply body with its xid, zxid and error.
// The first frame each way is the connect handshake, which has no xid.
const (
	xidWatchEvent = -1
	xidAuth       = -4 // answered outside the request pipeline; not a touch
	opCreate      = 1
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

func (f *frameParser) feed(p []byte, on func(first bool, head []byte) int) {
	for len(p) > 0 {
		if f.body == 0 {
			k := copy(f.lenBuf[f.lenN:], p)
			f.lenN += k
			p = p[k:]
			if f.lenN < 4 {
				return
			}
			f.lenN = 0
			f.body = int(binary.BigEndian.Uint32(f.lenBuf[:]))
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
}
