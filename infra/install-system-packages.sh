#!/usr/bin/env bash
# Installs the Debian packages the embedded stack needs, only when they are missing (idempotent).
# ZooKeeper comes from Debian (with SLF4J's simple logger for its log); Java 17 (a JDK) runs it, Spark and the
# Apache Kafka brokers, whose jars Maven resolves from Maven Central (`switchyard stack fetch`);
# Node.js and npm run kafkajs in the client compatibility tests; Prometheus's promtool and Alertmanager's
# amtool check infra/monitoring/ (rules, their unit tests, the example configs); Chromium and its
# WebDriver let the browser tests (Selenium) look at the Temporal Web UI and the HTML reports; a C compiler
# and librdkafka's headers build the benchmarks' load generator (tests/bench/loadgen.c).
set -euo pipefail

need=()
command -v javac >/dev/null 2>&1 || need+=(default-jdk-headless)  # the tests compile their Java applications
command -v mvn >/dev/null 2>&1 || need+=(maven)
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
[ -f /usr/share/java/slf4j-simple.jar ] || need+=(libslf4j-java)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v amtool >/dev/null 2>&1 || need+=(prometheus-alertmanager)
[ -x /usr/bin/chromium ] || need+=(chromium)
[ -x /usr/bin/chromedriver ] || need+=(chromium-driver)
command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
[ -f /usr/include/librdkafka/rdkafka.h ] || need+=(librdkafka-dev)
[ -x /usr/lib/postgresql/15/bin/initdb ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)

[ ${#need[@]} -eq 0 ] && exit 0

echo "installing system packages: ${need[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${need[@]}"
