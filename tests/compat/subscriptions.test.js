// Subscriptions through MedplumClient: a WebSocket subscription made by
// subscribeToCriteria (Subscription + $get-ws-binding-token + the
// /ws/subscriptions-r4 socket) receives the changes that meet its criteria,
// and ends when its socket unbinds.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { loginClient, startPinion } from './harness.js';

let stack;
let member;

before(async () => {
  stack = await startPinion();
  const su = await loginClient(stack.baseUrl, stack.superAdmin.clientId, stack.superAdmin.clientSecret);
  const project = await su.medplum.post('admin/Project', { resourceType: 'Project', name: 'Compat Subscriptions' });
  const app = await su.medplum.post(`admin/projects/${project.id}/client`, { name: 'subscriber' });
  member = await loginClient(stack.baseUrl, app.id, app.secret);
});

after(async () => {
  // The subscription manager's socket reconnects until it is closed.
  member?.medplum.getSubscriptionManager().closeWebSocket();
  await stack?.stop();
});

/** Resolves with the first event of type on emitter, or fails after ms. */
function nextEvent(emitter, type, ms = 10_000) {
  return new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`no ${type} event within ${ms} ms`)), ms);
    const listener = (e) => {
      clearTimeout(timer);
      emitter.removeEventListener(type, listener);
      ok(e);
    };
    emitter.addEventListener(type, listener);
  });
}

test('subscribeToCriteria receives the changes its criteria match, and no others', async () => {
  const medplum = member.medplum;
  const emitter = medplum.subscribeToCriteria('Communication?status=in-progress');
  const connected = await nextEvent(emitter, 'connect');
  assert.ok(connected.payload.subscriptionId, 'the handshake names the subscription');

  const sub = await medplum.readResource('Subscription', connected.payload.subscriptionId);
  assert.equal(sub.channel.type, 'websocket');

  const messages = [];
  emitter.addEventListener('message', (e) => messages.push(e.payload));
  await medplum.createResource({ resourceType: 'Communication', status: 'completed' });
  const wanted = nextEvent(emitter, 'message');
  const made = await medplum.createResource({ resourceType: 'Communication', status: 'in-progress' });
  const { payload: bundle } = await wanted;

  assert.equal(bundle.resourceType, 'Bundle');
  assert.equal(bundle.type, 'history');
  const [status, entry] = bundle.entry;
  assert.equal(status.resource.resourceType, 'SubscriptionStatus');
  assert.equal(status.resource.type, 'event-notification');
  assert.equal(status.resource.subscription.reference, `Subscription/${sub.id}`);
  assert.equal(status.resource.notificationEvent[0].focus.reference, `Communication/${made.id}`);
  assert.equal(entry.resource.id, made.id);
  assert.equal(entry.resource.status, 'in-progress');
  assert.equal(messages.length, 1, 'the completed Communication is not sent');

  // Closing the socket unbinds it (an unsubscribed criteria is unbound
  // 10 s later, or at once with the socket); as in Medplum, the
  // subscription then ends.
  medplum.unsubscribeFromCriteria('Communication?status=in-progress');
  medplum.getSubscriptionManager().closeWebSocket();
  const deadline = Date.now() + 10_000;
  for (;;) {
    const found = await medplum.searchResources('Subscription', { _id: sub.id }, { cache: 'no-cache' });
    if (found.length === 0) {
      break;
    }
    assert.ok(Date.now() < deadline, 'the unbound subscription is still there');
    await new Promise((ok) => setTimeout(ok, 50));
  }
});
