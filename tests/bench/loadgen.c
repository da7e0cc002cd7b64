/* A fixed-load Kafka client for tests/bench/test_load_bench.py, in C so that it costs little CPU.
 *
 * The load bench measures what the gateway adds with the gateway on a core of its own. On a 2-core host
 * the client then shares the other core with the brokers; a Python client (one produce() call and one
 * delivery callback per record in the interpreter) took enough of that core to queue the brokers' work,
 * so the figures measured the client. librdkafka driven from C does the same job for far less (7 % of a
 * core at 5 MiB/s of 1 KiB records, writing and reading back; half a core at 20 MiB/s of 100 B records).
 *
 * usage: loadgen BOOTSTRAP TOPIC PARTITIONS RECORD_BYTES MIB_PER_S SECONDS
 *
 * A consumer (assigned every partition at its end, no group) starts first; a second later a producer
 * offers MIB_PER_S of RECORD_BYTES records (no key) in 1 ms ticks for SECONDS (linger 1 ms, acks=all:
 * librdkafka's defaults otherwise). Every record is timed: its produce latency is librdkafka's own measure
 * (produce() to the acknowledgement); it carries its send time (CLOCK_MONOTONIC, ns) in its first 8 bytes,
 * and its end-to-end latency is the consumer's receipt less that. Prints one line of JSON: records sent
 * and acknowledged, the payload MiB/s achieved (acknowledged bytes over the time to the last
 * acknowledgement), the seconds from the first send to the last acknowledgement, and p50/p99 of both
 * latencies in ms with their counts.
 * Exits non-zero, naming the cause on stderr, on bad arguments or a client that cannot be created.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    double *values;
    size_t count, capacity;
    pthread_mutex_t lock;
} samples_t;

static void sample(samples_t *s, double value) {
    pthread_mutex_lock(&s->lock);
    if (s->count == s->capacity) {
        s->capacity = s->capacity ? s->capacity * 2 : 4096;
        s->values = realloc(s->values, s->capacity * sizeof(double));
        if (!s->values) {
            fprintf(stderr, "loadgen: out of memory\n");
            exit(2);
        }
    }
    s->values[s->count++] = value;
    pthread_mutex_unlock(&s->lock);
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double percentile(samples_t *s, double q) {
    if (s->count == 0) return -1;
    qsort(s->values, s->count, sizeof(double), by_value);
    size_t at = (size_t)(q * (double)s->count);
    return s->values[at < s->count ? at : s->count - 1];
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static samples_t produced = {.lock = PTHREAD_MUTEX_INITIALIZER};
static samples_t received = {.lock = PTHREAD_MUTEX_INITIALIZER};
static int64_t acked, acked_bytes, failed, last_ack_ns;
static atomic_int stopping;
static size_t record_bytes;

static void delivered(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk, (void)opaque;
    if (m->err) {
        if (failed++ == 0) fprintf(stderr, "loadgen: delivery failed: %s\n", rd_kafka_err2str(m->err));
        return;
    }
    acked++;
    acked_bytes += (int64_t)m->len;
    last_ack_ns = now_ns();
    sample(&produced, (double)rd_kafka_message_latency(m) / 1000.0);
}

static rd_kafka_t *client(rd_kafka_type_t type, const char **settings) {
    char error[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    for (; *settings; settings += 2) {
        if (rd_kafka_conf_set(conf, settings[0], settings[1], error, sizeof error) != RD_KAFKA_CONF_OK) {
            fprintf(stderr, "loadgen: %s\n", error);
            exit(2);
        }
    }
    if (type == RD_KAFKA_PRODUCER) rd_kafka_conf_set_dr_msg_cb(conf, delivered);
    rd_kafka_t *rk = rd_kafka_new(type, conf, error, sizeof error);
    if (!rk) {
        fprintf(stderr, "loadgen: %s\n", error);
        exit(2);
    }
    return rk;
}

static void *consume(void *arg) {
    rd_kafka_t *rk = arg;
    while (!atomic_load(&stopping)) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (!m) continue;
        if (!m->err && m->len == record_bytes) {
            int64_t sent;
            memcpy(&sent, m->payload, sizeof sent);
            sample(&received, (double)(now_ns() - sent) / 1e6);
        }
        rd_kafka_message_destroy(m);
    }
    return NULL;
}

static long number(const char *text, const char *name) {
    char *end;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (errno || *end || value <= 0) {
        fprintf(stderr, "loadgen: %s must be a positive integer, not '%s'\n", name, text);
        exit(2);
    }
    return value;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: loadgen BOOTSTRAP TOPIC PARTITIONS RECORD_BYTES MIB_PER_S SECONDS\n");
        return 2;
    }
    const char *bootstrap = argv[1], *topic = argv[2];
    int partitions = (int)number(argv[3], "PARTITIONS");
    long size = number(argv[4], "RECORD_BYTES"), mib_s = number(argv[5], "MIB_PER_S");
    long seconds = number(argv[6], "SECONDS");
    if (size < (long)sizeof(int64_t)) {
        fprintf(stderr, "loadgen: RECORD_BYTES must be at least %zu, for the send time\n", sizeof(int64_t));
        return 2;
    }
    record_bytes = (size_t)size;

    char group[64];
    snprintf(group, sizeof group, "loadgen-%ld", (long)now_ns());
    const char *consumer_settings[] = {"bootstrap.servers", bootstrap, "group.id", group,
                                       "client.id", "load@c", "fetch.wait.max.ms", "100", NULL};
    rd_kafka_t *consumer = client(RD_KAFKA_CONSUMER, consumer_settings);
    rd_kafka_topic_partition_list_t *assignment = rd_kafka_topic_partition_list_new(partitions);
    for (int p = 0; p < partitions; p++)
        rd_kafka_topic_partition_list_add(assignment, topic, p)->offset = RD_KAFKA_OFFSET_END;
    rd_kafka_resp_err_t err = rd_kafka_assign(consumer, assignment);
    rd_kafka_topic_partition_list_destroy(assignment);
    if (err) {
        fprintf(stderr, "loadgen: assign: %s\n", rd_kafka_err2str(err));
        return 2;
    }
    pthread_t reader;
    pthread_create(&reader, NULL, consume, consumer);

    const char *producer_settings[] = {"bootstrap.servers", bootstrap, "client.id", "load@p",
                                       "linger.ms", "1", "queue.buffering.max.messages", "1000000", NULL};
    rd_kafka_t *producer = client(RD_KAFKA_PRODUCER, producer_settings);
    /* Connections and metadata up, and the consumer's first fetches out, before the clock starts. */
    rd_kafka_producev(producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_VALUE("warm", 4), RD_KAFKA_V_END);
    if (rd_kafka_flush(producer, 10000)) {
        fprintf(stderr, "loadgen: the warm-up record was not acknowledged in 10 s\n");
        return 1;
    }
    acked = acked_bytes = 0;
    produced.count = 0;
    struct timespec pause = {1, 0};
    nanosleep(&pause, NULL);

    char *payload = malloc((size_t)size);
    memset(payload, 'l', (size_t)size);
    double per_tick = (double)mib_s * 1048576.0 / (double)size / 1000.0, owed = 0;
    int64_t started = now_ns(), sent = 0;
    for (long tick = 0; tick < seconds * 1000; tick++) {
        int64_t due = started + tick * 1000000;
        struct timespec at = {due / 1000000000, due % 1000000000};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
        for (owed += per_tick; owed >= 1; owed -= 1) {
            int64_t stamp = now_ns();
            memcpy(payload, &stamp, sizeof stamp);
            while (rd_kafka_producev(producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_VALUE(payload, (size_t)size),
                                     RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END) ==
                   RD_KAFKA_RESP_ERR__QUEUE_FULL)
                rd_kafka_poll(producer, 1);
            sent++;
        }
        rd_kafka_poll(producer, 0);
    }
    if (rd_kafka_flush(producer, 60000)) fprintf(stderr, "loadgen: records unacknowledged after 60 s\n");
    double elapsed = (double)(last_ack_ns - started) / 1e9;

    int64_t deadline = now_ns() + 30 * (int64_t)1000000000;
    while (now_ns() < deadline) {
        pthread_mutex_lock(&received.lock);
        size_t read = received.count;
        pthread_mutex_unlock(&received.lock);
        if (read >= produced.count) break;
        struct timespec wait = {0, 100000000};
        nanosleep(&wait, NULL);
    }
    atomic_store(&stopping, 1);
    pthread_join(reader, NULL);
    rd_kafka_consumer_close(consumer);
    rd_kafka_destroy(consumer);
    rd_kafka_destroy(producer);

    printf("{\"sent\": %" PRId64 ", \"acked\": %" PRId64 ", \"failed\": %" PRId64
           ", \"achieved_mib_s\": %.3f, \"seconds\": %.3f, "
           "\"produce_p50\": %.3f, \"produce_p99\": %.3f, \"produce_samples\": %zu, "
           "\"e2e_p50\": %.3f, \"e2e_p99\": %.3f, \"e2e_samples\": %zu}\n",
           sent, acked, failed, elapsed > 0 ? (double)acked_bytes / 1048576.0 / elapsed : 0.0, elapsed,
           percentile(&produced, 0.5), percentile(&produced, 0.99), produced.count,
           percentile(&received, 0.5), percentile(&received, 0.99), received.count);
    return failed || acked < sent;
}
