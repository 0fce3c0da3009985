// Authenticator codes (MFA) through MedplumClient, as Medplum's SignInForm
// and MfaForm do it: startLogin answers mfaEnrollRequired or mfaRequired,
// the app posts /auth/mfa/login-enroll or /auth/mfa/verify with the code,
// then processCode. Codes are computed here (RFC 6238).

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { loginClient, newClient, rejectsWithOutcome, startPinion } from './harness.js';

const PASSWORD = 'an authenticated password';
const EMAIL = 'otto.factor@example.com';

let stack;
let admin;
let project;
let uri; // the enrolment's otpauth URI
let enrolledAt; // when the enrolment's code was made

before(async () => {
  stack = await startPinion();
  admin = await loginClient(stack.baseUrl, stack.superAdmin.clientId, stack.superAdmin.clientSecret);
  project = await admin.medplum.createResource({ resourceType: 'Project', name: 'MFA compat' });
});

after(async () => {
  await stack?.stop();
});

/** The six-digit TOTP code (SHA-1, 30 s) of an otpauth URI's secret at ms. */
function totp(otpauth, ms) {
  const secret = new URL(otpauth).searchParams.get('secret').toUpperCase();
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
  let bits = '';
  for (const ch of secret) {
    bits += alphabet.indexOf(ch).toString(2).padStart(5, '0');
  }
  const key = Buffer.from(bits.match(/.{8}/g).map((b) => parseInt(b, 2)));
  const msg = Buffer.alloc(8);
  msg.writeBigUInt64BE(BigInt(Math.floor(ms / 30000)));
  const sum = createHmac('sha1', key).update(msg).digest();
  const off = sum[sum.length - 1] & 0x0f;
  return String((sum.readUInt32BE(off) & 0x7fffffff) % 1000000).padStart(6, '0');
}

test('an invite with mfaRequired: startLogin answers mfaEnrollRequired, login-enroll completes the sign-in', async () => {
  await admin.medplum.post(`admin/projects/${project.id}/invite`, {
    resourceType: 'Practitioner',
    firstName: 'Otto',
    lastName: 'Factor',
    email: EMAIL,
    password: PASSWORD,
    sendEmail: false,
    mfaRequired: true,
  });
  const c = newClient(stack.baseUrl);
  const res = await c.medplum.startLogin({ email: EMAIL, password: PASSWORD });
  assert.equal(res.mfaEnrollRequired, true);
  assert.equal(res.code, undefined);
  assert.match(res.enrollUri, /^otpauth:\/\/totp\//);
  assert.match(res.enrollQrCode, /^data:image\/png;base64,/);
  uri = res.enrollUri;

  // Medplum's login-enroll checks the code as its sign-in does (verifyMfaToken).
  await rejectsWithOutcome(c.medplum.post('auth/mfa/login-enroll', { login: res.login, token: '000000' }), {
    status: 400,
    text: 'Invalid MFA token',
  });
  enrolledAt = Date.now();
  const done = await c.medplum.post('auth/mfa/login-enroll', { login: res.login, token: totp(uri, enrolledAt) });
  assert.equal(done.login, res.login);
  assert.equal(done.recoveryCodes.length, 10);
  const profile = await c.medplum.processCode(done.code);
  assert.equal(profile.resourceType, 'Practitioner');
  assert.deepEqual(await c.medplum.get('auth/mfa/status'), { enrolled: true });
  assert.equal((await c.medplum.get('auth/me')).security.mfaEnrolled, true);
});

test('an enrolled user: startLogin answers mfaRequired, /auth/mfa/verify with a fresh code signs in; a spent one is refused', async () => {
  const c = newClient(stack.baseUrl);
  const res = await c.medplum.startLogin({ email: EMAIL, password: PASSWORD });
  assert.deepEqual(Object.keys(res).sort(), ['login', 'mfaRequired']);
  assert.equal(res.mfaRequired, true);

  await rejectsWithOutcome(c.medplum.post('auth/mfa/verify', { login: res.login, token: totp(uri, enrolledAt) }), {
    status: 400,
    text: 'Invalid MFA token',
  });
  const verified = await c.medplum.post('auth/mfa/verify', { login: res.login, token: totp(uri, enrolledAt + 30000) });
  assert.equal(verified.login, res.login);
  const profile = await c.medplum.processCode(verified.code);
  assert.equal(profile.resourceType, 'Practitioner');
  assert.equal(c.medplum.getProject().id, project.id);
  await rejectsWithOutcome(c.medplum.post('auth/mfa/verify', { login: res.login, token: '123456' }), {
    status: 400,
    text: 'Login granted',
  });
});
