package io.ferromq.interop5;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.BitSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.LitePushConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.java.impl.consumer.LitePushConsumerImpl;

/**
 * The receive side of the lite topic benchmark (benches/lite_consume_bench.py): RocketMQ 5.5 lite topics
 * received by the Java client 5.2.0's LitePushConsumers.
 *
 * <pre>
 * java -cp ferromq-interop5grpc.jar io.ferromq.interop5.LiteBench5 ENDPOINT PARENT GROUP LITES COUNT
 *     [CONSUMERS [PRODUCERS [WINDOW [STALL_SECONDS [PACED_COUNT [RATE]]]]]]
 * </pre>
 *
 * (or {@code Grpc5 ENDPOINT lite_bench PARENT GROUP COUNT}: LITES = COUNT / 10, no pauses, under Grpc5's
 * watchdog.) PARENT is a LITE topic, GROUP a lite group bound to it (consumeMessageOrderly true, its
 * {@code lite.sub.client.quota} at least LITES / CONSUMERS).
 *
 * <ol>
 * <li>CONSUMERS (8) LitePushConsumers of GROUP; consumer i subscribes the lite topics {@code lt<l>} with
 * l % CONSUMERS == i, each with subscribeLite (the consumers in parallel).</li>
 * <li>Warm-up: one message to each lite topic (its sequence number 0), all received: every lite topic is
 * active (made on the server, popped once) before the measured phase.</li>
 * <li>Measured phase: PRODUCERS (8) threads of one Producer send COUNT messages, message j to lite topic
 * j % LITES with sequence number j / LITES + 1, async with at most WINDOW (32) in flight per thread; thread t
 * sends the lite topics l with l % PRODUCERS == t, in sequence order, and WINDOW is below LITES / PRODUCERS,
 * so no two sends of one lite topic are ever in flight together. Each body is
 * {@code "<lite>|<seq>|<send time ms>|<run>|<padding>"} (run: this process's mark; a message of an earlier
 * run of the same group counts as stale). It ends when every message was received, or when nothing
 * arrived for STALL_SECONDS (30).</li>
 * <li>Then 3 s more to see late duplicates; then, when PACED_COUNT (0) is above 0, a second measured phase alike
 * with PACED_COUNT more messages (their sequence numbers go on) sent at RATE (300) messages/s, all threads
 * together: the latency of consumers that keep up, without a backlog; 3 s more, and the result.</li>
 * </ol>
 *
 * <p>Between the phases it prints {@code PHASE <name>} on stdout and, when run by its own main, waits for one
 * line on stdin (the benchmark reads the servers' CPU then). The listener records per message: the first
 * receipt of each (latency: receive time minus the send time in the body), duplicates (a message received
 * again), and order violations (a lite topic's message whose sequence number is not the one after the last
 * received of that lite topic). The RESULT line (JSON) has the counts, the latencies' percentiles, the
 * measured phase's duration, and samples of what went wrong (lite topics, sequence numbers).
 */
final class LiteBench5 {
    private static final int WARM_SEQ = 0;
    private static final long GRACE_MILLIS = 3_000;
    private static final long WARM_STALL_MILLIS = 30_000;
    private static final int SAMPLES = 20;
    /** A message received later than this after its send is "slow" (counted, sampled). */
    private static final long SLOW_MILLIS = 5_000;
    private static final String PADDING = repeat('x', 64);
    /** This run's mark in every body: a message of an earlier run (of the same group) is told apart. */
    private static final String RUN = Long.toHexString(System.nanoTime() & 0xffffffffL);

    private final int lites;
    /** Messages of the first measured phase (as fast as the window lets), then of the paced one. */
    private final int count;
    private final int pacedCount;
    private final double rate;
    private final boolean pause;
    private final BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));

    // What the listeners saw, under `this`. Message j (0 .. count + pacedCount - 1): lite topic j % lites,
    // sequence number j / lites + 1 (0: the warm-up's); j < count: the first phase, else the paced one.
    private final int[] lastSeq;
    private final BitSet warmSeen;
    private final BitSet seen;
    private final int[] latencyMillis;
    private final Stats[] stats = {new Stats(), new Stats()};
    private long unknown;
    private long stale;
    private final List<String> staleSamples = new ArrayList<>();
    private final List<String> warmSamples = new ArrayList<>();
    private final AtomicLong warmReceived = new AtomicLong();

    /** One measured phase's counts. */
    private static final class Stats {
        volatile long start;
        long received;
        long receivedTotal;
        long duplicates;
        long orderViolations;
        long slow;
        long lastReceiveMillis;
        final BitSet slowLites = new BitSet();
        /** Messages received in each second of the phase (the last slot: that or later). */
        final int[] perSecond = new int[900];
        final List<String> slowSamples = new ArrayList<>();
        final List<String> duplicateSamples = new ArrayList<>();
        final List<String> orderSamples = new ArrayList<>();
    }

    private LiteBench5(int lites, int count, int pacedCount, double rate, boolean pause) {
        this.lites = lites;
        this.count = count;
        this.pacedCount = pacedCount;
        this.rate = rate;
        this.pause = pause;
        this.lastSeq = new int[lites];
        Arrays.fill(lastSeq, -1);
        this.warmSeen = new BitSet(lites);
        this.seen = new BitSet(count + pacedCount);
        this.latencyMillis = new int[count + pacedCount];
    }

    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, "UTF-8");
        if (args.length < 5) {
            System.err.println("usage: LiteBench5 ENDPOINT PARENT GROUP LITES COUNT [CONSUMERS [PRODUCERS [WINDOW"
                + " [STALL_SECONDS [PACED_COUNT [RATE]]]]]]");
            System.exit(2);
        }
        int consumers = args.length > 5 ? Integer.parseInt(args[5]) : 8;
        int producers = args.length > 6 ? Integer.parseInt(args[6]) : 8;
        int window = args.length > 7 ? Integer.parseInt(args[7]) : 32;
        int stall = args.length > 8 ? Integer.parseInt(args[8]) : 30;
        int paced = args.length > 9 ? Integer.parseInt(args[9]) : 0;
        double rate = args.length > 10 ? Double.parseDouble(args[10]) : 300;
        Map<String, Object> result;
        try {
            LiteBench5 bench = new LiteBench5(Integer.parseInt(args[3]), Integer.parseInt(args[4]), paced, rate, true);
            result = bench.run(ClientServiceProvider.loadService(), out, args[0], args[1], args[2], consumers,
                producers, window, stall * 1000L);
        } catch (Throwable t) {
            t.printStackTrace();
            System.err.flush();
            System.exit(2);
            return;
        }
        out.println("RESULT " + Grpc5.Json.write(result));
        out.flush();
        System.exit(0);
    }

    /** Grpc5's {@code lite_bench} scenario: COUNT messages over COUNT / 10 lite topics, 8 consumers, 4 producers. */
    static Map<String, Object> scenario(ClientServiceProvider provider, PrintStream out, String endpoint,
        String parent, String group, int count) throws Exception {
        int lites = Math.max(8, count / 10);
        return new LiteBench5(lites, count, 0, 0, false).run(provider, out, endpoint, parent, group, 8, 4,
            Math.max(1, Math.min(32, lites / 4 - 1)), 20_000);
    }

    private Map<String, Object> run(ClientServiceProvider provider, PrintStream out, String endpoint, String parent,
        String group, int consumerCount, int producerCount, int window, long stallMillis) throws Exception {
        if (window >= Math.max(1, lites / producerCount)) {
            throw new IllegalArgumentException("WINDOW must be below LITES / PRODUCERS: per-lite-topic order");
        }
        Map<String, Object> result = new TreeMap<>();
        Map<String, Object> timing = new LinkedHashMap<>();
        List<LitePushConsumer> consumers = new ArrayList<>();
        Producer producer = null;
        ExecutorService pool = Executors.newFixedThreadPool(Math.max(consumerCount, producerCount));
        try {
            long t0 = System.currentTimeMillis();
            for (int i = 0; i < consumerCount; i++) {
                final int index = i;
                consumers.add(provider.newLitePushConsumerBuilder()
                    .setClientConfiguration(Grpc5.config(endpoint))
                    .setConsumerGroup(group)
                    .bindTopic(parent)
                    .setMessageListener(m -> onMessage(index, m))
                    .build());
            }
            for (LitePushConsumer c : consumers) {
                if (c instanceof LitePushConsumerImpl) {
                    waitQuota((LitePushConsumerImpl) c);
                }
            }
            timing.put("consumers_started_ms", System.currentTimeMillis() - t0);
            t0 = System.currentTimeMillis();
            List<Future<?>> subscribing = new ArrayList<>();
            for (int i = 0; i < consumerCount; i++) {
                final LitePushConsumer c = consumers.get(i);
                final int index = i;
                subscribing.add(pool.submit(() -> {
                    for (int l = index; l < lites; l += consumerCount) {
                        c.subscribeLite(lite(l));
                    }
                    return null;
                }));
            }
            for (Future<?> f : subscribing) {
                f.get();
            }
            timing.put("subscribe_ms", System.currentTimeMillis() - t0);
            producer = provider.newProducerBuilder()
                .setClientConfiguration(Grpc5.config(endpoint))
                .setTopics(parent)
                .build();

            phase(out, "warm");
            t0 = System.currentTimeMillis();
            long warmErrors = send(provider, producer, pool, parent, producerCount, window, -1, 0, lites, 0);
            waitFor(() -> warmReceived.get() >= lites, WARM_STALL_MILLIS, () -> warmReceived.get());
            timing.put("warm_ms", System.currentTimeMillis() - t0);
            Map<String, Object> warm = new TreeMap<>();
            warm.put("lite_topics", lites);
            warm.put("received", warmReceived.get());
            warm.put("send_errors", warmErrors);
            synchronized (this) {
                warm.put("sample", new ArrayList<>(warmSamples));
            }
            result.put("warm", warm);
            out.println(Grpc5.Json.write(java.util.Collections.singletonMap("warm", warm)));

            result.put("measured", measure(provider, producer, pool, out, parent, producerCount, window, stallMillis,
                0, "measure", "done", 0, count, 0));
            if (pacedCount > 0) {
                result.put("paced", measure(provider, producer, pool, out, parent, producerCount, window, stallMillis,
                    1, "paced", "paced_done", count, count + pacedCount, rate));
            }
            result.put("timing", timing);
            synchronized (this) {
                result.put("unknown", unknown);
                result.put("stale", stale);
                result.put("stale_sample", new ArrayList<>(staleSamples));
            }
            return result;
        } finally {
            pool.shutdownNow();
            if (producer != null) {
                Grpc5.closeQuietly(producer);
            }
            // All at once (each waits for its receives in flight): CLOSE_WAIT for all, not each.
            List<Thread> closing = new ArrayList<>();
            for (LitePushConsumer c : consumers) {
                Thread t = new Thread(() -> Grpc5.closeQuietly(c), "close-lite-consumer");
                t.setDaemon(true);
                t.start();
                closing.add(t);
            }
            long deadline = System.currentTimeMillis() + 3_000;
            for (Thread t : closing) {
                t.join(Math.max(1, deadline - System.currentTimeMillis()));
            }
        }
    }

    /** One measured phase: messages lo .. hi - 1 sent (at `rate`, 0: as fast as the window lets) and received. */
    private Map<String, Object> measure(ClientServiceProvider provider, Producer producer, ExecutorService pool,
        PrintStream out, String parent, int producerCount, int window, long stallMillis, int p, String begin,
        String end, int lo, int hi, double pace) throws Exception {
        Stats st = stats[p];
        phase(out, begin);
        long start = System.currentTimeMillis();
        st.start = start;
        long errors = send(provider, producer, pool, parent, producerCount, window, p, lo, hi, pace);
        long sentAt = System.currentTimeMillis();
        final int expected = hi - lo;
        boolean complete = waitFor(() -> receivedCount(st) >= expected, stallMillis, () -> receivedCount(st));
        long last;
        synchronized (this) {
            last = st.lastReceiveMillis;
        }
        phase(out, end);
        Thread.sleep(GRACE_MILLIS);
        return report(st, lo, hi, start, sentAt, last, complete, errors, pace);
    }

    private Map<String, Object> report(Stats st, int lo, int hi, long start, long sentAt, long end, boolean complete,
        long errors, double pace) {
        Map<String, Object> m = new TreeMap<>();
        synchronized (this) {
            int unique = 0;
            for (int j = lo; j < hi; j++) {
                if (seen.get(j)) {
                    unique++;
                }
            }
            m.put("sent", hi - lo - errors);
            m.put("send_errors", errors);
            m.put("rate", pace);
            m.put("received_unique", unique);
            m.put("received_total", st.receivedTotal);
            m.put("duplicates", st.duplicates);
            m.put("order_violations", st.orderViolations);
            m.put("complete", complete);
            m.put("send_seconds", (sentAt - start) / 1000.0);
            m.put("seconds", (Math.max(end, start) - start) / 1000.0);
            m.put("msg_per_s", end > start ? Math.round(unique * 1000.0 / (end - start)) : null);
            m.put("slow_over_5s", st.slow);
            m.put("slow_lite_topics", st.slowLites.cardinality());
            m.put("slow_sample", new ArrayList<>(st.slowSamples));
            int[] lat = new int[unique];
            int k = 0;
            List<String> missing = new ArrayList<>();
            long missingCount = 0;
            BitSet missingLites = new BitSet();
            for (int j = lo; j < hi; j++) {
                if (seen.get(j)) {
                    lat[k++] = latencyMillis[j];
                } else {
                    missingCount++;
                    missingLites.set(j % lites);
                    if (missing.size() < SAMPLES) {
                        missing.add(lite(j % lites) + "#" + (j / lites + 1));
                    }
                }
            }
            // The slowest (first receipts), worst first.
            List<Integer> order = new ArrayList<>();
            for (int j = lo; j < hi; j++) {
                if (seen.get(j)) {
                    order.add(j);
                }
            }
            order.sort((a, b) -> Integer.compare(latencyMillis[b], latencyMillis[a]));
            List<String> slowest = new ArrayList<>();
            for (int i = 0; i < Math.min(SAMPLES, order.size()); i++) {
                int j = order.get(i);
                slowest.add(lite(j % lites) + "#" + (j / lites + 1) + ": " + latencyMillis[j] + " ms");
            }
            m.put("slowest", slowest);
            int last = st.perSecond.length - 1;
            while (last > 0 && st.perSecond[last] == 0) {
                last--;
            }
            List<Integer> histogram = new ArrayList<>();
            for (int i = 0; i <= last; i++) {
                histogram.add(st.perSecond[i]);
            }
            m.put("received_per_second", histogram);
            Arrays.sort(lat);
            m.put("latency_ms", percentiles(lat));
            m.put("missing", missingCount);
            m.put("missing_lite_topics", missingLites.cardinality());
            m.put("missing_sample", missing);
            m.put("duplicate_sample", new ArrayList<>(st.duplicateSamples));
            m.put("order_sample", new ArrayList<>(st.orderSamples));
        }
        return m;
    }

    private static Map<String, Object> percentiles(int[] sorted) {
        Map<String, Object> p = new TreeMap<>();
        if (sorted.length == 0) {
            return p;
        }
        p.put("p50", sorted[(int) Math.min(sorted.length - 1, Math.floor(sorted.length * 0.50))]);
        p.put("p90", sorted[(int) Math.min(sorted.length - 1, Math.floor(sorted.length * 0.90))]);
        p.put("p99", sorted[(int) Math.min(sorted.length - 1, Math.floor(sorted.length * 0.99))]);
        p.put("max", sorted[sorted.length - 1]);
        return p;
    }

    /**
     * Sends messages lo .. hi - 1 (phase -1: the warm-up, one per lite topic, sequence number 0), thread t the
     * lite topics l % producerCount == t in j order, at most `window` in flight per thread, paced to `pace`
     * msg/s (all threads) when above 0; how many failed.
     */
    private long send(ClientServiceProvider provider, Producer producer, ExecutorService pool, String parent,
        int producerCount, int window, int p, int lo, int hi, double pace) throws Exception {
        final AtomicLong errors = new AtomicLong();
        List<Future<?>> threads = new ArrayList<>();
        for (int t = 0; t < producerCount; t++) {
            final int thread = t;
            threads.add(pool.submit(() -> {
                Semaphore inFlight = new Semaphore(window);
                double perThread = pace <= 0 ? 0 : pace / producerCount;
                long began = System.nanoTime();
                long mine = 0;
                for (int j = lo; j < hi; j++) {
                    int l = j % lites;
                    if (l % producerCount != thread) {
                        continue;
                    }
                    int seq = p < 0 ? WARM_SEQ : j / lites + 1;
                    if (perThread > 0) {
                        long due = began + (long) (mine * 1e9 / perThread);
                        long wait = due - System.nanoTime();
                        if (wait > 0) {
                            Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                        }
                    }
                    mine++;
                    String body = lite(l) + "|" + seq + "|" + System.currentTimeMillis() + "|" + RUN + "|" + PADDING;
                    inFlight.acquire();
                    producer.sendAsync(provider.newMessageBuilder()
                        .setTopic(parent)
                        .setBody(body.getBytes(StandardCharsets.UTF_8))
                        .setLiteTopic(lite(l))
                        .build()).whenComplete((r, e) -> {
                            if (e != null && errors.incrementAndGet() <= 5) {
                                System.err.println("{\"send_error\": " + Grpc5.Json.write(String.valueOf(e)) + "}");
                            }
                            inFlight.release();
                        });
                }
                inFlight.acquire(window);
                return null;
            }));
        }
        for (Future<?> f : threads) {
            f.get();
        }
        return errors.get();
    }

    private ConsumeResult onMessage(int consumer, MessageView m) {
        long now = System.currentTimeMillis();
        ByteBuffer buffer = m.getBody().duplicate();
        byte[] bytes = new byte[buffer.remaining()];
        buffer.get(bytes);
        String[] parts = new String(bytes, StandardCharsets.UTF_8).split("\\|", 5);
        int l;
        int seq;
        long sent;
        try {
            l = Integer.parseInt(parts[0].substring(2));
            seq = Integer.parseInt(parts[1]);
            sent = Long.parseLong(parts[2]);
        } catch (RuntimeException e) {
            synchronized (this) {
                unknown++;
            }
            return ConsumeResult.SUCCESS;
        }
        String liteTopic = m.getLiteTopic().orElse("");
        synchronized (this) {
            if (parts.length < 5 || !RUN.equals(parts[3])) {
                stale++;
                sample(staleSamples, parts[0] + "#" + parts[1]);
                return ConsumeResult.SUCCESS;
            }
            if (l < 0 || l >= lites || !liteTopic.equals(lite(l))) {
                unknown++;
                return ConsumeResult.SUCCESS;
            }
            if (seq == WARM_SEQ) {
                if (warmSeen.get(l)) {
                    sample(warmSamples, lite(l) + "#warm again");
                } else {
                    warmSeen.set(l);
                    warmReceived.incrementAndGet();
                }
                if (lastSeq[l] > WARM_SEQ) {
                    sample(warmSamples, lite(l) + ": warm after #" + lastSeq[l]);
                } else {
                    lastSeq[l] = WARM_SEQ;
                }
                return ConsumeResult.SUCCESS;
            }
            int j = (seq - 1) * lites + l;
            if (seq < 1 || j >= seen.size() || j >= latencyMillis.length) {
                unknown++;
                return ConsumeResult.SUCCESS;
            }
            Stats st = stats[j < count ? 0 : 1];
            st.receivedTotal++;
            st.lastReceiveMillis = now;
            if (st.start > 0) {
                int second = (int) Math.min(st.perSecond.length - 1, Math.max(0, (now - st.start) / 1000));
                st.perSecond[second]++;
            }
            if (seen.get(j)) {
                st.duplicates++;
                sample(st.duplicateSamples, lite(l) + "#" + seq + " (after #" + lastSeq[l] + ")");
                return ConsumeResult.SUCCESS;
            }
            seen.set(j);
            st.received++;
            latencyMillis[j] = (int) Math.max(0, now - sent);
            if (latencyMillis[j] > SLOW_MILLIS) {
                st.slow++;
                st.slowLites.set(l);
                sample(st.slowSamples, lite(l) + "#" + seq + " consumer " + consumer + ": sent +"
                    + (sent - st.start) + " ms, received +" + (now - st.start) + " ms");
            }
            // A lite topic whose warm-up message never came starts at 1 all the same.
            if (seq != Math.max(lastSeq[l], WARM_SEQ) + 1) {
                st.orderViolations++;
                sample(st.orderSamples, lite(l) + ": #" + seq + " after #" + lastSeq[l]);
            }
            if (seq > lastSeq[l]) {
                lastSeq[l] = seq;
            }
        }
        return ConsumeResult.SUCCESS;
    }

    private synchronized long receivedCount(Stats st) {
        return st.received;
    }

    private static void sample(List<String> samples, String s) {
        if (samples.size() < SAMPLES) {
            samples.add(s);
        }
    }

    /** Prints {@code PHASE name}, then (own main) waits for a line on stdin: the benchmark reads CPU then. */
    private void phase(PrintStream out, String name) throws Exception {
        out.println("PHASE " + name + " " + System.currentTimeMillis());
        out.flush();
        if (pause) {
            stdin.readLine();
        }
    }

    /** Waits until done, or until progress() has not moved for stallMillis; whether done. */
    private static boolean waitFor(java.util.function.BooleanSupplier done, long stallMillis,
        java.util.function.LongSupplier progress) throws InterruptedException {
        long last = progress.getAsLong();
        long moved = System.currentTimeMillis();
        while (!done.getAsBoolean()) {
            Thread.sleep(20);
            long now = progress.getAsLong();
            if (now != last) {
                last = now;
                moved = System.currentTimeMillis();
            } else if (System.currentTimeMillis() - moved > stallMillis) {
                return false;
            }
        }
        return true;
    }

    private static void waitQuota(LitePushConsumerImpl c) throws InterruptedException {
        long deadline = System.currentTimeMillis() + 10_000;
        while (c.getSettings().getLiteSubscriptionQuota() <= 0 && System.currentTimeMillis() < deadline) {
            Thread.sleep(20);
        }
    }

    private static String lite(int l) {
        return "lt" + l;
    }

    private static String repeat(char c, int n) {
        char[] chars = new char[n];
        Arrays.fill(chars, c);
        return new String(chars);
    }
}
