package fairqueue

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// A consumer's node in line/ says how many items it wants in its name
// ("_zkr_<guid>.<want>-take-<seq>"; no want: one), and where it stands in
// its data version and data:
//
//	version 0    waiting
//	offered      the head of the line handed it items: for each, a line
//	             "o/<bucket>/<name>/<version>/<held>/<n>", then the
//	             item's payload, n bytes (n = -1: the payload, too large to
//	             carry, is read from the item)
//	"x"          passed over (it froze, or left its offer unclaimed): its
//	             owner joins the line again
//
// A node is written at most twice (offered, then passed over), and only by
// a multi that checks its version: so two heads never offer one node two
// sets of items, and an offer and its revocation never both stand.
var passedMark = []byte("x")

// inlineMax is the largest payload an offer carries.
const inlineMax = 1 << 10

// wantOf reads how many items a node wants from its name.
func wantOf(name string) int {
	i := strings.LastIndex(name, "-take-")
	dot := strings.LastIndexByte(name[:max(i, 0)], '.')
	if i < 0 || dot < 0 {
		return 1
	}
	n, err := strconv.Atoi(name[dot+1 : i])
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// candidate is an item a consumer may claim.
type candidate struct {
	bucket, seq int64
	name        string // the item's node
	held        string // its node in held/, when it was held and is free now
}

func (c candidate) id() string { return itemID(c.bucket, c.seq) }

// item is a candidate as read; an offered one has no Data when its
// payload did not come along.
type item struct {
	candidate
	node znode.Node
}

// encodeOffer writes the items handed to one consumer.
func encodeOffer(its []item) []byte {
	var b []byte
	for _, it := range its {
		held := it.held
		if held == "" {
			held = "-"
		}
		n := len(it.node.Data)
		if n > inlineMax {
			n = -1
		}
		// '/' is the one character no node name holds.
		b = fmt.Appendf(b, "o/%d/%s/%d/%s/%d\n", it.bucket, it.name, it.node.Stat.Version, held, n)
		if n > 0 {
			b = append(b, it.node.Data...)
		}
	}
	return b
}

// parseOffer reads an offer; false for anything else (a passed node).
func parseOffer(b []byte) ([]item, bool) {
	var out []item
	for len(b) > 0 {
		head, rest, ok := bytes.Cut(b, []byte("\n"))
		f := strings.Split(string(head), "/")
		if !ok || len(f) != 6 || f[0] != "o" {
			return nil, false
		}
		var it item
		bucket, err1 := strconv.ParseInt(f[1], 10, 64)
		version, err2 := strconv.ParseInt(f[3], 10, 32)
		n, err3 := strconv.Atoi(f[5])
		seq, _, okItem := parseItem(f[2])
		if err1 != nil || err2 != nil || err3 != nil || !okItem || n > len(rest) {
			return nil, false
		}
		it.bucket, it.seq, it.name = bucket, seq, f[2]
		if f[4] != "-" {
			it.held = f[4]
		}
		it.node.Stat = &zk.Stat{Version: int32(version)}
		if n >= 0 {
			it.node.Data = rest[:n:n]
		}
		out = append(out, it)
		b = rest[max(n, 0):]
	}
	return out, len(out) > 0
}

// The offers standing are recorded in line/'s data, one line per item,
// "<item id> <node> <when, Unix ms>": a hand-out reads them (one read, not
// one per node) to know which items are spoken for, and writes them back
// with its own, conditional on the version it read, in its multi. So two
// hand-outs never overlap: the second one's multi fails. An offer leaves
// the record once its item is claimed (or gone), or it is passed over.
type standing struct {
	id, node string
	at       time.Time
	version  int32 // the node's data version while it holds the offer
}

func parseStanding(b []byte) []standing {
	var out []standing
	for l := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		if ms, err := strconv.ParseInt(f[2], 10, 64); err == nil {
			out = append(out, standing{id: f[0], node: f[1], at: time.UnixMilli(ms), version: 1})
		}
	}
	return out
}

func encodeStanding(os []standing) []byte {
	var b []byte
	for _, o := range os {
		b = fmt.Appendf(b, "%s %s %d\n", o.id, o.node, o.at.UnixMilli())
	}
	return b
}
