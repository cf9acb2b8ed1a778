package io.ferromq.loadgen;

import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.BitSet;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;

import com.alibaba.fastjson.JSON;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * One benchmark case against one broker, with the official RocketMQ 4.9.7 Java client; producers and
 * consumers share this JVM, so System.nanoTime() stamped into a body at send time and read again in the
 * consumer's listener gives the end-to-end latency without clock skew.
 *
 * <p>Usage: {@code java -jar ferromq-loadgen.jar key=value...}. Keys (defaults in brackets): namesrv,
 * prefix [Bench] (topic and group names start with it), size [1024] body bytes (at least 16: send
 * nanoTime, sequence number, zero padding), queues [8], phases [produce,consume,latency], mode
 * [sync|async], threads [16] (sync senders), window [256] (async in-flight bound), warmup [2] seconds
 * not counted, produce_seconds [10], produce_max [0 = no cap] messages, rates [1000,5000,20000] msg/s,
 * rate_seconds [10], lat_window [4096] (in-flight bound of the paced producer), consume_timeout [120]
 * seconds, timeout [900] seconds for the whole run.
 *
 * <p>Phases: produce (topic PREFIX-thr at saturation; before it, warm: untimed load of warm_seconds [10] into PREFIX-warm), consume (a new push consumer group reads PREFIX-thr
 * from offset 0 until every message sent is seen), latency (per rate a new topic and group; the consumer
 * runs while a paced async producer sends). Output: one {@code RESULT {json}} line per phase on stdout,
 * {@code FAIL ...} lines on stderr; exit code 0, 1 when a phase failed, 3 when the timeout passed.
 */
public final class LoadGen {
    private final Map<String, String> opts;
    private final long deadlineNanos;
    private final List<String> failures = new ArrayList<String>();
    private DefaultMQProducer producer;
    private BrokerCpu brokerCpu;

    private LoadGen(Map<String, String> opts) {
        this.opts = opts;
        this.deadlineNanos = System.nanoTime() + TimeUnit.SECONDS.toNanos(num("timeout", 900));
    }

    public static void main(String[] args) {
        Map<String, String> opts = new HashMap<String, String>();
        for (String a : args) {
            int eq = a.indexOf('=');
            if (eq <= 0) {
                System.err.println("FAIL bad argument (want key=value): " + a);
                System.exit(64);
            }
            opts.put(a.substring(0, eq), a.substring(eq + 1));
        }
        final LoadGen gen = new LoadGen(opts);
        Thread watchdog = new Thread(new Runnable() {
            public void run() {
                long left;
                while ((left = gen.deadlineNanos - System.nanoTime()) > 0) {
                    LockSupport.parkNanos(left);
                }
                System.err.println("FAIL timeout passed; exiting");
                System.err.flush();
                Runtime.getRuntime().halt(3);
            }
        }, "watchdog");
        watchdog.setDaemon(true);
        watchdog.start();
        int code;
        try {
            code = gen.run();
        } catch (Throwable t) {
            t.printStackTrace();
            System.err.println("FAIL " + t);
            code = 2;
        }
        System.out.flush();
        System.exit(code);
    }

    private String opt(String key, String dflt) {
        String v = opts.get(key);
        return v == null ? dflt : v;
    }

    private long num(String key, long dflt) {
        return Long.parseLong(opt(key, Long.toString(dflt)));
    }

    private void fail(String what) {
        failures.add(what);
        System.err.println("FAIL " + what);
    }

    private static void result(Map<String, Object> fields) {
        System.out.println("RESULT " + JSON.toJSONString(fields));
        System.out.flush();
    }

    /**
     * The broker process's CPU time (utime + stime from /proc/PID/stat) over a phase, less what it
     * spends idle (its own timers, measured for a second before the first phase), per message: the
     * figure that survives a noisy machine, since time waiting for a core does not count.
     */
    static final class BrokerCpu {
        private final String statPath;
        private final double idlePerSecond;

        BrokerCpu(long pid) throws Exception {
            statPath = "/proc/" + pid + "/stat";
            double before = seconds();
            long t0 = System.nanoTime();
            Thread.sleep(1000);
            idlePerSecond = (seconds() - before) / ((System.nanoTime() - t0) / 1e9);
        }

        /** utime + stime of the broker in seconds (fields 14 and 15; the process name may hold spaces). */
        double seconds() throws Exception {
            String stat = new String(java.nio.file.Files.readAllBytes(java.nio.file.Paths.get(statPath)), "US-ASCII");
            String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
            return (Long.parseLong(f[11]) + Long.parseLong(f[12])) / 100.0;
        }

        /** Adds broker_cpu_s, broker_idle_cpu_per_s and broker_cpu_us_per_msg for a phase to r. */
        void report(Map<String, Object> r, double cpuAtStart, long startNanos, long messages) throws Exception {
            double cpu = seconds() - cpuAtStart;
            double busy = cpu - idlePerSecond * (System.nanoTime() - startNanos) / 1e9;
            r.put("broker_cpu_s", cpu);
            r.put("broker_idle_cpu_per_s", idlePerSecond);
            r.put("broker_cpu_us_per_msg", messages > 0 ? Math.max(0.0, busy) / messages * 1e6 : null);
        }
    }

    private boolean pastDeadline(long marginSeconds) {
        return System.nanoTime() > deadlineNanos - TimeUnit.SECONDS.toNanos(marginSeconds);
    }

    private int run() throws Exception {
        String prefix = opt("prefix", "Bench");
        List<String> phases = Arrays.asList(opt("phases", "produce,consume,latency").split(","));
        producer = new DefaultMQProducer(prefix + "-producer");
        producer.setNamesrvAddr(opt("namesrv", "127.0.0.1:9876"));
        producer.setInstanceName("loadgen-" + ManagementFactory.getRuntimeMXBean().getName());
        producer.setSendMsgTimeout((int) num("send_timeout_ms", 10000));
        producer.setRetryTimesWhenSendFailed(2);
        producer.setRetryTimesWhenSendAsyncFailed(0);
        producer.start();
        if (opts.containsKey("broker_pid")) {
            // Before any load: the broker's idle CPU rate.
            brokerCpu = new BrokerCpu(num("broker_pid", 0));
        }
        try {
            long produced = -1;
            if (phases.contains("warm")) {
                // Untimed load first, so a JIT-compiled broker and page-cache state are warm for both.
                produce(prefix + "-warm", "warm", 0, num("warm_seconds", 10));
            }
            if (phases.contains("produce")) {
                produced = produce(prefix + "-thr", "produce", num("warmup", 2), num("produce_seconds", 10));
            }
            if (phases.contains("consume") && produced > 0) {
                consume(prefix + "-thr", prefix + "-thr-consumer", produced);
            }
            if (phases.contains("latency")) {
                for (String r : opt("rates", "1000,5000,20000").split(",")) {
                    if (pastDeadline(30)) {
                        fail("no time left for the latency run at " + r + " msg/s");
                        break;
                    }
                    int rate = Integer.parseInt(r.trim());
                    latency(prefix + "-lat" + rate, prefix + "-lat" + rate + "-consumer", rate);
                }
            }
        } finally {
            producer.shutdown();
        }
        return failures.isEmpty() ? 0 : 1;
    }

    /** Creates the topic with the configured queue count and waits until the name server routes it. */
    private void createTopic(String topic) throws Exception {
        int queues = (int) num("queues", 8);
        Exception last = null;
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (System.nanoTime() < until) {
            try {
                producer.createTopic("TBW102", topic, queues);
                List<MessageQueue> mqs = producer.fetchPublishMessageQueues(topic);
                if (mqs.size() == queues) {
                    return;
                }
            } catch (Exception e) {
                last = e;
            }
            Thread.sleep(200);
        }
        throw new IllegalStateException("topic " + topic + " not routed with " + queues + " queues", last);
    }

    private byte[] body(long seq) {
        byte[] b = new byte[(int) Math.max(16, num("size", 1024))];
        ByteBuffer.wrap(b).putLong(System.nanoTime()).putLong(seq);
        return b;
    }

    /** Sends at saturation for warmup + produce_seconds; counts sends completed OK after the warmup. */
    private long produce(final String topic, String phase, long warmupSeconds, long seconds) throws Exception {
        createTopic(topic);
        final String mode = opt("mode", "sync");
        final int threads = (int) num("threads", 16);
        final int window = (int) num("window", 256);
        final long max = num("produce_max", 0);
        final long start = System.nanoTime();
        final long warmEnd = start + TimeUnit.SECONDS.toNanos(warmupSeconds);
        final long end = warmEnd + TimeUnit.SECONDS.toNanos(seconds);
        final AtomicLong seq = new AtomicLong();
        final AtomicLong okTotal = new AtomicLong();
        final AtomicLong okMeasured = new AtomicLong();
        final AtomicLong notOk = new AtomicLong();
        final AtomicLong errors = new AtomicLong();
        final AtomicReference<String> firstError = new AtomicReference<String>();
        final AtomicLong lastMeasured = new AtomicLong(warmEnd);
        final double cpuAtStart = brokerCpu == null ? 0 : brokerCpu.seconds();

        if (mode.equals("sync")) {
            List<Thread> senders = new ArrayList<Thread>();
            for (int t = 0; t < threads; t++) {
                Thread th = new Thread(new Runnable() {
                    public void run() {
                        while (System.nanoTime() < end) {
                            long s = seq.getAndIncrement();
                            if (max > 0 && s >= max) {
                                break;
                            }
                            try {
                                SendResult r = producer.send(new Message(topic, "bench", body(s)));
                                long now = System.nanoTime();
                                if (r.getSendStatus() == SendStatus.SEND_OK) {
                                    okTotal.incrementAndGet();
                                    if (now >= warmEnd && now <= end) {
                                        okMeasured.incrementAndGet();
                                        lastMeasured.set(Math.max(lastMeasured.get(), now));
                                    }
                                } else {
                                    notOk.incrementAndGet();
                                    firstError.compareAndSet(null, r.getSendStatus().toString());
                                }
                            } catch (Exception e) {
                                errors.incrementAndGet();
                                firstError.compareAndSet(null, e.toString());
                            }
                        }
                    }
                }, "sender-" + t);
                th.start();
                senders.add(th);
            }
            for (Thread th : senders) {
                th.join(TimeUnit.NANOSECONDS.toMillis(Math.max(1, deadlineNanos - System.nanoTime())));
            }
        } else {
            final Semaphore inFlight = new Semaphore(window);
            while (System.nanoTime() < end && !pastDeadline(30)) {
                if (!inFlight.tryAcquire(100, TimeUnit.MILLISECONDS)) {
                    continue;
                }
                long s = seq.getAndIncrement();
                if (max > 0 && s >= max) {
                    inFlight.release();
                    break;
                }
                try {
                    producer.send(new Message(topic, "bench", body(s)), new SendCallback() {
                        public void onSuccess(SendResult r) {
                            long now = System.nanoTime();
                            if (r.getSendStatus() == SendStatus.SEND_OK) {
                                okTotal.incrementAndGet();
                                if (now >= warmEnd && now <= end) {
                                    okMeasured.incrementAndGet();
                                }
                            } else {
                                notOk.incrementAndGet();
                                firstError.compareAndSet(null, r.getSendStatus().toString());
                            }
                            inFlight.release();
                        }

                        public void onException(Throwable e) {
                            errors.incrementAndGet();
                            firstError.compareAndSet(null, e.toString());
                            inFlight.release();
                        }
                    }, producer.getSendMsgTimeout());
                } catch (Exception e) {
                    errors.incrementAndGet();
                    firstError.compareAndSet(null, e.toString());
                    inFlight.release();
                }
            }
            // Wait for the window to drain (each send has its own timeout, so this is bounded).
            if (!inFlight.tryAcquire(window, producer.getSendMsgTimeout() + 5000L, TimeUnit.MILLISECONDS)) {
                fail("produce: async sends still in flight after their timeout");
            }
        }
        long stop = System.nanoTime();
        double measuredSeconds = (Math.min(stop, end) - warmEnd) / 1e9;
        if (max > 0) {
            // A capped (smoke) run may end before the warm-up does: rate over the whole run then.
            measuredSeconds = (stop - start) / 1e9;
            okMeasured.set(okTotal.get());
        }
        Map<String, Object> r = new LinkedHashMap<String, Object>();
        r.put("phase", phase);
        r.put("topic", topic);
        r.put("mode", mode);
        r.put("threads", mode.equals("sync") ? threads : 1);
        r.put("window", mode.equals("sync") ? threads : window);
        r.put("sent_ok", okTotal.get());
        r.put("not_ok", notOk.get());
        r.put("errors", errors.get());
        r.put("first_error", firstError.get());
        r.put("measured_ok", okMeasured.get());
        r.put("seconds", measuredSeconds);
        r.put("msg_per_s", measuredSeconds > 0 ? okMeasured.get() / measuredSeconds : 0.0);
        if (brokerCpu != null) {
            // Over every send of the phase, warm-up included: the CPU was spent on all of them.
            brokerCpu.report(r, cpuAtStart, start, okTotal.get());
        }
        result(r);
        if (okTotal.get() == 0) {
            fail(phase + ": no message was sent OK (" + firstError.get() + ")");
        }
        return okTotal.get();
    }

    /** Records which sequence numbers a consumer saw, and when the first and last arrived. */
    static final class Seen {
        final BitSet seqs = new BitSet();
        long unique;
        long delivered;
        long primers;
        long firstNanos;
        long lastNanos;
        final long[] latencyNanos;

        Seen(int latencySlots) {
            latencyNanos = new long[latencySlots];
        }

        synchronized void add(List<MessageExt> msgs, long now) {
            for (MessageExt m : msgs) {
                ByteBuffer b = ByteBuffer.wrap(m.getBody());
                long sent = b.getLong();
                long seq = b.getLong();
                delivered++;
                if (seq < 0) {
                    primers++;
                    continue;
                }
                if (seq > Integer.MAX_VALUE || seqs.get((int) seq)) {
                    continue;
                }
                seqs.set((int) seq);
                unique++;
                if (firstNanos == 0) {
                    firstNanos = now;
                }
                lastNanos = now;
                if (seq < latencyNanos.length) {
                    latencyNanos[(int) seq] = Math.max(1, now - sent);
                }
            }
        }

        synchronized long unique() {
            return unique;
        }

        synchronized long primers() {
            return primers;
        }
    }

    private DefaultMQPushConsumer startConsumer(String topic, String group, final Seen seen) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(opt("namesrv", "127.0.0.1:9876"));
        c.setInstanceName(producer.getInstanceName());
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setConsumeMessageBatchMaxSize(32);
        c.subscribe(topic, "*");
        c.registerMessageListener(new MessageListenerConcurrently() {
            public ConsumeConcurrentlyStatus consumeMessage(List<MessageExt> msgs,
                    org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext ctx) {
                seen.add(msgs, System.nanoTime());
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            }
        });
        c.start();
        return c;
    }

    private boolean waitFor(Seen seen, long want, boolean primers, long timeoutSeconds) {
        long until = Math.min(deadlineNanos - TimeUnit.SECONDS.toNanos(5),
                System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutSeconds));
        while (System.nanoTime() < until) {
            if ((primers ? seen.primers() : seen.unique()) >= want) {
                return true;
            }
            LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(2));
        }
        return false;
    }

    /** A new group reads the throughput topic from offset 0 until every message sent OK was seen. */
    private void consume(String topic, String group, long expected) throws Exception {
        Seen seen = new Seen(0);
        long start = System.nanoTime();
        DefaultMQPushConsumer c = startConsumer(topic, group, seen);
        boolean all;
        try {
            all = waitFor(seen, expected, false, num("consume_timeout", 120));
        } finally {
            c.shutdown();
        }
        Map<String, Object> r = new LinkedHashMap<String, Object>();
        synchronized (seen) {
            double span = (seen.lastNanos - seen.firstNanos) / 1e9;
            r.put("phase", "consume");
            r.put("topic", topic);
            r.put("expected", expected);
            r.put("received", seen.unique);
            r.put("delivered", seen.delivered);
            r.put("complete", all);
            r.put("seconds", span);
            r.put("seconds_from_start", (seen.lastNanos - start) / 1e9);
            r.put("msg_per_s", span > 0 ? seen.unique / span : 0.0);
        }
        result(r);
        if (!all) {
            fail("consume: received " + seen.unique() + " of " + expected);
        }
    }

    /** Paced async sends at `rate` while a consumer measures receive time minus the stamped send time. */
    private void latency(String topic, String group, int rate) throws Exception {
        createTopic(topic);
        long warmup = num("warmup", 2);
        int n = (int) (rate * (warmup + num("rate_seconds", 10)));
        int warmN = (int) (rate * warmup);
        Seen seen = new Seen(n);
        DefaultMQPushConsumer c = startConsumer(topic, group, seen);
        final AtomicLong ok = new AtomicLong();
        final AtomicLong errors = new AtomicLong();
        final AtomicReference<String> firstError = new AtomicReference<String>();
        // Send-to-acknowledgement time per message: tells a slow broker write from a slow delivery.
        final long[] ackNanos = new long[n];
        int sent = 0;
        boolean stoppedEarly = false;
        boolean all;
        long start;
        long lastSend;
        double cpuAtStart;
        try {
            // Primers (sequence -1) on every queue: timing starts once the consumer receives from all of them.
            int primers = 2 * (int) num("queues", 8);
            for (int i = 0; i < primers; i++) {
                producer.send(new Message(topic, "primer", body(-1)));
            }
            if (!waitFor(seen, primers, true, 60)) {
                fail("latency " + rate + ": consumer did not receive the primers within 60 s");
                return;
            }
            final int window = (int) num("lat_window", 4096);
            final Semaphore inFlight = new Semaphore(window);
            double interval = 1e9 / rate;
            cpuAtStart = brokerCpu == null ? 0 : brokerCpu.seconds();
            start = System.nanoTime();
            long give_up = start + (long) (3 * n * interval) + TimeUnit.SECONDS.toNanos(5);
            lastSend = start;
            for (; sent < n; sent++) {
                long target = start + (long) (sent * interval);
                long now;
                while ((now = System.nanoTime()) < target) {
                    LockSupport.parkNanos(target - now);
                }
                if (now > give_up || pastDeadline(40)) {
                    stoppedEarly = true;
                    break;
                }
                boolean acquired = false;
                while (!acquired && System.nanoTime() <= give_up) {
                    acquired = inFlight.tryAcquire(100, TimeUnit.MILLISECONDS);
                }
                if (!acquired) {
                    stoppedEarly = true;
                    break;
                }
                lastSend = System.nanoTime();
                final int seq = sent;
                final long sentAt = lastSend;
                try {
                    producer.send(new Message(topic, "lat", body(sent)), new SendCallback() {
                        public void onSuccess(SendResult r) {
                            ackNanos[seq] = Math.max(1, System.nanoTime() - sentAt);
                            if (r.getSendStatus() == SendStatus.SEND_OK) {
                                ok.incrementAndGet();
                            } else {
                                errors.incrementAndGet();
                                firstError.compareAndSet(null, r.getSendStatus().toString());
                            }
                            inFlight.release();
                        }

                        public void onException(Throwable e) {
                            errors.incrementAndGet();
                            firstError.compareAndSet(null, e.toString());
                            inFlight.release();
                        }
                    }, producer.getSendMsgTimeout());
                } catch (Exception e) {
                    errors.incrementAndGet();
                    firstError.compareAndSet(null, e.toString());
                    inFlight.release();
                }
            }
            inFlight.tryAcquire(window, producer.getSendMsgTimeout() + 5000L, TimeUnit.MILLISECONDS);
            all = waitFor(seen, ok.get(), false, 60);
        } finally {
            c.shutdown();
        }
        double seconds = (lastSend - start) / 1e9;
        long[] lat;
        synchronized (seen) {
            lat = new long[Math.max(0, n - warmN)];
            int k = 0;
            for (int i = warmN; i < n; i++) {
                if (seen.latencyNanos[i] > 0) {
                    lat[k++] = seen.latencyNanos[i];
                }
            }
            lat = Arrays.copyOf(lat, k);
        }
        Arrays.sort(lat);
        long[] acks = new long[Math.max(0, n - warmN)];
        int a = 0;
        for (int i = warmN; i < n; i++) {
            if (ackNanos[i] > 0) {
                acks[a++] = ackNanos[i];
            }
        }
        acks = Arrays.copyOf(acks, a);
        Arrays.sort(acks);
        double achieved = seconds > 0 ? sent / seconds : 0.0;
        Map<String, Object> r = new LinkedHashMap<String, Object>();
        r.put("phase", "latency");
        r.put("topic", topic);
        r.put("target_rate", rate);
        r.put("achieved_rate", achieved);
        r.put("sustained", !stoppedEarly && achieved >= 0.95 * rate);
        r.put("sent", sent);
        r.put("sent_ok", ok.get());
        r.put("errors", errors.get());
        r.put("first_error", firstError.get());
        r.put("received", seen.unique());
        r.put("complete", all);
        r.put("measured", lat.length);
        r.put("p50_ms", pct(lat, 50.0));
        r.put("p99_ms", pct(lat, 99.0));
        r.put("p999_ms", pct(lat, 99.9));
        r.put("max_ms", lat.length > 0 ? lat[lat.length - 1] / 1e6 : null);
        r.put("ack_p50_ms", pct(acks, 50.0));
        r.put("ack_p99_ms", pct(acks, 99.0));
        r.put("slow_windows", slowWindows(seen, warmN, n, rate));
        if (brokerCpu != null) {
            // Each message's send and its delivery to the consumer, until the last one arrived.
            brokerCpu.report(r, cpuAtStart, start, ok.get());
        }
        result(r);
        if (!all) {
            fail("latency " + rate + ": received " + seen.unique() + " of " + ok.get() + " sent OK");
        }
    }

    /**
     * The 100 ms windows of the schedule (seconds from the start, by send slot) whose slowest message took
     * over 20 ms, worst first, at most 10: tells one stall from latency spread over the whole run.
     */
    private static List<List<Double>> slowWindows(Seen seen, int from, int n, int rate) {
        int per = Math.max(1, rate / 10);
        List<List<Double>> found = new ArrayList<List<Double>>();
        synchronized (seen) {
            for (int w = from; w < n; w += per) {
                long worst = 0;
                for (int i = w; i < Math.min(n, w + per); i++) {
                    worst = Math.max(worst, seen.latencyNanos[i]);
                }
                if (worst > 20_000_000L) {
                    found.add(Arrays.asList((double) w / rate, worst / 1e6));
                }
            }
        }
        found.sort((a, b) -> Double.compare(b.get(1), a.get(1)));
        return found.subList(0, Math.min(10, found.size()));
    }

    private static Double pct(long[] sorted, double p) {
        if (sorted.length == 0) {
            return null;
        }
        int i = (int) Math.min(sorted.length - 1, Math.ceil(p / 100.0 * sorted.length) - 1);
        return sorted[Math.max(0, i)] / 1e6;
    }
}
