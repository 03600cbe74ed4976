package fairqueue

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/zkrecipes/zkrecipes"
)

// Node names. A bucket is "b" and its number, printed with ten digits so
// names sort like numbers; an item is ZooKeeper's sequential "i-" name. An
// item's id is "<bucket>-<seq>": fixed width, so ids sort in queue order.
const (
	bucketPrefix = "b"
	itemPrefix   = "i-"
)

func bucketName(n int64) string { return fmt.Sprintf("%s%010d", bucketPrefix, n) }

// parseBucket returns the number of a bucket node, or false for anything else.
func parseBucket(name string) (int64, bool) {
	if !strings.HasPrefix(name, bucketPrefix) {
		return 0, false
	}
	n, err := strconv.ParseInt(name[len(bucketPrefix):], 10, 64)
	return n, err == nil && n >= 0
}

// parseItem returns the sequence number of an item node.
func parseItem(name string) (int64, bool) {
	if !strings.HasPrefix(name, itemPrefix) {
		return 0, false
	}
	n, err := strconv.ParseInt(name[len(itemPrefix):], 10, 32)
	return n, err == nil && n >= 0
}

func itemID(bucket int64, seq int64) string { return fmt.Sprintf("%010d-%010d", bucket, seq) }

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
