// npm dynamodb-lock-client (bench/dynamodb's), as a peer of dlock on the same table and name:
// driven by tests/dynamodb/dynamodb_foreign_test.cc.
//
//   node ddb_lock_client_peer.js ENDPOINT TABLE NAME failopen|failclosed FILE
//       Tries NAME once: prints "RESULT HELD" (then waits until FILE exists, releases it and
//       prints "RELEASED") or "RESULT REFUSED" and the library's message.
//
// The table's partition key is "id", as dlock's default. Credentials come from the environment
// (the tests set dummy ones). NODE_PATH names bench/dynamodb/node_modules.
'use strict';
const fs = require('fs');
const AWS = require('aws-sdk');
const DynamoDBLockClient = require('dynamodb-lock-client');

const [endpoint, table, name, mode, file] = process.argv.slice(2);
const dynamodb = new AWS.DynamoDB.DocumentClient({ endpoint, region: 'us-east-1', maxRetries: 0 });
const options = { dynamodb, lockTable: table, partitionKey: 'id', retryCount: 0, owner: 'node-peer' };
const client = mode === 'failopen'
  ? new DynamoDBLockClient.FailOpen({ ...options, leaseDurationMs: 20000, heartbeatPeriodMs: 2000 })
  : new DynamoDBLockClient.FailClosed({ ...options, acquirePeriodMs: 100 });

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

client.acquireLock(name, async (error, lock) => {
  if (error) {
    console.log(`RESULT REFUSED ${error.message}`);
    return;
  }
  lock.on('error', (e) => console.log(`LOST ${e.message}`));
  console.log('RESULT HELD');
  while (!fs.existsSync(file)) await sleep(5);
  lock.release((e) => {
    console.log(e ? `ERROR ${e.message}` : 'RELEASED');
    process.exit(e ? 1 : 0);
  });
});
