// A transactional producer on the Java client (kafka-clients) at its default settings: numbered
// transactions of five records over three partitions, each committed, aborted and written again on an
// abortable error as the client's documentation says. Writes "committed N" and "aborted EXCEPTION" lines
// to DIR/events, "fatal ..." when the producer must close; stops once DIR/stop exists. With --group G and
// --records 0, each transaction writes no record and only commits G's offset of partition 0 of the topic
// (N + 1), as a Kafka Streams task that consumed records and wrote nothing does. Compiled once
// against the stack's Kafka jars (tests/helpers/java_apps.py).
//
// It flushes before it commits. Without that, the Java client 4.4.0 on transaction version 2 at times sends
// EndTxn ahead of the transaction's records (its sender thread reads "no batch incomplete" before the
// application thread appends them and asks to commit), and the broker refuses the commit of a transaction
// it saw nothing of with INVALID_TXN_STATE, fatal. Reproduced with no gateway, straight to an Apache Kafka
// 4.4.0 broker, once in ~25,000 transactions with both cores busy; through the gateway, in 2 of 16 runs
// of ~800 transactions.

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class TxnApp {
    public static void main(String[] argv) throws IOException {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        Path dir = Path.of(args.get("dir"));
        Properties props = new Properties();
        props.put("bootstrap.servers", args.get("bootstrap"));
        props.put("client.id", args.get("client-id"));
        props.put("transactional.id", args.get("transactional-id"));
        String topic = args.get("topic");
        int records = Integer.parseInt(args.getOrDefault("records", "5"));
        String group = args.get("group");
        try (OutputStream events = new FileOutputStream(dir.resolve("events").toFile(), true);
             KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.initTransactions();
            int number = 0;
            while (!Files.exists(dir.resolve("stop"))) {
                try {
                    producer.beginTransaction();
                    for (int part = 0; part < records; part++) {
                        byte[] value = (number + "-" + part).getBytes(StandardCharsets.UTF_8);
                        producer.send(new ProducerRecord<>(topic, part % 3, null, value));
                    }
                    producer.flush();
                    if (group != null) {
                        producer.sendOffsetsToTransaction(
                            Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(number + 1)),
                            new ConsumerGroupMetadata(group, -1, "", Optional.empty()));
                    }
                    producer.commitTransaction();
                } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException e) {
                    write(events, "fatal " + e);
                    e.printStackTrace();
                    return;
                } catch (KafkaException e) {
                    try {
                        producer.abortTransaction();
                    } catch (KafkaException fatal) {
                        write(events, "fatal " + fatal + " (aborting after " + e + ")");
                        fatal.printStackTrace();
                        return;
                    }
                    write(events, "aborted " + e);
                    continue;
                }
                write(events, "committed " + number);
                number++;
            }
        }
    }

    private static void write(OutputStream events, String line) throws IOException {
        events.write((line + "\n").getBytes(StandardCharsets.UTF_8));
        events.flush();
    }
}
