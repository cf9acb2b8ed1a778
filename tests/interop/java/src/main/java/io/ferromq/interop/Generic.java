package io.ferromq.interop;

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.io.UnsupportedEncodingException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;

import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Content-agnostic scenarios with the official 4.9.7 Java client, for tests whose other side is not Java
 * (tests/interop/test_python_client_interop.py): the test decides what is sent and checks what arrives.
 *
 * <pre>
 * java -cp ferromq-interop.jar io.ferromq.interop.Generic produce namesrv=H:P spec=FILE [timeout=S]
 * java -cp ferromq-interop.jar io.ferromq.interop.Generic consume namesrv=H:P topic=T group=G expect=N
 *      [orderly=true] [expr=TAGS] [linger=MILLIS] [timeout=S]
 * java -cp ferromq-interop.jar io.ferromq.interop.Generic pull namesrv=H:P topic=T group=G queue=Q
 *      maxNums=N expect=M [timeout=S]
 * </pre>
 *
 * <p>produce: FILE is JSON {@code {"topic": T, "group": G, "messages": [{"id", "mode", "tags", "keys": [..],
 * "props": {..}, "body": BASE64, "shard": N}, ...]}}; mode is sync (default), oneway, orderly (the queue is
 * {@code mqs[shard % mqs.size()]}) or batch (a run of consecutive batch messages is sent as one batch). One
 * {@code RESULT {"event":"sent",...}} line per message (the unique id the client assigned, the send result),
 * one {@code batch-result} per batch, a final {@code summary}.
 *
 * <p>consume: a DefaultMQPushConsumer (CLUSTERING, CONSUME_FROM_FIRST_OFFSET, concurrently or orderly) that
 * prints one {@code RESULT {"event":"received",...}} line per delivery, in delivery order (body in base64,
 * every property), stops once {@code expect} distinct message ids arrived and {@code linger} more
 * milliseconds passed (duplicates would show), then prints a {@code summary}.
 *
 * <p>pull: a DefaultMQPullConsumer pulls queue {@code Q} from offset 0, {@code maxNums} at a time, until
 * {@code expect} messages arrived; one {@code RESULT {"event":"pulled","count":C,"next":O}} line per answer.
 *
 * <p>Exit code 0 on success, 1 when something is missing or failed, 2 on an exception, 3 when the deadline
 * ({@code timeout}, default 60 s) passed. Stdout is UTF-8.
 */
public final class Generic {
    private static final List<String> FAILURES = Collections.synchronizedList(new ArrayList<String>());
    private static final AtomicInteger INSTANCES = new AtomicInteger();
    private static PrintStream out;

    private final Map<String, String> opts;
    private final long deadline;

    private Generic(Map<String, String> opts) {
        this.opts = opts;
        this.deadline = System.currentTimeMillis() + 1000L * Integer.parseInt(opt("timeout", "60"));
    }

    public static void main(String[] args) throws UnsupportedEncodingException {
        out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, "UTF-8");
        if (args.length < 1) {
            System.err.println("usage: Generic produce|consume namesrv=HOST:PORT key=value...");
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
        final Generic g = new Generic(opts);
        startWatchdog(g.deadline + 5000, args[0]);
        int rc;
        try {
            if (args[0].equals("produce")) {
                rc = g.produce();
            } else if (args[0].equals("consume")) {
                rc = g.consume();
            } else if (args[0].equals("pull")) {
                rc = g.pull();
            } else {
                System.err.println("FAIL unknown scenario " + args[0]);
                rc = 64;
            }
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
        out.flush();
        System.err.flush();
        Runtime.getRuntime().halt(rc); // client threads are not daemons
    }

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
                out.flush();
                System.err.println("FAIL scenario " + scenario + " exceeded its deadline; failures so far: " + FAILURES);
                System.err.flush();
                Runtime.getRuntime().halt(3);
            }
        }, "generic-watchdog");
        t.setDaemon(true);
        t.start();
    }

    // -- helpers --------------------------------------------------------------------------------

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

    private long remainingMillis() {
        return Math.max(0, deadline - System.currentTimeMillis());
    }

    private static void fail(String message) {
        FAILURES.add(message);
    }

    static synchronized void result(Map<String, Object> fields) {
        out.println("RESULT " + JSON.toJSONString(fields));
        out.flush();
    }

    private <T extends ClientConfig> T configure(T c, String role) {
        c.setNamesrvAddr(opt("namesrv"));
        c.setVipChannelEnabled(false);
        c.setInstanceName("generic-" + Interop.pid() + "-" + role + "-" + INSTANCES.incrementAndGet());
        return c;
    }

    // -- pull -----------------------------------------------------------------------------------

    private int pull() throws Exception {
        DefaultMQPullConsumer c = configure(new DefaultMQPullConsumer(opt("group")), "pull");
        c.start();
        try {
            MessageQueue mq = null;
            for (MessageQueue q : c.fetchSubscribeMessageQueues(opt("topic"))) {
                if (q.getQueueId() == Integer.parseInt(opt("queue"))) {
                    mq = q;
                }
            }
            if (mq == null) {
                fail("no queue " + opt("queue") + " in the route of " + opt("topic"));
                return 1;
            }
            int maxNums = Integer.parseInt(opt("maxNums"));
            int expect = Integer.parseInt(opt("expect"));
            long offset = 0;
            int got = 0;
            while (got < expect && remainingMillis() > 0) {
                PullResult r = c.pull(mq, "*", offset, maxNums, Math.min(10_000L, remainingMillis()));
                int count = r.getMsgFoundList() == null ? 0 : r.getMsgFoundList().size();
                result(Interop.map("event", "pulled", "status", String.valueOf(r.getPullStatus()),
                    "count", count, "next", r.getNextBeginOffset()));
                got += count;
                offset = r.getNextBeginOffset();
            }
            return got >= expect ? 0 : 3;
        } finally {
            c.shutdown();
        }
    }

    // -- produce --------------------------------------------------------------------------------

    private static Message messageOf(String topic, JSONObject spec) {
        byte[] body = Base64.getDecoder().decode(spec.getString("body"));
        Message m = new Message(topic, body);
        if (spec.getString("tags") != null) {
            m.setTags(spec.getString("tags"));
        }
        JSONArray keys = spec.getJSONArray("keys");
        if (keys != null) {
            List<String> ks = new ArrayList<String>();
            for (int i = 0; i < keys.size(); i++) {
                ks.add(keys.getString(i));
            }
            m.setKeys(ks);
        }
        JSONObject props = spec.getJSONObject("props");
        if (props != null) {
            for (String name : props.keySet()) {
                m.putUserProperty(name, props.getString(name));
            }
        }
        return m;
    }

    private static Map<String, Object> sent(JSONObject spec, Message m, String status, String msgId,
                                            String offsetMsgId, Integer queueId, Long queueOffset) {
        return Interop.map("event", "sent", "id", spec.getString("id"), "mode", spec.getString("mode"),
            "uniqKey", MessageClientIDSetter.getUniqID(m), "msgId", msgId, "offsetMsgId", offsetMsgId,
            "status", status, "queueId", queueId, "queueOffset", queueOffset,
            "bodyLen", m.getBody().length, "bodySha", Interop.sha256(m.getBody()));
    }

    private int produce() throws Exception {
        JSONObject spec = JSON.parseObject(new String(Files.readAllBytes(Paths.get(opt("spec"))), StandardCharsets.UTF_8));
        final String topic = spec.getString("topic");
        JSONArray messages = spec.getJSONArray("messages");
        DefaultMQProducer p = configure(new DefaultMQProducer(spec.getString("group")), "produce");
        p.setSendMsgTimeout(10_000);
        p.setRetryTimesWhenSendFailed(0);
        p.start();
        int count = 0;
        try {
            int i = 0;
            while (i < messages.size()) {
                JSONObject s = messages.getJSONObject(i);
                String mode = s.getString("mode") == null ? "sync" : s.getString("mode");
                if (mode.equals("batch")) {
                    List<JSONObject> specs = new ArrayList<JSONObject>();
                    List<Message> batch = new ArrayList<Message>();
                    while (i < messages.size() && "batch".equals(messages.getJSONObject(i).getString("mode"))) {
                        specs.add(messages.getJSONObject(i));
                        batch.add(messageOf(topic, messages.getJSONObject(i)));
                        i++;
                    }
                    SendResult r = p.send(batch);
                    String[] ids = r.getMsgId() == null ? new String[0] : r.getMsgId().split(",");
                    String[] offs = r.getOffsetMsgId() == null ? new String[0] : r.getOffsetMsgId().split(",");
                    result(Interop.map("event", "batch-result", "status", String.valueOf(r.getSendStatus()),
                        "msgId", r.getMsgId(), "offsetMsgId", r.getOffsetMsgId(),
                        "queueId", r.getMessageQueue().getQueueId(), "queueOffset", r.getQueueOffset(),
                        "count", batch.size()));
                    for (int k = 0; k < batch.size(); k++) {
                        result(sent(specs.get(k), batch.get(k), String.valueOf(r.getSendStatus()),
                            k < ids.length ? ids[k] : null, k < offs.length ? offs[k] : null,
                            r.getMessageQueue().getQueueId(), r.getQueueOffset() + k));
                        count++;
                    }
                    continue;
                }
                Message m = messageOf(topic, s);
                if (mode.equals("oneway")) {
                    p.sendOneway(m);
                    result(sent(s, m, null, MessageClientIDSetter.getUniqID(m), null, null, null));
                } else {
                    SendResult r;
                    if (mode.equals("orderly")) {
                        r = p.send(m, new MessageQueueSelector() {
                            @Override
                            public MessageQueue select(List<MessageQueue> mqs, Message msg, Object arg) {
                                return mqs.get((Integer) arg % mqs.size());
                            }
                        }, s.getIntValue("shard"));
                    } else if (mode.equals("sync")) {
                        r = p.send(m);
                    } else {
                        throw new IllegalArgumentException("unknown mode " + mode);
                    }
                    result(sent(s, m, String.valueOf(r.getSendStatus()), r.getMsgId(), r.getOffsetMsgId(),
                        r.getMessageQueue().getQueueId(), r.getQueueOffset()));
                }
                count++;
                i++;
            }
        } finally {
            p.shutdown();
        }
        result(Interop.map("event", "summary", "sent", count, "failures", new ArrayList<String>(FAILURES)));
        return 0;
    }

    // -- consume --------------------------------------------------------------------------------

    static Map<String, Object> describe(MessageExt m) {
        byte[] body = m.getBody() == null ? new byte[0] : m.getBody();
        String offsetMsgId;
        try {
            offsetMsgId = (String) m.getClass().getMethod("getOffsetMsgId").invoke(m);
        } catch (Exception e) {
            offsetMsgId = null;
        }
        return Interop.map(
            "event", "received",
            "topic", m.getTopic(),
            "tags", m.getTags(),
            "keys", m.getKeys(),
            "msgId", m.getMsgId(),
            "offsetMsgId", offsetMsgId,
            "queueId", m.getQueueId(),
            "queueOffset", m.getQueueOffset(),
            "commitLogOffset", m.getCommitLogOffset(),
            "sysFlag", m.getSysFlag(),
            "reconsumeTimes", m.getReconsumeTimes(),
            "bornTimestamp", m.getBornTimestamp(),
            "storeTimestamp", m.getStoreTimestamp(),
            "storeHost", String.valueOf(m.getStoreHost()),
            "bodyLen", body.length,
            "bodySha", Interop.sha256(body),
            "body", Base64.getEncoder().encodeToString(body),
            "properties", new TreeMap<String, String>(m.getProperties()),
            "thread", Thread.currentThread().getName());
    }

    private int consume() throws Exception {
        final String topic = opt("topic");
        final int expect = Integer.parseInt(opt("expect"));
        final long linger = Long.parseLong(opt("linger", "1000"));
        final boolean orderly = Boolean.parseBoolean(opt("orderly", "false"));
        final Set<String> ids = Collections.newSetFromMap(new ConcurrentHashMap<String, Boolean>());
        final AtomicInteger deliveries = new AtomicInteger();
        final Object done = new Object();

        DefaultMQPushConsumer c = configure(new DefaultMQPushConsumer(opt("group")), "consume");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, opt("expr", "*"));
        if (orderly) {
            c.registerMessageListener(new MessageListenerOrderly() {
                @Override
                public ConsumeOrderlyStatus consumeMessage(List<MessageExt> msgs, ConsumeOrderlyContext ctx) {
                    for (MessageExt m : msgs) {
                        deliver(m, ids, deliveries, done);
                    }
                    return ConsumeOrderlyStatus.SUCCESS;
                }
            });
        } else {
            c.registerMessageListener(new MessageListenerConcurrently() {
                @Override
                public ConsumeConcurrentlyStatus consumeMessage(List<MessageExt> msgs, ConsumeConcurrentlyContext ctx) {
                    for (MessageExt m : msgs) {
                        deliver(m, ids, deliveries, done);
                    }
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                }
            });
        }
        c.start();
        boolean complete;
        try {
            synchronized (done) {
                while (ids.size() < expect && remainingMillis() > 0) {
                    done.wait(Math.max(1, Math.min(200, remainingMillis())));
                }
            }
            complete = ids.size() >= expect;
            Thread.sleep(Math.min(linger, remainingMillis()));
        } finally {
            c.shutdown();
        }
        if (!complete) {
            fail("received " + ids.size() + " distinct message ids of " + expect + " expected");
        }
        result(Interop.map("event", "summary", "distinct", ids.size(), "deliveries", deliveries.get(), "expected", expect,
            "failures", new ArrayList<String>(FAILURES)));
        return FAILURES.isEmpty() ? 0 : 1;
    }

    private static void deliver(MessageExt m, Set<String> ids, AtomicInteger deliveries, Object done) {
        result(describe(m));
        deliveries.incrementAndGet();
        ids.add(m.getMsgId());
        synchronized (done) {
            done.notifyAll();
        }
    }
}
