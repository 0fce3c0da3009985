// Starts the standalone Pinion binary (tests/stack.js, shared with
// tests/oidc) and builds MedplumClients that talk to it.
//
// One stack per test file:
//
//   const stack = await startPinion();   // in before()
//   await stack.stop();                  // in after()

import assert from 'node:assert/strict';
import {
  ClientStorage,
  MedplumClient,
  MemoryStorage,
  OperationOutcomeError,
  getStatus,
  normalizeOperationOutcome,
} from '@medplum/core';

import { startPinion as start, waitForMail } from '../stack.js';

export { waitForMail };

/**
 * Starts bin/pinion for this suite (tests/stack.js).
 * @param {{env?: Record<string, string>}} [opts] - extra PINION_ settings.
 */
export function startPinion(opts = {}) {
  return start({ ...opts, name: 'compat' });
}

/**
 * A MedplumClient as an app in Node would build it: baseUrl, Node's global
 * fetch, in-memory storage. The fetch is wrapped only to record each
 * exchange (method, URL, status, content type, and for the token endpoint
 * the grant_type sent) so tests can assert the HTTP status the server really
 * sent; requests and responses pass unchanged.
 * @param {string} baseUrl
 * @param {object} [options] - more MedplumClient options (refreshGracePeriod, say).
 * @returns {{medplum: MedplumClient, storage: ClientStorage, exchanges: Array<{method: string, url: string, status: number, contentType: string | null, grantType?: string | null}>}}
 */
export function newClient(baseUrl, options = {}) {
  const exchanges = [];
  const recordingFetch = async (url, init) => {
    const res = await globalThis.fetch(url, init);
    exchanges.push({
      method: init?.method ?? 'GET',
      url: String(url),
      status: res.status,
      contentType: res.headers.get('content-type'),
      ...(String(url).endsWith('/oauth2/token') && typeof init?.body === 'string'
        ? { grantType: new URLSearchParams(init.body).get('grant_type') }
        : {}),
    });
    return res;
  };
  const storage = new ClientStorage(new MemoryStorage());
  const medplum = new MedplumClient({ ...options, baseUrl, fetch: recordingFetch, storage });
  return { medplum, exchanges, storage };
}

/** Logs in with client credentials and returns a ready client. */
export async function loginClient(baseUrl, clientId, clientSecret, options = {}) {
  const c = newClient(baseUrl, options);
  await c.medplum.startClientLogin(clientId, clientSecret);
  return c;
}

/** The last exchange recorded for a client (see newClient). */
export function last(exchanges) {
  assert.ok(exchanges.length > 0, 'no request was made');
  return exchanges[exchanges.length - 1];
}

/**
 * Asserts that a client call rejects with an OperationOutcomeError whose
 * outcome matches. Returns the outcome.
 * @param {Promise<unknown>} promise
 * @param {{status?: number, id?: string, code?: string, text?: string | RegExp, expression?: string}} want
 */
export async function rejectsWithOutcome(promise, want) {
  let caught;
  try {
    await promise;
  } catch (err) {
    caught = err;
  }
  assert.ok(caught, `expected a rejection matching ${JSON.stringify(want)}, got success`);
  assert.ok(caught instanceof OperationOutcomeError, `expected OperationOutcomeError, got ${caught?.name}: ${caught?.message}`);
  const outcome = normalizeOperationOutcome(caught);
  const ctx = JSON.stringify(outcome);
  assert.equal(outcome.resourceType, 'OperationOutcome', ctx);
  if (want.status !== undefined) {
    assert.equal(getStatus(outcome), want.status, `getStatus(outcome): ${ctx}`);
  }
  if (want.id !== undefined) {
    assert.equal(outcome.id, want.id, `outcome.id: ${ctx}`);
  }
  const issue = outcome.issue?.[0];
  assert.ok(issue, `outcome without issues: ${ctx}`);
  assert.equal(issue.severity, 'error', `issue severity: ${ctx}`);
  if (want.code !== undefined) {
    assert.equal(issue.code, want.code, `issue code: ${ctx}`);
  }
  if (want.text !== undefined) {
    if (want.text instanceof RegExp) {
      assert.match(issue.details?.text ?? '', want.text, `details.text: ${ctx}`);
    } else {
      assert.equal(issue.details?.text, want.text, `details.text: ${ctx}`);
    }
  }
  if (want.expression !== undefined) {
    assert.ok(
      outcome.issue.some((i) => i.expression?.includes(want.expression)),
      `no issue names ${want.expression}: ${ctx}`
    );
  }
  return outcome;
}
