#!/usr/bin/python3
"""Queue-bench peer: kazoo's queues in the loop of bench/cmd/queuebench.

usage:
  kazoo_queue.py IMPL HOSTS PATH NAME PRODUCERS CONSUMERS WARMUP_MS DURATION_MS PAYLOAD WORK_MS POLL_MS
    IMPL queue:   kazoo.recipe.queue.Queue (at most once): put; get removes
                  the item before returning it, and returns None when the
                  queue is empty (it has no blocking get): the consumer then
                  sleeps POLL_MS and asks again.
    IMPL locking: kazoo.recipe.queue.LockingQueue (at least once): put;
                  get(timeout) locks the first free item (blocking, with
                  watches); consume() deletes it and its lock.

Every producer and consumer has its own KazooClient (session) and thread
(queuebench starts one process per worker, so the GIL is not shared). Prints
{"ready": true} once all are connected, starts on a line from stdin, runs for
WARMUP_MS + DURATION_MS, counting only what lands in the last DURATION_MS,
then prints one JSON report per worker and {"done": true}.
"""
import json
import sys
import threading
import time

from kazoo.client import KazooClient


class Worker:
    def __init__(self, name, queue):
        self.name = name
        self.queue = queue
        self.report = {"worker": name, "puts": 0, "acked": 0, "puts_all": 0,
                       "acked_all": 0, "take_us": []}

    def run(self, loop, *args):
        try:
            loop(self, *args)
        except Exception as e:  # reported, and the harness fails the run
            self.report["error"] = "%s: %r" % (type(e).__name__, e)


def produce(w, start, end, payload):
    r = w.report
    while time.monotonic() < end:
        w.queue.put(payload)
        now = time.monotonic()
        r["puts_all"] += 1
        if start <= now < end:
            r["puts"] += 1


def consume_queue(w, start, end, work, poll):
    r = w.report
    while True:
        t = time.monotonic()
        if t >= end:
            return
        item = w.queue.get()  # lists (once, then from its cache), reads, deletes
        while item is None:
            if time.monotonic() + poll >= end:
                return
            time.sleep(poll)
            item = w.queue.get()
        got = time.monotonic()
        if start <= got < end:
            r["take_us"].append(int((got - t) * 1e6))
        if work:
            time.sleep(work)
        r["acked_all"] += 1
        if start <= time.monotonic() < end:
            r["acked"] += 1


def consume_locking(w, start, end, work, _poll):
    r = w.report
    while True:
        t = time.monotonic()
        if t >= end:
            return
        item = None
        while item is None:
            left = end - time.monotonic()
            if left <= 0:
                return
            item = w.queue.get(timeout=min(left, 0.25))
        got = time.monotonic()
        if start <= got < end:
            r["take_us"].append(int((got - t) * 1e6))
        if work:
            time.sleep(work)
        if not w.queue.consume():  # the lock was lost: no faults here, so a bug
            raise RuntimeError("consume: lock on the item lost")
        r["acked_all"] += 1
        if start <= time.monotonic() < end:
            r["acked"] += 1


def main():
    if len(sys.argv) != 12 or sys.argv[1] not in ("queue", "locking"):
        sys.exit(__doc__)
    impl, hosts, path, name = sys.argv[1:5]
    producers, consumers = int(sys.argv[5]), int(sys.argv[6])
    warmup, duration = int(sys.argv[7]) / 1e3, int(sys.argv[8]) / 1e3
    payload = b"x" * int(sys.argv[9])
    work, poll = int(sys.argv[10]) / 1e3, int(sys.argv[11]) / 1e3

    clients, workers = [], []
    try:
        for i in range(producers + consumers):
            client = KazooClient(hosts=hosts, timeout=10)
            client.start(timeout=20)
            clients.append(client)
            q = client.Queue(path) if impl == "queue" else client.LockingQueue(path)
            if i < producers:
                workers.append((Worker("%s/producer-%d" % (name, i), q), produce, (payload,)))
            else:
                loop = consume_queue if impl == "queue" else consume_locking
                workers.append((Worker("%s/consumer-%d" % (name, i - producers), q), loop, (work, poll)))
        print(json.dumps({"ready": True}), flush=True)
        if not sys.stdin.readline():
            return
        t0 = time.monotonic()
        start, end = t0 + warmup, t0 + warmup + duration
        threads = [threading.Thread(target=w.run, args=(loop, start, end) + args)
                   for w, loop, args in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for w, _, _ in workers:
            print(json.dumps(w.report, separators=(",", ":")), flush=True)
        print(json.dumps({"done": True}), flush=True)
    finally:
        for client in clients:
            client.stop()
            client.close()


if __name__ == "__main__":
    main()
