// The compatibility application on kafkajs, at its default settings: the same arguments, events and
// stop signals as the Python applications (tests/compat/app_io.py).
'use strict'
const fs = require('fs')
const path = require('path')
const { Kafka, logLevel, CompressionTypes, CompressionCodecs } = require('kafkajs')

// kafkajs has GZIP built in; Snappy only with a codec registered (pure JavaScript), for reading too.
// LZ4 and ZSTD are left out: their kafkajs codecs need native builds.
CompressionCodecs[CompressionTypes.Snappy] = require('kafkajs-snappy')
const COMPRESSION = { gzip: CompressionTypes.GZIP, snappy: CompressionTypes.Snappy }

const args = {}
for (let i = 2; i < process.argv.length; i += 2) {
  args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1]
}
const rate = Number(args.rate || 100)
const eventsFile = fs.openSync(path.join(args.dir, 'events.jsonl'), 'a')
const event = (k, fields) => fs.writeSync(eventsFile, JSON.stringify({ k, t: Date.now() / 1000, ...fields }) + '\n')
const stopping = (what = 'stop') => fs.existsSync(path.join(args.dir, what))
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const client = (role) => new Kafka({ clientId: `${args.app}@${role}`, brokers: args.bootstrap.split(","), logLevel: logLevel.WARN })

// --codecs a,b: one producer per codec, record n through producer n % producers.length (none: one without)
async function produce () {
  const codecs = (args.codecs || '').split(',').filter((c) => c).map((c) => {
    if (!(c in COMPRESSION)) throw new Error(`compression codec not supported here: ${c}`)
    return COMPRESSION[c]
  })
  const producers = (codecs.length ? codecs : [CompressionTypes.None]).map((compression) => ({
    producer: client('producer').producer(), compression
  }))
  await Promise.all(producers.map(({ producer }) => producer.connect()))
  const pending = new Set()
  let n = 0 // the sends attempted: each ends in exactly one 'acked' or 'failed' event
  while (!stopping('stop-producing')) {
    const key = String(n)
    const value = key.padEnd(100) // as app_io.value_of: large enough that every batch is compressed
    const { producer, compression } = producers[n % producers.length]
    const at = Date.now() / 1000
    const sent = producer.send({ topic: args.topic, acks: -1, compression, messages: [{ key, value }] })
      .then((meta) => event('acked', { v: Number(key), p: meta[0].partition, o: Number(meta[0].baseOffset), s: at }))
      .catch((err) => event('failed', { v: Number(key), e: `${err.name}: ${err.message}` }))
    pending.add(sent)
    sent.finally(() => pending.delete(sent))
    n += 1
    await sleep(1000 / rate)
  }
  await Promise.all([...pending])
  event('produced', { n })
  await Promise.all(producers.map(({ producer }) => producer.disconnect()))
}

async function consume (group, manual) {
  const session = args['session-ms'] ? { sessionTimeout: Number(args['session-ms']), heartbeatInterval: 1000 } : {}
  const consumer = client(manual ? 'consumer' : 'auto').consumer({ groupId: group, ...session })
  await consumer.connect()
  await consumer.subscribe({ topic: args.topic, fromBeginning: true })
  const g = manual ? 'manual' : 'auto'
  await consumer.run({
    autoCommit: !manual,
    eachBatch: async ({ batch }) => {
      const recs = batch.messages.map((m) => [batch.partition, Number(m.offset), Number(m.value.toString())])
      if (recs.length === 0) return
      let commit = null
      let why = null
      if (manual) {
        const next = String(Number(batch.messages[batch.messages.length - 1].offset) + 1)
        try {
          await consumer.commitOffsets([{ topic: batch.topic, partition: batch.partition, offset: next }])
        } catch (err) {
          const cause = err.cause || {} // the retrier wraps what the broker answered
          commit = err.type || cause.type || cause.name || err.name
          why = err.message
        }
      }
      event('batch', { g, recs, commit, why })
    }
  })
  // a crash kafkajs restarts the consumer after (a retriable error, as connections refused for longer
  // than its retries last) is a retry the application goes on after; any other ends it
  consumer.on(consumer.events.CRASH, (e) => event(e.payload.restart ? 'retried' : 'error', { g, e: String(e.payload.error) }))
  while (!stopping()) await sleep(100)
  event('disconnecting', { g }) // of a group that never ends: whether it hung in its disconnect()
  await consumer.disconnect()
}

// each part says when it has ended: of an application that does not exit, which part did not
const ended = (g, part) => part.then(() => event('ended', { g }))
const groups = args.group ? [ended('manual', consume(args.group, true)), ended('auto', consume(args['auto-group'], false))] : [] // none: it only produces
Promise.all([ended('produce', produce()), ...groups])
  .then(() => process.exit(0))
  .catch((err) => { event('error', { g: 'app', e: String(err) }); process.exit(1) })
