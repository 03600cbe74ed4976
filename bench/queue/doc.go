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
// window. fairqueue runs with Take and Ack (one job at a time, nothing held
// ahead) and with Work (its handlers, and the items it holds ahead: Loop's
// Prefetch); producers may put in batches (PutMany).
//
// fairqueue and the floor run in this process, where Requests counts on
// the wire what their consumers' sessions send, per item consumed: reads,
// writes, and the writes the server refused. fairqueue's dispatcher, the
// one Queue among the consumers' that hands the items out (elected among
// them: see fairqueue's documentation), is counted with them, as it runs
// on a consumer's session; the producers' sessions are not counted (how
// each implementation's producers batch shows in its puts/s). The others
// run as peer processes (peers/), which print {"ready":true} once
// connected, start on a line read from stdin and report each worker's
// counts and take latencies as a JSON line (Report).
//
// Scale measures fairqueue and the floor with simulated work per job and a
// growing number of consumers, and, with Handlers and Batch, fairqueue's
// batching (Work with many handlers, PutMany) beside the floor.
//
// The command cmd/queuebench alternates the implementations in rounds and
// prints the table; it is what `make bench-queue` runs.
package queue
