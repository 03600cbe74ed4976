package queue

import (
	"fmt"
	"strings"
)

// Impl is a queue implementation under test.
type Impl string

const (
	FairQueue          Impl = "fairqueue"                      // this module, in process: Take and Ack
	FairQueueWork      Impl = "fairqueue.Work"                 // this module, in process: Work, one handler per session
	Floor              Impl = "floor"                          // the writes any such queue must make, nothing else, in process (floor.go)
	KazooQueue         Impl = "kazoo.Queue"                    // python3-kazoo
	KazooLockingQueue  Impl = "kazoo.LockingQueue"             // python3-kazoo
	CuratorDistributed Impl = "curator.DistributedQueue"       // libcurator-recipes-java, with a lock path
	CuratorSimple      Impl = "curator.SimpleDistributedQueue" // libcurator-recipes-java
)

// Impls is every implementation, in the order of the table.
var Impls = []Impl{FairQueue, FairQueueWork, Floor, KazooQueue, KazooLockingQueue, CuratorDistributed, CuratorSimple}

// Delivery is the implementation's guarantee: "at least once" when an item
// is removed only after the consumer acks it (a consumer that dies holding
// it gives it back), "at most once" when taking it removes it.
func (i Impl) Delivery() string {
	switch i {
	case FairQueue, FairQueueWork, Floor, KazooLockingQueue, CuratorDistributed:
		return "at least once"
	}
	return "at most once"
}

// ParseImpls reads a comma-separated list of implementations ("all" for
// every one); names are matched without regard to case.
func ParseImpls(s string) ([]Impl, error) {
	if strings.TrimSpace(s) == "all" {
		return Impls, nil
	}
	var out []Impl
next:
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		for _, i := range Impls {
			if strings.EqualFold(f, string(i)) {
				out = append(out, i)
				continue next
			}
		}
		return nil, fmt.Errorf("unknown implementation %q (want all, or some of %v)", f, Impls)
	}
	return out, nil
}
