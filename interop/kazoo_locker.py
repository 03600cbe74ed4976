#!/usr/bin/python3
"""Interop helper: kazoo's Lock on a path shared with Curator and zkrecipes.

usage:
  kazoo_locker.py cycles HOSTS LOCKPATH LOGFILE WHO K
      print "ready", wait for a line on stdin, then K times: acquire, append
      "enter WHO", sleep 5ms, append "exit WHO", release.
  kazoo_locker.py hold HOSTS LOCKPATH
      acquire, print "held", release when stdin is closed or gives a line.
  kazoo_locker.py timed HOSTS LOCKPATH
      print "ready", then do what each line on stdin says: "lock": acquire,
      print "held MICROS" (the time acquire took); "unlock": release, print
      "released"; "loop SECONDS": acquire and release as fast as it can for
      SECONDS, print "cycles N SECONDS-TAKEN"; "every MILLIS K": K times,
      acquire and release, MILLIS apart, print "waits MICROS...".
"""
import os
import sys
import time

from kazoo.client import KazooClient


def main():
    mode, hosts, path = sys.argv[1:4]
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=20)
    try:
        lock = client.Lock(path, "kazoo", extra_lock_patterns=["-lock-"])
        if mode == "timed":
            timed(lock)
            return
        if mode == "hold":
            lock.acquire(timeout=30)
            print("held", flush=True)
            sys.stdin.readline()
            lock.release()
            return
        logfile, who, k = sys.argv[4], sys.argv[5], int(sys.argv[6])
        fd = os.open(logfile, os.O_WRONLY | os.O_APPEND)
        print("ready", flush=True)
        if not sys.stdin.readline():
            return
        for _ in range(k):
            lock.acquire(timeout=60)
            os.write(fd, ("enter %s\n" % who).encode())
            time.sleep(0.005)
            os.write(fd, ("exit %s\n" % who).encode())
            lock.release()
        os.close(fd)
    finally:
        client.stop()
        client.close()


def timed(lock):
    print("ready", flush=True)
    for line in sys.stdin:
        f = line.split()
        if f[0] == "lock":
            t0 = time.monotonic()
            lock.acquire()
            print("held %d" % ((time.monotonic() - t0) * 1e6), flush=True)
        elif f[0] == "unlock":
            lock.release()
            print("released", flush=True)
        elif f[0] == "loop":
            t0 = time.monotonic()
            end, n = t0 + float(f[1]), 0
            while time.monotonic() < end:
                lock.acquire()
                lock.release()
                n += 1
            print("cycles %d %f" % (n, time.monotonic() - t0), flush=True)
        elif f[0] == "every":
            waits = []
            for _ in range(int(f[2])):
                time.sleep(int(f[1]) / 1000)
                t0 = time.monotonic()
                lock.acquire()
                waits.append("%d" % ((time.monotonic() - t0) * 1e6))
                lock.release()
            print("waits " + " ".join(waits), flush=True)
        else:
            raise ValueError("unknown command " + line)


if __name__ == "__main__":
    main()
