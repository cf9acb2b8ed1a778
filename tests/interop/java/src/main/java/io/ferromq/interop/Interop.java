package io.ferromq.interop;

import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Runs ONE interop scenario against a RocketMQ-compatible name server and broker with the official
 * 4.9.7 Java client, then exits: 0 on success, 1 when a check failed, 2 on an unexpected exception,
 * 3 when the overall deadline passed.
 *
 * <p>Usage: {@code java -jar ferromq-interop.jar SCENARIO key=value...}; common keys are
 * {@code namesrv} (host:port), {@code topic}, {@code group}, {@code run} (a token every message
 * carries), {@code n} (messages per kind), {@code timeout} (seconds, default 60) and, for
 * consume-concurrently, {@code expr} (a tag subscription expression, default *). Scenarios:
 * produce, consume-concurrently, produce-orderly, consume-orderly (also {@code shards}), lite-pull,
 * retry.
 *
 * <p>Output: one {@code RESULT {json}} line per event on stdout (sent, received, polled, ...) and a
 * final {@code RESULT {"event":"summary",...}}; {@code FAIL message} lines on stderr explain a
 * failure. Every wait is bounded by the deadline.
 */
public final class Interop {
    static final String[] KINDS = {"sync", "async", "oneway", "batch", "large"};
    static final String NOTE = "h\u00e9llo \u2192 \u2713 \u4e2d\u6587";
    static final int LARGE_SIZE = 12 * 1024;

    private static final AtomicInteger INSTANCES = new AtomicInteger();
    private static final List<String> FAILURES = Collections.synchronizedList(new ArrayList<String>());

    private final Map<String, String> opts;
    private final long deadline;

    private Interop(Map<String, String> opts) {
        this.opts = opts;
        this.deadline = System.currentTimeMillis() + 1000L * Integer.parseInt(opt("timeout", "60"));
    }

    public static void main(String[] args) {
        if (args.length < 1) {
            System.err.println("usage: Interop SCENARIO namesrv=HOST:PORT key=value...");
            System.exit(64);
        }
        Map<String, String> opts = new HashMap<String, String>();
        for (int i = 1; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq <= 0) {
                System.err.println("FAIL bad argument (want key=value): " + args[i]);
                System.exit(64);
            }
            opts.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        final Interop it = new Interop(opts);
        startWatchdog(it.deadline + 5000, args[0]);
        int rc;
        try {
            rc = it.run(args[0]);
        } catch (Throwable t) {
            System.err.println("FAIL exception in scenario " + args[0] + ": " + t);
            t.printStackTrace();
            rc = 2;
        }
        for (String f : FAILURES) {
            System.err.println("FAIL " + f);
        }
        if (rc == 0 && !FAILURES.isEmpty()) {
            rc = 1;
        }
        System.out.flush();
        System.err.flush();
        // Client threads are not daemons: exit explicitly.
        Runtime.getRuntime().halt(rc);
    }

    /** Hard bound on the whole process, whatever the client does. */
    private static void startWatchdog(final long at, final String scenario) {
        Thread t = new Thread(new Runnable() {
            @Override
            public void run() {
                try {
                    long left = at - System.currentTimeMillis();
                    if (left > 0) {
                        Thread.sleep(left);
                    }
                } catch (InterruptedException e) {
                    return;
                }
                System.out.flush();
                System.err.println("FAIL scenario " + scenario + " exceeded its deadline; failures so far: " + FAILURES);
                System.err.flush();
                Runtime.getRuntime().halt(3);
            }
        }, "interop-watchdog");
        t.setDaemon(true);
        t.start();
    }

    private int run(String scenario) throws Exception {
        switch (scenario) {
            case "produce":
                return produce();
            case "consume-concurrently":
                return consumeConcurrently();
            case "produce-orderly":
                return produceOrderly();
            case "consume-orderly":
                return consumeOrderly();
            case "lite-pull":
                return litePull();
            case "retry":
                return retry();
            default:
                System.err.println("FAIL unknown scenario " + scenario);
                return 64;
        }
    }

    // -- options and helpers --------------------------------------------------------------------

    private String opt(String key, String dflt) {
        String v = opts.get(key);
        return v != null ? v : dflt;
    }

    private String opt(String key) {
        String v = opts.get(key);
        if (v == null) {
            throw new IllegalArgumentException("missing option " + key + "=...");
        }
        return v;
    }

    private int optInt(String key, int dflt) {
        return Integer.parseInt(opt(key, String.valueOf(dflt)));
    }

    private long remainingMillis() {
        return Math.max(0, deadline - System.currentTimeMillis());
    }

    private static void fail(String message) {
        FAILURES.add(message);
    }

    static String pid() {
        String name = ManagementFactory.getRuntimeMXBean().getName();
        int at = name.indexOf('@');
        return at > 0 ? name.substring(0, at) : name;
    }

    /** Settings every client gets: the name server, no VIP channel, a unique instance name. */
    private <T extends ClientConfig> T configure(T c, String role) {
        c.setNamesrvAddr(opt("namesrv"));
        c.setVipChannelEnabled(false);
        c.setInstanceName("interop-" + pid() + "-" + role + "-" + INSTANCES.incrementAndGet());
        return c;
    }

    private DefaultMQProducer producer(String role) throws Exception {
        DefaultMQProducer p = configure(new DefaultMQProducer(opt("group", "interop") + "-" + role + "-pg"), role);
        p.setSendMsgTimeout(10_000);
        p.setRetryTimesWhenSendFailed(0);
        p.setRetryTimesWhenSendAsyncFailed(0);
        p.start();
        return p;
    }

    static synchronized void result(Map<String, Object> fields) {
        System.out.println("RESULT " + Json.write(fields));
        System.out.flush();
    }

    static Map<String, Object> map(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<String, Object>();
        for (int i = 0; i < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        return m;
    }

    static String sha256(byte[] data) {
        try {
            byte[] d = MessageDigest.getInstance("SHA-256").digest(data);
            StringBuilder sb = new StringBuilder();
            for (byte b : d) {
                sb.append(String.format("%02x", b & 0xff));
            }
            return sb.toString();
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    // -- the messages of scenario (a): every field derives from (run, kind, idx) ----------------

    static String tagOf(String kind, int idx) {
        return kind.equals("large") ? "TagL" : (idx % 2 == 0 ? "TagA" : "TagB");
    }

    static List<String> keysOf(String run, String kind, int idx) {
        return Arrays.asList(kind + "-" + idx, "run-" + run);
    }

    static byte[] bodyOf(String run, String kind, int idx) {
        if (kind.equals("large")) {
            StringBuilder sb = new StringBuilder();
            int line = 0;
            while (sb.length() < LARGE_SIZE) {
                sb.append(String.format("large %s line %05d: the quick brown fox jumps over the lazy dog%n", run, line++));
            }
            return sb.toString().getBytes(StandardCharsets.UTF_8);
        }
        byte[] head = (kind + ":" + idx + ":" + run + ":" + NOTE + ":").getBytes(StandardCharsets.UTF_8);
        byte[] body = new byte[head.length + 256];
        System.arraycopy(head, 0, body, 0, head.length);
        for (int i = 0; i < 256; i++) {
            body[head.length + i] = (byte) i; // every byte value, NULs included
        }
        return body;
    }

    static Message messageOf(String topic, String run, String kind, int idx) {
        Message m = new Message(topic, tagOf(kind, idx), bodyOf(run, kind, idx));
        m.setKeys(keysOf(run, kind, idx));
        m.putUserProperty("interop_kind", kind);
        m.putUserProperty("interop_idx", String.valueOf(idx));
        m.putUserProperty("interop_run", run);
        m.putUserProperty("interop_note", NOTE);
        return m;
    }

    static List<String> expectedIds(int n) {
        return expectedIds(n, "*");
    }

    /** The ids ("kind:idx") scenario (a) sent whose tag matches a subscription expression. */
    static List<String> expectedIds(int n, String expr) {
        Set<String> tags = new TreeSet<String>();
        for (String t : expr.split("\\|\\|")) {
            tags.add(t.trim());
        }
        List<String> ids = new ArrayList<String>();
        for (String kind : KINDS) {
            int count = kind.equals("large") ? 1 : n;
            for (int i = 0; i < count; i++) {
                if (tags.contains("*") || tags.contains(tagOf(kind, i))) {
                    ids.add(kind + ":" + i);
                }
            }
        }
        return ids;
    }

    /** Checks a received message against what scenario (a) sent; returns the differences. */
    static List<String> verify(MessageExt m, String topic, String run) {
        List<String> errors = new ArrayList<String>();
        String kind = m.getUserProperty("interop_kind");
        String idxs = m.getUserProperty("interop_idx");
        if (kind == null || idxs == null) {
            errors.add("missing interop_kind/interop_idx properties: " + m.getProperties());
            return errors;
        }
        int idx = Integer.parseInt(idxs);
        if (!topic.equals(m.getTopic())) {
            errors.add("topic " + m.getTopic() + " != " + topic);
        }
        if (!run.equals(m.getUserProperty("interop_run"))) {
            errors.add("interop_run " + m.getUserProperty("interop_run") + " != " + run);
        }
        if (!NOTE.equals(m.getUserProperty("interop_note"))) {
            errors.add("interop_note " + m.getUserProperty("interop_note") + " != " + NOTE);
        }
        if (!tagOf(kind, idx).equals(m.getTags())) {
            errors.add("tags " + m.getTags() + " != " + tagOf(kind, idx));
        }
        String keys = String.join(" ", keysOf(run, kind, idx));
        if (!keys.equals(m.getKeys())) {
            errors.add("keys " + m.getKeys() + " != " + keys);
        }
        byte[] want = bodyOf(run, kind, idx);
        if (!Arrays.equals(want, m.getBody())) {
            errors.add("body differs: " + (m.getBody() == null ? "null" : m.getBody().length + " bytes sha " + sha256(m.getBody()))
                + ", want " + want.length + " bytes sha " + sha256(want));
        }
        return errors;
    }

    static Map<String, Object> describe(String event, MessageExt m) {
        Map<String, Object> r = map(
            "event", event,
            "topic", m.getTopic(),
            "tags", m.getTags(),
            "keys", m.getKeys(),
            "msgId", m.getMsgId(),
            "offsetMsgId", offsetMsgIdOf(m),
            "queueId", m.getQueueId(),
            "queueOffset", m.getQueueOffset(),
            "commitLogOffset", m.getCommitLogOffset(),
            "sysFlag", m.getSysFlag(),
            "reconsumeTimes", m.getReconsumeTimes(),
            "bornTimestamp", m.getBornTimestamp(),
            "storeTimestamp", m.getStoreTimestamp(),
            "bornHost", String.valueOf(m.getBornHostString()),
            "storeHost", String.valueOf(m.getStoreHost()),
            "storeSize", m.getStoreSize(),
            "bodyLen", m.getBody() == null ? -1 : m.getBody().length,
            "bodySha", m.getBody() == null ? null : sha256(m.getBody()),
            "properties", new TreeMap<String, String>(m.getProperties()),
            "thread", Thread.currentThread().getName());
        return r;
    }

    static String offsetMsgIdOf(MessageExt m) {
        try {
            return (String) m.getClass().getMethod("getOffsetMsgId").invoke(m);
        } catch (Exception e) {
            return null;
        }
    }

    // -- (a) produce: sync, async, oneway, batch, one large (compressed) body -------------------

    private int produce() throws Exception {
        final String topic = opt("topic");
        final String run = opt("run");
        final int n = optInt("n", 8);
        DefaultMQProducer p = producer("produce");
        int sent = 0;
        try {
            // sync
            for (int i = 0; i < n; i++) {
                Message m = messageOf(topic, run, "sync", i);
                SendResult r = p.send(m);
                reportSent("sync", i, m, r, r.getMsgId(), r.getOffsetMsgId(), r.getQueueOffset());
                sent++;
            }
            // async
            final CountDownLatch done = new CountDownLatch(n);
            final AtomicInteger asyncOk = new AtomicInteger();
            for (int i = 0; i < n; i++) {
                final int idx = i;
                final Message m = messageOf(topic, run, "async", i);
                p.send(m, new SendCallback() {
                    @Override
                    public void onSuccess(SendResult r) {
                        reportSent("async", idx, m, r, r.getMsgId(), r.getOffsetMsgId(), r.getQueueOffset());
                        asyncOk.incrementAndGet();
                        done.countDown();
                    }

                    @Override
                    public void onException(Throwable e) {
                        fail("async send " + idx + " failed: " + e);
                        done.countDown();
                    }
                });
            }
            if (!done.await(Math.min(30_000, remainingMillis()), TimeUnit.MILLISECONDS)) {
                fail("async sends did not all complete: " + (n - done.getCount()) + " of " + n);
            }
            sent += asyncOk.get();
            // oneway: no result; the client assigned the unique id before sending
            for (int i = 0; i < n; i++) {
                Message m = messageOf(topic, run, "oneway", i);
                p.sendOneway(m);
                result(map("event", "sent", "kind", "oneway", "idx", i, "msgId", MessageClientIDSetter.getUniqID(m),
                    "bodyLen", m.getBody().length));
                sent++;
            }
            // batch: one request, n messages
            List<Message> batch = new ArrayList<Message>();
            for (int i = 0; i < n; i++) {
                batch.add(messageOf(topic, run, "batch", i));
            }
            SendResult br = p.send(batch);
            String[] uniq = br.getMsgId() == null ? new String[0] : br.getMsgId().split(",");
            String[] offs = br.getOffsetMsgId() == null ? new String[0] : br.getOffsetMsgId().split(",");
            result(map("event", "batch-result", "status", String.valueOf(br.getSendStatus()), "msgId", br.getMsgId(),
                "offsetMsgId", br.getOffsetMsgId(), "queueId", br.getMessageQueue().getQueueId(),
                "queueOffset", br.getQueueOffset(), "count", n));
            for (int i = 0; i < n; i++) {
                Message m = batch.get(i);
                String id = MessageClientIDSetter.getUniqID(m);
                if (i < uniq.length && !uniq[i].equals(id)) {
                    fail("batch send result msgId[" + i + "] " + uniq[i] + " != message unique id " + id);
                }
                reportSent("batch", i, m, br, id, i < offs.length ? offs[i] : null, br.getQueueOffset() + i);
                sent++;
            }
            // large: over compressMsgBodyOverHowmuch (4 KiB), so the client compresses it
            Message large = messageOf(topic, run, "large", 0);
            SendResult lr = p.send(large);
            reportSent("large", 0, large, lr, lr.getMsgId(), lr.getOffsetMsgId(), lr.getQueueOffset());
            sent++;

            // The auto-created topic must now have a route at the name server.
            List<MessageQueue> mqs = p.fetchPublishMessageQueues(topic);
            List<Object> qs = new ArrayList<Object>();
            for (MessageQueue mq : mqs) {
                qs.add(mq.getBrokerName() + ":" + mq.getQueueId());
            }
            result(map("event", "summary", "sent", sent, "expected", 4 * n + 1, "routeQueues", qs,
                "failures", new ArrayList<String>(FAILURES)));
            return sent == 4 * n + 1 && FAILURES.isEmpty() ? 0 : 1;
        } finally {
            p.shutdown();
        }
    }

    private static void reportSent(String kind, int idx, Message m, SendResult r, String msgId, String offsetMsgId,
                                   long queueOffset) {
        result(map("event", "sent", "kind", kind, "idx", idx, "status", String.valueOf(r.getSendStatus()),
            "msgId", msgId, "uniqId", MessageClientIDSetter.getUniqID(m), "offsetMsgId", offsetMsgId,
            "brokerName", r.getMessageQueue().getBrokerName(), "queueId", r.getMessageQueue().getQueueId(),
            "queueOffset", queueOffset, "bodyLen", m.getBody().length));
        if (r.getSendStatus() != org.apache.rocketmq.client.producer.SendStatus.SEND_OK) {
            fail(kind + " " + idx + " send status " + r.getSendStatus());
        }
    }

    // -- (b) push consumer, CONCURRENTLY --------------------------------------------------------

    private int consumeConcurrently() throws Exception {
        final String topic = opt("topic");
        final String run = opt("run");
        final int n = optInt("n", 8);
        final String expr = opt("expr", "*");
        final Set<String> want = new TreeSet<String>(expectedIds(n, expr));
        final Map<String, Integer> seen = new ConcurrentHashMap<String, Integer>();
        final AtomicInteger deliveries = new AtomicInteger();
        final CountDownLatch all = new CountDownLatch(1);

        DefaultMQPushConsumer c = configure(new DefaultMQPushConsumer(opt("group")), "push");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPullBatchSize(8);
        c.setConsumeThreadMin(4);
        c.setConsumeThreadMax(4);
        c.subscribe(topic, expr);
        c.registerMessageListener(new MessageListenerConcurrently() {
            @Override
            public ConsumeConcurrentlyStatus consumeMessage(List<MessageExt> msgs,
                                                            org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext ctx) {
                for (MessageExt m : msgs) {
                    deliveries.incrementAndGet();
                    List<String> errors = verify(m, topic, run);
                    String id = m.getUserProperty("interop_kind") + ":" + m.getUserProperty("interop_idx");
                    Map<String, Object> r = describe("received", m);
                    r.put("id", id);
                    r.put("errors", errors);
                    result(r);
                    for (String e : errors) {
                        fail(id + ": " + e);
                    }
                    if (!want.contains(id)) {
                        fail("unexpected message " + id + " " + m.getMsgId());
                    }
                    seen.merge(id, 1, Integer::sum);
                    if (seen.keySet().containsAll(want)) {
                        all.countDown();
                    }
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            }
        });
        c.start();
        try {
            boolean complete = all.await(remainingMillis(), TimeUnit.MILLISECONDS);
            Thread.sleep(Math.min(1500, remainingMillis())); // let duplicates or strays show up
            return summarize(complete, want, seen, deliveries.get());
        } finally {
            c.shutdown();
        }
    }

    private static int summarize(boolean complete, Set<String> want, Map<String, Integer> seen, int deliveries) {
        List<String> missing = new ArrayList<String>();
        for (String id : want) {
            if (!seen.containsKey(id)) {
                missing.add(id);
            }
        }
        List<String> dups = new ArrayList<String>();
        for (Map.Entry<String, Integer> e : new TreeMap<String, Integer>(seen).entrySet()) {
            if (e.getValue() > 1) {
                dups.add(e.getKey() + "x" + e.getValue());
            }
        }
        if (!complete || !missing.isEmpty()) {
            fail("not all messages arrived before the deadline; missing " + missing);
        }
        result(map("event", "summary", "distinct", seen.size(), "expected", want.size(), "deliveries", deliveries,
            "missing", missing, "duplicates", dups, "failures", new ArrayList<String>(FAILURES)));
        return FAILURES.isEmpty() ? 0 : 1;
    }

    // -- (c) orderly: a MessageQueueSelector by sharding key, a MessageListenerOrderly ----------

    private int produceOrderly() throws Exception {
        final String topic = opt("topic");
        final String run = opt("run");
        final int shards = optInt("shards", 6);
        final int n = optInt("n", 10);
        DefaultMQProducer p = producer("orderly");
        MessageQueueSelector byShard = new MessageQueueSelector() {
            @Override
            public MessageQueue select(List<MessageQueue> mqs, Message msg, Object arg) {
                return mqs.get(((Integer) arg) % mqs.size());
            }
        };
        int sent = 0;
        try {
            for (int seq = 0; seq < n; seq++) {
                for (int s = 0; s < shards; s++) {
                    String shard = "shard-" + s;
                    Message m = new Message(topic, "Ord", (shard + ":" + seq + ":" + run).getBytes(StandardCharsets.UTF_8));
                    m.setKeys(shard + "-" + seq);
                    m.putUserProperty("interop_shard", shard);
                    m.putUserProperty("interop_seq", String.valueOf(seq));
                    m.putUserProperty("interop_run", run);
                    SendResult r = p.send(m, byShard, s);
                    result(map("event", "sent", "shard", shard, "seq", seq, "status", String.valueOf(r.getSendStatus()),
                        "msgId", r.getMsgId(), "queueId", r.getMessageQueue().getQueueId(),
                        "queueOffset", r.getQueueOffset()));
                    if (r.getSendStatus() != org.apache.rocketmq.client.producer.SendStatus.SEND_OK) {
                        fail(shard + ":" + seq + " send status " + r.getSendStatus());
                    }
                    sent++;
                }
            }
            result(map("event", "summary", "sent", sent, "expected", shards * n, "failures", new ArrayList<String>(FAILURES)));
            return sent == shards * n && FAILURES.isEmpty() ? 0 : 1;
        } finally {
            p.shutdown();
        }
    }

    private int consumeOrderly() throws Exception {
        final String topic = opt("topic");
        final String run = opt("run");
        final int shards = optInt("shards", 6);
        final int n = optInt("n", 10);
        final Map<String, Integer> lastSeq = new ConcurrentHashMap<String, Integer>();
        final Map<Integer, Long> lastOffset = new ConcurrentHashMap<Integer, Long>();
        final Map<Integer, AtomicInteger> inFlight = new ConcurrentHashMap<Integer, AtomicInteger>();
        final AtomicInteger deliveries = new AtomicInteger();
        final AtomicInteger done = new AtomicInteger();
        final CountDownLatch all = new CountDownLatch(1);

        DefaultMQPushConsumer c = configure(new DefaultMQPushConsumer(opt("group")), "orderly");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPullBatchSize(4);
        c.setConsumeThreadMin(4);
        c.setConsumeThreadMax(4);
        c.subscribe(topic, "*");
        c.registerMessageListener(new MessageListenerOrderly() {
            @Override
            public ConsumeOrderlyStatus consumeMessage(List<MessageExt> msgs,
                                                       org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyContext ctx) {
                int queueId = ctx.getMessageQueue().getQueueId();
                AtomicInteger busy = inFlight.computeIfAbsent(queueId, k -> new AtomicInteger());
                if (busy.incrementAndGet() != 1) {
                    fail("queue " + queueId + " consumed by two threads at once");
                }
                try {
                    for (MessageExt m : msgs) {
                        deliveries.incrementAndGet();
                        String shard = m.getUserProperty("interop_shard");
                        int seq = Integer.parseInt(m.getUserProperty("interop_seq"));
                        List<String> errors = new ArrayList<String>();
                        if (!run.equals(m.getUserProperty("interop_run"))) {
                            errors.add("interop_run " + m.getUserProperty("interop_run"));
                        }
                        String body = new String(m.getBody(), StandardCharsets.UTF_8);
                        if (!body.equals(shard + ":" + seq + ":" + run)) {
                            errors.add("body " + body);
                        }
                        int expect = lastSeq.getOrDefault(shard, -1) + 1;
                        if (seq != expect) {
                            errors.add("shard " + shard + " got seq " + seq + ", expected " + expect);
                        }
                        Long prev = lastOffset.get(queueId);
                        if (prev != null && m.getQueueOffset() != prev + 1) {
                            errors.add("queue " + queueId + " offset " + m.getQueueOffset() + " after " + prev);
                        }
                        lastOffset.put(queueId, m.getQueueOffset());
                        lastSeq.put(shard, Math.max(seq, lastSeq.getOrDefault(shard, -1)));
                        Map<String, Object> r = describe("received", m);
                        r.put("shard", shard);
                        r.put("seq", seq);
                        r.put("errors", errors);
                        result(r);
                        for (String e : errors) {
                            fail(e);
                        }
                        if (seq == n - 1 && done.incrementAndGet() == shards) {
                            all.countDown();
                        }
                    }
                    Thread.sleep(5); // widen the window in which a second thread could take the queue
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                } finally {
                    busy.decrementAndGet();
                }
                return ConsumeOrderlyStatus.SUCCESS;
            }
        });
        c.start();
        try {
            boolean complete = all.await(remainingMillis(), TimeUnit.MILLISECONDS);
            Thread.sleep(Math.min(1000, remainingMillis()));
            if (!complete) {
                fail("not every shard reached seq " + (n - 1) + ": " + new TreeMap<String, Integer>(lastSeq));
            }
            result(map("event", "summary", "deliveries", deliveries.get(), "expected", shards * n,
                "lastSeq", new TreeMap<String, Integer>(lastSeq), "failures", new ArrayList<String>(FAILURES)));
            return FAILURES.isEmpty() ? 0 : 1;
        } finally {
            c.shutdown();
        }
    }

    // -- (d) DefaultLitePullConsumer: subscribe, poll, commit; a new instance sees the commit ----

    private int litePull() throws Exception {
        final String topic = opt("topic");
        final String run = opt("run");
        final String group = opt("group");
        final int n = optInt("n", 8);
        final Set<String> want = new TreeSet<String>(expectedIds(n));
        final Map<String, Integer> seen = new HashMap<String, Integer>();
        final Map<MessageQueue, Long> nextOffset = new HashMap<MessageQueue, Long>();
        int deliveries = 0;

        DefaultLitePullConsumer c = configure(new DefaultLitePullConsumer(group), "lite");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setAutoCommit(false);
        c.setPullBatchSize(4);
        c.setPollTimeoutMillis(1000);
        c.subscribe(topic, "*");
        c.start();
        boolean complete = false;
        try {
            while (remainingMillis() > 0 && !seen.keySet().containsAll(want)) {
                List<MessageExt> got = c.poll(Math.min(1000, Math.max(1, remainingMillis())));
                for (MessageExt m : got) {
                    deliveries++;
                    List<String> errors = verify(m, topic, run);
                    String id = m.getUserProperty("interop_kind") + ":" + m.getUserProperty("interop_idx");
                    Map<String, Object> r = describe("polled", m);
                    r.put("id", id);
                    r.put("errors", errors);
                    result(r);
                    for (String e : errors) {
                        fail(id + ": " + e);
                    }
                    seen.merge(id, 1, Integer::sum);
                    MessageQueue mq = new MessageQueue(m.getTopic(), m.getBrokerName(), m.getQueueId());
                    nextOffset.merge(mq, m.getQueueOffset() + 1, Math::max);
                }
            }
            complete = seen.keySet().containsAll(want);
            c.commitSync();
            result(map("event", "committed", "queues", describeOffsets(nextOffset)));
        } finally {
            c.shutdown(); // persists the committed offsets to the broker
        }
        if (!complete) {
            summarize(false, want, seen, deliveries);
            return 1;
        }

        // A second instance of the group: the broker returns the committed offsets, nothing is redelivered.
        DefaultLitePullConsumer again = configure(new DefaultLitePullConsumer(group), "lite2");
        again.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        again.setAutoCommit(false);
        again.setPollTimeoutMillis(1000);
        again.subscribe(topic, "*");
        again.start();
        try {
            // The shutdown above sent the offsets oneway: give the broker a moment (bounded) to apply them.
            Map<String, Object> committed = new TreeMap<String, Object>();
            long until = System.currentTimeMillis() + Math.min(10_000, remainingMillis());
            while (true) {
                committed.clear();
                boolean match = true;
                for (Map.Entry<MessageQueue, Long> e : nextOffset.entrySet()) {
                    Long off = again.committed(e.getKey());
                    committed.put(e.getKey().getBrokerName() + ":" + e.getKey().getQueueId(), off);
                    match &= e.getValue().equals(off);
                }
                if (match || System.currentTimeMillis() > until) {
                    break;
                }
                Thread.sleep(200);
            }
            result(map("event", "committed-read-back", "queues", committed));
            int redelivered = 0;
            long pollUntil = System.currentTimeMillis() + Math.min(4000, remainingMillis());
            while (System.currentTimeMillis() < pollUntil) {
                for (MessageExt m : again.poll(500)) {
                    redelivered++;
                    result(describe("redelivered", m));
                }
            }
            if (redelivered > 0) {
                fail(redelivered + " messages redelivered to a new instance after commit");
            }
            return summarize(true, want, seen, deliveries);
        } finally {
            again.shutdown();
        }
    }

    private static Map<String, Object> describeOffsets(Map<MessageQueue, Long> offsets) {
        Map<String, Object> r = new TreeMap<String, Object>();
        for (Map.Entry<MessageQueue, Long> e : offsets.entrySet()) {
            r.put(e.getKey().getBrokerName() + ":" + e.getKey().getQueueId(), e.getValue());
        }
        return r;
    }

    // -- (e) RECONSUME_LATER once: the message returns with reconsumeTimes 1 --------------------

    private int retry() throws Exception {
        final String topic = opt("topic");
        final String run = opt("run");
        final String group = opt("group");
        final List<Map<String, Object>> deliveries = Collections.synchronizedList(new ArrayList<Map<String, Object>>());
        final CountDownLatch second = new CountDownLatch(1);

        DefaultMQProducer p = producer("retry");
        final Message original = messageOf(topic, run, "sync", 0);
        SendResult sr;
        try {
            sr = p.send(original);
            reportSent("sync", 0, original, sr, sr.getMsgId(), sr.getOffsetMsgId(), sr.getQueueOffset());
        } finally {
            p.shutdown();
        }
        final String msgId = sr.getMsgId();

        DefaultMQPushConsumer c = configure(new DefaultMQPushConsumer(group), "retry");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        // %RETRY%<group> is created by the broker when this consumer's heartbeat arrives, after the
        // client's first route lookup: refresh routes often so the retry queue is pulled in time.
        c.setPollNameServerInterval(1000);
        c.setConsumeThreadMin(2);
        c.setConsumeThreadMax(2);
        c.subscribe(topic, "*");
        c.registerMessageListener(new MessageListenerConcurrently() {
            @Override
            public ConsumeConcurrentlyStatus consumeMessage(List<MessageExt> msgs,
                                                            org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext ctx) {
                ConsumeConcurrentlyStatus status = ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                for (MessageExt m : msgs) {
                    List<String> errors = verify(m, topic, run);
                    if (!msgId.equals(m.getMsgId())) {
                        errors.add("msgId " + m.getMsgId() + " != sent " + msgId);
                    }
                    Map<String, Object> r = describe("received", m);
                    r.put("receivedAt", System.currentTimeMillis());
                    r.put("errors", errors);
                    int k;
                    synchronized (deliveries) {
                        deliveries.add(r);
                        k = deliveries.size();
                    }
                    r.put("delivery", k);
                    if (k == 1) {
                        r.put("answer", "RECONSUME_LATER");
                        status = ConsumeConcurrentlyStatus.RECONSUME_LATER;
                    } else {
                        r.put("answer", "CONSUME_SUCCESS");
                    }
                    result(r);
                    for (String e : errors) {
                        fail("delivery " + k + ": " + e);
                    }
                    if (k == 1 && m.getReconsumeTimes() != 0) {
                        fail("first delivery has reconsumeTimes " + m.getReconsumeTimes());
                    }
                    if (k == 2) {
                        if (m.getReconsumeTimes() != 1) {
                            fail("second delivery has reconsumeTimes " + m.getReconsumeTimes() + ", expected 1");
                        }
                        second.countDown();
                    }
                }
                return status;
            }
        });
        c.start();
        try {
            boolean back = second.await(remainingMillis(), TimeUnit.MILLISECONDS);
            Thread.sleep(Math.min(1500, remainingMillis())); // no third delivery after CONSUME_SUCCESS
            if (!back) {
                fail("the message did not come back after RECONSUME_LATER (deliveries: " + deliveries.size() + ")");
            }
            if (deliveries.size() > 2) {
                fail(deliveries.size() + " deliveries, expected 2");
            }
            Long gap = null;
            if (deliveries.size() >= 2) {
                gap = (Long) deliveries.get(1).get("receivedAt") - (Long) deliveries.get(0).get("receivedAt");
            }
            result(map("event", "summary", "deliveries", deliveries.size(), "redeliveryGapMillis", gap,
                "failures", new ArrayList<String>(FAILURES)));
            return FAILURES.isEmpty() ? 0 : 1;
        } finally {
            c.shutdown();
        }
    }

    // -- a minimal JSON writer (no dependency beyond the client) --------------------------------

    static final class Json {
        static String write(Object o) {
            StringBuilder sb = new StringBuilder();
            write(sb, o);
            return sb.toString();
        }

        @SuppressWarnings("unchecked")
        private static void write(StringBuilder sb, Object o) {
            if (o == null) {
                sb.append("null");
            } else if (o instanceof String) {
                string(sb, (String) o);
            } else if (o instanceof Number || o instanceof Boolean) {
                sb.append(o);
            } else if (o instanceof Map) {
                sb.append('{');
                boolean first = true;
                for (Map.Entry<Object, Object> e : ((Map<Object, Object>) o).entrySet()) {
                    if (!first) {
                        sb.append(',');
                    }
                    first = false;
                    string(sb, String.valueOf(e.getKey()));
                    sb.append(':');
                    write(sb, e.getValue());
                }
                sb.append('}');
            } else if (o instanceof Collection) {
                sb.append('[');
                boolean first = true;
                for (Object v : (Collection<Object>) o) {
                    if (!first) {
                        sb.append(',');
                    }
                    first = false;
                    write(sb, v);
                }
                sb.append(']');
            } else {
                string(sb, String.valueOf(o));
            }
        }

        private static void string(StringBuilder sb, String s) {
            sb.append('"');
            for (int i = 0; i < s.length(); i++) {
                char ch = s.charAt(i);
                switch (ch) {
                    case '"':
                        sb.append("\\\"");
                        break;
                    case '\\':
                        sb.append("\\\\");
                        break;
                    case '\n':
                        sb.append("\\n");
                        break;
                    case '\r':
                        sb.append("\\r");
                        break;
                    case '\t':
                        sb.append("\\t");
                        break;
                    default:
                        if (ch < 0x20 || ch > 0x7e) {
                            sb.append(String.format("\\u%04x", (int) ch));
                        } else {
                            sb.append(ch);
                        }
                }
            }
            sb.append('"');
        }
    }
}
