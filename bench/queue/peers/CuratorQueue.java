import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.queue.DistributedQueue;
import org.apache.curator.framework.recipes.queue.QueueBuilder;
import org.apache.curator.framework.recipes.queue.QueueConsumer;
import org.apache.curator.framework.recipes.queue.QueueSerializer;
import org.apache.curator.framework.recipes.queue.SimpleDistributedQueue;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.RetryNTimes;

/**
 * Queue-bench peer: Curator's queues in the loop of bench/cmd/queuebench.
 *
 * <pre>
 * CuratorQueue IMPL CONNECT PATH NAME PRODUCERS CONSUMERS WARMUP_MS DURATION_MS PAYLOAD WORK_MS
 *   IMPL distributed: DistributedQueue with a lock path (at least once): items
 *        in PATH/items, locks in PATH/locks; consumers are pushed items.
 *   IMPL simple: SimpleDistributedQueue at PATH (at most once): offer, poll.
 * </pre>
 *
 * Every producer and consumer has its own client (session) and thread. Prints
 * {"ready":true} once all are connected, starts on a line from stdin, runs
 * for WARMUP_MS + DURATION_MS, counting only what lands in the last
 * DURATION_MS, then prints one JSON report per worker and {"done":true}.
 */
public class CuratorQueue {
    /** The measured part of the run, in System.nanoTime. */
    static final class Window {
        final long start, end;

        Window(long start, long end) {
            this.start = start;
            this.end = end;
        }

        boolean in(long t) {
            return t >= start && t < end;
        }
    }

    static final QueueSerializer<byte[]> BYTES = new QueueSerializer<byte[]>() {
        @Override
        public byte[] serialize(byte[] item) {
            return item;
        }

        @Override
        public byte[] deserialize(byte[] bytes) {
            return bytes;
        }
    };

    /** One producer or consumer: its client, its queue handle, its counts. */
    abstract static class Worker {
        final String name;
        final CuratorFramework client;
        long puts, acked, putsAll, ackedAll;
        final List<Long> takeUs = new ArrayList<>();
        String error;

        Worker(String name, CuratorFramework client) {
            this.name = name;
            this.client = client;
        }

        /** Builds and starts the queue handle (before "ready"). */
        abstract void open() throws Exception;

        /** Runs the loop until the window's end. */
        abstract void loop(Window w, long t0) throws Exception;

        void close() throws Exception {
        }

        void run(Window w, long t0) {
            try {
                loop(w, t0);
            } catch (Throwable e) {
                synchronized (this) {
                    error = e.toString();
                }
            }
        }

        synchronized String json() {
            StringBuilder sb = new StringBuilder();
            sb.append("{\"worker\":").append(quote(name))
                .append(",\"puts\":").append(puts)
                .append(",\"acked\":").append(acked)
                .append(",\"puts_all\":").append(putsAll)
                .append(",\"acked_all\":").append(ackedAll)
                .append(",\"take_us\":[");
            for (int i = 0; i < takeUs.size(); i++) {
                if (i > 0) {
                    sb.append(',');
                }
                sb.append(takeUs.get(i));
            }
            sb.append(']');
            if (error != null) {
                sb.append(",\"error\":").append(quote(error));
            }
            return sb.append('}').toString();
        }
    }

    /** Puts as fast as it can; put returns once the server has the item. */
    static final class Producer extends Worker {
        final boolean simple;
        final String path;
        final byte[] payload;
        DistributedQueue<byte[]> dq;
        SimpleDistributedQueue sq;

        Producer(String name, CuratorFramework client, boolean simple, String path, byte[] payload) {
            super(name, client);
            this.simple = simple;
            this.path = path;
            this.payload = payload;
        }

        @Override
        void open() throws Exception {
            if (simple) {
                sq = new SimpleDistributedQueue(client, path);
                return;
            }
            // A producer-only DistributedQueue (no consumer). putInBackground
            // is true by default: put would return before the server has the
            // item. The loop's put is synchronous for every implementation.
            dq = QueueBuilder.builder(client, null, BYTES, path + "/items")
                .lockPath(path + "/locks").putInBackground(false).buildQueue();
            dq.start();
        }

        @Override
        void loop(Window w, long t0) throws Exception {
            while (System.nanoTime() < w.end) {
                if (simple) {
                    sq.offer(payload);
                } else {
                    dq.put(payload);
                }
                long now = System.nanoTime();
                synchronized (this) {
                    putsAll++;
                    if (w.in(now)) {
                        puts++;
                    }
                }
            }
        }

        @Override
        void close() throws Exception {
            if (dq != null) {
                dq.close();
            }
        }
    }

    /** SimpleDistributedQueue: poll lists the queue, reads the first item and deletes it. */
    static final class SimpleConsumer extends Worker {
        final String path;
        final long workMs;
        SimpleDistributedQueue q;

        SimpleConsumer(String name, CuratorFramework client, String path, long workMs) {
            super(name, client);
            this.path = path;
            this.workMs = workMs;
        }

        @Override
        void open() {
            q = new SimpleDistributedQueue(client, path);
        }

        @Override
        void loop(Window w, long t0) throws Exception {
            for (;;) {
                long start = System.nanoTime();
                if (start >= w.end) {
                    return;
                }
                byte[] item = null;
                while (item == null) {
                    long leftMs = (w.end - System.nanoTime()) / 1_000_000;
                    if (leftMs <= 0) {
                        return;
                    }
                    item = q.poll(Math.min(leftMs, 250), TimeUnit.MILLISECONDS);
                }
                long got = System.nanoTime();
                if (workMs > 0) {
                    Thread.sleep(workMs);
                }
                long now = System.nanoTime();
                synchronized (this) {
                    if (w.in(got)) {
                        takeUs.add((got - start) / 1000);
                    }
                    ackedAll++;
                    if (w.in(now)) {
                        acked++;
                    }
                }
            }
        }
    }

    /**
     * DistributedQueue with a lock path. Curator pushes items: its loop
     * thread walks each snapshot of the queue's children and, for each
     * item, locks it (an ephemeral node under the lock path), reads it,
     * calls consumeMessage, deletes it and unlocks it. That work is handed
     * to an Executor; this consumer is that executor and runs it directly on
     * Curator's one thread, as the default (a direct executor) does. So the
     * ack is over when execute returns, and "take latency" is the time from
     * the end of the previous item's ack (when a take call would start) to
     * consumeMessage.
     */
    static final class DistConsumer extends Worker implements QueueConsumer<byte[]>, Executor {
        final String path;
        final long workMs;
        DistributedQueue<byte[]> q;
        Window w; // null until the start
        long freeAt;
        boolean consumed;

        DistConsumer(String name, CuratorFramework client, String path, long workMs) {
            super(name, client);
            this.path = path;
            this.workMs = workMs;
        }

        @Override
        void open() throws Exception {
            q = QueueBuilder.builder(client, this, BYTES, path + "/items")
                .lockPath(path + "/locks").executor(this).buildQueue();
            q.start();
        }

        @Override
        public void execute(Runnable r) {
            r.run(); // lock, read, consumeMessage, delete, unlock
            long now = System.nanoTime();
            synchronized (this) {
                if (consumed) {
                    consumed = false;
                    freeAt = now;
                    ackedAll++;
                    if (w != null && w.in(now)) {
                        acked++;
                    }
                }
            }
        }

        @Override
        public void consumeMessage(byte[] message) throws Exception {
            long now = System.nanoTime();
            synchronized (this) {
                if (w != null && w.in(now)) {
                    takeUs.add((now - freeAt) / 1000);
                }
                consumed = true;
            }
            if (workMs > 0) {
                Thread.sleep(workMs);
            }
        }

        @Override
        public void stateChanged(CuratorFramework client, ConnectionState newState) {
        }

        @Override
        void loop(Window w, long t0) throws Exception {
            synchronized (this) {
                this.w = w;
                freeAt = t0;
            }
            long left;
            while ((left = w.end - System.nanoTime()) > 0) {
                TimeUnit.NANOSECONDS.sleep(left);
            }
            q.close();
        }

        @Override
        void close() throws Exception {
            q.close(); // idempotent
        }
    }

    static CuratorFramework connect(String connect) throws InterruptedException {
        CuratorFramework c = CuratorFrameworkFactory.newClient(connect, 10000, 10000, new RetryNTimes(3, 100));
        c.start();
        if (!c.blockUntilConnected(20, TimeUnit.SECONDS)) {
            c.close();
            throw new IllegalStateException("not connected to " + connect);
        }
        return c;
    }

    static String quote(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            if (ch == '"' || ch == '\\') {
                sb.append('\\').append(ch);
            } else if (ch < 0x20) {
                sb.append(String.format("\\u%04x", (int) ch));
            } else {
                sb.append(ch);
            }
        }
        return sb.append('"').toString();
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 10 || !(args[0].equals("distributed") || args[0].equals("simple"))) {
            System.err.println("usage: CuratorQueue distributed|simple CONNECT PATH NAME PRODUCERS CONSUMERS WARMUP_MS DURATION_MS PAYLOAD WORK_MS");
            System.exit(2);
        }
        boolean simple = args[0].equals("simple");
        String connect = args[1], path = args[2], name = args[3];
        int producers = Integer.parseInt(args[4]), consumers = Integer.parseInt(args[5]);
        long warmupMs = Long.parseLong(args[6]), durationMs = Long.parseLong(args[7]);
        byte[] payload = new byte[Integer.parseInt(args[8])];
        java.util.Arrays.fill(payload, (byte) 'x');
        long workMs = Long.parseLong(args[9]);

        List<Worker> workers = new ArrayList<>();
        int status = 0;
        try {
            for (int i = 0; i < producers + consumers; i++) {
                CuratorFramework c = connect(connect);
                Worker w;
                if (i < producers) {
                    w = new Producer(name + "/producer-" + i, c, simple, path, payload);
                } else if (simple) {
                    w = new SimpleConsumer(name + "/consumer-" + (i - producers), c, path, workMs);
                } else {
                    w = new DistConsumer(name + "/consumer-" + (i - producers), c, path, workMs);
                }
                workers.add(w);
                w.open();
            }
            System.out.println("{\"ready\":true}");
            System.out.flush();
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            if (in.readLine() == null) {
                return;
            }
            long t0 = System.nanoTime();
            Window win = new Window(t0 + warmupMs * 1_000_000, t0 + (warmupMs + durationMs) * 1_000_000);
            List<Thread> threads = new ArrayList<>();
            for (Worker w : workers) {
                Thread t = new Thread(() -> w.run(win, t0), w.name);
                t.start();
                threads.add(t);
            }
            for (Thread t : threads) {
                t.join();
            }
            for (Worker w : workers) {
                System.out.println(w.json());
            }
            System.out.println("{\"done\":true}");
            System.out.flush();
        } catch (Throwable e) {
            e.printStackTrace();
            status = 1;
        } finally {
            for (Worker w : workers) {
                try {
                    w.close();
                } catch (Throwable ignore) {
                }
                w.client.close();
            }
        }
        System.exit(status);
    }
}
