// Produces Turnpike request records with kafkajs, one at a time and in
// order, with acks=all: e2e's interop test runs it to see where kafkajs
// places keyed records.
//
//   node produce.js BROKERS TOPIC PARTITIONER < records
//
// BROKERS is a comma-separated list, PARTITIONER "default" (v2's
// Partitioners.DefaultPartitioner) or "legacy"
// (Partitioners.LegacyPartitioner, the v1 default). Each line of standard
// input is one record, {"key": "...", "value": "..."}. For each record it
// prints the partition and offset the broker gave it, as a JSON line.
'use strict';

const readline = require('node:readline');
const { Kafka, Partitioners, logLevel } = require('kafkajs');

const partitioners = {
  default: Partitioners.DefaultPartitioner,
  legacy: Partitioners.LegacyPartitioner,
};

async function main() {
  const [brokers, topic, name] = process.argv.slice(2);
  const createPartitioner = partitioners[name];
  if (!brokers || !topic || !createPartitioner) {
    throw new Error('usage: node produce.js BROKERS TOPIC default|legacy < records');
  }
  const kafka = new Kafka({ clientId: 'turnpike-interop', brokers: brokers.split(','), logLevel: logLevel.ERROR });
  const producer = kafka.producer({ createPartitioner, allowAutoTopicCreation: false });
  await producer.connect();
  try {
    const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
    for await (const line of lines) {
      if (line.trim() === '') continue;
      const { key, value } = JSON.parse(line);
      const [meta] = await producer.send({ topic, acks: -1, messages: [{ key, value }] });
      process.stdout.write(JSON.stringify({ key, partition: meta.partition, offset: meta.baseOffset }) + '\n');
    }
  } finally {
    await producer.disconnect();
  }
}

main().catch((err) => {
  process.stderr.write(`produce.js: ${err.stack || err}\n`);
  process.exit(1);
});
