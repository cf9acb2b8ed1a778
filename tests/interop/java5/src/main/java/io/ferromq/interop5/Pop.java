package io.ferromq.interop5;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.serializer.SerializerFeature;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageRequestMode;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.body.SubscriptionGroupWrapper;
import org.apache.rocketmq.remoting.protocol.body.TopicConfigSerializeWrapper;
import org.apache.rocketmq.remoting.protocol.heartbeat.MessageModel;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * POP consumption (RocketMQ 5.x) with the official 5.3.3 remoting client. One subcommand per run; every
 * result is one JSON object on its own line of stdout (UTF-8).
 *
 * <pre>
 * setmode NAMESRV CLUSTER TOPIC GROUP POP|PULL
 *     What `mqadmin setConsumeMode -c CLUSTER -t TOPIC -g GROUP -m MODE -q 0` does: SET_MESSAGE_REQUEST_MODE
 *     (code 401) to every master of CLUSTER (DefaultMQAdminExt.setMessageRequestMode, 5 s). First, on each
 *     master, the topic (4 queues, UPDATE_AND_CREATE_TOPIC) and the group (Java's defaults,
 *     UPDATE_AND_CREATE_SUBSCRIPTIONGROUP) are created when GET_ALL_TOPIC_CONFIG / GET_ALL_SUBSCRIPTIONGROUP_CONFIG
 *     do not list them. Prints per master {"broker","addr","createdTopic","createdGroup","mode","ok"} or
 *     {"broker","addr","error"}. Exit code 0 when every master took the mode, 1 otherwise, 2 on a usage error.
 *
 * consume NAMESRV TOPIC GROUP COUNT TIMEOUT_MS FAIL_BODIES
 *     A DefaultMQPushConsumer in POP mode (setClientRebalance(false): the broker's QUERY_ASSIGNMENT decides;
 *     concurrently, CLUSTERING, CONSUME_FROM_FIRST_OFFSET, popInvisibleTime 5000 ms, the smallest the client
 *     keeps) subscribed to TOPIC "*". Its listener returns RECONSUME_LATER the first time it sees a message
 *     whose body is one of the comma-separated FAIL_BODIES ("-" or "" for none; the client then sends
 *     CHANGE_MESSAGE_INVISIBLETIME) and CONSUME_SUCCESS otherwise (the client sends ACK_MESSAGE). Prints one
 *     line per delivery {"body","msgId","topic","queueId","queueOffset","reconsumeTimes","receivedAtMs",
 *     "bornTimestamp","bornHost","storeTimestamp","storeHost","commitLogOffset","sysFlag","flag","status",
 *     "properties":{...all of them...}}. Once COUNT distinct bodies were consumed successfully it
 *     waits (at most 10 s) for the brokers' answers to every ack and change it sent, then exits 0; exit 1
 *     when TIMEOUT_MS passed first.
 *     On stderr, one JSON line per answered POP request {"rpc":"POP_MESSAGE"|"ACK_MESSAGE"|
 *     "CHANGE_MESSAGE_INVISIBLETIME"|"QUERY_ASSIGNMENT"|..., "atMs","addr","request":{ext},"code","remark",
 *     "response":{ext}} (seen through an RPCHook), for diagnosis; also PULL_MESSAGE, QUERY_CONSUMER_OFFSET and
 *     UPDATE_CONSUMER_OFFSET (of %RETRY%GROUP, which the consumer still pulls), and a last {"rpc":"summary"}.
 * </pre>
 */
public final class Pop {
    private static final int POP_INVISIBLE_TIME_MS = 5000;
    private static final long ANSWERS_WAIT_MS = 10000;
    private static final Map<Integer, String> CODES = new HashMap<>();

    static {
        CODES.put(200050, "POP_MESSAGE");
        CODES.put(200051, "ACK_MESSAGE");
        CODES.put(200151, "BATCH_ACK_MESSAGE");
        CODES.put(200052, "PEEK_MESSAGE");
        CODES.put(200053, "CHANGE_MESSAGE_INVISIBLETIME");
        CODES.put(200054, "NOTIFICATION");
        CODES.put(200055, "POLLING_INFO");
        CODES.put(400, "QUERY_ASSIGNMENT");
        CODES.put(401, "SET_MESSAGE_REQUEST_MODE");
        // The push consumer pulls %RETRY%<group> (the assignment says PULL there) and keeps its offsets.
        CODES.put(11, "PULL_MESSAGE");
        CODES.put(14, "QUERY_CONSUMER_OFFSET");
        CODES.put(15, "UPDATE_CONSUMER_OFFSET");
    }

    private static PrintStream out;
    private static PrintStream err;

    private Pop() {}

    public static void main(String[] args) throws Exception {
        out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, "UTF-8");
        err = new PrintStream(new FileOutputStream(FileDescriptor.err), true, "UTF-8");
        int code;
        if (args.length == 6 && args[0].equals("setmode")) {
            code = setMode(args[1], args[2], args[3], args[4], args[5]);
        } else if (args.length == 7 && args[0].equals("consume")) {
            code = consume(
                args[1], args[2], args[3], Integer.parseInt(args[4]), Long.parseLong(args[5]), args[6]);
        } else {
            System.err.println("usage: Pop setmode NAMESRV CLUSTER TOPIC GROUP POP|PULL");
            System.err.println("       Pop consume NAMESRV TOPIC GROUP COUNT TIMEOUT_MS FAIL_BODIES");
            code = 2;
        }
        out.flush();
        err.flush();
        // The client leaves non-daemon threads behind.
        System.exit(code);
    }

    private static void print(PrintStream to, Map<String, Object> o) {
        synchronized (Pop.class) {
            to.println(JSON.toJSONString(o, SerializerFeature.WriteMapNullValue));
            to.flush();
        }
    }

    private static int setMode(String namesrv, String cluster, String topic, String group, String mode)
            throws Exception {
        MessageRequestMode requestMode = MessageRequestMode.valueOf(mode);
        DefaultMQAdminExt admin = new DefaultMQAdminExt(5000);
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName("pop5-admin-" + pid());
        admin.start();
        int failed = 0;
        try {
            // CommandUtil.fetchMasterAddrByClusterName, keeping the broker names.
            Map<String, String> masters = new TreeMap<>();
            ClusterInfo info = admin.examineBrokerClusterInfo();
            Set<String> names = info.getClusterAddrTable().get(cluster);
            for (String name : names == null ? Collections.<String>emptySet() : names) {
                BrokerData data = info.getBrokerAddrTable().get(name);
                String addr = data == null ? null : data.getBrokerAddrs().get(MixAll.MASTER_ID);
                if (addr != null) {
                    masters.put(name, addr);
                }
            }
            if (masters.isEmpty()) {
                Map<String, Object> o = new LinkedHashMap<>();
                o.put("error", "no master in cluster " + cluster);
                print(out, o);
                return 1;
            }
            for (Map.Entry<String, String> e : masters.entrySet()) {
                String addr = e.getValue();
                Map<String, Object> o = new LinkedHashMap<>();
                o.put("broker", e.getKey());
                o.put("addr", addr);
                try {
                    TopicConfigSerializeWrapper topics = admin.getAllTopicConfig(addr, 5000);
                    boolean createTopic = !topics.getTopicConfigTable().containsKey(topic);
                    if (createTopic) {
                        TopicConfig tc = new TopicConfig(topic, 4, 4);
                        admin.createAndUpdateTopicConfig(addr, tc);
                    }
                    SubscriptionGroupWrapper groups = admin.getAllSubscriptionGroup(addr, 5000);
                    boolean createGroup = !groups.getSubscriptionGroupTable().containsKey(group);
                    if (createGroup) {
                        SubscriptionGroupConfig sg = new SubscriptionGroupConfig();
                        sg.setGroupName(group);
                        admin.createAndUpdateSubscriptionGroupConfig(addr, sg);
                    }
                    admin.setMessageRequestMode(addr, topic, group, requestMode, 0, 5000);
                    o.put("createdTopic", createTopic);
                    o.put("createdGroup", createGroup);
                    o.put("mode", requestMode.name());
                    o.put("ok", true);
                } catch (Exception ex) {
                    o.put("error", ex.toString());
                    failed++;
                }
                print(out, o);
            }
        } finally {
            admin.shutdown();
        }
        return failed == 0 ? 0 : 1;
    }

    /** Every POP request's answer, on stderr; counts the answered acks and changes. */
    private static final class Hook implements RPCHook {
        final AtomicInteger acks = new AtomicInteger();
        final AtomicInteger changes = new AtomicInteger();

        @Override
        public void doBeforeRequest(String remoteAddr, RemotingCommand request) {}

        @Override
        public void doAfterResponse(String remoteAddr, RemotingCommand request, RemotingCommand response) {
            String name = CODES.get(request.getCode());
            if (name == null) {
                return;
            }
            Map<String, Object> o = new LinkedHashMap<>();
            o.put("rpc", name);
            o.put("atMs", System.currentTimeMillis());
            o.put("addr", remoteAddr);
            o.put("request", request.getExtFields() == null ? null : new TreeMap<>(request.getExtFields()));
            if (request.getBody() != null && request.getCode() != 200050 && request.getCode() != 11) {
                o.put("requestBody", new String(request.getBody(), StandardCharsets.UTF_8));
            }
            if (response != null) {
                o.put("code", response.getCode());
                o.put("remark", response.getRemark());
                o.put("response", response.getExtFields() == null ? null : new TreeMap<>(response.getExtFields()));
                if (request.getCode() == 400 && response.getBody() != null) {
                    o.put("responseBody", new String(response.getBody(), StandardCharsets.UTF_8));
                }
            }
            print(err, o);
            if (request.getCode() == 200051) {
                acks.incrementAndGet();
            } else if (request.getCode() == 200053) {
                changes.incrementAndGet();
            }
        }
    }

    private static int consume(
            String namesrv, String topic, String group, int count, long timeoutMs, String failBodies)
            throws MQClientException, InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        Set<String> fail = new HashSet<>(Arrays.asList(failBodies.split(",")));
        fail.remove("");
        fail.remove("-");
        Set<String> failedOnce = ConcurrentHashMap.newKeySet();
        Set<String> succeeded = ConcurrentHashMap.newKeySet();
        AtomicInteger successes = new AtomicInteger();
        AtomicInteger failures = new AtomicInteger();
        CountDownLatch done = new CountDownLatch(count);
        Hook hook = new Hook();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group, hook);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("pop5-" + pid());
        consumer.setClientRebalance(false);
        consumer.setMessageModel(MessageModel.CLUSTERING);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setPopInvisibleTime(POP_INVISIBLE_TIME_MS);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            long receivedAt = System.currentTimeMillis();
            ConsumeConcurrentlyStatus status = ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            for (MessageExt m : msgs) {
                String body = new String(m.getBody(), StandardCharsets.UTF_8);
                if (fail.contains(body) && failedOnce.add(body)) {
                    status = ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
            }
            for (MessageExt m : msgs) {
                Map<String, Object> o = new LinkedHashMap<>();
                String body = new String(m.getBody(), StandardCharsets.UTF_8);
                o.put("body", body);
                o.put("msgId", m.getMsgId());
                o.put("topic", m.getTopic());
                o.put("queueId", m.getQueueId());
                o.put("queueOffset", m.getQueueOffset());
                o.put("reconsumeTimes", m.getReconsumeTimes());
                o.put("receivedAtMs", receivedAt);
                o.put("bornTimestamp", m.getBornTimestamp());
                o.put("bornHost", String.valueOf(m.getBornHost()));
                o.put("storeTimestamp", m.getStoreTimestamp());
                o.put("storeHost", String.valueOf(m.getStoreHost()));
                o.put("commitLogOffset", m.getCommitLogOffset());
                o.put("sysFlag", m.getSysFlag());
                o.put("flag", m.getFlag());
                o.put("status", status.name());
                o.put("properties", new TreeMap<>(m.getProperties()));
                print(out, o);
                if (status == ConsumeConcurrentlyStatus.CONSUME_SUCCESS) {
                    successes.incrementAndGet();
                    if (succeeded.add(body)) {
                        done.countDown();
                    }
                } else {
                    failures.incrementAndGet();
                }
            }
            return status;
        });
        consumer.start();
        boolean ok = false;
        try {
            ok = done.await(Math.max(0, deadline - System.currentTimeMillis()), TimeUnit.MILLISECONDS);
            if (ok) {
                // The acks (and changes) go out asynchronously after the listener returns: wait for their
                // answers, so that the broker has them all before this client goes away.
                long until = System.currentTimeMillis() + ANSWERS_WAIT_MS;
                while (System.currentTimeMillis() < until
                        && (hook.acks.get() < successes.get() || hook.changes.get() < failures.get())) {
                    Thread.sleep(20);
                }
            }
        } finally {
            consumer.shutdown();
        }
        Map<String, Object> summary = new LinkedHashMap<>();
        summary.put("rpc", "summary");
        summary.put("succeeded", new TreeSet<>(succeeded));
        summary.put("successes", successes.get());
        summary.put("failures", failures.get());
        summary.put("ackAnswers", hook.acks.get());
        summary.put("changeAnswers", hook.changes.get());
        print(err, summary);
        return ok ? 0 : 1;
    }

    /** The JVM's process id (compiled for Java 8, so no ProcessHandle). */
    private static String pid() {
        String name = java.lang.management.ManagementFactory.getRuntimeMXBean().getName();
        int at = name.indexOf('@');
        return at > 0 ? name.substring(0, at) : name;
    }
}
