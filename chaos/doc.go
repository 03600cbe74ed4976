// Package chaos is a Jepsen-style test of the recipes: real ZooKeeper
// servers, real client processes, real faults, and histories checked after
// the fact.
//
// [Run] starts a 3-server ensemble whose members talk through proxies that
// can be cut (zktest.StartLinkedCluster), a fenced register (see
// [Register]) and a few client processes (cmd/chaosclient), each running
// every workload: a Mutex guarding read-modify-writes of the register, a
// CachedMutex guarding those of a register of its own (phases a few
// seconds apart, when the lock may be free: calm ones, a long hold then
// short sections between which the holding may be kept idle, and hot ones,
// sections back to back from two goroutines; a Mutex on its path now and
// then), an Election with observers, a Semaphore, and a fairqueue with
// producers and consumers, each consumer's Queue standing for election as
// the queue's dispatcher, which hands the items out. Holders hold for
// real: a lease for 0.5 to 4 s (the register's read-modify-write first),
// one job in eight for up to 4 s. The first
// clients are pinned, one to each server, so that every server has
// holders on it.
//
// A nemesis then injects, one at a time, each healed before the next:
//
//   - kill -9 of a server, or of the leader, then a restart;
//   - a follower on which a lease was just granted cut off from its peers
//     while its clients still reach it, for the session timeout plus 3 to
//     7 s: it answers their pings on its own for syncLimit x tickTime (5 s
//     here) while the leader, which hears nothing of them, expires their
//     sessions and grants their locks to others;
//   - the leader cut off likewise;
//   - the connections of a client just granted the mutex frozen past its
//     session timeout (once none of its releases is out: one frozen
//     between its write and its reply may have landed or not, which the
//     checker cannot tell);
//   - a holder stopped with SIGSTOP past its session timeout right after it
//     read the register (the holder that wakes up to write: Kleppmann's
//     scenario);
//   - a process stopped likewise right after it ended a CachedMutex
//     section, its holding kept idle;
//   - kill -9 of a client, then a new one in its place;
//   - the queue's dispatcher (the consumer whose session owns the lowest
//     node of the queue's election) killed with -9, then a new process in
//     its place; stopped with SIGSTOP past its session timeout; and the
//     server its session is connected to cut off from its peers past the
//     session timeout (from the moment the others have a new leader, when
//     it was the leader). Each is kept on until the hand-out stall's
//     bound has passed, so that the next fault does not fall within it.
//
// Every client records what it did, stamped with the machine's monotonic
// clock (package record), including, from a goroutine waiting on each
// lease's and Job's Done, the moment it closed. The checks read the records
// in the order things happened ([Ordered]: by that clock, each process's own
// order kept), not in the order they arrived through the processes' pipes:
//
//   - leases: each lease and each Job's claim of an item is an interval
//     from its grant to the earliest moment its holder could know it no
//     longer held it (see [Lease]: a release counts from when it was sent
//     only if it was confirmed, or its session was then given up). No two
//     of the mutex's or the election's may overlap, no more than the
//     semaphore's permits, no two claims of one item: the library
//     promises a holder is told of a loss before
//     anyone else is granted (each CachedMutex section is a lease, and the
//     Mutex's leases on its path count with them);
//   - register: the history of reads and writes, checked for
//     linearizability with porcupine against a register written only by
//     read-modify-writes, so that any lost update is caught; its HTML
//     visualisation is written next to the summary;
//   - mutex and election: tokens (terms) increasing over successive
//     holders (fences, for the CachedMutex's sections), one leader per
//     term, observers never going back to an older term and all converging
//     on the latest leader;
//   - bypass: a contender that joined the lock's line (the harness watches
//     the line and notes when each node appears) is passed by at most one
//     section of a kept CachedMutex holding begun later than the freshness
//     window (plus a margin) after its join ([CheckBypass]);
//   - queue: every item whose Put succeeded acked, none acked twice, no
//     phantom, each consumer's ids going backwards only on redelivery
//     (Attempt above 1);
//   - hand-out stall: after each dispatcher fault, from the first moment an
//     item was pending while a consumer that could take it waited in Take,
//     to the next delivery, at most the dispatcher's session timeout plus
//     [StallMargin] (plus the time the ensemble had no leader, when the
//     server cut off was the leader); every stall measured is reported
//     ([CheckStalls], stalls.txt);
//   - honesty: what a client was told. An Unlock that returned nil or a raw
//     connection error for a lease that had been lost, or an Ack that
//     returned ErrClaimLost although it had landed, is a violation too.
//     (Both were found by this suite, and fixed; -chaos.findings runs
//     TestUnlockAfterLossReportsLoss, the first one's reproduction, which
//     make chaos runs too.)
//   - ensemble: once the run is over, every server is read alone (a session
//     with that server only, after a sync) and the servers' trees under the
//     run's root are compared node by node: children, czxid, mzxid, pzxid,
//     version, cversion, ephemeralOwner; so are each server's node count
//     and ephemeral nodes, which see nodes no walk from the root reaches
//     (one left under a parent the others deleted). Each server's log is
//     read for its own digest check's verdict ([Divergence]). A
//     disagreement is reported as the ensemble's, naming the servers, paths
//     and fields that differ; the recipes' violations of the same run may
//     follow from it, and an observer's report given by a server shown to
//     have diverged is classed as the ensemble's ([Ensemble.Explain]).
//
// A violation names the fault it happened during (or after). A failed run
// keeps the servers' logs and data directories in its output directory
// (servers/), with events.jsonl and history.json, from which TestRecheck
// (-chaos.recheck=DIR) checks it again.
//
// The tests run only when asked: `go test ./chaos -chaos.for=2m` (make
// chaos); -chaos.faults=isolate-follower,kill-dispatcher,... picks faults, -chaos.session
// the session timeout. -chaos.selftest runs the proof that the checks bite:
// the same faults (holders stopped and frozen just after their grant) with
// the clients broken on purpose, unfenced and deaf to Done, must be
// reported as lost updates and as two mutex holders at once, and unbroken
// must not; and with the cached workload's hot phases deaf to contenders
// on purpose (-bypass), contenders must be reported passed.
package chaos
