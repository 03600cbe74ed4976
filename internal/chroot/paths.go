package chroot

import (
	"bytes"
	"encoding/binary"
)

// The protocol's constants this layer needs. A request body is its xid,
// its opcode and the request; a reply body its xid, zxid, error and the
// response.
const (
	replyHeader   = 16
	xidWatchEvent = -1
	opWatchEvent  = -1000 // not an opcode: marks a watch event's frame

	opCreate          = 1
	opDelete          = 2
	opExists          = 3
	opGetData         = 4
	opSetData         = 5
	opGetACL          = 6
	opSetACL          = 7
	opGetChildren     = 8
	opSync            = 9
	opPing            = 11
	opGetChildren2    = 12
	opCheck           = 13
	opMulti           = 14
	opCreate2         = 15
	opReconfig        = 16
	opCheckWatches    = 17
	opRemoveWatches   = 18
	opCreateContainer = 19
	opDeleteContainer = 20
	opCreateTTL       = 21
	opMultiRead       = 22
	opSetAuth         = 100
	opSetWatches      = 101
	opSASL            = 102
	opGetAllChildren  = 104
	opSetWatches2     = 105
	opAddWatch        = 106
	opWhoAmI          = 107
	opClose           = -11
	opError           = -1 // a multi result's type when its op failed

	// statLen is a Stat's: czxid, mzxid, ctime, mtime (longs), version,
	// cversion, aversion (ints), ephemeralOwner (long), dataLength,
	// numChildren (ints), pzxid (long).
	statLen = 68
)

// pathFirst are the requests whose body starts with a path.
var pathFirst = map[int32]bool{
	opCreate: true, opDelete: true, opExists: true, opGetData: true, opSetData: true,
	opGetACL: true, opSetACL: true, opGetChildren: true, opSync: true, opGetChildren2: true,
	opCheck: true, opCreate2: true, opCheckWatches: true, opRemoveWatches: true,
	opCreateContainer: true, opDeleteContainer: true, opCreateTTL: true,
	opGetAllChildren: true, opAddWatch: true,
}

// noPath are the requests that hold no path.
var noPath = map[int32]bool{
	opPing: true, opReconfig: true, opSetAuth: true, opSASL: true, opWhoAmI: true, opClose: true,
}

// replyHasPath: the requests whose reply holds a path (when it holds more
// than its header).
func replyHasPath(op int32) bool {
	switch op {
	case opCreate, opCreate2, opCreateContainer, opCreateTTL, opSync, opMulti:
		return true
	}
	return false
}

// rooted is a chroot: an absolute path other than "/", without a trailing
// slash.
type rooted string

// in is the server's path for the client's p.
func (r rooted) in(p []byte) []byte {
	if string(p) == "/" {
		return []byte(r)
	}
	return append([]byte(r), p...)
}

// out is the client's path for the server's p: the root comes off. A path
// outside the root (which the server does not send: every request was
// rooted) is left as it is.
func (r rooted) out(p []byte) []byte {
	switch {
	case string(p) == string(r):
		return []byte("/")
	case len(p) > len(r) && p[len(r)] == '/' && bytes.HasPrefix(p, []byte(r)):
		return p[len(r):]
	}
	return p
}

// request returns the request body b with the root in front of its paths,
// or an error for a request it cannot read.
func (r rooted) request(b []byte) ([]byte, error) {
	if len(b) < 8 {
		return b, nil // no opcode: nothing to root (and nothing a server takes)
	}
	_, op := header(b)
	out := append(make([]byte, 0, len(b)+len(r)+16), b[:8]...)
	body := b[8:]
	switch {
	case noPath[op]:
		return b, nil
	case pathFirst[op]:
		p, rest, ok := readString(body)
		if !ok {
			return nil, errRequest(op, "no path")
		}
		out = appendString(out, r.in(p))
		return append(out, rest...), nil
	case op == opMulti || op == opMultiRead:
		return r.multi(out, body, op)
	case op == opSetWatches || op == opSetWatches2:
		// relativeZxid, then lists of paths: data, exist and child
		// watches (and persistent, persistent recursive ones).
		lists := 3
		if op == opSetWatches2 {
			lists = 5
		}
		if len(body) < 8 {
			return nil, errRequest(op, "truncated")
		}
		out, body = append(out, body[:8]...), body[8:]
		for range lists {
			var ok bool
			if out, body, ok = r.paths(out, body); !ok {
				return nil, errRequest(op, "truncated list of watches")
			}
		}
		return append(out, body...), nil
	}
	return nil, errRequest(op, "unknown request")
}

// paths copies a list of paths from b onto out, rooted.
func (r rooted) paths(out, b []byte) ([]byte, []byte, bool) {
	if len(b) < 4 {
		return out, b, false
	}
	n := int(int32(binary.BigEndian.Uint32(b)))
	out, b = append(out, b[:4]...), b[4:]
	for range max(n, 0) {
		p, rest, ok := readString(b)
		if !ok {
			return out, b, false
		}
		out, b = appendString(out, r.in(p)), rest
	}
	return out, b, true
}

// multi roots each operation of a multi: a header {type int32, done bool,
// err int32}, then a body that starts with the path; a done header ends the
// list.
func (r rooted) multi(out, b []byte, op int32) ([]byte, error) {
	for {
		if len(b) < 9 {
			return nil, errRequest(op, "truncated multi")
		}
		typ, done := int32(binary.BigEndian.Uint32(b)), b[4] != 0
		out, b = append(out, b[:9]...), b[9:]
		if done {
			return append(out, b...), nil
		}
		p, rest, ok := readString(b)
		if !ok {
			return nil, errRequest(op, "multi operation without a path")
		}
		out = appendString(out, r.in(p))
		n, ok := opRest(typ, rest)
		if !ok {
			return nil, errRequest(op, "multi operation of unknown type or truncated")
		}
		out, b = append(out, rest[:n]...), rest[n:]
	}
}

// opRest is the length of a multi operation's body after its path.
func opRest(typ int32, b []byte) (int, bool) {
	at := 0
	skipString := func() bool {
		_, rest, ok := readString(b[at:])
		at = len(b) - len(rest)
		return ok
	}
	skip := func(n int) bool {
		at += n
		return at <= len(b)
	}
	switch typ {
	case opCreate, opCreate2, opCreateContainer, opCreateTTL:
		// data, ACLs {perms, scheme, id}, flags (and a TTL)
		if !skipString() || !skip(4) {
			return 0, false
		}
		for range max(int(int32(binary.BigEndian.Uint32(b[at-4:]))), 0) {
			if !skip(4) || !skipString() || !skipString() {
				return 0, false
			}
		}
		if !skip(4) || (typ == opCreateTTL && !skip(8)) {
			return 0, false
		}
	case opSetData:
		if !skipString() || !skip(4) { // data, version
			return 0, false
		}
	case opDelete, opCheck:
		if !skip(4) { // version
			return 0, false
		}
	case opGetData, opGetChildren:
		if !skip(1) { // watch (a multiRead's reads)
			return 0, false
		}
	default:
		return 0, false
	}
	return at, true
}

// reply returns the reply body b (after its header) of a request of op, or
// of a watch event, with the root taken off its paths. A body it cannot
// read goes through as it is.
func (r rooted) reply(op int32, b []byte) []byte {
	switch op {
	case opWatchEvent:
		// type, state, path
		if len(b) < 8 {
			return b
		}
		p, rest, ok := readString(b[8:])
		if !ok {
			return b
		}
		out := appendString(append([]byte(nil), b[:8]...), r.out(p))
		return append(out, rest...)
	case opCreate, opCreate2, opCreateContainer, opCreateTTL, opSync:
		// the path (then, but for create and sync, a Stat)
		p, rest, ok := readString(b)
		if !ok {
			return b
		}
		return append(appendString(nil, r.out(p)), rest...)
	case opMulti:
		return r.multiReply(b)
	}
	return b
}

// multiReply takes the root off the paths of a multi's results: each a
// header {type, done, err} and a body by type; a done header ends them.
func (r rooted) multiReply(b []byte) []byte {
	out := make([]byte, 0, len(b))
	in := b
	for len(in) >= 9 {
		typ, done := int32(binary.BigEndian.Uint32(in)), in[4] != 0
		out, in = append(out, in[:9]...), in[9:]
		if done {
			break
		}
		switch typ {
		case opCreate, opCreate2, opCreateContainer, opCreateTTL:
			p, rest, ok := readString(in)
			if !ok {
				return b
			}
			out, in = appendString(out, r.out(p)), rest
			if typ != opCreate {
				if len(in) < statLen {
					return b
				}
				out, in = append(out, in[:statLen]...), in[statLen:]
			}
		case opSetData:
			if len(in) < statLen {
				return b
			}
			out, in = append(out, in[:statLen]...), in[statLen:]
		case opDelete, opCheck:
		case opError:
			if len(in) < 4 {
				return b
			}
			out, in = append(out, in[:4]...), in[4:]
		case opGetData: // a multiRead's: data, Stat
			_, rest, ok := readString(in)
			if !ok || len(rest) < statLen {
				return b
			}
			n := len(in) - len(rest) + statLen
			out, in = append(out, in[:n]...), in[n:]
		case opGetChildren: // a multiRead's: names, not paths
			rest, ok := skipStrings(in)
			if !ok {
				return b
			}
			n := len(in) - len(rest)
			out, in = append(out, in[:n]...), in[n:]
		default:
			return b
		}
	}
	return append(out, in...)
}

// readString reads a jute string or buffer: an int32 length (-1: null),
// then the bytes.
func readString(b []byte) ([]byte, []byte, bool) {
	if len(b) < 4 {
		return nil, b, false
	}
	n := int(int32(binary.BigEndian.Uint32(b)))
	b = b[4:]
	if n < 0 {
		return nil, b, true
	}
	if len(b) < n {
		return nil, b, false
	}
	return b[:n], b[n:], true
}

// skipStrings skips a jute vector of strings.
func skipStrings(b []byte) ([]byte, bool) {
	if len(b) < 4 {
		return b, false
	}
	n := int(int32(binary.BigEndian.Uint32(b)))
	b = b[4:]
	for range max(n, 0) {
		var ok bool
		if _, b, ok = readString(b); !ok {
			return b, false
		}
	}
	return b, true
}

func appendString(dst, s []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}
