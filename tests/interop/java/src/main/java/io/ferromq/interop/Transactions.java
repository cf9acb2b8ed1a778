package io.ferromq.interop;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * The official 4.9.7 {@code TransactionMQProducer} against a RocketMQ-compatible broker: one JVM run,
 * {@code java -cp ferromq-interop.jar io.ferromq.interop.Transactions namesrv=H:P topic=T group=G run=R
 * n=N timeout=S}.
 *
 * <p>It sends {@code n} transactional messages of each kind: {@code commit} (the local transaction
 * commits), {@code rollback} (it rolls back) and {@code check} (it answers UNKNOW; the broker's
 * check-back gets UNKNOW the first time and COMMIT the second). Output, like {@link Interop}: one
 * {@code RESULT {json}} line per event ({@code sent}, {@code executed}, {@code checked}) and a final
 * {@code summary}; exit code 0 when every check-back arrived in time and nothing else was checked.
 *
 * <p>{@code immunity=S} (optional) gives the commit and rollback transactions the user property
 * {@code CHECK_IMMUNITY_TIME_IN_SECONDS=S}: the broker does not check them within S seconds, however
 * long this JVM takes between a send's answer and its END_TRANSACTION (under load that can exceed
 * the broker's transactionTimeOut, and a check of a commit counts as a failure here).
 */
public final class Transactions {
    static final String[] KINDS = {"commit", "rollback", "check"};
    private static final List<String> FAILURES = Collections.synchronizedList(new ArrayList<String>());

    private Transactions() {
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
        final long deadline = System.currentTimeMillis() + 1000L * Integer.parseInt(get(opts, "timeout", "60"));
        Thread watchdog = new Thread(new Runnable() {
            @Override
            public void run() {
                try {
                    Thread.sleep(Math.max(1, deadline + 5000 - System.currentTimeMillis()));
                } catch (InterruptedException e) {
                    return;
                }
                System.out.flush();
                System.err.println("FAIL transactions exceeded its deadline; failures so far: " + FAILURES);
                System.err.flush();
                Runtime.getRuntime().halt(3);
            }
        }, "transactions-watchdog");
        watchdog.setDaemon(true);
        watchdog.start();
        int rc;
        try {
            rc = run(opts, deadline);
        } catch (Throwable t) {
            System.err.println("FAIL exception: " + t);
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
        Runtime.getRuntime().halt(rc);
    }

    private static String get(Map<String, String> opts, String key, String dflt) {
        String v = opts.get(key);
        return v != null ? v : dflt;
    }

    private static String get(Map<String, String> opts, String key) {
        String v = opts.get(key);
        if (v == null) {
            throw new IllegalArgumentException("missing option " + key + "=...");
        }
        return v;
    }

    private static int run(Map<String, String> opts, long deadline) throws Exception {
        final String topic = get(opts, "topic");
        final String run = get(opts, "run");
        final int n = Integer.parseInt(get(opts, "n", "3"));
        final String immunity = opts.get("immunity");
        final Map<String, AtomicInteger> checks = new ConcurrentHashMap<String, AtomicInteger>();
        final CountDownLatch committedByCheck = new CountDownLatch(n);

        TransactionMQProducer p = new TransactionMQProducer(get(opts, "group"));
        p.setNamesrvAddr(get(opts, "namesrv"));
        p.setVipChannelEnabled(false);
        p.setInstanceName("interop-tx-" + Interop.pid());
        p.setSendMsgTimeout(10_000);
        ExecutorService checkPool = Executors.newFixedThreadPool(2);
        p.setExecutorService(checkPool);
        p.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                String kind = msg.getUserProperty("tx_kind");
                Interop.result(Interop.map("event", "executed", "kind", kind, "idx", msg.getUserProperty("tx_idx"),
                    "transactionId", msg.getTransactionId(), "arg", String.valueOf(arg)));
                if ("commit".equals(kind)) {
                    return LocalTransactionState.COMMIT_MESSAGE;
                }
                if ("rollback".equals(kind)) {
                    return LocalTransactionState.ROLLBACK_MESSAGE;
                }
                return LocalTransactionState.UNKNOW;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                String kind = msg.getUserProperty("tx_kind");
                String id = kind + ":" + msg.getUserProperty("tx_idx");
                int times = checks.computeIfAbsent(id, k -> new AtomicInteger()).incrementAndGet();
                LocalTransactionState answer = "check".equals(kind) && times >= 2
                    ? LocalTransactionState.COMMIT_MESSAGE : LocalTransactionState.UNKNOW;
                Interop.result(Interop.map("event", "checked", "id", id, "times", times,
                    "answer", String.valueOf(answer), "msgId", msg.getMsgId(), "transactionId", msg.getTransactionId(),
                    "topic", msg.getTopic(), "queueId", msg.getQueueId(), "queueOffset", msg.getQueueOffset(),
                    "commitLogOffset", msg.getCommitLogOffset(), "body", new String(msg.getBody(), StandardCharsets.UTF_8),
                    "properties", new TreeMap<String, String>(msg.getProperties())));
                if (!"check".equals(kind)) {
                    fail("a " + kind + " transaction was checked: " + id);
                }
                if (answer == LocalTransactionState.COMMIT_MESSAGE && times == 2) {
                    committedByCheck.countDown();
                }
                return answer;
            }
        });
        p.start();
        try {
            for (String kind : KINDS) {
                for (int i = 0; i < n; i++) {
                    Message m = new Message(topic, "Tx", (kind + ":" + i + ":" + run).getBytes(StandardCharsets.UTF_8));
                    m.setKeys(kind + "-" + i);
                    m.putUserProperty("tx_kind", kind);
                    m.putUserProperty("tx_idx", String.valueOf(i));
                    m.putUserProperty("tx_run", run);
                    if (immunity != null && !"check".equals(kind)) {
                        m.putUserProperty("CHECK_IMMUNITY_TIME_IN_SECONDS", immunity);
                    }
                    TransactionSendResult r = p.sendMessageInTransaction(m, kind + "-arg");
                    Interop.result(Interop.map("event", "sent", "kind", kind, "idx", i,
                        "status", String.valueOf(r.getSendStatus()),
                        "localState", String.valueOf(r.getLocalTransactionState()),
                        "msgId", r.getMsgId(), "uniqId", MessageClientIDSetter.getUniqID(m),
                        "offsetMsgId", r.getOffsetMsgId(), "queueOffset", r.getQueueOffset(),
                        "queueId", r.getMessageQueue().getQueueId(), "transactionId", r.getTransactionId(),
                        "sysFlagPrepared", "true".equals(m.getProperty("TRAN_MSG"))));
                    if (r.getSendStatus() != org.apache.rocketmq.client.producer.SendStatus.SEND_OK) {
                        fail(kind + ":" + i + " send status " + r.getSendStatus());
                    }
                }
            }
            long left = Math.max(0, deadline - System.currentTimeMillis());
            boolean all = committedByCheck.await(left, TimeUnit.MILLISECONDS);
            if (!all) {
                fail("check-backs did not commit every check transaction: " + checks);
            }
            // END_TRANSACTION after a check is sent one-way by the check thread after the answer
            // counted down: wait for those threads to finish (the shutdown below then unregisters
            // over the same connection, behind it).
            checkPool.shutdown();
            if (!checkPool.awaitTermination(Math.max(1, deadline - System.currentTimeMillis()), TimeUnit.MILLISECONDS)) {
                fail("the check threads did not finish");
            }
            Map<String, Object> counts = new TreeMap<String, Object>();
            for (Map.Entry<String, AtomicInteger> e : checks.entrySet()) {
                counts.put(e.getKey(), e.getValue().get());
            }
            Interop.result(Interop.map("event", "summary", "checks", counts, "failures", new ArrayList<String>(FAILURES)));
            return FAILURES.isEmpty() ? 0 : 1;
        } finally {
            p.shutdown();
            checkPool.shutdownNow();
        }
    }

    private static void fail(String message) {
        FAILURES.add(message);
    }
}
