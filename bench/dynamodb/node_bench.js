// The Node dynamodb-lock-client (FailOpen), one "thread" (sequential awaits): acquire+release
// cycles per second against the endpoint given. Same lock name every cycle, no contention,
// lease 10 s, no heartbeat (so no timer runs during a cycle). The AWS SDK v2 client is given
// kept-alive connections (AWS_NODEJS_CONNECTION_REUSE_ENABLED=1 from bench/dynamodb/run), its
// best case.
//   node node_bench.js ENDPOINT SECONDS
"use strict";
const AWS = require("aws-sdk");
const DynamoDBLockClient = require("dynamodb-lock-client");

const [endpoint, secondsText] = process.argv.slice(2);
const seconds = Number(secondsText || "5");
const options = {
  endpoint,
  region: "us-east-1",
  credentials: new AWS.Credentials(process.env.AWS_ACCESS_KEY_ID || "AKIDBENCH",
                                   process.env.AWS_SECRET_ACCESS_KEY || "bench-secret"),
  maxRetries: 0,
};
const dynamodb = new AWS.DynamoDB(options);
const documentClient = new AWS.DynamoDB.DocumentClient({ service: dynamodb });
const table = "node_bench_locks";

const lockClient = new DynamoDBLockClient.FailOpen({
  dynamodb: documentClient,
  lockTable: table,
  partitionKey: "id",
  leaseDurationMs: 10000,
  owner: "bench",
  retryCount: 0,
});

const acquire = (id) => new Promise((resolve, reject) =>
  lockClient.acquireLock(id, (error, lock) => (error ? reject(error) : resolve(lock))));
const release = (lock) => new Promise((resolve, reject) =>
  lock.release((error) => (error ? reject(error) : resolve())));

async function ensureTable() {
  try {
    await dynamodb.createTable({
      TableName: table,
      AttributeDefinitions: [{ AttributeName: "id", AttributeType: "S" }],
      KeySchema: [{ AttributeName: "id", KeyType: "HASH" }],
      BillingMode: "PAY_PER_REQUEST",
    }).promise();
  } catch (e) {
    if (e.code !== "ResourceInUseException") throw e;
  }
  await dynamodb.waitFor("tableExists", { TableName: table, $waiter: { delay: 0.1, maxAttempts: 100 } }).promise();
}

async function main() {
  await ensureTable();
  for (let i = 0; i < 200; i++) await release(await acquire("bench"));  // warm up
  let cycles = 0;
  const start = process.hrtime.bigint();
  const until = start + BigInt(Math.round(seconds * 1e9));
  while (process.hrtime.bigint() < until) {
    await release(await acquire("bench"));
    cycles++;
  }
  const elapsed = Number(process.hrtime.bigint() - start) / 1e9;
  console.log(`cycles ${cycles}`);
  console.log(`cycles_per_sec ${(cycles / elapsed).toFixed(0)}`);
  console.log(`cycle_us ${((elapsed * 1e6) / cycles).toFixed(1)}`);
}

main().catch((e) => {
  console.error(`node_bench: ${e.stack || e}`);
  process.exit(1);
});
