package io.ferromq.interop;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Callable;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Scenarios of tests/interop/test_side_by_side.py, run unchanged against ferromq and Apache RocketMQ 4.9.7.
 *
 * <pre>
 * java -cp ferromq-interop.jar io.ferromq.interop.SideBySide retry-dlq namesrv=H:P topic=T group=G
 *      [max=2] [linger=MILLIS] [timeout=S]
 * </pre>
 *
 * <p>retry-dlq: sends one message (tags TagR, keys rk1 rk2, user property sbs=retry), then a push consumer with
 * {@code maxReconsumeTimes=max} answers RECONSUME_LATER to every delivery; after {@code max + 1} deliveries and
 * {@code linger} more milliseconds (a further delivery would show) it stops, and a pull consumer reads
 * {@code %DLQ%G} from offset 0. Prints RESULT lines: {@code sent}, one {@code received} per delivery,
 * {@code dlq} per dead letter, a final {@code summary}. Exit code 0, or 1 on a failure, 3 past the deadline.
 */
public final class SideBySide {
    private static final AtomicInteger INSTANCES = new AtomicInteger();
    private static final List<String> FAILURES = new ArrayList<String>();

    private final Map<String, String> opts;
    private final long deadline;

    private SideBySide(Map<String, String> opts) {
        this.opts = opts;
        this.deadline = System.currentTimeMillis() + 1000L * Integer.parseInt(opt("timeout", "60"));
    }

    public static void main(String[] args) {
        Map<String, String> opts = Driver.options(args);
        final SideBySide s = new SideBySide(opts);
        boolean known = args.length > 0 && args[0].equals("retry-dlq");
        Driver.run("retry-dlq", s.deadline, FAILURES, known ? new Callable<Integer>() {
            @Override
            public Integer call() throws Exception {
                return s.retryDlq();
            }
        } : null);
    }

    private String opt(String key, String dflt) {
        String v = opts.get(key);
        return v != null ? v : dflt;
    }

    private long remainingMillis() {
        return Math.max(0, deadline - System.currentTimeMillis());
    }

    private static void fail(String message) {
        synchronized (FAILURES) {
            FAILURES.add(message);
        }
    }

    private <T extends ClientConfig> T configure(T c, String role) {
        c.setNamesrvAddr(opts.get("namesrv"));
        c.setVipChannelEnabled(false);
        c.setInstanceName("sbs-" + Interop.pid() + "-" + role + "-" + INSTANCES.incrementAndGet());
        return c;
    }

    private int retryDlq() throws Exception {
        final String topic = opts.get("topic");
        final String group = opts.get("group");
        final int max = Integer.parseInt(opt("max", "2"));
        final long linger = Long.parseLong(opt("linger", "3000"));

        DefaultMQProducer p = configure(new DefaultMQProducer(group + "-pg"), "produce");
        p.setSendMsgTimeout(10_000);
        p.setRetryTimesWhenSendFailed(0);
        p.start();
        try {
            Message m = new Message(topic, "TagR", "sbs-retry-body".getBytes(StandardCharsets.UTF_8));
            m.setKeys(Arrays.asList("rk1", "rk2"));
            m.putUserProperty("sbs", "retry");
            SendResult r = p.send(m);
            Interop.result(Interop.map("event", "sent", "status", String.valueOf(r.getSendStatus()),
                "msgId", r.getMsgId(), "offsetMsgId", r.getOffsetMsgId(),
                "queueId", r.getMessageQueue().getQueueId(), "queueOffset", r.getQueueOffset()));
        } finally {
            p.shutdown();
        }

        final AtomicInteger deliveries = new AtomicInteger();
        final Object done = new Object();
        DefaultMQPushConsumer c = configure(new DefaultMQPushConsumer(group), "consume");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setMaxReconsumeTimes(max);
        c.subscribe(topic, "*");
        c.registerMessageListener(new MessageListenerConcurrently() {
            @Override
            public ConsumeConcurrentlyStatus consumeMessage(List<MessageExt> msgs, ConsumeConcurrentlyContext ctx) {
                for (MessageExt m : msgs) {
                    Interop.result(Generic.describe(m));
                }
                deliveries.addAndGet(msgs.size());
                synchronized (done) {
                    done.notifyAll();
                }
                return ConsumeConcurrentlyStatus.RECONSUME_LATER;
            }
        });
        c.start();
        try {
            synchronized (done) {
                while (deliveries.get() < max + 1 && remainingMillis() > 0) {
                    done.wait(Math.max(1, Math.min(200, remainingMillis())));
                }
            }
            Thread.sleep(Math.min(linger, remainingMillis()));
        } finally {
            c.shutdown();
        }
        if (deliveries.get() < max + 1) {
            fail("only " + deliveries.get() + " deliveries of " + (max + 1) + " expected");
        }

        // The dead letter: route of %DLQ%group from the name server, then a pull from offset 0.
        String dlq = "%DLQ%" + group;
        DefaultMQPullConsumer reader = configure(new DefaultMQPullConsumer(group + "-dlq-reader"), "dlq");
        reader.start();
        int found = 0;
        try {
            Set<MessageQueue> mqs = null;
            while (mqs == null && remainingMillis() > 0) {
                try {
                    mqs = reader.fetchSubscribeMessageQueues(dlq);
                } catch (Exception e) {
                    Thread.sleep(Math.min(500, remainingMillis()));
                }
            }
            if (mqs == null) {
                fail("no route for " + dlq);
            } else {
                Interop.result(Interop.map("event", "dlq-route", "queues", mqs.size()));
                while (found == 0 && remainingMillis() > 0) {
                    for (MessageQueue mq : mqs) {
                        PullResult r = reader.pull(mq, "*", 0, 32, Math.min(5000, Math.max(1, remainingMillis())));
                        if (r.getMsgFoundList() != null) {
                            for (MessageExt m : r.getMsgFoundList()) {
                                Map<String, Object> d = Generic.describe(m);
                                d.put("event", "dlq");
                                d.put("pullStatus", String.valueOf(r.getPullStatus()));
                                d.put("nextBeginOffset", r.getNextBeginOffset());
                                d.put("maxOffset", r.getMaxOffset());
                                Interop.result(d);
                                found++;
                            }
                        }
                    }
                    if (found == 0) {
                        Thread.sleep(Math.min(500, remainingMillis()));
                    }
                }
            }
        } finally {
            reader.shutdown();
        }
        if (found == 0) {
            fail("nothing in " + dlq);
        }
        Interop.result(Interop.map("event", "summary", "deliveries", deliveries.get(), "dlq", found));
        return 0;
    }
}
