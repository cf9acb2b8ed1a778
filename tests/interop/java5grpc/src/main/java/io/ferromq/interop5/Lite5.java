package io.ferromq.interop5;

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.BooleanSupplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.LitePushConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.java.impl.consumer.LitePushConsumerImpl;
import org.apache.rocketmq.client.java.impl.consumer.LitePushConsumerSettings;

/**
 * The {@code lite} scenario of {@link Grpc5} (RocketMQ 5.5 lite topics, rocketmq-client-java 5.2.0's
 * LitePushConsumer): {@code Grpc5 ENDPOINT lite PARENT_TOPIC GROUP COUNT}, PARENT_TOPIC a LITE topic and
 * GROUP a group with the attribute {@code lite.bind.topic=PARENT_TOPIC}.
 *
 * <ol>
 * <li>A LitePushConsumer (bindTopic PARENT_TOPIC) whose listener records, per lite topic
 * ({@code MessageView.getLiteTopic()}), the bodies in arrival order, and returns SUCCESS. It waits (10 s at
 * most) for the server's settings (a lite subscription quota above 0: until then the client refuses every
 * subscribeLite by its own quota check) and prints {@code {"settings": {"liteSubscriptionQuota": q,
 * "maxLiteTopicSize": m}}}.</li>
 * <li>subscribeLite "a", "b", "c"; a producer sends COUNT messages to each of "a", "b", "c" and "d" (not
 * subscribed), bodies "LITE-I", interleaved (a-0, b-0, c-0, d-0, a-1, ...); waits (60 s at most) for COUNT of
 * each subscribed lite topic; prints {@code {"received": {"a": [...], "b": [...], "c": [...]},
 * "unexpected": [...]}} (unexpected: the bodies of any lite topic not subscribed).</li>
 * <li>unsubscribeLite "c"; sends COUNT more to "c" and "a" (bodies "c-I", "a-I", I from COUNT on,
 * interleaved); waits for the a's, then a fixed grace of 3 s (the one fixed wait: nothing tells that a
 * message will not come) and prints {@code {"after_unsubscribe": {"a": [...], "c": [...]}}}.</li>
 * <li>Two messages sent to lite topic "e" before anyone subscribed it ("e-before-0", "e-before-1"), then
 * subscribeLite "e" and one more ("e-after"); waits for e-after (60 s at most) and 3 s more; prints
 * {@code {"before_subscribe": {"e": [...]}}}: where a new lite subscription starts (two before, to tell
 * "from the first" from "from the last one").</li>
 * <li>subscribeLite of "bad,topic" (a char outside [a-zA-Z0-9_-]) and of a 65-char name: prints
 * {@code {"refusals": {"illegal_char": {...}, "too_long": {...}}}}, each the exception's class, its message
 * without the request id and the response code in it (null when none).</li>
 * </ol>
 *
 * <p>The RESULT line has all of these in one object. How long each wait took goes to stderr as
 * {@code {"timing": {...}}} (it varies: not a result).
 */
final class Lite5 {
    private static final long DEADLINE_MILLIS = 60_000;
    private static final long SETTINGS_MILLIS = 10_000;
    /** The one fixed wait: how long a lite topic that must get nothing is watched after the rest came. */
    private static final long GRACE_MILLIS = 3_000;
    private static final List<String> SUBSCRIBED = Arrays.asList("a", "b", "c");
    private static final Pattern RESPONSE_CODE = Pattern.compile("response-code=(\\d+)");
    private static final Pattern REQUEST_ID = Pattern.compile("\\[request-id=[^,\\]]*, ");

    private Lite5() {}

    static Map<String, Object> lite(ClientServiceProvider provider, PrintStream out, String endpoint,
        String parent, String group, int count) throws Exception {
        Map<String, List<String>> received = new ConcurrentHashMap<>();
        Map<String, Object> result = new TreeMap<>();
        LitePushConsumer consumer = provider.newLitePushConsumerBuilder()
            .setClientConfiguration(Grpc5.config(endpoint))
            .setConsumerGroup(group)
            .bindTopic(parent)
            .setMessageListener(m -> {
                record(received, m);
                return ConsumeResult.SUCCESS;
            })
            .build();
        Producer producer = null;
        try {
            Map<String, Object> settings = settings(consumer);
            if (settings != null) {
                emit(out, result, "settings", settings);
            }
            for (String lite : SUBSCRIBED) {
                consumer.subscribeLite(lite);
            }
            producer = provider.newProducerBuilder()
                .setClientConfiguration(Grpc5.config(endpoint))
                .setTopics(parent)
                .build();
            for (int i = 0; i < count; i++) {
                for (String lite : Arrays.asList("a", "b", "c", "d")) {
                    send(provider, producer, parent, lite, lite + "-" + i);
                }
            }
            long sent = System.currentTimeMillis();
            waitUntil(() -> SUBSCRIBED.stream().allMatch(l -> bodies(received, l).size() >= count), DEADLINE_MILLIS);
            Map<String, Object> timing = new TreeMap<>();
            timing.put("first_all_received_ms", System.currentTimeMillis() - sent);
            Map<String, Object> first = new TreeMap<>();
            Map<String, Object> byLite = new TreeMap<>();
            for (String lite : SUBSCRIBED) {
                byLite.put(lite, bodies(received, lite));
            }
            first.put("received", byLite);
            List<String> unexpected = new ArrayList<>();
            for (Map.Entry<String, List<String>> e : new TreeMap<>(received).entrySet()) {
                if (!SUBSCRIBED.contains(e.getKey())) {
                    unexpected.addAll(bodies(received, e.getKey()));
                }
            }
            first.put("unexpected", unexpected);
            out.println(Grpc5.Json.write(first));
            result.putAll(first);

            consumer.unsubscribeLite("c");
            for (int i = count; i < 2 * count; i++) {
                send(provider, producer, parent, "c", "c-" + i);
                send(provider, producer, parent, "a", "a-" + i);
            }
            sent = System.currentTimeMillis();
            waitUntil(() -> bodies(received, "a").size() >= 2 * count, DEADLINE_MILLIS);
            timing.put("after_unsubscribe_a_received_ms", System.currentTimeMillis() - sent);
            Thread.sleep(GRACE_MILLIS);
            Map<String, Object> after = new TreeMap<>();
            after.put("a", bodies(received, "a").subList(Math.min(count, bodies(received, "a").size()),
                bodies(received, "a").size()));
            after.put("c", bodies(received, "c").subList(Math.min(count, bodies(received, "c").size()),
                bodies(received, "c").size()));
            emit(out, result, "after_unsubscribe", after);

            send(provider, producer, parent, "e", "e-before-0");
            send(provider, producer, parent, "e", "e-before-1");
            consumer.subscribeLite("e");
            send(provider, producer, parent, "e", "e-after");
            sent = System.currentTimeMillis();
            waitUntil(() -> bodies(received, "e").contains("e-after"), DEADLINE_MILLIS);
            timing.put("e_after_received_ms", System.currentTimeMillis() - sent);
            // Times vary from run to run: on stderr, out of the compared results.
            System.err.println(Grpc5.Json.write(Collections.singletonMap("timing", timing)));
            Thread.sleep(GRACE_MILLIS);
            emit(out, result, "before_subscribe", Collections.singletonMap("e", bodies(received, "e")));

            Map<String, Object> refusals = new TreeMap<>();
            refusals.put("illegal_char", refusal(consumer, "bad,topic"));
            StringBuilder longName = new StringBuilder();
            while (longName.length() < 65) {
                longName.append('x');
            }
            refusals.put("too_long", refusal(consumer, longName.toString()));
            emit(out, result, "refusals", refusals);
            return result;
        } finally {
            if (producer != null) {
                Grpc5.closeQuietly(producer);
            }
            Grpc5.closeSoon(consumer);
        }
    }

    private static void record(Map<String, List<String>> received, MessageView m) {
        String lite = m.getLiteTopic().orElse("");
        received.computeIfAbsent(lite, k -> Collections.synchronizedList(new ArrayList<>())).add(Grpc5.body(m));
    }

    /** A copy of the bodies received of `lite`, in arrival order. */
    private static List<String> bodies(Map<String, List<String>> received, String lite) {
        List<String> list = received.get(lite);
        if (list == null) {
            return new ArrayList<>();
        }
        synchronized (list) {
            return new ArrayList<>(list);
        }
    }

    private static void send(ClientServiceProvider provider, Producer producer, String parent, String lite,
        String body) throws Exception {
        producer.send(provider.newMessageBuilder()
            .setTopic(parent)
            .setBody(body.getBytes(StandardCharsets.UTF_8))
            .setLiteTopic(lite)
            .build());
    }

    /** The settings the server gave (once its quota is above 0, SETTINGS_MILLIS at most), or null. */
    private static Map<String, Object> settings(LitePushConsumer consumer) throws InterruptedException {
        if (!(consumer instanceof LitePushConsumerImpl)) {
            return null;
        }
        LitePushConsumerSettings s = ((LitePushConsumerImpl) consumer).getSettings();
        waitUntil(() -> s.getLiteSubscriptionQuota() > 0, SETTINGS_MILLIS);
        Map<String, Object> settings = new TreeMap<>();
        settings.put("liteSubscriptionQuota", s.getLiteSubscriptionQuota());
        settings.put("maxLiteTopicSize", s.getMaxLiteTopicSize());
        return settings;
    }

    private static Map<String, Object> refusal(LitePushConsumer consumer, String lite) {
        Map<String, Object> r = new TreeMap<>();
        try {
            consumer.subscribeLite(lite);
            r.put("class", null);
            r.put("message", "subscribed");
            r.put("code", null);
        } catch (Exception e) {
            String message = String.valueOf(e.getMessage());
            Matcher code = RESPONSE_CODE.matcher(message);
            r.put("class", e.getClass().getName());
            r.put("message", REQUEST_ID.matcher(message).replaceAll("["));
            r.put("code", code.find() ? Integer.valueOf(code.group(1)) : null);
        }
        return r;
    }

    private static void emit(PrintStream out, Map<String, Object> result, String key, Object value) {
        out.println(Grpc5.Json.write(Collections.singletonMap(key, value)));
        result.put(key, value);
    }

    private static void waitUntil(BooleanSupplier done, long millis) throws InterruptedException {
        long deadline = System.currentTimeMillis() + millis;
        while (!done.getAsBoolean() && System.currentTimeMillis() < deadline) {
            Thread.sleep(100);
        }
    }
}
