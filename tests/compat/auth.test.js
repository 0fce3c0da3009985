// Sign-in and project administration through MedplumClient: client
// credentials, /auth/me, creating a project and a client application in it,
// signing one client-credentials session out, the sign-in rate limit.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  ClientStorage,
  MedplumClient,
  MemoryStorage,
  OperationOutcomeError,
  canReadResourceType,
  canWriteResourceType,
  createReference,
  isJwt,
  normalizeOperationOutcome,
  parseJWTPayload,
} from '@medplum/core';
import { last, loginClient, newClient, rejectsWithOutcome, startPinion } from './harness.js';

let stack;
let admin; // the super admin's client, signed in by the first test

before(async () => {
  stack = await startPinion();
});

after(async () => {
  await stack?.stop();
});

test('startClientLogin as super admin: /oauth2/token then /auth/me; getProfile() is the ClientApplication', async () => {
  const { clientId, clientSecret } = stack.superAdmin;
  admin = newClient(stack.baseUrl);
  const { medplum, exchanges } = admin;

  const profile = await medplum.startClientLogin(clientId, clientSecret);

  // The client made exactly these two calls, both answered with JSON.
  assert.deepEqual(
    exchanges.map((e) => [e.method, new URL(e.url).pathname, e.status]),
    [
      ['POST', '/oauth2/token', 200],
      ['GET', '/auth/me', 200],
    ]
  );
  assert.match(exchanges[1].contentType, /json/);

  assert.equal(profile.resourceType, 'ClientApplication');
  assert.equal(profile.id, clientId);
  assert.deepEqual(medplum.getProfile(), profile);
  assert.deepEqual(await medplum.getProfileAsync(), profile);
  assert.ok(medplum.isAuthenticated(), 'token not accepted as current');

  // The token is one Medplum's client recognizes as a Medplum token (that is
  // what makes it call /auth/me at all): a JWT with login_id and client_id.
  const token = medplum.getAccessToken();
  assert.ok(isJwt(token));
  const claims = parseJWTPayload(token);
  assert.equal(typeof claims.login_id, 'string');
  assert.equal(claims.client_id, clientId);
  assert.equal(claims.iss, stack.baseUrl);

  // /auth/me filled the session details the client exposes.
  const project = medplum.getProject();
  assert.equal(project?.resourceType, 'Project');
  assert.equal(project.superAdmin, true);
  const membership = medplum.getProjectMembership();
  assert.equal(membership?.resourceType, 'ProjectMembership');
  assert.equal(typeof membership.id, 'string');
  assert.equal(membership.profile.reference, `ClientApplication/${clientId}`);
  assert.ok(medplum.isSuperAdmin(), 'isSuperAdmin() is false');
  assert.ok(medplum.isProjectAdmin(), 'isProjectAdmin() is false');
  assert.equal(medplum.getUserConfiguration()?.resourceType, 'UserConfiguration');

  // The login the client stored names the same project and profile.
  const login = medplum.getActiveLogin();
  assert.equal(login.profile.reference, `ClientApplication/${clientId}`);
  assert.equal(login.project.reference, `Project/${project.id}`);
});

test("/auth/me has Medplum's shape: cut-down project and membership, a UserConfiguration, no user for a client", async () => {
  const { medplum, exchanges } = admin;
  const me = await medplum.get('auth/me', { cache: 'no-cache' });
  assert.deepEqual([last(exchanges).method, last(exchanges).status], ['GET', 200]);
  // Medplum's meHandler sends only these fields of the project and the
  // membership (never Project.secret, say), and `user` only for User logins.
  const extra = (obj, allowed) => Object.keys(obj).filter((k) => !allowed.includes(k));
  assert.deepEqual(extra(me.project, ['resourceType', 'id', 'name', 'description', 'strictMode', 'superAdmin']), []);
  assert.deepEqual(extra(me.membership, ['resourceType', 'id', 'identifier', 'user', 'profile', 'admin']), []);
  assert.equal(me.project.id, medplum.getProject().id);
  assert.equal(me.membership.admin, true);
  assert.equal(me.profile.resourceType, 'ClientApplication');
  assert.equal(me.config?.resourceType, 'UserConfiguration');
  assert.ok(Array.isArray(me.config.menu), JSON.stringify(me.config));
  assert.equal(me.user, undefined, 'a ClientApplication is not a User');
});

test("post('admin/Project') as super admin creates the Project (201)", async () => {
  const { medplum, exchanges } = admin;
  const created = await medplum.post('admin/Project', { resourceType: 'Project', name: 'Compat Clinic' });

  assert.equal(last(exchanges).status, 201);
  assert.equal(created.resourceType, 'Project');
  assert.equal(created.name, 'Compat Clinic');
  assert.equal(typeof created.id, 'string');
  assert.equal(created.strictMode, true);
  assert.equal(typeof created.meta?.versionId, 'string');
  assert.equal(typeof created.meta?.lastUpdated, 'string');
  assert.ok(!created.superAdmin, 'a new project must not be super admin');

  // A super admin reads it back through the FHIR API.
  const read = await medplum.readResource('Project', created.id);
  assert.equal(read.name, 'Compat Clinic');
  assert.equal(read.meta.versionId, created.meta.versionId);
});

test("post('admin/Project') without a name is a 400 naming the field", async () => {
  const outcome = await rejectsWithOutcome(admin.medplum.post('admin/Project', { resourceType: 'Project' }), {
    status: 400,
    code: 'invalid',
    expression: 'name',
  });
  assert.equal(outcome.id, undefined);
  assert.equal(last(admin.exchanges).status, 400);
});

test("post('admin/projects/<id>/client') returns a ClientApplication with a secret that signs in", async () => {
  const project = await admin.medplum.post('admin/Project', { resourceType: 'Project', name: 'Client App Project' });
  const app = await admin.medplum.post(`admin/projects/${project.id}/client`, { name: 'compat app' });

  assert.equal(last(admin.exchanges).status, 201);
  assert.equal(app.resourceType, 'ClientApplication');
  assert.equal(app.name, 'compat app');
  assert.equal(typeof app.id, 'string');
  assert.equal(typeof app.secret, 'string');
  assert.ok(app.secret.length >= 32, `secret too short: ${app.secret.length}`);
  assert.equal(app.meta?.project, project.id);

  // A second client signs in with the new credentials.
  const { medplum, exchanges } = newClient(stack.baseUrl);
  const profile = await medplum.startClientLogin(app.id, app.secret);
  assert.deepEqual(
    exchanges.map((e) => [e.method, new URL(e.url).pathname, e.status]),
    [
      ['POST', '/oauth2/token', 200],
      ['GET', '/auth/me', 200],
    ]
  );
  assert.equal(profile.resourceType, 'ClientApplication');
  assert.equal(profile.id, app.id);
  assert.equal(profile.secret, undefined, 'the secret must not be returned again');
  assert.equal(medplum.getProject()?.id, project.id);
  assert.equal(medplum.getProjectMembership()?.profile.reference, `ClientApplication/${app.id}`);
  assert.ok(!medplum.isSuperAdmin());
  assert.equal(medplum.getActiveLogin().project.reference, `Project/${project.id}`);
});

test("/auth/me's accessPolicy is the policy computed for the login, which @medplum/core's permission checks read", async () => {
  const project = await admin.medplum.post('admin/Project', { resourceType: 'Project', name: 'Policy Project' });
  const policy = await admin.medplum.createResource({
    resourceType: 'AccessPolicy',
    meta: { project: project.id },
    name: 'patients read-only, own observations',
    resource: [
      { resourceType: 'Patient', readonly: true },
      { resourceType: 'Observation', criteria: 'Observation?identifier=%profile.id' },
    ],
  });
  const app = await admin.medplum.post(`admin/projects/${project.id}/client`, {
    name: 'policy reader',
    accessPolicy: createReference(policy),
  });
  const { medplum } = await loginClient(stack.baseUrl, app.id, app.secret);

  const accessPolicy = medplum.getAccessPolicy();
  assert.equal(accessPolicy?.resourceType, 'AccessPolicy', JSON.stringify(accessPolicy));
  assert.ok(canReadResourceType(accessPolicy, 'Patient'));
  assert.ok(!canWriteResourceType(accessPolicy, 'Patient'));
  assert.ok(canWriteResourceType(accessPolicy, 'Observation'));
  assert.ok(!canReadResourceType(accessPolicy, 'Practitioner'));
  // The parameters are in: %profile is this client.
  assert.ok(
    accessPolicy.resource.some((r) => r.criteria === `Observation?identifier=${app.id}`),
    JSON.stringify(accessPolicy.resource)
  );
});

test('startClientLogin with a bad secret rejects with "Invalid secret" and leaves the client signed out', async () => {
  const { medplum, exchanges } = newClient(stack.baseUrl);
  const err = await medplum.startClientLogin(stack.superAdmin.clientId, 'not-the-secret-' + 'x'.repeat(32)).then(
    () => assert.fail('signed in with a bad secret'),
    (e) => e
  );
  assert.ok(err instanceof OperationOutcomeError, `${err?.name}: ${err?.message}`);
  assert.equal(err.message, 'Failed to fetch tokens: Invalid secret');
  assert.equal(normalizeOperationOutcome(err).issue[0].details.text, 'Invalid secret');
  assert.deepEqual(
    exchanges.map((e) => [e.method, new URL(e.url).pathname, e.status]),
    [['POST', '/oauth2/token', 401]]
  );
  assert.equal(medplum.getAccessToken(), undefined);
  assert.equal(medplum.getProfile(), undefined);
});

test('startClientLogin with an unknown client id rejects with "Invalid client"', async () => {
  const { medplum } = newClient(stack.baseUrl);
  await assert.rejects(medplum.startClientLogin('no-such-client', 'x'.repeat(40)), {
    name: 'OperationOutcomeError',
    message: 'Failed to fetch tokens: Invalid client',
  });
});

test("a project's own client cannot post('admin/Project'): 403 forbidden", async () => {
  const project = await admin.medplum.post('admin/Project', { resourceType: 'Project', name: 'Not Super' });
  const app = await admin.medplum.post(`admin/projects/${project.id}/client`, { name: 'plain app' });
  const { medplum, exchanges } = await loginClient(stack.baseUrl, app.id, app.secret);

  await rejectsWithOutcome(medplum.post('admin/Project', { resourceType: 'Project', name: 'Sneaky' }), {
    status: 403,
    id: 'forbidden',
    code: 'forbidden',
    text: 'Forbidden',
  });
  assert.equal(last(exchanges).status, 403);
});

test('a client that has not signed in gets 401 from the server', async () => {
  const { medplum, exchanges } = newClient(stack.baseUrl);
  await rejectsWithOutcome(medplum.searchResources('Patient'), { status: 401, id: 'unauthorized' });
  assert.deepEqual(
    exchanges.map((e) => [e.method, new URL(e.url).pathname, e.status]),
    [['GET', '/fhir/R4/Patient', 401]]
  );
});

test('a token the server rejects (401) makes the client sign in again with its client credentials and retry', async () => {
  const project = await admin.medplum.post('admin/Project', { resourceType: 'Project', name: 'Relogin' });
  const app = await admin.medplum.post(`admin/projects/${project.id}/client`, { name: 'relogin app' });
  const { medplum, exchanges, storage } = await loginClient(stack.baseUrl, app.id, app.secret);
  const patient = await medplum.createResource({ resourceType: 'Patient', name: [{ family: 'Relogin' }] });

  // Spoil the signature of the stored token, as if it had been revoked or
  // signed with a key the server no longer has; it still looks current to the client.
  const good = medplum.getAccessToken();
  const [h, p, sig] = good.split('.');
  const bad = `${h}.${p}.${sig.startsWith('A') ? 'B' : 'A'}${sig.slice(1)}`;
  storage.setObject('activeLogin', { ...medplum.getActiveLogin(), accessToken: bad });
  medplum.setAccessToken(bad);
  assert.ok(medplum.isAuthenticated());

  const before = exchanges.length;
  const read = await medplum.readResource('Patient', patient.id);
  assert.equal(read.id, patient.id);
  assert.deepEqual(
    exchanges.slice(before).map((e) => [e.method, new URL(e.url).pathname, e.status]),
    [
      ['GET', `/fhir/R4/Patient/${patient.id}`, 401],
      ['POST', '/oauth2/token', 200],
      ['GET', '/auth/me', 200],
      ['GET', `/fhir/R4/Patient/${patient.id}`, 200],
    ]
  );
  assert.notEqual(medplum.getAccessToken(), bad);
});

test('signOut() of one client-credentials session leaves the other sessions of that ClientApplication working', async () => {
  const project = await admin.medplum.post('admin/Project', { resourceType: 'Project', name: 'Two Workers' });
  const app = await admin.medplum.post(`admin/projects/${project.id}/client`, { name: 'worker app' });
  // Two workers signed in with the same credentials.
  const a = await loginClient(stack.baseUrl, app.id, app.secret);
  const b = await loginClient(stack.baseUrl, app.id, app.secret);
  const aToken = a.medplum.getAccessToken();

  await a.medplum.signOut();
  assert.deepEqual([last(a.exchanges).method, new URL(last(a.exchanges).url).pathname, last(a.exchanges).status], [
    'POST',
    '/oauth2/logout',
    200,
  ]);

  const before = b.exchanges.length;
  await b.medplum.searchResources('Patient');
  assert.deepEqual(
    b.exchanges.slice(before).map((e) => [e.method, new URL(e.url).pathname, e.status]),
    [['GET', '/fhir/R4/Patient', 200]]
  );

  // a's token is dead for anyone still holding it...
  const stale = new MedplumClient({
    baseUrl: stack.baseUrl,
    storage: new ClientStorage(new MemoryStorage()),
    accessToken: aToken,
    fetch,
  });
  await rejectsWithOutcome(stale.searchResources('Patient'), { status: 401, id: 'unauthorized' });

  // ...and signing in again works at once.
  const c = await loginClient(stack.baseUrl, app.id, app.secret);
  await c.medplum.searchResources('Patient');
  assert.deepEqual(
    c.exchanges.map((e) => [e.method, new URL(e.url).pathname, e.status]),
    [
      ['POST', '/oauth2/token', 200],
      ['GET', '/auth/me', 200],
      ['GET', '/fhir/R4/Patient', 200],
    ]
  );
});

test('the sign-in rate limit: RateLimit header the client reads, /auth/me not counted, one request per 429', async () => {
  const LIMIT = 4;
  const limited = await startPinion({ env: { PINION_AUTH_RATE_LIMIT: String(LIMIT) } });
  try {
    const { clientId, clientSecret } = limited.superAdmin;
    // Each sign-in is POST /oauth2/token + GET /auth/me; only the first counts.
    for (let i = 1; i <= LIMIT; i++) {
      const { medplum, exchanges } = newClient(limited.baseUrl);
      await medplum.startClientLogin(clientId, clientSecret);
      assert.deepEqual(
        exchanges.map((e) => [new URL(e.url).pathname, e.status]),
        [
          ['/oauth2/token', 200],
          ['/auth/me', 200],
        ]
      );
      const [status] = medplum.rateLimitStatus();
      assert.equal(status?.name, 'requests', JSON.stringify(medplum.rateLimitStatus()));
      assert.equal(status.remainingUnits, LIMIT - i);
      assert.ok(status.secondsUntilReset > 0 && status.secondsUntilReset <= 60, JSON.stringify(status));
    }

    // Over the limit: the client sees the reset time in the RateLimit header,
    // which is beyond its maxRetryTime, so it gives up after one request
    // instead of retrying the 429.
    const { medplum, exchanges } = newClient(limited.baseUrl);
    await rejectsWithOutcome(medplum.startClientLogin(clientId, clientSecret), { status: 429, id: 'too-many-requests', code: 'throttled' });
    assert.deepEqual(
      exchanges.map((e) => [new URL(e.url).pathname, e.status]),
      [['/oauth2/token', 429]]
    );
    assert.equal(medplum.rateLimitStatus()[0]?.remainingUnits, 0);
  } finally {
    await limited.stop();
  }
});
