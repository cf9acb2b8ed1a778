package io.ferromq.interop;

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
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
import org.apache.rocketmq.common.AclConfig;
import org.apache.rocketmq.common.PlainAccessConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.protocol.body.ClusterAclVersionInfo;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The official Java client 4.9.7 signing with {@code AclClientRPCHook}, for the ACL tests
 * (tests/interop/test_acl_side_by_side.py).
 *
 * <pre>
 * java -cp ferromq-interop.jar io.ferromq.interop.AclProbe produce namesrv=H:P ak=K sk=S topic=T group=G count=N
 * java -cp ferromq-interop.jar io.ferromq.interop.AclProbe consume namesrv=H:P ak=K sk=S topic=T group=G expect=N
 * java -cp ferromq-interop.jar io.ferromq.interop.AclProbe admin namesrv=H:P ak=K sk=S broker=H:P aclFile=PATH
 * </pre>
 *
 * <p>admin: {@code DefaultMQAdminExt} (as mqadmin) creates an account, reads the ACL config and versions,
 * updates the global white addresses and deletes the account; one RESULT line per step.
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
            } else if (args[0].equals("admin")) {
                admin(opts);
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

    private static void admin(Map<String, String> opts) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt(hook(opts));
        admin.setNamesrvAddr(opts.get("namesrv"));
        admin.setVipChannelEnabled(false);
        admin.setInstanceName("acl-admin-" + Interop.pid());
        admin.start();
        String addr = opts.get("broker");
        try {
            PlainAccessConfig c = new PlainAccessConfig();
            c.setAccessKey("javaMadeKey1");
            c.setSecretKey("javaMadeSecret1");
            c.setDefaultTopicPerm("SUB");
            c.setTopicPerms(Arrays.asList("T1=PUB", "T2=PUB|SUB"));
            c.setGroupPerms(Arrays.asList("G1=SUB"));
            admin.createAndUpdatePlainAccessConfig(addr, c);
            result(Interop.map("event", "created"));
            AclConfig config = admin.examineBrokerClusterAclConfig(addr);
            List<Map<String, Object>> accounts = new ArrayList<Map<String, Object>>();
            for (PlainAccessConfig a : config.getPlainAccessConfigs()) {
                accounts.add(Interop.map("accessKey", a.getAccessKey(), "secretKey", a.getSecretKey(),
                    "admin", a.isAdmin(), "defaultTopicPerm", a.getDefaultTopicPerm(),
                    "defaultGroupPerm", a.getDefaultGroupPerm(), "topicPerms", a.getTopicPerms(),
                    "groupPerms", a.getGroupPerms(), "whiteRemoteAddress", a.getWhiteRemoteAddress()));
            }
            result(Interop.map("event", "config", "globalWhiteAddrs", config.getGlobalWhiteAddrs(), "accounts", accounts));
            ClusterAclVersionInfo v = admin.examineBrokerClusterAclVersionInfo(addr);
            result(Interop.map("event", "versions", "brokerName", v.getBrokerName(), "clusterName", v.getClusterName(),
                "files", v.getAllAclConfigDataVersion().size(),
                "counters", v.getAllAclConfigDataVersion().values().iterator().next().getCounter().get()));
            admin.updateGlobalWhiteAddrConfig(addr, "10.10.103.*,10.10.105.*", opts.get("aclFile"));
            result(Interop.map("event", "white"));
            admin.deletePlainAccessConfig(addr, "javaMadeKey1");
            result(Interop.map("event", "deleted"));
            try {
                admin.deletePlainAccessConfig(addr, "javaMadeKey1");
                result(Interop.map("event", "deleted again"));
            } catch (MQClientException e) {
                // mqadmin's client reports a refused ACL change as an MQClientException with the code.
                result(Interop.map("event", "refused", "code", e.getResponseCode(), "remark", e.getErrorMessage()));
            }
        } finally {
            admin.shutdown();
        }
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
