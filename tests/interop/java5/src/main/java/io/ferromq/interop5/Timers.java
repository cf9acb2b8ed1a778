package io.ferromq.interop5;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.serializer.SerializerFeature;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Timer (and delay level) messages with the official RocketMQ 5.3.3 remoting client. One subcommand per
 * run; every result is one JSON object on its own line of stdout (UTF-8).
 *
 * <pre>
 * send NAMESRV TOPIC COUNT PROPERTY VALUE_SPEC
 *     COUNT messages (body "timer-I", key "timer-key-I", tag "TimerTag") with PROPERTY (TIMER_DELIVER_MS,
 *     TIMER_DELAY_SEC, TIMER_DELAY_MS, DELAY = a delay level, or any user property) set to VALUE_SPEC:
 *     a literal value, or "+N" for now + N ms (the time just before each send). Prints per message
 *     {"i","status","msgId","queueId","queueOffset","sentAtMs","returnedAtMs","requested","value","via"}
 *     or {"i","error":code,"remark","sentAtMs","value","via"} for a refused send. "requested" is the deliver
 *     time the client asked for in epoch ms as seen from sentAtMs (null when the value is no number).
 *     "via" says how the property was set: 5.x reserves TIMER_* and DELAY for putUserProperty, so those go
 *     through the client's own setters (setDeliverTimeMs, setDelayTimeSec, setDelayTimeMs,
 *     setDelayTimeLevel), and a value that is no number through MessageAccessor.putProperty (verbatim).
 *     Exit code 0 (refusals included), 2 on a usage error.
 *
 * consume NAMESRV TOPIC GROUP COUNT TIMEOUT_MS
 *     A DefaultLitePullConsumer from the first offset; prints each message as {"topic","queueId",
 *     "queueOffset","body","msgId","bornTimestamp","storeTimestamp","receivedAtMs","commitLogOffset",
 *     "sysFlag","reconsumeTimes","properties":{...all of them...}} until COUNT arrived (exit 0) or TIMEOUT_MS
 *     passed (exit 1).
 *     The lite pull consumer pulls with LITE_PULL_MESSAGE (request code 361).
 *
 * push NAMESRV TOPIC GROUP COUNT TIMEOUT_MS
 *     The same with a DefaultMQPushConsumer (pulls with PULL_MESSAGE, code 11), from the first offset: prints
 *     each delivery (redeliveries too, with "reconsumeTimes") as "consume" does until COUNT distinct
 *     messages (by msgId) arrived (exit 0) or TIMEOUT_MS passed (exit 1). The push consumer adds
 *     CONSUME_START_TIME to each message's properties before its listener sees it.
 * </pre>
 */
public final class Timers {
    // The broker's default messageDelayLevel, in ms: level L (1-based) waits LEVELS[L - 1].
    private static final long[] LEVELS = {
        1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000, 360000, 420000, 480000, 540000,
        600000, 1200000, 1800000, 3600000, 7200000,
    };

    private static PrintStream out;

    private Timers() {}

    public static void main(String[] args) throws Exception {
        out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, "UTF-8");
        int code;
        if (args.length == 6 && args[0].equals("send")) {
            code = send(args[1], args[2], Integer.parseInt(args[3]), args[4], args[5]);
        } else if (args.length == 6 && args[0].equals("consume")) {
            code = consume(args[1], args[2], args[3], Integer.parseInt(args[4]), Long.parseLong(args[5]));
        } else if (args.length == 6 && args[0].equals("push")) {
            code = push(args[1], args[2], args[3], Integer.parseInt(args[4]), Long.parseLong(args[5]));
        } else {
            System.err.println("usage: Timers send NAMESRV TOPIC COUNT PROPERTY VALUE_SPEC");
            System.err.println("       Timers consume NAMESRV TOPIC GROUP COUNT TIMEOUT_MS");
            System.err.println("       Timers push NAMESRV TOPIC GROUP COUNT TIMEOUT_MS");
            code = 2;
        }
        out.flush();
        // The client leaves non-daemon threads behind.
        System.exit(code);
    }

    private static void print(Map<String, Object> o) {
        out.println(JSON.toJSONString(o, SerializerFeature.WriteMapNullValue));
        out.flush();
    }

    private static Long number(String value) {
        try {
            return Long.parseLong(value.trim());
        } catch (NumberFormatException e) {
            return null;
        }
    }

    /** Sets PROPERTY on msg; returns how. */
    private static String apply(Message msg, String property, String value) {
        try {
            msg.putUserProperty(property, value);
            return "putUserProperty";
        } catch (RuntimeException reserved) {
            // "The Property<...> is used by system, input another please": 5.x reserves the timer names.
        }
        Long n = number(value);
        if (n != null) {
            switch (property) {
                case "TIMER_DELIVER_MS":
                    msg.setDeliverTimeMs(n);
                    return "setDeliverTimeMs";
                case "TIMER_DELAY_SEC":
                    msg.setDelayTimeSec(n);
                    return "setDelayTimeSec";
                case "TIMER_DELAY_MS":
                    msg.setDelayTimeMs(n);
                    return "setDelayTimeMs";
                case "DELAY":
                    msg.setDelayTimeLevel(n.intValue());
                    return "setDelayTimeLevel";
                default:
                    break;
            }
        }
        MessageAccessor.putProperty(msg, property, value);
        return "MessageAccessor.putProperty";
    }

    /** The deliver time asked for, in epoch ms, as seen from sentAt; null if unknown. */
    private static Long requested(String property, String value, long sentAt) {
        Long n = number(value);
        if (n == null) {
            return null;
        }
        switch (property) {
            case "TIMER_DELIVER_MS":
                return n;
            case "TIMER_DELAY_SEC":
                return sentAt + n * 1000L;
            case "TIMER_DELAY_MS":
                return sentAt + n;
            case "DELAY":
                return n >= 1 && n <= LEVELS.length ? sentAt + LEVELS[(int) (n - 1)] : null;
            default:
                return null;
        }
    }

    private static int send(String namesrv, String topic, int count, String property, String spec)
            throws MQClientException, InterruptedException {
        DefaultMQProducer producer = new DefaultMQProducer("Timers5Producer");
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("timers5-" + pid());
        producer.setSendMsgTimeout(15000);
        producer.start();
        try {
            for (int i = 0; i < count; i++) {
                Message msg = new Message(
                    topic, "TimerTag", "timer-key-" + i, ("timer-" + i).getBytes(StandardCharsets.UTF_8));
                long sentAt = System.currentTimeMillis();
                String value =
                    spec.startsWith("+") ? Long.toString(sentAt + Long.parseLong(spec.substring(1))) : spec;
                String via = apply(msg, property, value);
                Map<String, Object> o = new LinkedHashMap<>();
                o.put("i", i);
                try {
                    SendResult r = producer.send(msg);
                    o.put("status", r.getSendStatus().name());
                    o.put("msgId", r.getMsgId());
                    o.put("queueId", r.getMessageQueue().getQueueId());
                    o.put("queueOffset", r.getQueueOffset());
                    o.put("sentAtMs", sentAt);
                    o.put("returnedAtMs", System.currentTimeMillis());
                    o.put("requested", requested(property, value, sentAt));
                } catch (MQBrokerException e) {
                    o.put("error", e.getResponseCode());
                    o.put("remark", e.getErrorMessage());
                    o.put("sentAtMs", sentAt);
                } catch (MQClientException e) {
                    o.put("error", e.getResponseCode());
                    o.put("remark", e.getErrorMessage());
                    o.put("sentAtMs", sentAt);
                } catch (org.apache.rocketmq.remoting.exception.RemotingException e) {
                    o.put("error", -1);
                    o.put("remark", e.toString());
                    o.put("sentAtMs", sentAt);
                }
                o.put("value", value);
                o.put("via", via);
                print(o);
            }
        } finally {
            producer.shutdown();
        }
        return 0;
    }

    private static int consume(String namesrv, String topic, String group, int count, long timeoutMs)
            throws MQClientException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("timers5-" + pid());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setAutoCommit(true);
        consumer.subscribe(topic, "*");
        consumer.start();
        int got = 0;
        try {
            while (got < count) {
                long left = deadline - System.currentTimeMillis();
                if (left <= 0) {
                    break;
                }
                List<MessageExt> msgs = consumer.poll(Math.min(left, 500));
                long receivedAt = System.currentTimeMillis();
                for (MessageExt m : msgs) {
                    print(received(m, receivedAt));
                    got++;
                }
            }
        } finally {
            consumer.shutdown();
        }
        return got >= count ? 0 : 1;
    }

    private static Map<String, Object> received(MessageExt m, long receivedAt) {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("topic", m.getTopic());
        o.put("queueId", m.getQueueId());
        o.put("queueOffset", m.getQueueOffset());
        o.put("body", new String(m.getBody(), StandardCharsets.UTF_8));
        o.put("msgId", m.getMsgId());
        o.put("bornTimestamp", m.getBornTimestamp());
        o.put("storeTimestamp", m.getStoreTimestamp());
        o.put("receivedAtMs", receivedAt);
        o.put("commitLogOffset", m.getCommitLogOffset());
        o.put("sysFlag", m.getSysFlag());
        o.put("reconsumeTimes", m.getReconsumeTimes());
        o.put("properties", new TreeMap<>(m.getProperties()));
        return o;
    }

    private static int push(String namesrv, String topic, String group, int count, long timeoutMs)
            throws MQClientException, InterruptedException {
        Set<String> seen = ConcurrentHashMap.newKeySet();
        CountDownLatch done = new CountDownLatch(count);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("timers5-" + pid());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            long receivedAt = System.currentTimeMillis();
            for (MessageExt m : msgs) {
                synchronized (Timers.class) {
                    print(received(m, receivedAt));
                }
                if (seen.add(m.getMsgId())) {
                    done.countDown();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        try {
            return done.await(timeoutMs, TimeUnit.MILLISECONDS) ? 0 : 1;
        } finally {
            consumer.shutdown();
        }
    }

    /** The JVM's process id (compiled for Java 8, so no ProcessHandle). */
    private static String pid() {
        String name = java.lang.management.ManagementFactory.getRuntimeMXBean().getName();
        int at = name.indexOf('@');
        return at > 0 ? name.substring(0, at) : name;
    }
}
