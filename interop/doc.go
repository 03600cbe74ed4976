// Package interop holds the interop tests (build tag "interop"): zkrecipes'
// Mutex sharing a lock path with Apache Curator's InterProcessMutex (Java)
// and kazoo's Lock (Python), using the versions Debian bookworm ships.
// docs/interop.md shows the code on each side; run them with make interop.
package interop
