// Self-registration through MedplumClient, as Medplum's RegisterForm and
// app do it: startNewUser, then startNewProject or startNewPatient, then
// processCode; sign in again with startLogin; invite. A patient signs up
// under the project's defaultPatientAccessPolicy and reads only themself.
// Refusals carry Medplum's texts, and registration can be turned off.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { last, loginClient, newClient, rejectsWithOutcome, startPinion, waitForMail } from './harness.js';

const PASSWORD = 'a long registered password';

let stack;
let admin; // super admin client
let founder; // { medplum, project }: registered, owns a project
let policy; // the project's patient policy

before(async () => {
  stack = await startPinion();
  admin = await loginClient(stack.baseUrl, stack.superAdmin.clientId, stack.superAdmin.clientSecret);
});

after(async () => {
  await stack?.stop();
});

test('startNewUser, startNewProject, processCode: a new person owns a new project', async () => {
  const c = newClient(stack.baseUrl);
  const { login } = await c.medplum.startNewUser({
    firstName: 'Fay',
    lastName: 'Founder',
    email: 'fay@example.com',
    password: PASSWORD,
    remember: true,
  });
  assert.equal(typeof login, 'string');
  const { code } = await c.medplum.startNewProject({ login, projectName: 'Fay Clinic' });
  assert.equal(typeof code, 'string');
  const profile = await c.medplum.processCode(code);
  assert.equal(profile.resourceType, 'Practitioner');
  assert.deepEqual(profile.name, [{ given: ['Fay'], family: 'Founder' }]);
  const project = c.medplum.getProject();
  assert.equal(project.name, 'Fay Clinic');
  assert.equal(c.medplum.getProjectMembership().admin, true);

  // The founder signs in again with the password and invites a colleague.
  const again = newClient(stack.baseUrl);
  const res = await again.medplum.startLogin({ email: 'fay@example.com', password: PASSWORD });
  await again.medplum.processCode(res.code);
  assert.equal(again.medplum.getProject().id, project.id);
  const member = await again.medplum.invite(project.id, {
    resourceType: 'Practitioner',
    firstName: 'Col',
    lastName: 'League',
    email: 'col@example.com',
  });
  assert.equal(member.project.reference, `Project/${project.id}`);
  founder = { medplum: again.medplum, project };
});

test('the registration e-mail\'s link: POST auth/verifyemail, once', async () => {
  const mail = await waitForMail(stack, 'fay@example.com');
  const link = mail.match(/\/verifyemail\/([0-9a-f-]{36})\/([0-9a-f]{64})/);
  assert.ok(link, `no verification link in:\n${mail}`);
  const c = newClient(stack.baseUrl);
  await rejectsWithOutcome(c.medplum.post('auth/verifyemail', { id: link[1], secret: '0'.repeat(64) }), {
    status: 400,
    text: 'Incorrect secret',
  });
  await c.medplum.post('auth/verifyemail', { id: link[1], secret: link[2] });
  assert.equal(last(c.exchanges).status, 200);
  await rejectsWithOutcome(c.medplum.post('auth/verifyemail', { id: link[1], secret: link[2] }), { status: 400, text: 'Already used' });
  const user = await admin.medplum.searchOne('User', { email: 'fay@example.com' });
  assert.equal(user.emailVerified, true);
});

test('startNewUser with an address already registered: 400 "Email already registered"', async () => {
  const c = newClient(stack.baseUrl);
  await rejectsWithOutcome(
    c.medplum.startNewUser({ firstName: 'Fake', lastName: 'Fay', email: 'Fay@Example.com', password: 'another password' }),
    { status: 400, text: 'Email already registered', expression: 'email' }
  );
  assert.equal(last(c.exchanges).status, 400);
});

test('startNewUser refuses bad fields with Medplum\'s texts', async () => {
  const c = newClient(stack.baseUrl);
  await rejectsWithOutcome(c.medplum.startNewUser({ firstName: '', lastName: 'X', email: 'x@example.com', password: PASSWORD }), {
    status: 400,
    text: 'First name must be between 1 and 128 characters',
    expression: 'firstName',
  });
  await rejectsWithOutcome(c.medplum.startNewUser({ firstName: 'X', lastName: 'X', email: 'x@example.com', password: 'short' }), {
    status: 400,
    text: 'Password must be between 8 and 72 characters',
    expression: 'password',
  });
});

test('startNewUser with a leaked password: 400 "Password found in breach database"', async () => {
  const c = newClient(stack.baseUrl);
  await rejectsWithOutcome(c.medplum.startNewUser({ firstName: 'Lee', lastName: 'Ked', email: 'leaked@example.com', password: 'Password1' }), {
    status: 400,
    text: 'Password found in breach database',
    expression: 'password',
  });
});

test('startNewPatient: a patient signs up under the project\'s default patient policy and reads only themself', async () => {
  const { project } = founder;
  // Closed until the project names a patient policy.
  const early = newClient(stack.baseUrl);
  await rejectsWithOutcome(
    early.medplum.startNewUser({ firstName: 'Early', lastName: 'Bird', email: 'early@example.com', password: PASSWORD, projectId: project.id }),
    { status: 400, text: 'Project does not allow open registration' }
  );

  policy = await founder.medplum.createResource({
    resourceType: 'AccessPolicy',
    name: 'patients',
    resource: [{ resourceType: 'Patient', criteria: 'Patient?_id=%patient.id' }],
  });
  const other = await founder.medplum.createResource({ resourceType: 'Patient', name: [{ family: 'Someone-Else' }] });
  // A super admin sets the project's policy (Pinion's project admins change
  // their Project only through /admin routes).
  const p = await admin.medplum.readResource('Project', project.id);
  await admin.medplum.updateResource({ ...p, defaultPatientAccessPolicy: { reference: `AccessPolicy/${policy.id}` } });

  const c = newClient(stack.baseUrl);
  const { login } = await c.medplum.startNewUser({
    firstName: 'Pat',
    lastName: 'Signup',
    email: 'pat.signup@example.com',
    password: PASSWORD,
    projectId: project.id,
  });
  const { code } = await c.medplum.startNewPatient({ login, projectId: project.id });
  const me = await c.medplum.processCode(code);
  assert.equal(me.resourceType, 'Patient');
  const membership = await founder.medplum.searchOne('ProjectMembership', { profile: `Patient/${me.id}` });
  assert.equal(membership.accessPolicy?.reference, `AccessPolicy/${policy.id}`);
  assert.equal(membership.admin, undefined);

  assert.equal((await c.medplum.readResource('Patient', me.id)).id, me.id);
  const seen = await c.medplum.searchResources('Patient');
  assert.deepEqual(
    seen.map((r) => r.id),
    [me.id]
  );
  await assert.rejects(c.medplum.readResource('Patient', other.id));
  assert.ok([403, 404].includes(last(c.exchanges).status), `status ${last(c.exchanges).status}`);

  // The same login cannot take a second membership.
  await rejectsWithOutcome(c.medplum.startNewPatient({ login, projectId: project.id }), {
    status: 400,
    text: 'Login already has a membership',
  });
});

test('registration turned off (PINION_REGISTER_ENABLED=false): 400 "Registration is disabled"', async () => {
  const closed = await startPinion({ env: { PINION_REGISTER_ENABLED: 'false' } });
  try {
    const c = newClient(closed.baseUrl);
    await rejectsWithOutcome(c.medplum.startNewUser({ firstName: 'No', lastName: 'Entry', email: 'no@example.com', password: PASSWORD }), {
      status: 400,
      text: 'Registration is disabled',
    });
  } finally {
    await closed.stop();
  }
});

test('startNewUser with a project site\'s recaptchaSiteKey: that site\'s secret verifies the token', async () => {
  // A local siteverify that accepts one token per secret key.
  const tokens = { 'server-secret': 'server-token', 'portal-secret': 'portal-token' };
  const verifier = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk) => (body += chunk));
    req.on('end', () => {
      const form = new URLSearchParams(body);
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify({ success: tokens[form.get('secret')] === form.get('response') }));
    });
  });
  await new Promise((resolve) => verifier.listen(0, '127.0.0.1', resolve));
  const guarded = await startPinion({
    env: {
      PINION_RECAPTCHA_SITE_KEY: 'server-site-key',
      PINION_RECAPTCHA_SECRET_KEY: 'server-secret',
      PINION_RECAPTCHA_VERIFY_URL: `http://127.0.0.1:${verifier.address().port}/siteverify`,
    },
  });
  try {
    const su = await loginClient(guarded.baseUrl, guarded.superAdmin.clientId, guarded.superAdmin.clientSecret);
    // A founder registers with the server's key, and founds a project.
    const f = newClient(guarded.baseUrl);
    const { login } = await f.medplum.startNewUser({
      firstName: 'Sid', lastName: 'Site', email: 'sid@example.com', password: PASSWORD,
      recaptchaSiteKey: 'server-site-key', recaptchaToken: 'server-token',
    });
    await f.medplum.processCode((await f.medplum.startNewProject({ login, projectName: 'Portal Clinic' })).code);
    const project = f.medplum.getProject();
    const patients = await f.medplum.createResource({
      resourceType: 'AccessPolicy', name: 'patients', resource: [{ resourceType: 'Patient', criteria: 'Patient?_id=%patient.id' }],
    });
    const p = await su.medplum.readResource('Project', project.id);
    await su.medplum.updateResource({
      ...p,
      defaultPatientAccessPolicy: { reference: `AccessPolicy/${patients.id}` },
      site: [{ name: 'portal', domain: ['portal.example'], recaptchaSiteKey: 'portal-site-key', recaptchaSecretKey: 'portal-secret' }],
    });
    // The project's admin sees the site, not its secret key.
    const seen = await f.medplum.readResource('Project', project.id);
    assert.equal(seen.site?.[0]?.recaptchaSiteKey, 'portal-site-key');
    assert.equal(seen.site?.[0]?.recaptchaSecretKey, undefined);

    const patient = { firstName: 'Pam', lastName: 'Portal', password: PASSWORD, projectId: project.id, recaptchaSiteKey: 'portal-site-key' };
    const c = newClient(guarded.baseUrl);
    await rejectsWithOutcome(c.medplum.startNewUser({ ...patient, email: 'pam@example.com', recaptchaToken: 'server-token' }), {
      status: 400,
      text: 'Recaptcha failed',
    });
    await rejectsWithOutcome(c.medplum.startNewUser({ ...patient, email: 'pam@example.com', recaptchaSiteKey: 'unknown-site-key', recaptchaToken: 'portal-token' }), {
      status: 400,
      text: 'Invalid recaptchaSiteKey',
    });
    const signup = await c.medplum.startNewUser({ ...patient, email: 'pam@example.com', recaptchaToken: 'portal-token' });
    const me = await c.medplum.processCode((await c.medplum.startNewPatient({ login: signup.login, projectId: project.id })).code);
    assert.equal(me.resourceType, 'Patient');
  } finally {
    await guarded.stop();
    verifier.close();
  }
});
