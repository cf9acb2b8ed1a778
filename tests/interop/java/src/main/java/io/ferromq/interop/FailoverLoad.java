package io.ferromq.interop;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.Map;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

/**
 * A SYNC send load with the official 4.9.7 Java client for the failover tests (tests/interop/test_failover.py):
 * sends {@code <prefix>-<i>|} bodies one after another until the file {@code stop} exists (or {@code timeout}
 * seconds passed), a failed send is noted and the loop goes on. Each acknowledged send (SEND_OK) is appended to
 * {@code out} as one line "id wall-clock-millis", each other outcome as "! id what".
 *
 * <pre>
 * java -cp ferromq-interop.jar io.ferromq.interop.FailoverLoad namesrv=H:P topic=T group=G prefix=P out=FILE
 *      stop=FILE [poll=MILLIS] [timeout=S]
 * </pre>
 *
 * <p>poll is the client's pollNameServerInterval (how soon it sees a new master in the routes).
 */
public final class FailoverLoad {
    public static void main(String[] args) throws Exception {
        Map<String, String> opts = new HashMap<String, String>();
        for (String a : args) {
            int eq = a.indexOf('=');
            opts.put(a.substring(0, eq), a.substring(eq + 1));
        }
        long deadline = System.currentTimeMillis() + 1000L * Long.parseLong(opts.getOrDefault("timeout", "300"));
        DefaultMQProducer p = new DefaultMQProducer(opts.get("group"));
        p.setNamesrvAddr(opts.get("namesrv"));
        p.setVipChannelEnabled(false);
        p.setInstanceName("failover-" + Interop.pid());
        p.setPollNameServerInterval(Integer.parseInt(opts.getOrDefault("poll", "1000")));
        p.setSendMsgTimeout(3000);
        p.start();
        String prefix = opts.get("prefix");
        try (Writer out = new OutputStreamWriter(new FileOutputStream(opts.get("out"), true), StandardCharsets.UTF_8)) {
            for (int i = 0; !Files.exists(Paths.get(opts.get("stop"))) && System.currentTimeMillis() < deadline; i++) {
                String id = prefix + "-" + i;
                Message m = new Message(opts.get("topic"), (id + "|").getBytes(StandardCharsets.UTF_8));
                try {
                    SendResult r = p.send(m);
                    if (r.getSendStatus() == SendStatus.SEND_OK) {
                        line(out, id + " " + System.currentTimeMillis());
                    } else {
                        line(out, "! " + id + " " + r.getSendStatus());
                    }
                } catch (Exception e) {
                    line(out, "! " + id + " " + e.getClass().getSimpleName());
                    Thread.sleep(50);
                }
            }
        } finally {
            p.shutdown();
        }
    }

    private static void line(Writer out, String text) throws IOException {
        out.write(text + "\n");
        out.flush();
    }
}
