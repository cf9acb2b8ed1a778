// The official mqadmin (rocketmq-tools 4.9.7 or 5.3.3, MQAdminStartup.main0, exactly what the mqadmin
// script runs) as a shell: one JVM runs many subcommands, so the tests avoid a JVM start and netty's
// graceful shutdown per command. Run with `java -cp <classpath> MqadminShell.java` (single-file
// source launch; no build step).
//
// Protocol on stdin/stdout: one subcommand a line, its arguments separated by TAB characters; the
// reply is the subcommand's stdout and stderr, then a line "\u0001END <milliseconds>".

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

import org.apache.rocketmq.tools.command.MQAdminStartup;

public class MqadminShell {
    public static void main(String[] args) throws Exception {
        PrintStream realOut = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true, "UTF-8");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        java.lang.reflect.Field field;
        try {
            field = MQAdminStartup.class.getDeclaredField("subCommandList");  // 4.9.7
        } catch (NoSuchFieldException e) {
            field = MQAdminStartup.class.getDeclaredField("SUB_COMMANDS");  // 5.x
        }
        field.setAccessible(true);
        java.util.List<?> subCommands = (java.util.List<?>) field.get(null);
        realOut.println("\u0001READY");
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) {
                continue;
            }
            String[] argv = line.split("\t");
            ByteArrayOutputStream captured = new ByteArrayOutputStream();
            PrintStream capture = new PrintStream(captured, true, "UTF-8");
            PrintStream oldOut = System.out;
            PrintStream oldErr = System.err;
            System.setOut(capture);
            System.setErr(capture);
            long start = System.currentTimeMillis();
            try {
                // main0 registers fresh subcommand objects on each call but finds the first ones
                // registered; some keep their (shut down) admin client in a field. Start clean, as a
                // new mqadmin process would.
                subCommands.clear();
                registerUnlisted(subCommands);
                MQAdminStartup.main0(argv, null);
            } catch (Throwable t) {
                t.printStackTrace(capture);
            } finally {
                capture.flush();
                System.setOut(oldOut);
                System.setErr(oldErr);
            }
            realOut.print(captured.toString("UTF-8"));
            realOut.println();
            realOut.println("\u0001END " + (System.currentTimeMillis() - start));
            realOut.flush();
        }
        // stdin closed: done (without waiting for netty's graceful shutdown of the last clients).
        System.exit(0);
    }

    // 5.3.3 ships copyUsers and copyAcls (tools/command/auth) but does not list them in
    // MQAdminStartup (5.4 does): registered here, they run the jar's own code.
    @SuppressWarnings("unchecked")
    private static void registerUnlisted(java.util.List<?> subCommands) {
        for (String name : new String[] {"CopyUsersSubCommand", "CopyAclsSubCommand"}) {
            try {
                Object command = Class.forName("org.apache.rocketmq.tools.command.auth." + name)
                    .getDeclaredConstructor().newInstance();
                ((java.util.List<Object>) subCommands).add(command);
            } catch (ReflectiveOperationException e) {
                // not in this version (4.9.7)
            }
        }
    }
}
