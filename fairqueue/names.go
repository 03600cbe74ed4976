package fairqueue

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/zkrecipes/zkrecipes"
)

// Node names. A bucket is "b" and its number, printed with ten digits so
// names sort like numbers. An item is ZooKeeper's sequential "i-" name, with
// the producer's key between, when it gave one: "i-0000000007" or
// "i-k.<key>.0000000007". An item's id is "<bucket>-<seq>": fixed width, so
// ids sort in queue order.
//
// An item given back (Nack, NackAfter) has a node in held/ (see heldBase),
// and a delayed one (WithDelay) waits in delayed/ as
// "d-<not before>-<key>-<seq>", both with the time in Unix milliseconds, 13
// digits: the name says when, so that a listing is all the dispatcher
// reads to know.
const (
	bucketPrefix = "b"
	itemPrefix   = "i-"
	keyMark      = "k."
	delayPrefix  = "d-"
)

// Blobs. The payloads of a multi of several items with no key (a PutMany),
// one at least too large for its name (see inline payloads), are stored
// together, in one node, items/p<bucket>/p-<tag> (the bucket's number
// printed as in its name), so that a consumer reads them once for all the
// items of it it holds, not once an item; the items are
// "i-p.<tag>.<index>.<seq>", with no data. A bucket's blob directory is
// made with the bucket, and deleted with it.
const (
	blobPrefix    = "p-"
	blobMark      = "p."
	blobDirPrefix = "p"
)

// Inline payloads. A small payload of an item with no key, not in a blob,
// is written in the item's name, "i-v.<payload>.<seq>" (base64, URL alphabet,
// no padding), the node holding no data: the dispatcher learns it from the
// listing it makes anyway, the consumer from the name in its offer, and no
// one reads the item (one given back is read for its version).
const (
	inlineMark = "v."
	inlineMax  = 48 // bytes, 64 in the name: a bucket of 1,000 is listed in under 80 KiB
)

// inlineItemBase is the name an item with payload data in its name is
// created with, before its sequence number.
func inlineItemBase(data []byte) string {
	return itemPrefix + inlineMark + base64.RawURLEncoding.EncodeToString(data) + "."
}

// inline says whether an item's name holds its payload: an offer of it
// need not carry it.
func inline(name string) bool { return strings.HasPrefix(name, itemPrefix+inlineMark) }

// inlinePayload returns the payload an item's name holds, if it holds one.
func inlinePayload(name string) ([]byte, bool) {
	if !inline(name) || len(name) < len(itemPrefix+inlineMark)+1+10 {
		return nil, false
	}
	b, err := base64.RawURLEncoding.DecodeString(name[len(itemPrefix+inlineMark) : len(name)-11])
	return b, err == nil && name[len(name)-11] == '.'
}

// blobItemBase is the name the index-th item of blob tag is created with,
// before its sequence number.
func blobItemBase(tag string, index int) string {
	return itemPrefix + blobMark + tag + "." + strconv.Itoa(index) + "."
}

// parseBlobRef returns the blob node and the index an item's name refers
// to.
func parseBlobRef(name string) (blob string, idx int, ok bool) {
	if !strings.HasPrefix(name, itemPrefix+blobMark) {
		return "", 0, false
	}
	rest := name[len(itemPrefix+blobMark):]
	tag, rest, _ := strings.Cut(rest, ".")
	i, rest, _ := strings.Cut(rest, ".")
	n, err := strconv.Atoi(i)
	return blobPrefix + tag, n, err == nil && rest != ""
}

// encodeBlob makes a blob's data: the payloads, each after its length (a
// uvarint).
func encodeBlob(items []putItem) []byte {
	var b []byte
	for _, it := range items {
		b = binary.AppendUvarint(b, uint64(len(it.data)))
		b = append(b, it.data...)
	}
	return b
}

// blobPart returns the idx-th payload of a blob's data.
func blobPart(b []byte, idx int) ([]byte, bool) {
	for i := 0; len(b) > 0; i++ {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return nil, false
		}
		if i == idx {
			return b[k : k+int(n) : k+int(n)], true
		}
		b = b[k+int(n):]
	}
	return nil, false
}

func bucketName(n int64) string { return string(appendPadded([]byte(bucketPrefix), n, 10)) }

// appendPadded appends n (>= 0) in decimal, zero-padded to width digits,
// as %0*d would: names are made per item, and fmt costs a hand-out's
// share of the consumer's CPU.
func appendPadded(b []byte, n int64, width int) []byte {
	var digits [20]byte
	d := strconv.AppendInt(digits[:0], n, 10)
	for range width - len(d) {
		b = append(b, '0')
	}
	return append(b, d...)
}

// parseBucket returns the number of a bucket node, or false for anything else.
func parseBucket(name string) (int64, bool) {
	if !strings.HasPrefix(name, bucketPrefix) {
		return 0, false
	}
	n, err := strconv.ParseInt(name[len(bucketPrefix):], 10, 64)
	return n, err == nil && n >= 0
}

// itemBase is the name an item is created with, before its sequence number.
func itemBase(key string) string {
	if key == "" {
		return itemPrefix
	}
	return itemPrefix + keyMark + key + "."
}

// parseItem returns the sequence number and the key of an item node.
func parseItem(name string) (seq int64, key string, ok bool) {
	if !strings.HasPrefix(name, itemPrefix) || len(name) < len(itemPrefix)+10 {
		return 0, "", false
	}
	rest, digits := name[len(itemPrefix):len(name)-10], name[len(name)-10:]
	if strings.HasPrefix(rest, blobMark) || strings.HasPrefix(rest, inlineMark) {
		rest = ""
	}
	if rest != "" {
		if !strings.HasPrefix(rest, keyMark) || !strings.HasSuffix(rest, ".") {
			return 0, "", false
		}
		key = rest[len(keyMark) : len(rest)-1]
	}
	n, err := strconv.ParseInt(digits, 10, 32)
	return n, key, err == nil && n >= 0
}

func itemID(bucket int64, seq int64) string {
	b := make([]byte, 0, 21)
	b = appendPadded(b, bucket, 10)
	return string(appendPadded(append(b, '-'), seq, 10))
}

// parseID splits an id into bucket and item sequence numbers.
func parseID(id string) (bucket, seq int64, err error) {
	b, s, ok := strings.Cut(id, "-")
	if ok {
		bucket, err = strconv.ParseInt(b, 10, 64)
		if err == nil {
			seq, err = strconv.ParseInt(s, 10, 32)
		}
	}
	if !ok || err != nil || bucket < 0 || seq < 0 || len(b) != 10 || len(s) != 10 {
		return 0, 0, fmt.Errorf("%w: malformed job id %q", zkrecipes.ErrInvalidArgument, id)
	}
	return bucket, seq, nil
}

// maxKeyLen bounds a key, which lives in node names.
const maxKeyLen = 200

// checkKey says what is wrong with a producer's key, if anything: it goes
// into node names, so it must be printable UTF-8 without '/' or '.'.
func checkKey(key string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: key %q %s", zkrecipes.ErrInvalidArgument, key, why)
	}
	switch {
	case key == "":
		return bad("is empty")
	case len(key) > maxKeyLen:
		return bad(fmt.Sprintf("is longer than %d bytes", maxKeyLen))
	case !utf8.ValidString(key):
		return bad("is not UTF-8")
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f || r == '/' || r == '.' || (r >= 0x80 && r <= 0x9f) || (r >= 0xd800 && r <= 0xf8ff) || r >= 0xfff0 {
			return bad(fmt.Sprintf("holds %U, which a node name cannot (nor '/' or '.')", r))
		}
	}
	return nil
}

// stamp prints a time as 13 digits of Unix milliseconds: names sort by it.
func stamp(t time.Time) string { return fmt.Sprintf("%013d", t.UnixMilli()) }

func parseStamp(s string) (time.Time, bool) {
	if len(s) != 13 {
		return time.Time{}, false
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	return time.UnixMilli(ms), err == nil
}

// heldBase is the name a given-back item's node is created with in held/,
// before its sequence number: when it is free again, its bucket and its
// node, so that the dispatcher's listing of held/ is all it reads.
func heldBase(bucket int64, name string, until time.Time) string {
	return stamp(until) + "-" + bucketName(bucket) + "-" + name + "-"
}

// parseHeld reads a held node's name: when the item is free again, its
// bucket and its node's name.
func parseHeld(held string) (until time.Time, bucket int64, name string, ok bool) {
	const head = 13 + 1 + 11 + 1 // stamp, '-', bucket, '-'
	if len(held) < head+len(itemPrefix)+10+1+10 || held[13] != '-' || held[head-1] != '-' || held[len(held)-11] != '-' {
		return time.Time{}, 0, "", false
	}
	until, ok = parseStamp(held[:13])
	bucket, bok := parseBucket(held[14 : head-1])
	name = held[head : len(held)-11]
	_, _, iok := parseItem(name)
	return until, bucket, name, ok && bok && iok
}

// A ticket is a consumer's request for items, in ready/:
// "<kind>-<consumer>-<tag>-<want>-<seq>". Its kind says who asks: "t" a
// Take, "y" a TryTake (answered even when nothing is pending), "w" Work.
// The consumer is a Queue that takes, "<session>-<queue>" (16 and 8 hex
// digits), and names its inbox; the tag (8 hex digits, one per request)
// lets the consumer find its tickets after a create whose reply was lost;
// want (4 digits) is how many items it asks for; the sequence number is
// its place in line.
const (
	kindTake = 't'
	kindTry  = 'y'
	kindWork = 'w'
	maxWant  = 9999
)

// consumerName is the name of a Queue that takes: its session's id and a
// tag of its own.
func consumerName(sid int64, tag string) string { return fmt.Sprintf("%016x-%s", uint64(sid), tag) }

func ticketBase(kind byte, consumer string, tag string, want int) string {
	return fmt.Sprintf("%c-%s-%s-%04d-", kind, consumer, tag, want)
}

// ticketName is a ticket's name, parsed.
type ticketName struct {
	kind          byte
	consumer, tag string
	want          int
	seq           int64
}

func (t ticketName) try() bool { return t.kind == kindTry }

func parseTicket(name string) (ticketName, bool) {
	if len(name) != 2+25+1+8+1+4+1+10 || name[1] != '-' || name[18] != '-' || name[27] != '-' || name[36] != '-' ||
		name[41] != '-' || (name[0] != kindTake && name[0] != kindTry && name[0] != kindWork) {
		return ticketName{}, false
	}
	want, werr := strconv.Atoi(name[37:41])
	seq, err := strconv.ParseInt(name[42:], 10, 64)
	return ticketName{kind: name[0], consumer: name[2:27], tag: name[28:36], want: want, seq: seq},
		err == nil && werr == nil && want >= 1 && seq >= 0
}

// delayedBase is the name a delayed item is created with in delayed/.
func delayedBase(due time.Time, key string) string {
	return delayPrefix + stamp(due) + "-" + key + "-"
}

// parseDelayed reads a delayed node's name: when it is due, and its key.
func parseDelayed(name string) (due time.Time, key string, ok bool) {
	if !strings.HasPrefix(name, delayPrefix) || len(name) < len(delayPrefix)+13+2+10 {
		return time.Time{}, "", false
	}
	rest := name[len(delayPrefix):]
	due, ok = parseStamp(rest[:13])
	if !ok || rest[13] != '-' || rest[len(rest)-11] != '-' {
		return time.Time{}, "", false
	}
	return due, rest[14 : len(rest)-11], true
}
