import java.io.BufferedReader;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryNTimes;

/**
 * Interop helper: Curator's InterProcessMutex on a path shared with kazoo and zkrecipes.
 *
 * <pre>
 * CuratorLocker cycles CONNECT LOCKPATH LOGFILE WHO K
 *     print "ready", wait for a line on stdin, then K times: acquire, append
 *     "enter WHO", sleep 5ms, append "exit WHO", release.
 * CuratorLocker try CONNECT LOCKPATH SECONDS
 *     try to acquire within SECONDS; print "acquired" or "timeout"; release.
 * CuratorLocker timed CONNECT LOCKPATH
 *     print "ready", then do what each line on stdin says:
 *     "lock": acquire, print "held MICROS" (the time acquire took);
 *     "unlock": release, print "released";
 *     "loop SECONDS": acquire and release as fast as it can for SECONDS,
 *     print "cycles N SECONDS-TAKEN";
 *     "every MILLIS K": K times, acquire and release, MILLIS apart, print
 *     "waits MICROS..." (the time each acquire took).
 * </pre>
 */
public class CuratorLocker {
    public static void main(String[] args) throws Exception {
        String mode = args[0], connect = args[1], path = args[2];
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try (CuratorFramework client = CuratorFrameworkFactory.newClient(connect, 10000, 10000, new RetryNTimes(3, 100))) {
            client.start();
            if (!client.blockUntilConnected(20, TimeUnit.SECONDS)) {
                throw new IllegalStateException("not connected to " + connect);
            }
            InterProcessMutex mutex = new InterProcessMutex(client, path);
            if (mode.equals("timed")) {
                timed(mutex, in);
                return;
            }
            if (mode.equals("try")) {
                if (mutex.acquire(Long.parseLong(args[3]), TimeUnit.SECONDS)) {
                    System.out.println("acquired");
                    mutex.release();
                } else {
                    System.out.println("timeout");
                }
                return;
            }
            String who = args[4];
            int k = Integer.parseInt(args[5]);
            try (FileOutputStream out = new FileOutputStream(args[3], true)) {
                System.out.println("ready");
                System.out.flush();
                if (in.readLine() == null) {
                    return;
                }
                byte[] enter = ("enter " + who + "\n").getBytes(StandardCharsets.UTF_8);
                byte[] exit = ("exit " + who + "\n").getBytes(StandardCharsets.UTF_8);
                for (int i = 0; i < k; i++) {
                    mutex.acquire();
                    out.write(enter);
                    out.flush();
                    Thread.sleep(5);
                    out.write(exit);
                    out.flush();
                    mutex.release();
                }
            }
        }
    }

    static void timed(InterProcessMutex mutex, BufferedReader in) throws Exception {
        System.out.println("ready");
        System.out.flush();
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.trim().split(" ");
            switch (f[0]) {
                case "lock": {
                    long t0 = System.nanoTime();
                    mutex.acquire();
                    System.out.println("held " + (System.nanoTime() - t0) / 1000);
                    break;
                }
                case "unlock":
                    mutex.release();
                    System.out.println("released");
                    break;
                case "loop": {
                    long t0 = System.nanoTime();
                    long end = t0 + (long) (Double.parseDouble(f[1]) * 1e9);
                    long n = 0;
                    while (System.nanoTime() < end) {
                        mutex.acquire();
                        mutex.release();
                        n++;
                    }
                    System.out.println("cycles " + n + " " + (System.nanoTime() - t0) / 1e9);
                    break;
                }
                case "every": {
                    long millis = Long.parseLong(f[1]);
                    int k = Integer.parseInt(f[2]);
                    StringBuilder waits = new StringBuilder("waits");
                    for (int i = 0; i < k; i++) {
                        Thread.sleep(millis);
                        long t0 = System.nanoTime();
                        mutex.acquire();
                        waits.append(' ').append((System.nanoTime() - t0) / 1000);
                        mutex.release();
                    }
                    System.out.println(waits);
                    break;
                }
                default:
                    throw new IllegalArgumentException("unknown command " + line);
            }
            System.out.flush();
        }
    }
}
