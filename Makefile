# zkrecipes: the two commands the README promises, and the checks.
#   make demo     start a ZooKeeper if none answers on $(ZK) (the compose
#                 ensemble where it can run, else a local server), then run
#                 the demo: a fair mutex, an election, a job queue
#   make test     the same set-up, then the whole test suite under the race detector
#   make zk-down  stop the ZooKeeper that make demo or make test started
ZK ?= 127.0.0.1:2181
GO ?= go
STATICCHECK ?= $(shell $(GO) env GOPATH)/bin/staticcheck
# Pinned: a new staticcheck may bring new checks, which a lint run should
# not meet unannounced. Installed when the binary is missing or another
# version.
STATICCHECK_VERSION ?= v0.8.2
# The modules: the library (.), and apart from it what only tests and tools
# need, so that the library's importers never get their dependencies: the
# zklock command (Prometheus, the OpenTelemetry SDK), the telemetry's tests
# (the SDK), the chaos suite, zktest's Docker source (testcontainers-go),
# the benchmarks, and the consumer that make lean builds.
MODULES = . cmd/zklock telemetrytest chaos zktest/docker bench .ci/consumer

.PHONY: demo test zk-up zk-down lint lean bench interop

zk-up:
	bash scripts/zk-up.sh $(ZK)

zk-down:
	bash scripts/zk-down.sh $(ZK)

demo: zk-up
	cd cmd/zklock && ZK_CONNECT=$(ZK) $(GO) run . demo

# Everything under the race detector (-count=1: see test-recipes); then the tests in which clients
# reconnect with watches set, without it (see reconnect_test.go: a data
# race inside go-zookeeper v1.0.4 itself).
test: zk-up zktest-version
	$(GO) test -count=1 -race -timeout 15m ./...
	cd cmd/zklock && $(GO) test -count=1 -race -timeout 15m ./...
	cd telemetrytest && $(GO) test -race -timeout 10m ./...
	cd chaos && $(GO) test -race -timeout 15m ./...
	cd zktest/docker && $(GO) test -race -timeout 15m ./...
	$(GO) test -count=1 -timeout 10m -run 'TestLeaderKilledMidRun|TestSessionSurvivesServerRestart|TestSuperviseElectionThroughEnsembleRestart' .
	$(GO) test -count=1 -timeout 10m -run 'TestQueueSurvivesFaults' ./fairqueue/

# ZKTEST_VERSION=3.9 makes every server the tests start ZooKeeper 3.9 (3.8,
# Debian's own package, when unset): make test ZKTEST_VERSION=3.9.
# scripts/zk39-fetch.sh fetches it first (Debian trixie's 3.9.3, into a
# cache; nothing installed). See docs/zookeeper-versions.md.
ZKTEST_VERSION ?=
export ZKTEST_VERSION
.PHONY: zktest-version test-recipes
zktest-version:
ifeq ($(ZKTEST_VERSION),3.9)
	bash scripts/zk39-fetch.sh
endif

# The recipe suites alone (CI runs them on each ZooKeeper release), as make
# test runs them: make test-recipes ZKTEST_VERSION=3.9. -count=1: go test's
# cache does not see ZKTEST_VERSION (TestMain reads it, before the test log
# starts), and would replay the last release's results.
test-recipes: zktest-version
	$(GO) test -count=1 -race -timeout 15m . ./zklock/... ./fairqueue/...
	cd cmd/zklock && $(GO) test -count=1 -race -timeout 15m ./...
	$(GO) test -count=1 -timeout 10m -run 'TestLeaderKilledMidRun|TestSessionSurvivesServerRestart|TestSuperviseElectionThroughEnsembleRestart' .
	$(GO) test -count=1 -timeout 10m -run 'TestQueueSurvivesFaults' ./fairqueue/

# gofmt over the whole tree; go mod tidy -diff, go vet and staticcheck in
# each module.
lint:
	@test -z "$$(gofmt -l . | tee /dev/stderr)" || (echo "gofmt: files above need formatting" && exit 1)
	$(STATICCHECK) -version 2>/dev/null | grep -qF '($(patsubst v%,%,$(STATICCHECK_VERSION)))' || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@set -e; for m in $(MODULES); do \
		echo "lint: module $$m"; \
		(cd $$m && $(GO) mod tidy -diff && $(GO) vet ./... && $(STATICCHECK) ./...); \
	done

# Issue 19, a lean import: a service that imports only zklock and fairqueue
# (.ci/consumer) builds with the oldest Go the module supports, its go.sum
# names none of Docker's, moby's or testcontainers' modules, and its module
# graph none of Prometheus' or the OpenTelemetry SDK's (issue 24); the
# root module, tests included, vets with that Go too (no newer API).
# GOTOOLCHAIN without +auto: a go line above it fails instead of switching.
LEAN_GO ?= go1.25.0
lean:
	cd .ci/consumer && GOTOOLCHAIN=$(LEAN_GO) $(GO) version
	cd .ci/consumer && GOTOOLCHAIN=$(LEAN_GO) $(GO) mod tidy -diff
	cd .ci/consumer && GOTOOLCHAIN=$(LEAN_GO) $(GO) build -o /dev/null .
	GOTOOLCHAIN=$(LEAN_GO) $(GO) vet ./...
	@if grep -Ei 'docker|moby|testcontainers' .ci/consumer/go.sum; then \
		echo "lean: .ci/consumer/go.sum names the modules above: the recipes pull in Docker's"; exit 1; \
	fi
	@if cd .ci/consumer && GOTOOLCHAIN=$(LEAN_GO) $(GO) list -m all | grep -E 'prometheus|opentelemetry.io/otel/(sdk|exporters)'; then \
		echo "lean: .ci/consumer's module graph lists the modules above: the library requires what only zklock and the tests need"; exit 1; \
	fi
	@echo "lean: .ci/consumer builds with $(LEAN_GO); its go.sum has $$(cut -d' ' -f1 .ci/consumer/go.sum | sort -u | wc -l) modules, none of Docker's, moby's or testcontainers', and its module graph none of Prometheus' or the OpenTelemetry SDK's"

# Side by side with go-zookeeper's zk.Lock, and the CachedMutex (its default
# window, and a sync for every Lock) with the Mutex, on one server, in
# rounds whose order rotates; requests per cycle counted on the wire.
bench: zk-up
	cd bench && $(GO) run ./cmd/lockbench -zk $(ZK) -sessions 1,2,8,32 -d 4s -rounds 9

# The same on a private 3-server ensemble at tickTime 2s (package zktest),
# where a session whose server is a follower proves its contact with the
# leader through syncs and writes (bench/lockspeed_test.go).
.PHONY: bench-ensemble
bench-ensemble:
	cd bench && $(GO) test -count=1 -timeout 30m -run '^TestLockSpeedEnsemble$$' -v . -lockbench.ensemble

# What an idle holder costs (bench/idlecost_test.go): 1, 100 and 1,000
# sessions each holding a zklock.Mutex, then as many holding go-zookeeper's
# zk.Lock (pings only), idle for IDLE_FOR on a private 3-server ensemble and
# on a private standalone server (tickTime 2s, 10s sessions); requests per
# holder by opcode, the servers' packets, writes committed and CPU, into
# bench/results/idle-cost.csv. Takes about ten minutes.
IDLE_HOLDERS ?= 1,100,1000
IDLE_FOR ?= 30s
.PHONY: bench-idle
bench-idle:
	cd bench && $(GO) test -count=1 -timeout 60m -run '^TestIdleCost$$' -v . -idle -idle.holders $(IDLE_HOLDERS) -idle.for $(IDLE_FOR) -idle.out results/idle-cost.csv

# The long stress of issue 7: Mutex, RWMutex and Semaphore, 1 session
# uncontended and 8 contended, 100,000 cycles each, GOMAXPROCS=8 beside CPU
# hogs; fails on any error from Lock/Unlock, false loss, exclusion violation
# or node left behind. A quick try: make stress STRESS_CYCLES=2000
STRESS_CYCLES ?= 100000
.PHONY: stress
stress: zk-up
	cd bench && $(GO) run ./cmd/lockstress -zk $(ZK) -cycles $(STRESS_CYCLES) -procs 8 -hogs 2

# fairqueue (Take and Ack; Work) side by side with the floor (the three
# writes per item any such queue must make, the choice of item made for
# free in process), kazoo's Queue and LockingQueue and Curator's
# DistributedQueue and SimpleDistributedQueue (Debian's, as for interop) on
# one server, alternating rounds, with the consumers' reads, writes and
# refused writes per item (fairqueue's dispatcher, one of its consumers,
# counted with them); then fairqueue's batching, 16 consumers each running
# Work(16) and 4 producers PutMany(100), beside the floor (issue 25's gate,
# measured as the dispatcher probe measured it); then the consumer-scaling
# curve of fairqueue and the floor, written to
# bench/results/queue-scaling.{csv,png}. A quick try (2 rounds of 3s, 1 and
# 4 consumers, into bench/results/quick):
#   make bench-queue BENCH_QUEUE_FLAGS=-quick
# Work's prefetch: BENCH_QUEUE_FLAGS='-prefetch 0'; one consumer's Work in
# the batching rounds: '-work-consumers 1' (go run ./cmd/queuebench -h).
BENCH_QUEUE_FLAGS ?=
.PHONY: bench-queue
bench-queue: zk-up
	bash interop/install.sh
	cd bench && $(GO) run ./cmd/queuebench -zk $(ZK) $(BENCH_QUEUE_FLAGS)

# The 4x4 comparison (fairqueue with Take and with Work, and the floor) and
# the 64-consumer point of the curve, once, against a server that syncs its
# transaction log to disk before it acknowledges a write (forceSync=yes),
# for information beside bench-queue's figures: the servers zk-up and
# zktest start, bench-queue's too, run with forceSync=no. The server is one
# of its own, on ZK_FSYNC (not $(ZK): a server already there runs without
# fsync), started by zk-up with ZK_FORCE_SYNC=yes (its files, the log
# among them, on disk in /tmp/zkrecipes-zk-<port>) and stopped afterwards;
# zk-up refuses a server that answers there and that it did not start with
# forceSync=yes. The curve goes to bench/results/fsync. Like every
# benchmark, under the machine's bench lock:
#   flock /tmp/zkr-bench.lock make bench-queue-fsync
ZK_FSYNC ?= 127.0.0.1:2189
BENCH_QUEUE_FSYNC_FLAGS ?= -mode compare,scale -impls fairqueue,fairqueue.Work,floor -scale 64 -out results/fsync
.PHONY: bench-queue-fsync
bench-queue-fsync:
	bash interop/install.sh
	@trap 'bash "$(CURDIR)/scripts/zk-down.sh" $(ZK_FSYNC)' EXIT; trap 'exit 130' INT TERM; \
	ZK_FORCE_SYNC=yes bash scripts/zk-up.sh $(ZK_FSYNC) && \
	cd bench && $(GO) run ./cmd/queuebench -zk $(ZK_FSYNC) -fsync $(BENCH_QUEUE_FSYNC_FLAGS) $(BENCH_QUEUE_FLAGS)

# A Go service sharing one lock path with Curator (Java) and with kazoo (Python).
interop: zktest-version
	bash interop/install.sh
	$(GO) test -race -count=1 -tags interop ./interop/

# zktest's Docker sources of servers, end to end (scripts/test-docker.sh):
# starts a Docker engine when none answers (as root: installs Debian's
# docker.io when missing), installs compose when missing (as root, on
# either engine), builds the local stand-in for zookeeper:3.8 when
# the image is missing (scripts/zk-image.sh, cached in Docker's image store),
# runs zktest/docker's tests, then zktest's and zklock's against a container
# of zktest/docker's (zkcontainer), all through testcontainers-go, then the
# recipe tests against docker-compose.yml's 3-server ensemble, and leaves no
# container behind.
.PHONY: test-docker
test-docker:
	GO=$(GO) bash scripts/test-docker.sh

# Jepsen-style chaos suite (chaos/): Mutex and CachedMutex with a fenced
# register, Election, Semaphore and fairqueue, in client processes (some pinned to one server
# each) that hold their leases for seconds, on a 3-server ensemble, under
# kill -9 of servers and of the leader, a follower with a holder on it and
# the leader cut off from their peers while their clients still reach them,
# clients' connections frozen and holders stopped (SIGSTOP) past their
# session timeout, clients killed, and the queue's dispatcher killed, stopped
# and its server cut off; then every history checked, in the
# order things happened (porcupine for the register; no two holders' leases
# overlapping), and every server read alone and compared. Fails on any
# violation, and then keeps the servers' logs and data in $(CHAOS_OUT).
# Then the self-tests: with the clients broken on purpose the same checks
# must report lost updates, two holders at once and contenders passed by a
# cache deaf to them, and unbroken they must not. All the tests run
# whatever the first finds. Longer:
# CHAOS_FOR=30m make chaos; some faults only:
# CHAOS_FLAGS=-chaos.faults=isolate-follower (or kill-dispatcher,stop-dispatcher,
# isolate-dispatcher: the queue's dispatcher killed, stopped past its session,
# its server cut off; after each, the hand-out stall is measured and must stay
# within the session timeout plus a margin: summary.txt, stalls.txt).
# chaos/ is a module of its own: the tests run from there.
CHAOS_FOR ?= 2m
CHAOS_OUT ?= $(CURDIR)/chaos-out
CHAOS_FLAGS ?=
.PHONY: chaos
chaos: zktest-version
	@status=0; cd chaos || exit 1; \
	$(GO) test -count=1 -timeout 0 -run '^TestChaos$$' -v . -chaos.for=$(CHAOS_FOR) -chaos.out=$(CHAOS_OUT) $(CHAOS_FLAGS) || status=1; \
	$(GO) test -count=1 -timeout 0 -run '^TestCheckerCatches' -v . -chaos.selftest -chaos.out=$(CHAOS_OUT) || status=1; \
	$(GO) test -count=1 -timeout 10m -run '^TestUnlockAfterLossReportsLoss$$' -v . -chaos.findings || status=1; \
	exit $$status

# The seeds' comparison, run (bench/fencing_test.go): redsync on one Redis,
# Redlock on three, the plain ephemeral-znode lock, zklock.Mutex without and
# with its token, each under the same pauses and lock-server restarts, on
# the same fenced register; then wake-ups per hand-off, plain ephemeral lock
# against zklock.Mutex. Installs Debian's redis-server when missing. Tables
# in $(COMPARE_OUT)/comparison.md.
COMPARE_FOR ?= 40s
COMPARE_OUT ?= $(CURDIR)/compare-out
.PHONY: redis-compare
redis-compare:
	command -v redis-server >/dev/null || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server)
	cd bench && $(GO) test -count=1 -timeout 40m -run '^TestLockComparison$$' -v . -compare -compare.for=$(COMPARE_FOR) -compare.out=$(COMPARE_OUT)
