package io.ferromq.interop;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;

/**
 * What every scenario driver's {@code main} does: {@code key=value} options, a watchdog that halts the JVM
 * 5 s past the deadline (exit 3), the scenario's exit code (2 on an exception, 1 when a failure was recorded),
 * each failure printed as a {@code FAIL} line, and a halt (the client's threads are not daemons).
 */
final class Driver {
    private Driver() {
    }

    /** The {@code key=value} arguments after the scenario name; halts with 64 on a malformed one. */
    static Map<String, String> options(String[] args) {
        Map<String, String> opts = new HashMap<String, String>();
        for (int i = 1; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq <= 0) {
                System.err.println("FAIL bad argument (want key=value): " + args[i]);
                Runtime.getRuntime().halt(64);
            }
            opts.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        return opts;
    }

    /** Runs {@code scenario} (null: an unknown scenario name, exit 64) and halts with its exit code. */
    static void run(String name, long deadline, final List<String> failures, Callable<Integer> scenario) {
        final long hardStop = deadline + 5000;
        Thread watchdog = new Thread(new Runnable() {
            @Override
            public void run() {
                try {
                    Thread.sleep(Math.max(1, hardStop - System.currentTimeMillis()));
                } catch (InterruptedException e) {
                    return;
                }
                System.out.flush();
                synchronized (failures) {
                    System.err.println("FAIL past the deadline; failures so far: " + new ArrayList<String>(failures));
                }
                Runtime.getRuntime().halt(3);
            }
        }, name + "-watchdog");
        watchdog.setDaemon(true);
        watchdog.start();
        int rc;
        try {
            if (scenario == null) {
                System.err.println("FAIL unknown scenario");
                rc = 64;
            } else {
                rc = scenario.call();
            }
        } catch (Throwable t) {
            System.err.println("FAIL exception: " + t);
            t.printStackTrace();
            rc = 2;
        }
        synchronized (failures) {
            for (String f : failures) {
                System.err.println("FAIL " + f);
            }
            if (rc == 0 && !failures.isEmpty()) {
                rc = 1;
            }
        }
        System.out.flush();
        System.err.flush();
        Runtime.getRuntime().halt(rc);
    }
}
