// Package queue measures fairqueue beside the ZooKeeper queues a user would
// otherwise pick, as Debian ships them (interop/install.sh installs them):
// kazoo's Queue and LockingQueue (Python) and Curator's DistributedQueue
// and SimpleDistributedQueue (Java); and beside the floor (floor.go), the
// writes any queue with fairqueue's guarantees must make per item, with
// nothing else.
//
// Every implementation runs the same loop on the same server: P producers
// and C consumers, each with its own session, producers putting small
// payloads as fast as they can, consumers taking (and acking, where the
// queue has an ack) as fast as they can, for a warm-up and then a measured
// window. fairqueue and the floor run in this process, where Claims counts
// what their consumers send (reads, writes, the claim writes and those the
// server refused), per item consumed; the others run as peer
// processes (peers/), which print {"ready":true} once connected, start on
// a line read from stdin and report each worker's counts and take
// latencies as a JSON line (Report).
//
// Scale measures fairqueue and the floor with simulated work per job and a
// growing number of consumers.
//
// The command cmd/queuebench alternates the implementations in rounds and
// prints the table; it is what `make bench-queue` runs.
package queue
