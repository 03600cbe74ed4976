# zkrecipes: the two commands the README promises, and the checks.
#   make demo   start a ZooKeeper if none answers on $(ZK), then run the demo
#   make test   the same set-up, then the whole test suite under the race detector
ZK ?= 127.0.0.1:2181
GO ?= go
STATICCHECK ?= $(shell $(GO) env GOPATH)/bin/staticcheck

.PHONY: demo test zk-up zk-down lint bench interop

zk-up:
	bash scripts/zk-up.sh $(ZK)

zk-down:
	bash scripts/zk-down.sh

demo: zk-up
	ZK_CONNECT=$(ZK) $(GO) run ./cmd/zklock demo

# Everything under the race detector; then the tests in which clients
# reconnect with watches set, without it (see reconnect_test.go: a data
# race inside go-zookeeper v1.0.4 itself).
test: zk-up
	$(GO) test -race -timeout 15m ./...
	$(GO) test -count=1 -timeout 10m -run 'TestLeaderKilledMidRun|TestSessionSurvivesServerRestart' .

lint:
	@test -z "$$(gofmt -l . | tee /dev/stderr)" || (echo "gofmt: files above need formatting" && exit 1)
	$(GO) mod tidy -diff
	cd bench && $(GO) mod tidy -diff
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	test -x $(STATICCHECK) || $(GO) install honnef.co/go/tools/cmd/staticcheck@latest
	$(STATICCHECK) ./...
	cd bench && $(STATICCHECK) ./...

# Side by side with go-zookeeper's zk.Lock on one server, alternating rounds.
bench: zk-up
	cd bench && $(GO) run ./cmd/lockbench -zk $(ZK) -sessions 1,8,32 -d 4s -rounds 9

# The long stress of issue 7: Mutex, RWMutex and Semaphore, 1 session
# uncontended and 8 contended, 100,000 cycles each, GOMAXPROCS=8 beside CPU
# hogs; fails on any error from Lock/Unlock, false loss, exclusion violation
# or node left behind. A quick try: make stress STRESS_CYCLES=2000
STRESS_CYCLES ?= 100000
.PHONY: stress
stress: zk-up
	cd bench && $(GO) run ./cmd/lockstress -zk $(ZK) -cycles $(STRESS_CYCLES) -procs 8 -hogs 2

# A Go service sharing one lock path with Curator (Java) and with kazoo (Python).
interop:
	bash interop/install.sh
	$(GO) test -race -count=1 -tags interop ./interop/
