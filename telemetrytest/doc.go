// Package telemetrytest holds the tests that read what the library records
// back through the OpenTelemetry SDK: the instruments, their attributes and
// the spans of every recipe, against a real ZooKeeper. It is a module of
// its own so that the library's go.mod does not require the SDK, and a
// program that imports the library does not find the SDK in its module
// graph.
package telemetrytest
