// People through MedplumClient: invite, set the password from the e-mail,
// sign in with startLogin/processCode (PKCE), administer members, refresh an
// access token, sign out.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { ClientStorage, MedplumClient, MemoryStorage, OperationOutcomeError, isJwt, normalizeOperationOutcome } from '@medplum/core';
import { last, loginClient, newClient, rejectsWithOutcome, startPinion, waitForMail } from './harness.js';

const PASSWORD = 'correct horse battery staple';

let stack;
let admin; // super admin client
let project;
let ada; // { medplum, exchanges, storage, membership }: an invited project admin, signed in
let pat; // membership of an invited Patient

before(async () => {
  stack = await startPinion();
  admin = await loginClient(stack.baseUrl, stack.superAdmin.clientId, stack.superAdmin.clientSecret);
  project = await admin.medplum.post('admin/Project', { resourceType: 'Project', name: 'Compat People' });
});

after(async () => {
  await stack?.stop();
});

test('invite() with a JSON body returns the ProjectMembership and e-mails a set-password link', async () => {
  const membership = await admin.medplum.invite(project.id, {
    resourceType: 'Practitioner',
    firstName: 'Ada',
    lastName: 'Admin',
    email: 'Ada@Example.com',
    sendEmail: true,
    admin: true,
  });
  assert.deepEqual([last(admin.exchanges).method, last(admin.exchanges).status], ['POST', 200]);
  assert.equal(membership.resourceType, 'ProjectMembership');
  assert.equal(membership.admin, true);
  assert.equal(membership.project.reference, `Project/${project.id}`);
  assert.match(membership.profile.reference, /^Practitioner\//);
  assert.match(membership.user.reference, /^User\//);
  assert.equal(membership.invitedBy?.reference, `ClientApplication/${stack.superAdmin.clientId}`);

  const profile = await admin.medplum.readReference(membership.profile);
  assert.deepEqual(profile.name, [{ given: ['Ada'], family: 'Admin' }]);
  assert.ok(profile.telecom.some((t) => t.system === 'email' && t.value === 'ada@example.com'), JSON.stringify(profile.telecom));

  const mail = await waitForMail(stack, 'ada@example.com');
  const link = mail.match(/\/setpassword\/([^/\s]+)\/([^/\s]+)/);
  assert.ok(link, `no set-password link in:\n${mail}`);

  // The invitee opens the link: the app posts the password with its id and secret.
  const anon = newClient(stack.baseUrl);
  await anon.medplum.post('auth/setpassword', { id: link[1], secret: link[2], password: PASSWORD });
  assert.equal(last(anon.exchanges).status, 200);
  // The link works once.
  await rejectsWithOutcome(anon.medplum.post('auth/setpassword', { id: link[1], secret: link[2], password: PASSWORD }), {
    status: 400,
  });

  ada = { ...newClient(stack.baseUrl), membership };
});

test('invite() with a form body, a duplicate invite (409) and a bad one (400 per field)', async () => {
  pat = await admin.medplum.post(
    `admin/projects/${project.id}/invite`,
    new URLSearchParams({ resourceType: 'Patient', firstName: 'Pat', lastName: 'Form', email: 'pat@example.com', sendEmail: 'false' }).toString(),
    'application/x-www-form-urlencoded'
  );
  assert.equal(last(admin.exchanges).status, 200);
  assert.equal(pat.resourceType, 'ProjectMembership');
  assert.match(pat.profile.reference, /^Patient\//);
  assert.ok(!pat.admin);

  await rejectsWithOutcome(
    admin.medplum.invite(project.id, { resourceType: 'Patient', firstName: 'Pat', lastName: 'Form', email: 'pat@example.com', sendEmail: false }),
    { status: 409, id: 'conflict', text: 'User is already a member of this project' }
  );

  const outcome = await rejectsWithOutcome(admin.medplum.invite(project.id, { resourceType: 'Practitioner', email: 'x' }), {
    status: 400,
    code: 'invalid',
  });
  const byField = Object.fromEntries(outcome.issue.map((i) => [i.expression?.[0], i.details?.text]));
  assert.equal(byField.firstName, 'First name is required');
  assert.equal(byField.lastName, 'Last name is required');
  assert.equal(byField.email, 'Either email or externalId is required');
});

test('startLogin + processCode signs the invited user in (PKCE), with a refresh token when asked', async () => {
  assert.ok(ada, 'needs the invite test');
  const { medplum, exchanges } = ada;

  const res = await medplum.startLogin({ email: 'ada@example.com', password: PASSWORD, scope: 'openid offline_access' });
  assert.deepEqual([last(exchanges).method, new URL(last(exchanges).url).pathname, last(exchanges).status], ['POST', '/auth/login', 200]);
  assert.equal(typeof res.login, 'string');
  assert.equal(typeof res.code, 'string');

  const before = exchanges.length;
  const profile = await medplum.processCode(res.code);
  assert.deepEqual(
    exchanges.slice(before).map((e) => [e.method, new URL(e.url).pathname, e.status]),
    [
      ['POST', '/oauth2/token', 200],
      ['GET', '/auth/me', 200],
    ]
  );
  assert.equal(profile.resourceType, 'Practitioner');
  assert.equal(`Practitioner/${profile.id}`, ada.membership.profile.reference);
  assert.ok(isJwt(medplum.getAccessToken()));
  assert.equal(typeof medplum.getActiveLogin().refreshToken, 'string');
  assert.equal(medplum.getProject()?.id, project.id);
  assert.ok(medplum.isProjectAdmin());
  assert.ok(!medplum.isSuperAdmin());

});

test('an authorization code used twice is refused and ends the login it made', async () => {
  // A second sign-in of the same user, so Ada's session above is left alone.
  const first = newClient(stack.baseUrl);
  const { code } = await first.medplum.startLogin({ email: 'ada@example.com', password: PASSWORD });
  await first.medplum.processCode(code);

  const second = newClient(stack.baseUrl);
  await assert.rejects(second.medplum.processCode(code), {
    name: 'OperationOutcomeError',
    message: 'Failed to fetch tokens: Token already granted',
  });
  assert.equal(last(second.exchanges).status, 400);

  // RFC 6749 4.1.2: the tokens issued for that code stop working.
  await rejectsWithOutcome(first.medplum.readReference(ada.membership.profile), { status: 401, id: 'unauthorized' });
  assert.equal(first.exchanges.find((e) => e.url.includes('/fhir/R4/'))?.status, 401);
});

test('startLogin with a wrong password is a 400 and signs nobody in', async () => {
  const { medplum, exchanges } = newClient(stack.baseUrl);
  await rejectsWithOutcome(medplum.startLogin({ email: 'ada@example.com', password: 'not the password at all' }), {
    status: 400,
    code: 'invalid',
    text: 'Email or password is invalid',
  });
  assert.equal(last(exchanges).status, 400);
  assert.equal(medplum.getAccessToken(), undefined);
});

test('a project admin reads, searches, replaces and patches memberships', async () => {
  assert.ok(ada?.medplum.getAccessToken() && pat, 'needs the sign-in and invite tests');
  const { medplum, exchanges } = ada;

  const got = await medplum.get(`admin/projects/${project.id}/members/${ada.membership.id}`);
  assert.equal(last(exchanges).status, 200);
  assert.equal(got.id, ada.membership.id);
  assert.equal(got.admin, true);

  const practitioners = await medplum.searchResources('ProjectMembership', { 'profile-type': 'Practitioner' });
  assert.deepEqual(
    practitioners.map((m) => m.id),
    [ada.membership.id]
  );
  const patients = await medplum.searchResources('ProjectMembership', 'profile-type=Patient');
  assert.deepEqual(
    patients.map((m) => m.id),
    [pat.id]
  );

  const patched = await medplum.patch(`admin/projects/${project.id}/members/${pat.id}`, [{ op: 'replace', path: '/admin', value: true }]);
  assert.deepEqual([last(exchanges).method, last(exchanges).status], ['PATCH', 200]);
  assert.equal(patched.admin, true);
  assert.notEqual(patched.meta.versionId, pat.meta.versionId);

  const replaced = await medplum.post(`admin/projects/${project.id}/members/${pat.id}`, { ...patched, admin: false });
  assert.equal(last(exchanges).status, 200);
  assert.equal(replaced.admin, false);

  await rejectsWithOutcome(
    medplum.post(`admin/projects/${project.id}/members/${pat.id}`, { ...replaced, user: { reference: 'User/someone-else' } }),
    { status: 400, code: 'invalid', expression: 'user' }
  );
  const unchanged = await medplum.get(`admin/projects/${project.id}/members/${pat.id}`);
  assert.equal(unchanged.user.reference, pat.user.reference);

  const details = await medplum.get(`admin/projects/${project.id}`);
  assert.equal(details.project.id, project.id);
  assert.equal(details.project.name, 'Compat People');
});

test('a token the server rejects (401) is refreshed with the refresh token and the call retried', async () => {
  assert.ok(ada?.medplum.getActiveLogin()?.refreshToken, 'needs the sign-in test');
  const { medplum, exchanges, storage } = ada;
  const good = medplum.getAccessToken();
  const [h, p, sig] = good.split('.');
  const bad = `${h}.${p}.${sig.startsWith('A') ? 'B' : 'A'}${sig.slice(1)}`;
  const login = medplum.getActiveLogin();
  storage.setObject('activeLogin', { ...login, accessToken: bad });
  medplum.setAccessToken(bad, login.refreshToken);

  const before = exchanges.length;
  const me = await medplum.readReference(ada.membership.profile);
  assert.equal(`Practitioner/${me.id}`, ada.membership.profile.reference);
  const path = `/fhir/R4/${ada.membership.profile.reference}`;
  assert.deepEqual(
    exchanges.slice(before).map((e) => [e.method, new URL(e.url).pathname, e.status]),
    [
      ['GET', path, 401],
      ['POST', '/oauth2/token', 200],
      ['GET', '/auth/me', 200],
      ['GET', path, 200],
    ]
  );
  // Refresh tokens rotate.
  assert.notEqual(medplum.getActiveLogin().refreshToken, login.refreshToken);
});

test('signOut() ends the login: the client forgets it and the old token gets 401', async () => {
  assert.ok(ada?.medplum.getAccessToken(), 'needs the sign-in test');
  const { medplum, exchanges } = ada;
  const token = medplum.getAccessToken();

  await medplum.signOut();
  assert.deepEqual([last(exchanges).method, new URL(last(exchanges).url).pathname, last(exchanges).status], ['POST', '/oauth2/logout', 200]);
  assert.equal(medplum.getAccessToken(), undefined);
  assert.equal(medplum.getActiveLogin(), undefined);

  // Another client still holding the token is turned away.
  const seen = [];
  const stale = new MedplumClient({
    baseUrl: stack.baseUrl,
    storage: new ClientStorage(new MemoryStorage()),
    accessToken: token,
    fetch: async (url, init) => {
      const res = await fetch(url, init);
      seen.push(res.status);
      return res;
    },
  });
  const err = await stale.readReference(ada.membership.profile).then(
    () => assert.fail('the signed-out token still works'),
    (e) => e
  );
  assert.equal(normalizeOperationOutcome(err).id, 'unauthorized');
  assert.deepEqual(seen, [401]);
});
