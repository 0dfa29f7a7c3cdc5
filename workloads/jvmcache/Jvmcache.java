// jvmcache: a JVM service with a large heap for perfpilot's proof harness (crates/proof).
//
// A table of `long` values (default 3 GiB, in 8 MiB arrays on the Java heap) is filled with
// pseudo-random numbers at start; GET /get?k=N does a chain of dependent random reads through
// it (each read's value picks the next slot, like an index walk or a hash-chain lookup), so the
// work is bound by memory latency and the TLB, as in large-heap caches and scoring services.
// GET /metrics serves `jvmcache_requests_total` in the Prometheus text format.
//
// Java 17, the JDK's own HTTP server, no dependencies:
//   javac -d classes Jvmcache.java
//   java -Xms4g -Xmx4g -cp classes Jvmcache --port 8080 --table-mib 3072 --threads 4 --steps 32
// It prints "listening on 127.0.0.1:PORT" once the table is full and the port is open.

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.LongAdder;

public final class Jvmcache {
    /** Longs per array: 8 MiB, so no single allocation needs a contiguous 3 GiB. */
    private static final int CHUNK = 1 << 20;

    private final long[][] table;
    private final long slots;
    private final int steps;
    private final LongAdder requests = new LongAdder();

    private Jvmcache(long tableMib, int steps) {
        long total = tableMib * 1024L * 1024L / 8L;
        int chunks = (int) Math.max(1, (total + CHUNK - 1) / CHUNK);
        this.table = new long[chunks][];
        long seed = 0x9E3779B97F4A7C15L;
        for (int c = 0; c < chunks; c++) {
            long[] a = new long[CHUNK];
            for (int i = 0; i < CHUNK; i++) {
                seed = mix(seed + i);
                a[i] = seed;
            }
            table[c] = a;
        }
        this.slots = (long) chunks * CHUNK;
        this.steps = steps;
    }

    /** SplitMix64's finalizer: a cheap, well-spread hash of a long. */
    private static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /** The lookup: `steps` dependent reads, each slot chosen by the value read before. */
    private long lookup(long key) {
        long slot = Long.remainderUnsigned(mix(key), slots);
        long acc = 0;
        for (int s = 0; s < steps; s++) {
            long v = table[(int) (slot / CHUNK)][(int) (slot % CHUNK)];
            acc += v;
            slot = Long.remainderUnsigned(mix(v ^ key), slots);
        }
        return acc;
    }

    private static void reply(HttpExchange ex, int status, String contentType, String body)
            throws IOException {
        byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().set("Content-Type", contentType);
        ex.sendResponseHeaders(status, bytes.length);
        try (OutputStream os = ex.getResponseBody()) {
            os.write(bytes);
        }
    }

    private void get(HttpExchange ex) throws IOException {
        String query = ex.getRequestURI().getRawQuery();
        long key = -1;
        if (query != null) {
            for (String part : query.split("&")) {
                if (part.startsWith("k=")) {
                    try {
                        key = Long.parseLong(part.substring(2));
                    } catch (NumberFormatException e) {
                        key = -1;
                    }
                }
            }
        }
        if (key < 0) {
            reply(ex, 400, "text/plain", "give a key: /get?k=NUMBER\n");
            return;
        }
        long value = lookup(key);
        requests.increment();
        // A small JSON answer, built per request like a real service's (young-generation garbage).
        reply(ex, 200, "application/json", "{\"k\":" + key + ",\"v\":" + value + "}\n");
    }

    private void metrics(HttpExchange ex) throws IOException {
        String body = "# HELP jvmcache_requests_total Lookups served.\n"
                + "# TYPE jvmcache_requests_total counter\n"
                + "jvmcache_requests_total " + requests.sum() + "\n"
                + "# HELP jvmcache_table_bytes Size of the in-memory table.\n"
                + "# TYPE jvmcache_table_bytes gauge\n"
                + "jvmcache_table_bytes " + (slots * 8L) + "\n";
        reply(ex, 200, "text/plain; version=0.0.4", body);
    }

    public static void main(String[] args) throws IOException {
        // The JDK server writes headers and body separately: without TCP_NODELAY each keep-alive
        // response waits for the client's delayed ACK (~40 ms), and the service measures that.
        System.setProperty("sun.net.httpserver.nodelay", "true");
        int port = 8080;
        long tableMib = 3072;
        int threads = 4;
        int steps = 32;
        String host = "127.0.0.1";
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--port": port = Integer.parseInt(args[i + 1]); break;
                case "--table-mib": tableMib = Long.parseLong(args[i + 1]); break;
                case "--threads": threads = Integer.parseInt(args[i + 1]); break;
                case "--steps": steps = Integer.parseInt(args[i + 1]); break;
                case "--host": host = args[i + 1]; break;
                default:
                    System.err.println("unknown option " + args[i]
                            + " (options: --port --table-mib --threads --steps --host)");
                    System.exit(2);
            }
        }
        Jvmcache cache = new Jvmcache(tableMib, steps);
        HttpServer server = HttpServer.create(new InetSocketAddress(host, port), 1024);
        server.createContext("/get", ex -> {
            try (ex) {
                cache.get(ex);
            }
        });
        server.createContext("/metrics", ex -> {
            try (ex) {
                cache.metrics(ex);
            }
        });
        server.setExecutor(Executors.newFixedThreadPool(threads));
        server.start();
        System.out.println("listening on " + host + ":" + server.getAddress().getPort());
        System.out.flush();
    }
}
