// The compatibility application on the Java client (kafka-clients), at its default settings: the same
// arguments, events and stop signals as the Python applications (tests/compat/app_io.py). Compiled
// once (tests/helpers/java_apps.py) and run, `java -cp 'CLASSES:LIBS/*' CompatApp ...`, against the jars
// of the stack's Kafka distribution (tests/helpers/compat.py); `--group-protocol consumer` gives its consumers the new
// group protocol (KIP-848), otherwise they keep the client's default.

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class CompatApp {
    private static final int VALUE_BYTES = 100; // as app_io.VALUE_BYTES: every batch is compressed

    private final Map<String, String> args;
    private final Path dir;
    private final OutputStream events;

    private CompatApp(Map<String, String> args) throws IOException {
        this.args = args;
        this.dir = Path.of(args.get("dir"));
        this.events = new FileOutputStream(dir.resolve("events.jsonl").toFile(), true);
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        System.exit(new CompatApp(args).run());
    }

    /** Each part in a thread of its own; 1 if any part threw (written as an error event), else 0. */
    private int run() throws InterruptedException {
        Map<String, Runnable> parts = new HashMap<>();
        parts.put("produce", this::produce);
        if (args.containsKey("group")) {
            parts.put("manual", () -> consume(args.get("group"), true));
            parts.put("auto", () -> consume(args.get("auto-group"), false));
        }
        AtomicBoolean failed = new AtomicBoolean();
        List<Thread> threads = new ArrayList<>();
        for (Map.Entry<String, Runnable> part : parts.entrySet()) {
            Thread thread = new Thread(() -> {
                try {
                    part.getValue().run();
                    event("ended", "\"g\":\"" + part.getKey() + "\"");
                } catch (Throwable e) {
                    failed.set(true);
                    event("error", "\"g\":\"app\",\"e\":" + quoted(part.getKey() + ": " + e));
                    e.printStackTrace();
                }
            }, part.getKey());
            thread.start();
            threads.add(thread);
        }
        for (Thread thread : threads) {
            thread.join();
        }
        return failed.get() ? 1 : 0;
    }

    private synchronized void event(String kind, String fields) {
        double t = System.currentTimeMillis() / 1000.0;
        String line = "{\"k\":\"" + kind + "\",\"t\":" + t + (fields.isEmpty() ? "" : "," + fields) + "}\n";
        try {
            events.write(line.getBytes(StandardCharsets.UTF_8));
            events.flush();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    private boolean stopping(String what) {
        return Files.exists(dir.resolve(what));
    }

    private Properties client(String role) {
        Properties settings = new Properties();
        settings.put("bootstrap.servers", args.get("bootstrap"));
        settings.put("client.id", args.get("app") + "@" + role);
        return settings;
    }

    /** One producer per codec of --codecs (none: one without compression), record n through the
     * n % producers'th, paced at --rate; every send ends in exactly one acked or failed event. */
    private void produce() {
        List<String> codecs = new ArrayList<>();
        for (String codec : args.getOrDefault("codecs", "").split(",")) {
            if (!codec.isEmpty()) {
                codecs.add(codec);
            }
        }
        if (codecs.isEmpty()) {
            codecs.add(null);
        }
        List<KafkaProducer<byte[], byte[]>> producers = new ArrayList<>();
        for (String codec : codecs) {
            Properties settings = client("producer");
            if (codec != null) {
                settings.put("compression.type", codec);
            }
            producers.add(new KafkaProducer<>(settings, new ByteArraySerializer(), new ByteArraySerializer()));
        }
        double rate = Double.parseDouble(args.getOrDefault("rate", "100"));
        long interval = (long) (1_000_000_000L / rate);
        long nextAt = System.nanoTime();
        int n = 0;
        while (!stopping("stop-producing")) {
            long wait = nextAt - System.nanoTime();
            if (wait > 0) {
                sleep(Math.min(wait / 1_000_000, 50));
                continue;
            }
            nextAt += interval;
            final int v = n++;
            byte[] key = String.valueOf(v).getBytes(StandardCharsets.UTF_8);
            byte[] value = String.format("%-" + VALUE_BYTES + "s", v).getBytes(StandardCharsets.UTF_8);
            try {
                producers.get(v % producers.size()).send(new ProducerRecord<>(args.get("topic"), key, value), (meta, e) -> {
                    if (e == null) {
                        event("acked", "\"v\":" + v + ",\"p\":" + meta.partition() + ",\"o\":" + meta.offset());
                    } else {
                        event("failed", "\"v\":" + v + ",\"e\":" + quoted(e.toString()));
                    }
                });
            } catch (KafkaException e) { // refused at once: its callback is not called
                event("failed", "\"v\":" + v + ",\"e\":" + quoted(e.toString()));
            }
        }
        for (KafkaProducer<byte[], byte[]> producer : producers) {
            producer.flush(); // every send completes, acknowledged or failed, within delivery.timeout.ms
        }
        event("produced", "\"n\":" + n + ",\"unreported\":0");
        for (KafkaProducer<byte[], byte[]> producer : producers) {
            producer.close();
        }
    }

    /** A consumer in `group`: `manual` commits synchronously after each batch it processed, the other
     * keeps the client's auto-commit. */
    private void consume(String group, boolean manual) {
        String g = manual ? "manual" : "auto";
        Properties settings = client(manual ? "consumer" : "auto");
        settings.put("group.id", group);
        settings.put("auto.offset.reset", "earliest");
        if (manual) {
            settings.put("enable.auto.commit", "false");
        }
        if (args.containsKey("group-protocol")) {
            settings.put("group.protocol", args.get("group-protocol"));
        }
        if (args.containsKey("session-ms") && !"consumer".equals(args.get("group-protocol"))) {
            settings.put("session.timeout.ms", args.get("session-ms")); // the new protocol's is the broker's
            settings.put("heartbeat.interval.ms", "1000");
        }
        try (KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(settings, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.subscribe(List.of(args.get("topic")), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    rebalanced(g, "assign", parts);
                }

                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    rebalanced(g, "revoke", parts);
                }

                @Override
                public void onPartitionsLost(Collection<TopicPartition> parts) {
                    rebalanced(g, "lost", parts);
                }
            });
            while (!stopping("stop")) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    continue;
                }
                List<String> recs = new ArrayList<>();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    String value = new String(r.value(), StandardCharsets.UTF_8).trim();
                    recs.add("[" + r.partition() + "," + r.offset() + "," + value + "]");
                }
                String commit = "null";
                String why = "null";
                if (manual) {
                    try {
                        consumer.commitSync();
                    } catch (KafkaException e) {
                        commit = quoted(e.getClass().getSimpleName());
                        why = quoted(String.valueOf(e.getMessage()));
                    }
                }
                event("batch", "\"g\":\"" + g + "\",\"recs\":[" + String.join(",", recs) + "],\"commit\":" + commit
                        + ",\"why\":" + why);
            }
        }
    }

    private void rebalanced(String g, String what, Collection<TopicPartition> parts) {
        String numbers = parts.stream().map(p -> String.valueOf(p.partition())).collect(Collectors.joining(","));
        event("rebalance", "\"g\":\"" + g + "\",\"what\":\"" + what + "\",\"parts\":[" + numbers + "]");
    }

    private static String quoted(String text) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }
}
