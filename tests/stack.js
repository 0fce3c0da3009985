// Starts the standalone Pinion binary (bin/pinion, which `make test-compat`
// and `make test-oidc` build) on a free loopback port with a fresh data
// directory and known super-admin credentials, and reads the e-mails it
// writes. It builds nothing: a missing binary is reported, not compiled.
// Both Node suites use it (tests/compat, tests/oidc); it needs nothing but
// Node itself.
//
//   const stack = await startPinion({ name: 'compat' });   // in before()
//   await stack.stop();                                     // in after()

import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { access, constants, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

/** The binary under test; PINION_BIN overrides it. */
export const PINION_BIN = process.env.PINION_BIN ?? resolve(here, '../bin/pinion');

/** How long the stack may take to answer GET /readyz with 200. */
const READY_TIMEOUT_MS = 30_000;
/** How long a stopped stack may take to exit before it is killed. */
const STOP_TIMEOUT_MS = 5_000;
/** Keep at most this much of the process's output for error messages. */
const MAX_OUTPUT = 64 * 1024;

/** Asks the kernel for a loopback port that is free right now. */
export function freePort() {
  return new Promise((ok, fail) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', fail);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => ok(port));
    });
  });
}

export function sleep(ms) {
  return new Promise((ok) => setTimeout(ok, ms));
}

/**
 * Starts bin/pinion and waits until GET /readyz answers 200.
 * @param {{env?: Record<string, string>}} [opts] - extra PINION_ settings (they win over the defaults here).
 * @returns {Promise<{baseUrl: string, superAdmin: {clientId: string, clientSecret: string}, dataDir: string, output: () => string, stop: () => Promise<void>}>}
 */
export async function startPinion(opts = {}) {
  const name = opts.name ?? 'pinion';
  try {
    await access(PINION_BIN, constants.X_OK);
  } catch {
    throw new Error(
      `${PINION_BIN} not found or not executable: run \`make test-compat\` from the repository root, ` +
        'or `go build -o bin/pinion ./deploy/standalone/cmd/pinion` first'
    );
  }
  // A port found free can be taken before pinion binds it; pinion then exits
  // at once with a one-line reason, and we try another port.
  let lastErr;
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      return await startOnce(await freePort(), opts.env ?? {}, name);
    } catch (err) {
      lastErr = err;
      if (!err.portTaken) {
        throw err;
      }
    }
  }
  throw lastErr;
}

async function startOnce(port, extraEnv, name) {
  const dataDir = await mkdtemp(join(tmpdir(), `pinion-${name}-`));
  const baseUrl = `http://127.0.0.1:${port}/`;
  const superAdmin = {
    clientId: `${name}-super-admin`,
    clientSecret: `${name}-` + randomBytes(24).toString('hex'),
  };
  const env = {
    ...process.env,
    PINION_ADDR: `127.0.0.1:${port}`,
    PINION_BASE_URL: baseUrl,
    PINION_DATA_DIR: dataDir,
    PINION_SUPERADMIN_CLIENT_ID: superAdmin.clientId,
    PINION_SUPERADMIN_CLIENT_SECRET: superAdmin.clientSecret,
    PINION_AUTH_RATE_LIMIT: '0',
    PINION_LOG_LEVEL: process.env.PINION_LOG_LEVEL ?? 'warn',
  };
  // Never talk to external servers a developer may have configured.
  for (const k of ['PINION_MONGODB_URI', 'PINION_NATS_URL', 'PINION_NATS_LISTEN', 'PINION_FERRETDB_POSTGRESQL_URL', 'PINION_SMTP_URL']) {
    delete env[k];
  }
  Object.assign(env, extraEnv);

  const child = spawn(PINION_BIN, [], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d) => (stdout = (stdout + d).slice(-MAX_OUTPUT)));
  child.stderr.setEncoding('utf8').on('data', (d) => (stderr = (stderr + d).slice(-MAX_OUTPUT)));
  let exited;
  const exitPromise = new Promise((ok) =>
    child.on('exit', (code, signal) => {
      exited = { code, signal };
      ok(exited);
    })
  );
  let spawnError;
  child.on('error', (err) => (spawnError = err));
  // If this test process dies without after() running, take the stack down too.
  const onExit = () => {
    if (!exited) {
      child.kill('SIGKILL');
    }
    rmSync(dataDir, { recursive: true, force: true });
  };
  process.once('exit', onExit);

  const cleanup = async () => {
    process.removeListener('exit', onExit);
    if (!exited) {
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
      await exitPromise;
      clearTimeout(t);
    }
    await rm(dataDir, { recursive: true, force: true });
  };

  const started = Date.now();
  for (;;) {
    if (spawnError || exited) {
      await cleanup();
      const why = spawnError ? `could not start: ${spawnError.message}` : `exited (${exited.signal ?? 'code ' + exited.code})`;
      const err = new Error(`${PINION_BIN} ${why} before /readyz answered.\n--- stderr ---\n${stderr}\n--- stdout ---\n${stdout}`);
      err.portTaken = /address already in use/i.test(stderr);
      throw err;
    }
    try {
      const res = await fetch(baseUrl + 'readyz', { signal: AbortSignal.timeout(2_000) });
      await res.arrayBuffer();
      if (res.status === 200) {
        break;
      }
    } catch {
      // not listening yet
    }
    if (Date.now() - started > READY_TIMEOUT_MS) {
      await cleanup();
      throw new Error(
        `${PINION_BIN} did not answer GET /readyz with 200 within ${READY_TIMEOUT_MS / 1000}s.\n--- stderr ---\n${stderr}\n--- stdout ---\n${stdout}`
      );
    }
    await sleep(50);
  }

  return {
    baseUrl,
    superAdmin,
    dataDir,
    output: () => `--- stderr ---\n${stderr}\n--- stdout ---\n${stdout}`,
    stop: cleanup,
  };
}

/**
 * Waits for the e-mail Pinion writes for `to` when no SMTP server is
 * configured (<data dir>/mail/*.eml) and returns its decoded text. This
 * stands in for the user reading their inbox.
 * @param {{dataDir: string}} stack
 * @param {string} to
 * @param {number} [timeoutMs]
 * @returns {Promise<string>}
 */
export async function waitForMail(stack, to, timeoutMs = 10_000) {
  const dir = join(stack.dataDir, 'mail');
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    let names = [];
    try {
      names = (await readdir(dir)).filter((n) => n.endsWith('.eml'));
    } catch {
      // no mail yet
    }
    for (const name of names) {
      const raw = await readFile(join(dir, name), 'utf8');
      if (raw.toLowerCase().includes(`to: <${to.toLowerCase()}>`)) {
        // quoted-printable: soft line breaks and =XX escapes
        return raw.replace(/=\r?\n/g, '').replace(/=([0-9A-F]{2})/g, (_, h) => String.fromCharCode(parseInt(h, 16)));
      }
    }
    if (Date.now() > deadline) {
      throw new Error(`no e-mail to ${to} under ${dir} within ${timeoutMs / 1000}s (found: ${names.join(', ') || 'none'})`);
    }
    await sleep(50);
  }
}

