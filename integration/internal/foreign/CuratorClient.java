// CuratorClient drives one Apache Curator lock client for the interop
// tests: it takes commands on standard input, one a line, and answers on
// standard output.
//
//   java CuratorClient CONNECT PATH RECIPE SESSION_TIMEOUT_MS
//
// RECIPE is mutex (InterProcessMutex), rw-read or rw-write (the read or
// write side of InterProcessReadWriteLock) or latch (LeaderLatch). Once
// connected it prints "ready". Then:
//
//   lock    acquire; print "held CZXID" once the recipe's acquire has
//           returned (latch: once it has leadership), CZXID being the
//           czxid of this client's own znode
//   unlock  release (latch: close the latch); print "released"
//   exit    close the client; print "bye" and exit 0 (so does the end
//           of standard input)
//
// Any error is printed to standard error and ends the program with
// status 2. The client's own znode is the one its recipe created: for the
// locks, the path InterProcessMutex keeps for the thread that acquired
// (getLockPath, protected, exposed by a subclass that changes nothing
// else); for LeaderLatch, getOurPath, read after await returned and
// checked again with hasLeadership once the czxid is known.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.data.Stat;

public final class CuratorClient {
    /** One lock recipe: lock returns the path of the client's own znode. */
    interface Recipe {
        String lock() throws Exception;

        void unlock() throws Exception;
    }

    static final class Mutex extends InterProcessMutex implements Recipe {
        Mutex(CuratorFramework c, String path) {
            super(c, path);
        }

        public String lock() throws Exception {
            acquire();
            return getLockPath();
        }

        public void unlock() throws Exception {
            release();
        }
    }

    static final class Write extends InterProcessReadWriteLock.WriteLock implements Recipe {
        Write(CuratorFramework c, String path) {
            super(c, path, null);
        }

        public String lock() throws Exception {
            acquire();
            return getLockPath();
        }

        public void unlock() throws Exception {
            release();
        }
    }

    // Read is the read side as InterProcessReadWriteLock builds it: a
    // ReadLock that knows the write side of the same lock object.
    static final class Read extends InterProcessReadWriteLock.ReadLock implements Recipe {
        Read(CuratorFramework c, String path) {
            super(c, path, null, new InterProcessReadWriteLock.WriteLock(c, path, null));
        }

        public String lock() throws Exception {
            acquire();
            return getLockPath();
        }

        public void unlock() throws Exception {
            release();
        }
    }

    // Latch starts a LeaderLatch per round: a latch gives up leadership
    // only by closing.
    static final class Latch implements Recipe {
        private final CuratorFramework client;
        private final String path;
        private LeaderLatch latch;
        private int round;

        Latch(CuratorFramework c, String path) {
            this.client = c;
            this.path = path;
        }

        public String lock() throws Exception {
            round++;
            latch = new LeaderLatch(client, path, "curator-latch-" + ProcessHandle.current().pid() + "-" + round);
            latch.start();
            latch.await();
            String own = latch.getOurPath();
            if (!latch.hasLeadership() || own == null) {
                throw new IllegalStateException("latch: await returned without leadership");
            }
            return own;
        }

        public void unlock() throws Exception {
            latch.close();
            latch = null;
        }

        boolean leads(String own) {
            return latch != null && latch.hasLeadership() && own.equals(latch.getOurPath());
        }
    }

    static Recipe recipe(String name, CuratorFramework c, String path) {
        switch (name) {
            case "mutex":
                return new Mutex(c, path);
            case "rw-read":
                return new Read(c, path);
            case "rw-write":
                return new Write(c, path);
            case "latch":
                return new Latch(c, path);
            default:
                throw new IllegalArgumentException("unknown recipe " + name + ": want mutex, rw-read, rw-write or latch");
        }
    }

    // czxid reads the czxid of the client's own znode, which it holds.
    static long czxid(CuratorFramework c, Recipe r, String own) throws Exception {
        if (own == null) {
            throw new IllegalStateException("acquire returned, but the recipe knows no znode of its own");
        }
        Stat st = c.checkExists().forPath(own);
        if (st == null) {
            throw new IllegalStateException("own znode " + own + " is gone");
        }
        if (r instanceof Latch && !((Latch) r).leads(own)) {
            throw new IllegalStateException("latch: leadership lost while reading " + own);
        }
        return st.getCzxid();
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 4) {
            System.err.println("usage: CuratorClient CONNECT PATH RECIPE SESSION_TIMEOUT_MS");
            System.exit(2);
        }
        int timeout = Integer.parseInt(args[3]);
        CuratorFramework c = CuratorFrameworkFactory.builder()
                .connectString(args[0])
                .sessionTimeoutMs(timeout)
                .connectionTimeoutMs(Math.min(timeout, 15000))
                .retryPolicy(new ExponentialBackoffRetry(50, 10, 1000))
                .build();
        try {
            c.start();
            if (!c.blockUntilConnected(60, TimeUnit.SECONDS)) {
                throw new IllegalStateException("no connection to " + args[0] + " within 60s");
            }
            serve(c, recipe(args[2], c, args[1]));
        } catch (Exception e) {
            System.err.println("CuratorClient: " + e);
            e.printStackTrace();
            System.exit(2);
        }
    }

    static void serve(CuratorFramework c, Recipe r) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        say("ready");
        for (String line; (line = in.readLine()) != null; ) {
            switch (line) {
                case "lock":
                    String own = r.lock();
                    say("held " + czxid(c, r, own));
                    break;
                case "unlock":
                    r.unlock();
                    say("released");
                    break;
                case "exit":
                    c.close();
                    say("bye");
                    return;
                default:
                    throw new IllegalArgumentException("unknown command " + line);
            }
        }
        c.close();
        say("bye");
    }

    static void say(String s) {
        System.out.println(s);
        System.out.flush();
    }
}
