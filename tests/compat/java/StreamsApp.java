// A Kafka Streams application of our own (kafka-streams, from the stack's Kafka distribution) at its
// defaults but for exactly-once: processing.guarantee=exactly_once_v2. It counts the input records per
// group (a record's value modulo 7): a repartition topic before the count, a changelog after it, and
// each count's updates written to the output. Writes its state changes to DIR/events, and stops once
// DIR/stop exists. Compiled once (tests/helpers/java_apps.py).

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

public final class StreamsApp {
    public static void main(String[] argv) throws IOException, InterruptedException {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        Path dir = Path.of(args.get("dir"));
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args.get("application-id"));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        props.put(StreamsConfig.CLIENT_ID_CONFIG, args.get("client-id"));
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.STATE_DIR_CONFIG, dir.resolve("state").toString());

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args.get("input"), Consumed.with(Serdes.String(), Serdes.String()))
            .groupBy((key, value) -> "g" + (Long.parseLong(value) % 7),
                     Grouped.with("by-group", Serdes.String(), Serdes.String()))
            .count(Materialized.as("counts"))
            .toStream()
            .to(args.get("output"), Produced.with(Serdes.String(), Serdes.Long()));

        try (OutputStream events = new FileOutputStream(dir.resolve("events").toFile(), true);
             KafkaStreams streams = new KafkaStreams(builder.build(), props)) {
            streams.setStateListener((now, before) -> write(events, "state " + now));
            streams.setUncaughtExceptionHandler(e -> {
                write(events, "fatal " + e);
                e.printStackTrace();
                return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
            });
            streams.start();
            while (!Files.exists(dir.resolve("stop"))) {
                Thread.sleep(100);
            }
            streams.close(Duration.ofSeconds(30));
        }
    }

    private static synchronized void write(OutputStream events, String line) {
        try {
            events.write((line + "\n").getBytes(StandardCharsets.UTF_8));
            events.flush();
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
    }
}
