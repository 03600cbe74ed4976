// Package chaos is a Jepsen-style test of the recipes: real ZooKeeper
// servers, real client processes, real faults, and histories checked after
// the fact.
//
// [Run] starts a 3-server ensemble whose members talk through proxies that
// can be cut (zktest.StartLinkedCluster), a fenced register (see
// [Register]) and a few client processes (cmd/chaosclient), each running
// every workload: a Mutex guarding read-modify-writes of the register, an
// Election with observers, a Semaphore, and a fairqueue with producers and
// consumers. A nemesis then injects, one at a time, each healed before the
// next: kill -9 of a server or of the leader (then restart), a partition of
// one server from the others, a client's connections frozen past its
// session timeout, a client stopped with SIGSTOP past its session timeout
// (right after it read the register under the mutex: the holder that
// pauses and wakes up to write, Kleppmann's scenario), and kill -9 of a
// client (then a new one in its place).
//
// Every client records what it did, stamped with the machine's monotonic
// clock (package record). The checks:
//
//   - register: the history of reads and writes, checked for
//     linearizability with porcupine against a register written only by
//     read-modify-writes, so that any lost update is caught; its HTML
//     visualisation is written next to the summary;
//   - mutex: one holder at a time among the leases that look held, tokens
//     increasing over successive holders, and losses reported before the
//     next grant (see [Lease] for what "looks held" means for a paused
//     holder);
//   - election: one leader at a time, one leader per term, terms
//     increasing, observers never going back to an older term and all
//     converging on the latest leader;
//   - semaphore: never more holders than permits;
//   - queue: every item whose Put succeeded acked, none acked twice, no
//     phantom, each consumer's ids going backwards only on redelivery;
//   - honesty: what a client was told. An Unlock that returned nil or a raw
//     connection error for a lease that had been lost, or an Ack that
//     returned ErrClaimLost although it had landed, is a violation too.
//     (Both were found by this suite, and fixed; -chaos.findings runs
//     TestUnlockAfterLossReportsLoss, the first one's reproduction, which
//     make chaos runs too.)
//
// The tests run only when asked: `go test ./chaos -chaos.for=2m` (make
// chaos). -chaos.selftest runs the proof that the checks bite: the same
// paused-holder scenario with the clients' fencing broken on purpose must
// be reported, and with fencing must not.
package chaos
