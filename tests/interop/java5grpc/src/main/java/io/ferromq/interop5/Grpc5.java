package io.ferromq.interop5;

import java.io.Closeable;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.function.Predicate;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientConfigurationBuilder;
import org.apache.rocketmq.client.apis.ClientException;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.StaticSessionCredentialsProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionChecker;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

/**
 * Scenarios of the official RocketMQ 5.x Java client (rocketmq-client-java, over gRPC) against a gRPC
 * endpoint, ferromq's or Apache RocketMQ's proxy; the Java twin of tests/interop/client5_scenarios.py
 * (the official Python 5.x client): the same scenario names and the same normalised answers.
 *
 * <pre>
 * java -cp ferromq-interop5grpc.jar io.ferromq.interop5.Grpc5 ENDPOINT SCENARIO TOPIC GROUP [COUNT]
 * </pre>
 *
 * <p>Prints one {@code RESULT {json}} line on stdout (keys sorted, no message ids, times or hosts) and
 * exits 0; a scenario that throws prints its stack trace on stderr and exits 2. A watchdog (a daemon
 * thread) ends the process with exit code 3 after {@link #WATCHDOG_SECONDS} whatever happens, shutdown
 * included. Scenarios: roundtrip, redelivery, push_tags, push_sql, dead_letter, wrong_type, fifo, delay,
 * transaction, recall (as
 * client5_scenarios.py), and for the mixed tests: send (three messages "j5-I|..." with tag TagJ, keys
 * j5-I-k1 and j5-I-k2, properties color=green and seq=I; their message ids) and receive (a SimpleConsumer
 * receives and acks COUNT messages, 3 by default; each with its message id), priority, and lite (a
 * LitePushConsumer of RocketMQ 5.5's lite topics, TOPIC the parent topic; see {@link Lite5}: it also prints a
 * JSON line on stdout per step before the RESULT line).
 *
 * <p>The client turns TLS on by default; the tests run it plain ({@code enableSsl(false)}) unless
 * FERROMQ_TEST_SSL=1, which keeps the default (the server's certificate is not checked: the client's
 * own choice). Signed with FERROMQ_TEST_AK / FERROMQ_TEST_SK when both are set.
 */
public final class Grpc5 {
    /** The bound of every scenario's own waiting (as DEADLINE_SECONDS in client5_scenarios.py). */
    private static final long DEADLINE_MILLIS = 60_000;
    /** The whole process, client start and shutdown included. */
    private static final long WATCHDOG_SECONDS = 110;
    private static final Duration REQUEST_TIMEOUT = Duration.ofSeconds(10);
    private static final Duration AWAIT = Duration.ofSeconds(5);
    private static final Duration CLOSE_WAIT = Duration.ofSeconds(2);

    private static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();
    private static PrintStream out;

    private Grpc5() {}

    public static void main(String[] args) throws Exception {
        out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, "UTF-8");
        if (args.length < 4 || args.length > 5) {
            System.err.println("usage: Grpc5 ENDPOINT SCENARIO TOPIC GROUP [COUNT]");
            System.exit(2);
        }
        startWatchdog();
        String endpoint = args[0];
        String scenario = args[1];
        String topic = args[2];
        String group = args[3];
        int count = args.length == 5 ? Integer.parseInt(args[4]) : 3;
        Map<String, Object> result;
        try {
            result = run(endpoint, scenario, topic, group, count);
        } catch (Throwable t) {
            t.printStackTrace();
            System.err.flush();
            System.exit(2);
            return;
        }
        out.println("RESULT " + Json.write(result));
        out.flush();
        System.exit(0);
    }

    private static Map<String, Object> run(String endpoint, String scenario, String topic, String group, int count)
        throws Exception {
        switch (scenario) {
            case "roundtrip":
                return roundtrip(endpoint, topic, group);
            case "redelivery":
                return redelivery(endpoint, topic, group);
            case "push_tags":
                return pushTags(endpoint, topic, group);
            case "push_sql":
                return pushSql(endpoint, topic, group);
            case "dead_letter":
                return deadLetter(endpoint, topic, group);
            case "wrong_type":
                return wrongType(endpoint, topic);
            case "fifo":
                return fifo(endpoint, topic, group);
            case "delay":
                return delay(endpoint, topic, group);
            case "transaction":
                return transaction(endpoint, topic, group);
            case "recall":
                return recall(endpoint, topic, group);
            case "send":
                return send(endpoint, topic);
            case "receive":
                return receive(endpoint, topic, group, count);
            case "priority":
                return priority(endpoint, topic, group, count);
            case "lite":
                return Lite5.lite(PROVIDER, out, endpoint, topic, group, count);
            case "lite_bench":
                return LiteBench5.scenario(PROVIDER, out, endpoint, topic, group, count);
            default:
                throw new IllegalArgumentException("unknown scenario " + scenario);
        }
    }

    private static void startWatchdog() {
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(WATCHDOG_SECONDS * 1000);
            } catch (InterruptedException e) {
                return;
            }
            System.err.println("{\"error\":\"watchdog\",\"seconds\":" + WATCHDOG_SECONDS + "}");
            System.err.flush();
            Runtime.getRuntime().halt(3);
        }, "watchdog");
        watchdog.setDaemon(true);
        watchdog.start();
    }

    // ---------------------------------------------------------------------------------------- helpers

    static ClientConfiguration config(String endpoint) {
        ClientConfigurationBuilder builder = ClientConfiguration.newBuilder()
            .setEndpoints(endpoint)
            .enableSsl("1".equals(System.getenv("FERROMQ_TEST_SSL")))
            .setRequestTimeout(REQUEST_TIMEOUT);
        String ak = System.getenv("FERROMQ_TEST_AK");
        String sk = System.getenv("FERROMQ_TEST_SK");
        if (ak != null && !ak.isEmpty() && sk != null && !sk.isEmpty()) {
            builder.setCredentialProvider(new StaticSessionCredentialsProvider(ak, sk));
        }
        return builder.build();
    }

    static MessageBuilder message(String topic, String body, String tag, List<String> keys, String... props) {
        MessageBuilder builder = PROVIDER.newMessageBuilder()
            .setTopic(topic)
            .setBody(body.getBytes(StandardCharsets.UTF_8))
            .setTag(tag);
        if (!keys.isEmpty()) {
            builder.setKeys(keys.toArray(new String[0]));
        }
        for (int i = 0; i + 1 < props.length; i += 2) {
            builder.addProperty(props[i], props[i + 1]);
        }
        return builder;
    }

    static MessageBuilder message(String topic, String body) {
        return message(topic, body, "T", Collections.emptyList());
    }

    static String body(MessageView m) {
        ByteBuffer buffer = m.getBody().duplicate();
        byte[] bytes = new byte[buffer.remaining()];
        buffer.get(bytes);
        return new String(bytes, StandardCharsets.UTF_8);
    }

    /** As client5_scenarios.seen: body, tag, sorted keys, user properties, delivery attempt, topic. */
    static Map<String, Object> seen(MessageView m) {
        Map<String, Object> s = new TreeMap<>();
        s.put("body", body(m));
        s.put("tag", m.getTag().orElse(null));
        s.put("keys", new ArrayList<>(new TreeSet<>(m.getKeys())));
        s.put("properties", new TreeMap<>(m.getProperties()));
        s.put("delivery_attempt", m.getDeliveryAttempt());
        s.put("topic", m.getTopic());
        return s;
    }

    static List<Map<String, Object>> seenAll(Collection<MessageView> messages) {
        List<Map<String, Object>> all = new ArrayList<>();
        for (MessageView m : messages) {
            all.add(seen(m));
        }
        return all;
    }

    static List<Map<String, Object>> sortedByBody(List<Map<String, Object>> seen) {
        seen.sort(Comparator.comparing(s -> (String) s.get("body")));
        return seen;
    }

    static List<String> bodies(Collection<MessageView> messages) {
        List<String> all = new ArrayList<>();
        for (MessageView m : messages) {
            all.add(body(m));
        }
        return all;
    }

    static SimpleConsumer simpleConsumer(String endpoint, String group, String topic) throws Exception {
        return PROVIDER.newSimpleConsumerBuilder()
            .setClientConfiguration(config(endpoint))
            .setConsumerGroup(group)
            .setSubscriptionExpressions(Collections.singletonMap(topic, FilterExpression.SUB_ALL))
            .setAwaitDuration(AWAIT)
            .build();
    }

    static Producer producer(String endpoint, String topic, TransactionChecker checker) throws Exception {
        return (checker == null ? PROVIDER.newProducerBuilder()
            : PROVIDER.newProducerBuilder().setTransactionChecker(checker))
            .setClientConfiguration(config(endpoint))
            .setTopics(topic)
            .build();
    }

    /**
     * One receive. Apache RocketMQ's proxy answers a receive that comes before it has taken the consumer's
     * settings (Telemetry) with a NullPointerException about "settings" (code 50001): asked again then,
     * for DEADLINE_MILLIS at most.
     */
    static List<MessageView> receive(SimpleConsumer consumer, int count, int invisibleSeconds) throws Exception {
        long deadline = System.currentTimeMillis() + DEADLINE_MILLIS;
        while (true) {
            try {
                return consumer.receive(count, Duration.ofSeconds(invisibleSeconds));
            } catch (ClientException e) {
                String message = String.valueOf(e.getMessage());
                if (!message.contains("\"settings\" is null") || System.currentTimeMillis() > deadline) {
                    throw e;
                }
                Thread.sleep(200);
            }
        }
    }

    /** Receives until `count` messages came (or `done` says so), DEADLINE_MILLIS at most. */
    static List<MessageView> receiveUntil(SimpleConsumer consumer, int count, int invisibleSeconds,
        Predicate<List<MessageView>> done) throws Exception {
        List<MessageView> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + DEADLINE_MILLIS;
        while (got.size() < count && System.currentTimeMillis() < deadline) {
            got.addAll(receive(consumer, count - got.size(), invisibleSeconds));
            if (done != null && done.test(got)) {
                break;
            }
        }
        return got;
    }

    static List<MessageView> receiveUntil(SimpleConsumer consumer, int count, int invisibleSeconds)
        throws Exception {
        return receiveUntil(consumer, count, invisibleSeconds, null);
    }

    static List<String> sendAll(String endpoint, String topic, List<Message> messages) throws Exception {
        try (Producer producer = producer(endpoint, topic, null)) {
            List<String> ids = new ArrayList<>();
            for (Message m : messages) {
                ids.add(producer.send(m).getMessageId().toString());
            }
            return ids;
        }
    }

    static void closeQuietly(Closeable closeable) {
        try {
            closeable.close();
        } catch (Exception e) {
            e.printStackTrace();
        }
    }

    /**
     * Closes a PushConsumer, waiting at most CLOSE_WAIT: its close tells the server at once
     * (NotifyClientTermination), then waits for its receives in flight, which a server may hold for
     * its whole long-polling time (20 s for Java's proxy); the process ends soon after anyway.
     */
    static void closeSoon(Closeable closeable) throws InterruptedException {
        Thread closing = new Thread(() -> closeQuietly(closeable), "close-push-consumer");
        closing.setDaemon(true);
        closing.start();
        closing.join(CLOSE_WAIT.toMillis());
    }

    // -------------------------------------------------------------------------------------- scenarios

    /** Three messages with a tag, keys and a user property; a SimpleConsumer receives and acks them. */
    static Map<String, Object> roundtrip(String endpoint, String topic, String group) throws Exception {
        List<Message> sent = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            sent.add(message(topic, "rt " + i, "TagA", Collections.singletonList("k" + i), "color", "blue").build());
        }
        List<String> ids = sendAll(endpoint, topic, sent);
        SimpleConsumer consumer = simpleConsumer(endpoint, group, topic);
        try {
            List<MessageView> got = receiveUntil(consumer, 3, 15);
            List<String> gotIds = new ArrayList<>();
            for (MessageView m : got) {
                consumer.ack(m);
                gotIds.add(m.getMessageId().toString());
            }
            Collections.sort(ids);
            Collections.sort(gotIds);
            Map<String, Object> result = new TreeMap<>();
            result.put("received", sortedByBody(seenAll(got)));
            result.put("ids_match", ids.equals(gotIds));
            return result;
        } finally {
            closeQuietly(consumer);
        }
    }

    /** A message not acked comes back once its invisible time (changed to 1 s) is over, with its delivery
     * attempt raised; acked, it does not come back. */
    static Map<String, Object> redelivery(String endpoint, String topic, String group) throws Exception {
        sendAll(endpoint, topic, Collections.singletonList(message(topic, "again").build()));
        SimpleConsumer consumer = simpleConsumer(endpoint, group, topic);
        try {
            List<MessageView> first = receiveUntil(consumer, 1, 20);
            consumer.changeInvisibleDuration(first.get(0), Duration.ofSeconds(1));
            List<MessageView> second = receiveUntil(consumer, 1, 20);
            for (MessageView m : second) {
                consumer.ack(m);
            }
            List<MessageView> third = receive(consumer, 1, 20);
            Map<String, Object> result = new TreeMap<>();
            result.put("first", seenAll(first));
            result.put("second", seenAll(second));
            result.put("after_ack", seenAll(third));
            return result;
        } finally {
            closeQuietly(consumer);
        }
    }

    /** A PushConsumer subscribed to TagA || TagC gets only those; the one that fails once comes back. */
    static Map<String, Object> pushTags(String endpoint, String topic, String group) throws Exception {
        List<List<Object>> got = Collections.synchronizedList(new ArrayList<>());
        Set<String> failed = Collections.synchronizedSet(new HashSet<>());
        PushConsumer consumer = PROVIDER.newPushConsumerBuilder()
            .setClientConfiguration(config(endpoint))
            .setConsumerGroup(group)
            .setSubscriptionExpressions(Collections.singletonMap(
                topic, new FilterExpression("TagA || TagC", FilterExpressionType.TAG)))
            .setMessageListener(m -> {
                String body = body(m);
                if (body.equals("p 2") && failed.add(body)) {
                    return ConsumeResult.FAILURE;
                }
                got.add(Arrays.asList(body, m.getTag().orElse(null), m.getDeliveryAttempt()));
                return ConsumeResult.SUCCESS;
            })
            .build();
        try {
            String[] tags = {"TagA", "TagB", "TagC"};
            List<Message> messages = new ArrayList<>();
            for (int i = 0; i < 6; i++) {
                messages.add(message(topic, "p " + i, tags[i % 3], Collections.emptyList()).build());
            }
            sendAll(endpoint, topic, messages);
            long deadline = System.currentTimeMillis() + DEADLINE_MILLIS;
            while (got.size() < 4 && System.currentTimeMillis() < deadline) {
                Thread.sleep(100);
            }
            List<List<Object>> received;
            synchronized (got) {
                received = new ArrayList<>(got);
            }
            received.sort(Comparator.comparing((List<Object> r) -> (String) r.get(0))
                .thenComparing(r -> String.valueOf(r.get(1)))
                .thenComparing(r -> (Integer) r.get(2)));
            Map<String, Object> result = new TreeMap<>();
            result.put("received", received);
            return result;
        } finally {
            closeSoon(consumer);
        }
    }

    /** A PushConsumer with an SQL92 filter gets only the messages whose properties match it. */
    static Map<String, Object> pushSql(String endpoint, String topic, String group) throws Exception {
        List<List<Object>> got = Collections.synchronizedList(new ArrayList<>());
        PushConsumer consumer = PROVIDER.newPushConsumerBuilder()
            .setClientConfiguration(config(endpoint))
            .setConsumerGroup(group)
            .setSubscriptionExpressions(Collections.singletonMap(
                topic, new FilterExpression("a > 1 AND color = 'red'", FilterExpressionType.SQL92)))
            .setMessageListener(m -> {
                got.add(Arrays.asList(body(m), m.getDeliveryAttempt()));
                return ConsumeResult.SUCCESS;
            })
            .build();
        try {
            String[] colors = {"red", "blue"};
            List<Message> messages = new ArrayList<>();
            for (int i = 0; i < 6; i++) {
                messages.add(message(topic, "s " + i, "T", Collections.emptyList(),
                    "a", String.valueOf(i), "color", colors[i % 2]).build());
            }
            sendAll(endpoint, topic, messages);
            long deadline = System.currentTimeMillis() + DEADLINE_MILLIS;
            while (got.size() < 2 && System.currentTimeMillis() < deadline) {
                Thread.sleep(100);
            }
            List<List<Object>> received;
            synchronized (got) {
                received = new ArrayList<>(got);
            }
            received.sort(Comparator.comparing((List<Object> r) -> (String) r.get(0))
                .thenComparing(r -> (Integer) r.get(1)));
            Map<String, Object> result = new TreeMap<>();
            result.put("received", received);
            return result;
        } finally {
            closeSoon(consumer);
        }
    }

    /**
     * A PushConsumer that fails every message, in a group that retries none (retryMaxTimes 0): delivered
     * once, then in the group's dead letter topic, where a SimpleConsumer of another group reads it.
     */
    static Map<String, Object> deadLetter(String endpoint, String topic, String group) throws Exception {
        List<List<Object>> deliveries = Collections.synchronizedList(new ArrayList<>());
        PushConsumer consumer = PROVIDER.newPushConsumerBuilder()
            .setClientConfiguration(config(endpoint))
            .setConsumerGroup(group)
            .setSubscriptionExpressions(Collections.singletonMap(topic, FilterExpression.SUB_ALL))
            .setMessageListener(m -> {
                deliveries.add(Arrays.asList(body(m), m.getDeliveryAttempt()));
                return ConsumeResult.FAILURE;
            })
            .build();
        try {
            sendAll(endpoint, topic, Collections.singletonList(
                message(topic, "dead", "TagD", Collections.singletonList("dk"), "color", "grey").build()));
            List<MessageView> dead = readDeadLetters(endpoint, group);
            Map<String, Object> result = new TreeMap<>();
            synchronized (deliveries) {
                result.put("deliveries", new ArrayList<>(deliveries));
            }
            result.put("dead", seenAll(dead));
            return result;
        } finally {
            closeSoon(consumer);
        }
    }

    /**
     * The first message of %DLQ%group, read by a SimpleConsumer of another group. The topic exists once
     * the first message is in it: until then its route is not found, and the reader is built again.
     */
    static List<MessageView> readDeadLetters(String endpoint, String group) throws Exception {
        String topic = "%DLQ%" + group;
        long deadline = System.currentTimeMillis() + DEADLINE_MILLIS;
        while (true) {
            SimpleConsumer reader = null;
            try {
                reader = simpleConsumer(endpoint, group + "Reader", topic);
                List<MessageView> got = receiveUntil(reader, 1, 15);
                for (MessageView m : got) {
                    reader.ack(m);
                }
                return got;
            } catch (ClientException | IllegalStateException e) {  // the build fails on a missing route
                if (System.currentTimeMillis() > deadline) {
                    throw e;
                }
                Thread.sleep(500);
            } finally {
                if (reader != null) {
                    closeQuietly(reader);
                }
            }
        }
    }

    /** A FIFO message (message group) to a NORMAL topic is refused. */
    static Map<String, Object> wrongType(String endpoint, String topic) throws Exception {
        Map<String, Object> result = new TreeMap<>();
        try (Producer producer = producer(endpoint, topic, null)) {
            try {
                producer.send(message(topic, "fifo to normal").setMessageGroup("g1").build());
                result.put("refused", null);
            } catch (Exception e) {
                result.put("refused", e.getClass().getSimpleName());
                result.put("message", e.getMessage());
            }
        }
        return result;
    }

    /** Two message groups interleaved on a FIFO topic; an orderly group's SimpleConsumer gets each group's
     * messages in the order they were sent (acking each before the next comes). */
    static Map<String, Object> fifo(String endpoint, String topic, String group) throws Exception {
        List<Message> messages = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
            for (String g : new String[] {"gA", "gB"}) {
                messages.add(message(topic, g + "-" + i).setMessageGroup(g).build());
            }
        }
        sendAll(endpoint, topic, messages);
        Map<String, List<String>> order = new TreeMap<>();
        order.put("gA", new ArrayList<>());
        order.put("gB", new ArrayList<>());
        SimpleConsumer consumer = simpleConsumer(endpoint, group, topic);
        try {
            long deadline = System.currentTimeMillis() + DEADLINE_MILLIS;
            while (order.get("gA").size() + order.get("gB").size() < 8 && System.currentTimeMillis() < deadline) {
                for (MessageView m : receiveUntil(consumer, 1, 15)) {
                    order.computeIfAbsent(m.getMessageGroup().orElse(null), g -> new ArrayList<>()).add(body(m));
                    consumer.ack(m);
                }
            }
            Map<String, Object> result = new TreeMap<>();
            result.put("order", order);
            return result;
        } finally {
            closeQuietly(consumer);
        }
    }

    /** A message delivered at its delivery timestamp (now + 3 s, whole seconds): not before it. */
    static Map<String, Object> delay(String endpoint, String topic, String group) throws Exception {
        long due = (System.currentTimeMillis() / 1000 + 3) * 1000;
        sendAll(endpoint, topic, Collections.singletonList(message(topic, "later").setDeliveryTimestamp(due).build()));
        SimpleConsumer consumer = simpleConsumer(endpoint, group, topic);
        try {
            List<MessageView> got = receiveUntil(consumer, 1, 15);
            long at = System.currentTimeMillis();
            for (MessageView m : got) {
                consumer.ack(m);
            }
            Map<String, Object> result = new TreeMap<>();
            result.put("received", bodies(got));
            result.put("early", at < due);
            return result;
        } finally {
            closeQuietly(consumer);
        }
    }

    /** Three half messages: one committed, one rolled back, one left open and committed when the broker
     * checks back (over the telemetry stream); a consumer gets the committed two only. */
    static Map<String, Object> transaction(String endpoint, String topic, String group) throws Exception {
        Set<String> checked = Collections.synchronizedSet(new TreeSet<>());
        TransactionChecker checker = m -> {
            String body = body(m);
            checked.add(body);
            return body.equals("roll me back") ? TransactionResolution.ROLLBACK : TransactionResolution.COMMIT;
        };
        Producer producer = producer(endpoint, topic, checker);
        try {
            String[][] plan = {{"commit me", "commit"}, {"roll me back", "rollback"}, {"check me", ""}};
            for (String[] step : plan) {
                Transaction t = producer.beginTransaction();
                producer.send(message(topic, step[0]).build(), t);
                if (step[1].equals("commit")) {
                    t.commit();
                } else if (step[1].equals("rollback")) {
                    t.rollback();
                }
            }
            SimpleConsumer consumer = simpleConsumer(endpoint, group, topic);
            try {
                List<MessageView> got = receiveUntil(consumer, 2, 15);
                for (MessageView m : got) {
                    consumer.ack(m);
                }
                List<MessageView> late = receive(consumer, 1, 15);
                List<String> all = bodies(got);
                all.addAll(bodies(late));
                Set<String> distinct = new TreeSet<>(all);
                Map<String, Object> result = new TreeMap<>();
                result.put("received", new ArrayList<>(distinct));
                // At least once: a commit and a check that cross may deliver a message twice.
                result.put("duplicates", all.size() - distinct.size());
                synchronized (checked) {
                    result.put("checked", new ArrayList<>(checked));
                }
                return result;
            } finally {
                closeQuietly(consumer);
            }
        } finally {
            closeQuietly(producer);
        }
    }

    /** A delayed message recalled before it is due is never delivered; another one is. */
    static Map<String, Object> recall(String endpoint, String topic, String group) throws Exception {
        String handle;
        try (Producer producer = producer(endpoint, topic, null)) {
            long now = System.currentTimeMillis() / 1000 * 1000;
            SendReceipt receipt = producer.send(message(topic, "recalled").setDeliveryTimestamp(now + 6000).build());
            handle = receipt.getRecallHandle();
            producer.recallMessage(topic, handle);
            producer.send(message(topic, "kept").setDeliveryTimestamp(now + 2000).build());
        }
        SimpleConsumer consumer = simpleConsumer(endpoint, group, topic);
        try {
            List<MessageView> got = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 12_000; // past the recalled one's time
            while (System.currentTimeMillis() < deadline) {
                for (MessageView m : receive(consumer, 2, 15)) {
                    got.add(m);
                    consumer.ack(m);
                }
            }
            List<String> received = bodies(got);
            Collections.sort(received);
            Map<String, Object> result = new TreeMap<>();
            result.put("received", received);
            result.put("had_handle", handle != null && !handle.isEmpty());
            return result;
        } finally {
            closeQuietly(consumer);
        }
    }

    /** Mixed tests: three messages for other clients to receive; their bodies and message ids. */
    static Map<String, Object> send(String endpoint, String topic) throws Exception {
        List<Message> messages = new ArrayList<>();
        List<String> bodies = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            String id = "j5-" + i;
            bodies.add(id + "|java 5.x over gRPC");
            List<String> keys = Arrays.asList(id + "-k1", id + "-k2");
            messages.add(message(topic, bodies.get(i), "TagJ", keys, "color", "green", "seq", "" + i).build());
        }
        List<String> ids = sendAll(endpoint, topic, messages);
        List<Map<String, Object>> sent = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            Map<String, Object> s = new LinkedHashMap<>();
            s.put("body", bodies.get(i));
            s.put("message_id", ids.get(i));
            sent.add(s);
        }
        Map<String, Object> result = new TreeMap<>();
        result.put("sent", sent);
        return result;
    }

    /** Mixed tests: a SimpleConsumer receives and acks `count` messages other clients sent. */
    static Map<String, Object> receive(String endpoint, String topic, String group, int count) throws Exception {
        SimpleConsumer consumer = simpleConsumer(endpoint, group, topic);
        try {
            List<MessageView> got = receiveUntil(consumer, count, 15);
            List<Map<String, Object>> received = new ArrayList<>();
            for (MessageView m : got) {
                consumer.ack(m);
                Map<String, Object> s = seen(m);
                s.put("message_id", m.getMessageId().toString());
                received.add(s);
            }
            Map<String, Object> result = new TreeMap<>();
            result.put("received", sortedByBody(received));
            return result;
        } finally {
            closeQuietly(consumer);
        }
    }

    /**
     * Priority messages (RocketMQ 5.4): three messages of each priority below `levels`, sent lowest first
     * with setPriority, to a PRIORITY topic whose queues were empty; then one SimpleConsumer receives and
     * acks them all. The bodies and priorities in the order received, and whether the client let a
     * priority go with a message group (it refuses: the types exclude each other).
     */
    static Map<String, Object> priority(String endpoint, String topic, String group, int levels) throws Exception {
        List<Message> messages = new ArrayList<>();
        for (int p = 0; p < levels; p++) {
            for (int k = 0; k < 3; k++) {
                messages.add(message(topic, "p" + p + "-" + k).setPriority(p).build());
            }
        }
        String withGroup;
        try {
            message(topic, "grouped").setPriority(1).setMessageGroup("g").build();
            withGroup = "built";
        } catch (IllegalArgumentException e) {
            withGroup = "refused";
        }
        sendAll(endpoint, topic, messages);
        SimpleConsumer consumer = simpleConsumer(endpoint, group, topic);
        try {
            List<String> bodies = new ArrayList<>();
            List<Object> priorities = new ArrayList<>();
            for (MessageView m : receiveUntil(consumer, messages.size(), 30)) {
                consumer.ack(m);
                bodies.add(body(m));
                priorities.add(m.getPriority().orElse(null));
            }
            Map<String, Object> result = new TreeMap<>();
            result.put("bodies", bodies);
            result.put("priorities", priorities);
            result.put("with_group", withGroup);
            return result;
        } finally {
            closeQuietly(consumer);
        }
    }

    /** Just enough JSON for the results: maps (keys sorted), lists, strings, numbers, booleans, null. */
    static final class Json {
        private Json() {}

        static String write(Object value) {
            StringBuilder sb = new StringBuilder();
            write(sb, value);
            return sb.toString();
        }

        private static void write(StringBuilder sb, Object value) {
            if (value == null) {
                sb.append("null");
            } else if (value instanceof String) {
                string(sb, (String) value);
            } else if (value instanceof Number || value instanceof Boolean) {
                sb.append(value);
            } else if (value instanceof Map) {
                sb.append('{');
                String sep = "";
                for (Map.Entry<?, ?> e : new TreeMap<>((Map<?, ?>) value).entrySet()) {
                    sb.append(sep);
                    string(sb, String.valueOf(e.getKey()));
                    sb.append(": ");
                    write(sb, e.getValue());
                    sep = ", ";
                }
                sb.append('}');
            } else if (value instanceof Collection) {
                sb.append('[');
                String sep = "";
                for (Object item : (Collection<?>) value) {
                    sb.append(sep);
                    write(sb, item);
                    sep = ", ";
                }
                sb.append(']');
            } else {
                throw new IllegalArgumentException("no JSON for " + value.getClass());
            }
        }

        private static void string(StringBuilder sb, String s) {
            sb.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                if (c == '"' || c == '\\') {
                    sb.append('\\').append(c);
                } else if (c < 0x20 || c > 0x7e) {
                    sb.append(String.format("\\u%04x", (int) c));
                } else {
                    sb.append(c);
                }
            }
            sb.append('"');
        }
    }
}
