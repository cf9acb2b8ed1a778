package io.ferromq.interop;

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import com.alibaba.fastjson.JSON;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * The official Java client 4.9.7 signing with {@code AclClientRPCHook}, for the ACL tests
 * (tests/interop/test_acl_side_by_side.py).
 *
 * <pre>
 * java -cp ferromq-interop.jar io.ferromq.interop.AclProbe produce namesrv=H:P ak=K sk=S topic=T group=G count=N
 * java -cp ferromq-interop.jar io.ferromq.interop.AclProbe consume namesrv=H:P ak=K sk=S topic=T group=G expect=N
 * </pre>
 *
 * <p>produce: N sync sends, one {@code RESULT {"event":"sent"|"refused",...}} line each (a refusal with the
 * broker's response code and remark). consume: a push consumer (CONSUME_FROM_FIRST_OFFSET) until N messages
 * arrived or the deadline passed; one {@code received} line with the bodies. Options ak/sk absent: no hook.
 * Exit code 0, or 2 on an unexpected exception.
 */
public final class AclProbe {
    private static PrintStream out;

    private AclProbe() {
    }

    public static void main(String[] args) throws Exception {
        out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, "UTF-8");
        Map<String, String> opts = new HashMap<String, String>();
        for (int i = 1; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            opts.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        long deadline = System.currentTimeMillis() + 1000L * Integer.parseInt(opts.getOrDefault("timeout", "60"));
        int rc = 0;
        try {
            if (args[0].equals("produce")) {
                produce(opts);
            } else {
                consume(opts, deadline);
            }
        } catch (Throwable t) {
            System.err.println("FAIL " + t);
            t.printStackTrace();
            rc = 2;
        }
        out.flush();
        Runtime.getRuntime().halt(rc); // client threads are not daemons
    }

    private static RPCHook hook(Map<String, String> opts) {
        if (opts.get("ak") == null) {
            return null;
        }
        return new AclClientRPCHook(new SessionCredentials(opts.get("ak"), opts.get("sk")));
    }

    private static void result(Map<String, Object> fields) {
        out.println("RESULT " + JSON.toJSONString(fields));
        out.flush();
    }

    private static void produce(Map<String, String> opts) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(opts.get("group"), hook(opts));
        p.setNamesrvAddr(opts.get("namesrv"));
        p.setVipChannelEnabled(false);
        p.setInstanceName("acl-produce-" + Interop.pid());
        p.setSendMsgTimeout(10_000);
        p.setRetryTimesWhenSendFailed(0);
        p.start();
        int count = Integer.parseInt(opts.getOrDefault("count", "1"));
        for (int i = 0; i < count; i++) {
            Message m = new Message(opts.get("topic"), ("acl-" + i).getBytes(StandardCharsets.UTF_8));
            try {
                SendResult r = p.send(m);
                result(Interop.map("event", "sent", "status", String.valueOf(r.getSendStatus()),
                    "queueOffset", r.getQueueOffset()));
            } catch (MQBrokerException e) {
                result(Interop.map("event", "refused", "code", e.getResponseCode(), "remark", e.getErrorMessage()));
            } catch (MQClientException e) {
                // With retries used up the client wraps the broker's refusal: report that one.
                if (e.getCause() instanceof MQBrokerException) {
                    MQBrokerException b = (MQBrokerException) e.getCause();
                    result(Interop.map("event", "refused", "code", b.getResponseCode(), "remark", b.getErrorMessage()));
                } else {
                    result(Interop.map("event", "refused", "code", e.getResponseCode(), "remark", e.getErrorMessage()));
                }
            }
        }
        p.shutdown();
    }

    private static void consume(Map<String, String> opts, long deadline) throws Exception {
        final int expect = Integer.parseInt(opts.getOrDefault("expect", "1"));
        final List<String> bodies = Collections.synchronizedList(new ArrayList<String>());
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(opts.get("group"), hook(opts),
            new AllocateMessageQueueAveragely());
        c.setNamesrvAddr(opts.get("namesrv"));
        c.setVipChannelEnabled(false);
        c.setInstanceName("acl-consume-" + Interop.pid());
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(opts.get("topic"), "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                bodies.add(new String(m.getBody(), StandardCharsets.UTF_8));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        while (bodies.size() < expect && System.currentTimeMillis() < deadline) {
            Thread.sleep(100);
        }
        List<String> sorted;
        synchronized (bodies) {
            sorted = new ArrayList<String>(bodies);
        }
        Collections.sort(sorted);
        result(Interop.map("event", "received", "count", sorted.size(), "bodies", sorted));
        c.shutdown();
    }
}
