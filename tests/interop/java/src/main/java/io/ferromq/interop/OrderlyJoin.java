package io.ferromq.interop;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Ordered consumption while a consumer group grows: the scenario of benches/orderly_rebalance_bench.py and
 * tests/interop/test_orderly_rebalance.py, run unchanged against ferromq and Apache RocketMQ 4.9.7.
 *
 * <pre>
 * java -cp ferromq-interop.jar io.ferromq.interop.OrderlyJoin orderly-join namesrv=H:P broker=H:P topic=T
 *      group=G [queues=8] [n=100] [members=3] [joinEvery=4000] [work=10] [sendEvery=0] [preload=false]
 *      [leave=false] [rebalanceWaitMs=20000] [unlockDelayMs=20000] [timeout=S]
 * </pre>
 *
 * <p>orderly-join: creates the topic with {@code queues} queues on {@code broker}, starts the first member of
 * {@code group} (a DefaultMQPushConsumer with a MessageListenerOrderly, CONSUME_FROM_FIRST_OFFSET), then a
 * producer that sends {@code n} messages to each queue (shard s always to queue s, seq 0..n-1 in order, one
 * round of sends every {@code sendEvery} ms; with {@code preload=true} all of them before the first member
 * starts), and starts member k (k = 2..members) {@code joinEvery} ms after member k-1. Each message takes the
 * listener {@code work} ms. With {@code leave=true} the first member shuts down (it unlocks its queues) once
 * the last has joined. It stops when every (shard, seq) was consumed.
 * {@code rebalanceWaitMs} and {@code unlockDelayMs} set the client's periodic rebalance
 * (rocketmq.client.rebalance.waitInterval) and how long a member that gives up a queue it still holds pulled
 * messages of waits before unlocking it (rocketmq.client.unlockDelayTimeMills).
 *
 * <p>Checks: no queue is consumed by two members at once (the broker's locks), a queue's deliveries never skip
 * an offset (a new owner may go back to the last committed offset, never forward past a message), every
 * message is consumed. Prints RESULT lines: {@code join} and {@code leave} per member, {@code first} the first
 * delivery of each (member, queue) with the milliseconds since that member joined, {@code stall} each time a
 * queue with messages waiting had no delivery for more than a second, and a final {@code summary} with the
 * wall time from the first member's start to the last message consumed. Exit code 0, 1 on a failed check, 3
 * past the deadline.
 */
public final class OrderlyJoin {
    private static final List<String> FAILURES = Collections.synchronizedList(new ArrayList<String>());

    private final Map<String, String> opts;
    private final long deadline;

    private OrderlyJoin(Map<String, String> opts) {
        this.opts = opts;
        this.deadline = System.currentTimeMillis() + 1000L * Integer.parseInt(opt("timeout", "120"));
    }

    public static void main(String[] args) {
        Map<String, String> opts = Driver.options(args);
        // Before any client class is loaded: the client reads them into static fields.
        if (opts.containsKey("rebalanceWaitMs")) {
            System.setProperty("rocketmq.client.rebalance.waitInterval", opts.get("rebalanceWaitMs"));
        }
        if (opts.containsKey("unlockDelayMs")) {
            System.setProperty("rocketmq.client.unlockDelayTimeMills", opts.get("unlockDelayMs"));
        }
        final OrderlyJoin s = new OrderlyJoin(opts);
        boolean known = args.length > 0 && args[0].equals("orderly-join");
        Driver.run("orderly-join", s.deadline, FAILURES, known ? new Callable<Integer>() {
            @Override
            public Integer call() throws Exception {
                return s.orderlyJoin();
            }
        } : null);
    }

    private String opt(String key, String dflt) {
        String v = opts.get(key);
        return v != null ? v : dflt;
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

    private <T extends ClientConfig> T configure(T c, String role) {
        c.setNamesrvAddr(opts.get("namesrv"));
        c.setVipChannelEnabled(false);
        c.setInstanceName("oj-" + Interop.pid() + "-" + role);
        return c;
    }

    /** What the members share: per queue, who consumes it now, the last offset delivered, timings. */
    private final class Tally {
        final int queues;
        final int n;
        final long start;
        final Map<Integer, AtomicInteger> busy = new ConcurrentHashMap<Integer, AtomicInteger>();
        final Map<Integer, Long> lastOffset = new ConcurrentHashMap<Integer, Long>();
        final Map<Integer, Long> lastDelivery = new ConcurrentHashMap<Integer, Long>();
        final Map<String, Boolean> seen = new ConcurrentHashMap<String, Boolean>();
        final Map<String, Long> firstOf = new ConcurrentHashMap<String, Long>();
        final AtomicInteger deliveries = new AtomicInteger();
        final AtomicInteger redeliveries = new AtomicInteger();
        final AtomicInteger stalls = new AtomicInteger();
        final AtomicLong stalledMillis = new AtomicLong();
        final AtomicLong lastConsumed = new AtomicLong();
        final Object allDone = new Object();

        Tally(int queues, int n) {
            this.queues = queues;
            this.n = n;
            this.start = System.currentTimeMillis();
        }

        long since() {
            return System.currentTimeMillis() - start;
        }
    }

    private DefaultMQPushConsumer member(final Tally t, final String group, final String topic, final int index,
                                         final long joinedAt, final int work) throws Exception {
        final String name = "m" + index;
        DefaultMQPushConsumer c = configure(new DefaultMQPushConsumer(group), name);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPullBatchSize(8);
        c.subscribe(topic, "*");
        c.registerMessageListener(new MessageListenerOrderly() {
            @Override
            public ConsumeOrderlyStatus consumeMessage(List<MessageExt> msgs, ConsumeOrderlyContext ctx) {
                int q = ctx.getMessageQueue().getQueueId();
                AtomicInteger b = t.busy.computeIfAbsent(q, k -> new AtomicInteger());
                if (b.incrementAndGet() != 1) {
                    fail("queue " + q + " consumed by two members at once (" + name + " is one)");
                }
                try {
                    long now = System.currentTimeMillis();
                    Long prevAt = t.lastDelivery.put(q, now);
                    String key = name + "/" + q;
                    if (t.firstOf.putIfAbsent(key, now) == null) {
                        Interop.result(Interop.map("event", "first", "member", name, "queue", q,
                            "offset", msgs.get(0).getQueueOffset(), "sinceJoinMs", now - joinedAt,
                            "atMs", now - t.start));
                    }
                    for (MessageExt m : msgs) {
                        t.deliveries.incrementAndGet();
                        String shard = m.getUserProperty("oj_shard");
                        int seq = Integer.parseInt(m.getUserProperty("oj_seq"));
                        if (!String.valueOf(q).equals(shard)) {
                            fail("shard " + shard + " message in queue " + q);
                        }
                        Long prev = t.lastOffset.get(q);
                        long off = m.getQueueOffset();
                        if (prev != null && off > prev + 1) {
                            fail("queue " + q + " skipped from offset " + prev + " to " + off + " (" + name + ")");
                        }
                        if (prev != null && off <= prev) {
                            t.redeliveries.incrementAndGet();
                        }
                        t.lastOffset.put(q, off);
                        if (t.seen.putIfAbsent(shard + ":" + seq, Boolean.TRUE) == null) {
                            t.lastConsumed.set(System.currentTimeMillis());
                            if (t.seen.size() == t.queues * t.n) {
                                synchronized (t.allDone) {
                                    t.allDone.notifyAll();
                                }
                            }
                        }
                    }
                    if (prevAt != null && now - prevAt > 1000) {
                        t.stalls.incrementAndGet();
                        t.stalledMillis.addAndGet(now - prevAt);
                        Interop.result(Interop.map("event", "stall", "member", name, "queue", q,
                            "ms", now - prevAt, "atMs", now - t.start));
                    }
                    if (work > 0) {
                        Thread.sleep((long) work * msgs.size());
                    }
                    t.lastDelivery.put(q, System.currentTimeMillis());
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                } finally {
                    b.decrementAndGet();
                }
                return ConsumeOrderlyStatus.SUCCESS;
            }
        });
        c.start();
        Interop.result(Interop.map("event", "join", "member", name, "atMs", joinedAt - t.start));
        return c;
    }

    private int orderlyJoin() throws Exception {
        final String topic = opts.get("topic");
        final String group = opts.get("group");
        final int queues = optInt("queues", 8);
        final int n = optInt("n", 100);
        final int members = optInt("members", 3);
        final long joinEvery = optInt("joinEvery", 4000);
        final int work = optInt("work", 10);
        final long sendEvery = optInt("sendEvery", 0);
        final boolean leave = Boolean.parseBoolean(opt("leave", "false"));
        final boolean preload = Boolean.parseBoolean(opt("preload", "false"));

        DefaultMQAdminExt admin = configure(new DefaultMQAdminExt(), "admin");
        admin.start();
        try {
            TopicConfig tc = new TopicConfig(topic, queues, queues, 6);
            admin.createAndUpdateTopicConfig(opts.get("broker"), tc);
        } finally {
            admin.shutdown();
        }
        final DefaultMQProducer p = configure(new DefaultMQProducer(group + "-pg"), "producer");
        p.setSendMsgTimeout(10_000);
        p.setRetryTimesWhenSendFailed(0);
        p.start();
        // The route with every queue (the name server learns the topic at the broker's next registration).
        while (remainingMillis() > 0) {
            List<MessageQueue> mqs = null;
            try {
                mqs = p.fetchPublishMessageQueues(topic);
            } catch (Exception e) {
                // no route yet
            }
            if (mqs != null && mqs.size() == queues) {
                break;
            }
            Thread.sleep(100);
        }

        final AtomicInteger sent = new AtomicInteger();
        final long[] started = new long[1];
        final Thread producer = new Thread(new Runnable() {
            @Override
            public void run() {
                MessageQueueSelector byShard = new MessageQueueSelector() {
                    @Override
                    public MessageQueue select(List<MessageQueue> mqs, Message msg, Object arg) {
                        for (MessageQueue mq : mqs) {
                            if (mq.getQueueId() == (Integer) arg) {
                                return mq;
                            }
                        }
                        return mqs.get((Integer) arg % mqs.size());
                    }
                };
                try {
                    for (int seq = 0; seq < n && remainingMillis() > 0; seq++) {
                        for (int s = 0; s < queues; s++) {
                            Message m = new Message(topic, "Ord", (s + ":" + seq).getBytes(StandardCharsets.UTF_8));
                            m.putUserProperty("oj_shard", String.valueOf(s));
                            m.putUserProperty("oj_seq", String.valueOf(seq));
                            SendResult r = p.send(m, byShard, s);
                            if (r.getSendStatus() != SendStatus.SEND_OK || r.getMessageQueue().getQueueId() != s) {
                                fail(s + ":" + seq + " sent to queue " + r.getMessageQueue().getQueueId() + ", "
                                    + r.getSendStatus());
                            }
                            sent.incrementAndGet();
                        }
                        if (sendEvery > 0) {
                            Thread.sleep(sendEvery);
                        }
                    }
                } catch (Exception e) {
                    fail("send failed: " + e);
                }
                Interop.result(Interop.map("event", "sent", "count", sent.get(),
                    "atMs", System.currentTimeMillis() - started[0]));
            }
        }, "oj-producer");
        started[0] = System.currentTimeMillis();
        if (preload) {
            producer.start();
            producer.join(Math.max(1, remainingMillis()));
        }
        final Tally t = new Tally(queues, n);
        final List<DefaultMQPushConsumer> running = new ArrayList<DefaultMQPushConsumer>();
        running.add(member(t, group, topic, 1, t.start, work));
        if (!preload) {
            started[0] = t.start;
            producer.start();
        }
        try {
            for (int k = 2; k <= members; k++) {
                long at = t.start + (k - 1) * joinEvery;
                synchronized (t.allDone) {
                    while (System.currentTimeMillis() < at && remainingMillis() > 0) {
                        t.allDone.wait(Math.max(1, at - System.currentTimeMillis()));
                    }
                }
                running.add(member(t, group, topic, k, System.currentTimeMillis(), work));
            }
            if (leave && running.size() > 1) {
                running.remove(0).shutdown();
                Interop.result(Interop.map("event", "leave", "member", "m1", "atMs", t.since()));
            }
            synchronized (t.allDone) {
                while (t.seen.size() < queues * n && remainingMillis() > 0) {
                    t.allDone.wait(Math.max(1, Math.min(200, remainingMillis())));
                }
            }
            producer.join(Math.max(1, remainingMillis()));
        } finally {
            for (DefaultMQPushConsumer c : running) {
                c.shutdown();
            }
            p.shutdown();
        }
        if (t.seen.size() < queues * n) {
            Map<Integer, Long> last = new TreeMap<Integer, Long>(t.lastOffset);
            fail("consumed " + t.seen.size() + " of " + queues * n + " messages; last offsets " + last);
        }
        Interop.result(Interop.map("event", "summary", "wallMs", t.lastConsumed.get() - t.start,
            "sent", sent.get(), "distinct", t.seen.size(), "expected", queues * n,
            "deliveries", t.deliveries.get(), "redeliveries", t.redeliveries.get(), "stalls", t.stalls.get(),
            "stalledMs", t.stalledMillis.get(), "failures", new ArrayList<String>(FAILURES)));
        return FAILURES.isEmpty() ? 0 : 1;
    }
}
