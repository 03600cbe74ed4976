#!/usr/bin/python3
"""Interop helper: kazoo's Lock on a path shared with Curator and zkrecipes.

usage:
  kazoo_locker.py cycles HOSTS LOCKPATH LOGFILE WHO K
      print "ready", wait for a line on stdin, then K times: acquire, append
      "enter WHO", sleep 5ms, append "exit WHO", release.
  kazoo_locker.py hold HOSTS LOCKPATH
      acquire, print "held", release when stdin is closed or gives a line.
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


if __name__ == "__main__":
    main()
