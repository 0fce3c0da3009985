// People through MedplumClient: invite (in each payload form), set the
// password from the e-mail, sign in with startLogin/processCode (PKCE),
// administer members, refresh an access token (rejected, and about to
// expire), sign out.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  ClientStorage,
  MedplumClient,
  MemoryStorage,
  OperationOutcomeError,
  isJwt,
  normalizeOperationOutcome,
  parseJWTPayload,
} from '@medplum/core';
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

  // A RelatedPerson needs the Patient it relates to (InviteRequest.patient).
  await rejectsWithOutcome(
    admin.medplum.invite(project.id, { resourceType: 'RelatedPerson', firstName: 'Rel', lastName: 'Ative', email: 'rel@example.com', sendEmail: false }),
    { status: 400, code: 'invalid' }
  );
  const related = await admin.medplum.invite(project.id, {
    resourceType: 'RelatedPerson', firstName: 'Rel', lastName: 'Ative', email: 'rel@example.com', sendEmail: false,
    patient: pat.profile,
  });
  const rp = await admin.medplum.readReference(related.profile);
  assert.equal(rp.resourceType, 'RelatedPerson');
  assert.equal(rp.patient.reference, pat.profile.reference);
});

test('invite() in each payload form: admin at the top level or in membership, membership.access, sendEmail false or "false"', async () => {
  // A project of its own, so the member searches below see only theirs.
  const project = await admin.medplum.post('admin/Project', { resourceType: 'Project', name: 'Compat Invite Forms' });
  // Resources for the access entries, written by a client of the project.
  const app = await admin.medplum.post(`admin/projects/${project.id}/client`, { name: 'invite forms app' });
  const { medplum: clinic } = await loginClient(stack.baseUrl, app.id, app.secret);
  // The policy by the super admin, placed by meta.project: only admins write
  // access policies.
  const policy = await admin.medplum.createResource({
    resourceType: 'AccessPolicy',
    meta: { project: project.id },
    name: 'One patient',
    resource: [{ resourceType: 'Patient', criteria: 'Patient?_id=%patient.id' }],
  });
  const [p1, p2, p3] = await Promise.all(
    ['One', 'Two', 'Three'].map((family) => clinic.createResource({ resourceType: 'Patient', name: [{ family }] }))
  );
  // The same policy twice, with a different parameter each time.
  const access = [p1, p2].map((p) => ({
    policy: { reference: `AccessPolicy/${policy.id}` },
    parameter: [{ name: 'patient', valueReference: { reference: `Patient/${p.id}` } }],
  }));

  const forms = [
    {
      body: { resourceType: 'Practitioner', firstName: 'Top', lastName: 'Level', email: 'top@example.com', sendEmail: false, admin: true },
      admin: true,
    },
    {
      body: { resourceType: 'Practitioner', firstName: 'In', lastName: 'Membership', email: 'inmember@example.com', sendEmail: false, membership: { admin: true } },
      admin: true,
    },
    {
      body: {
        resourceType: 'Practitioner',
        firstName: 'Care',
        lastName: 'Giver',
        email: 'carer@example.com',
        password: PASSWORD,
        sendEmail: 'false',
        membership: { access },
      },
      admin: false,
      access,
    },
    {
      body: { resourceType: 'Patient', firstName: 'No', lastName: 'Mail', email: 'nomail@example.com', sendEmail: false },
      admin: false,
    },
  ];
  for (const { body, admin: isAdmin, access: wantAccess } of forms) {
    const label = JSON.stringify(body);
    const membership = await admin.medplum.invite(project.id, body);
    assert.deepEqual([last(admin.exchanges).method, last(admin.exchanges).status], ['POST', 200], label);
    assert.equal(membership.resourceType, 'ProjectMembership', label);
    assert.equal(membership.project.reference, `Project/${project.id}`, label);
    assert.match(membership.profile.reference, new RegExp(`^${body.resourceType}/`), label);
    assert.match(membership.user.reference, /^User\//, label);
    assert.equal(membership.admin ?? false, isAdmin, label);
    assert.deepEqual(membership.access, wantAccess, label);

    // What was stored is what was returned.
    const stored = await admin.medplum.get(`admin/projects/${project.id}/members/${membership.id}`, { cache: 'no-cache' });
    assert.equal(stored.admin ?? false, isAdmin, label);
    assert.deepEqual(stored.access, wantAccess, label);
    const profile = await admin.medplum.readReference(membership.profile);
    assert.deepEqual(profile.name, [{ given: [body.firstName], family: body.lastName }], label);
  }

  // The carer signs in and sees the two patients the two entries name, as a
  // union of one policy instantiated twice, and not the third.
  const carer = newClient(stack.baseUrl);
  const { code } = await carer.medplum.startLogin({ email: 'carer@example.com', password: PASSWORD });
  await carer.medplum.processCode(code);
  assert.equal((await carer.medplum.readResource('Patient', p1.id)).id, p1.id);
  assert.equal((await carer.medplum.readResource('Patient', p2.id)).id, p2.id);
  await rejectsWithOutcome(carer.medplum.readResource('Patient', p3.id), { status: 404, id: 'not-found' });
  const seen = await carer.medplum.searchResources('Patient');
  assert.deepEqual(seen.map((p) => p.id).sort(), [p1.id, p2.id].sort());

  // A default invite (sendEmail left out) sends its e-mail; once it is there,
  // none came for the invites that said false, as a boolean or as a string.
  await admin.medplum.invite(project.id, { resourceType: 'Patient', firstName: 'Yes', lastName: 'Mail', email: 'yesmail@example.com' });
  await waitForMail(stack, 'yesmail@example.com');
  for (const { body } of forms) {
    await assert.rejects(waitForMail(stack, body.email, 0), /no e-mail/, `an e-mail went to ${body.email}`);
  }
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

test('an access token about to expire is refreshed before the call, with the refresh token of an offline_access sign-in', async () => {
  // How the token comes to be "expired" without waiting an hour. MedplumClient
  // refreshes before a request (wrappedFetch -> refreshIfExpired) once
  //   Date.now() >= exp * 1000 - refreshGracePeriod
  // where exp is the stored token's own claim and refreshGracePeriod is a
  // documented constructor option (default 5 minutes). So the honest way is a
  // real short-lived token from the server plus that option, not a forged
  // token: a stack with PINION_ACCESS_TOKEN_LIFETIME=10m (the shortest it
  // allows: below the client's default 5-minute grace period plus margin a
  // client would refresh without end) issues tokens with exp = iat + 600 s,
  // iat in whole seconds, so a new token has 599-600 s left; with a 596 s
  // grace period the client treats it as current for 3-4 s (signing in
  // takes milliseconds) and then, by its own clock, as due for refresh.
  // Setting a token whose exp is already past with setAccessToken would
  // test a token the server never issued; waiting out the token would take
  // ten minutes.
  const GRACE_MS = 596_000;
  const short = await startPinion({ env: { PINION_ACCESS_TOKEN_LIFETIME: '10m' } });
  try {
    const root = await loginClient(short.baseUrl, short.superAdmin.clientId, short.superAdmin.clientSecret, {
      refreshGracePeriod: 0,
    });
    const proj = await root.medplum.post('admin/Project', { resourceType: 'Project', name: 'Short Tokens' });
    // InviteRequest.password sets the password at once, so no e-mail round trip.
    const member = await root.medplum.invite(proj.id, {
      resourceType: 'Practitioner',
      firstName: 'Rhea',
      lastName: 'Fresh',
      email: 'rhea@example.com',
      password: PASSWORD,
      sendEmail: false,
    });

    const { medplum, exchanges } = newClient(short.baseUrl, { refreshGracePeriod: GRACE_MS });
    const { code } = await medplum.startLogin({ email: 'rhea@example.com', password: PASSWORD, scope: 'openid offline_access' });
    await medplum.processCode(code);
    const first = { access: medplum.getAccessToken(), refresh: medplum.getActiveLogin().refreshToken };
    assert.equal(typeof first.refresh, 'string', 'offline_access gave no refresh token');
    const { exp, iat } = parseJWTPayload(first.access);
    assert.equal(exp - iat, 600, 'a real 10-minute token');
    assert.ok(medplum.isAuthenticated(), 'signing in took longer than the grace period leaves');

    const deadline = Date.now() + 6_000;
    while (medplum.isAuthenticated()) {
      assert.ok(Date.now() < deadline, 'the client never found the token due');
      await new Promise((ok) => setTimeout(ok, 50));
    }

    const before = exchanges.length;
    const me = await medplum.readReference(member.profile);
    assert.equal(`Practitioner/${me.id}`, member.profile.reference);
    // Refreshed first, no 401 on the way.
    assert.deepEqual(
      exchanges.slice(before).map((e) => [e.method, new URL(e.url).pathname, e.status, e.grantType]),
      [
        ['POST', '/oauth2/token', 200, 'refresh_token'],
        ['GET', '/auth/me', 200, undefined],
        ['GET', `/fhir/R4/${member.profile.reference}`, 200, undefined],
      ]
    );
    const now = medplum.getAccessToken();
    assert.notEqual(now, first.access);
    assert.ok(parseJWTPayload(now).exp > exp, 'the new token expires later');
    assert.notEqual(medplum.getActiveLogin().refreshToken, first.refresh, 'refresh tokens rotate');
    assert.ok(medplum.isAuthenticated());
  } finally {
    await short.stop();
  }
});
