// Sign-in through an external OpenID provider that is not the test's own
// hand-written one: panva's oidc-provider (pinned in package.json), run in
// this process on 127.0.0.1 with its development login and consent pages.
// Pinion is the provider's client: it exchanges the code (client_secret_post
// or client_secret_basic, PKCE S256), verifies the ID token against the
// provider's JWKS, and finishes the sign-in as Medplum does (a redirect to
// the app with login and code, then /oauth2/token). Covered: a domain's
// provider found by /auth/method, a ClientApplication's provider with
// useSubject, and the provider's people Pinion refuses (an unverified
// address, an address outside the domain, a nonce from another sign-in);
// and, against an attacker who runs a provider on their own project's
// client (issue 52): a forged state signs nobody in, a project's provider
// reaches that project only and changes nothing of the account, and an
// external sign-in asks for the person's second factor.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, createHmac, generateKeyPairSync, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import Provider from 'oidc-provider';
import { Browser, createClient, createProject, freePort, inviteUser, parseForms, startPinion, superAdminToken } from './harness.js';
import { sleep, waitForMail } from '../stack.js';

const REQUEST_TIMEOUT_MS = 15_000;

let stack;
let idp; // {issuer, server}
let token; // the super admin's
let projectId;
let domain;
let redirectUri; // the app's; nothing listens there, the browser stops at it
let app; // a ClientApplication without a provider of its own (the domain's is used)
let ssoApp; // a ClientApplication with its own provider, useSubject
const members = {}; // name -> {email, membershipId}
// The attacker: a project of their own whose client signs in through a
// provider they run (here, the same oidc-provider, whose accounts the
// test makes up), and the victim they invited into it.
let attackerProject;
let attackerApp;
const victim = { email: `victim-${randomBytes(3).toString('hex')}@clinic.example`, password: 'the victim password' };

/** The provider's people, by the login typed on its dev login page. */
const accounts = new Map();

const b64url = (buf) => Buffer.from(buf).toString('base64url');
const s256 = (v) => b64url(createHash('sha256').update(v).digest());

/** A JSON call with the super admin's token that must answer 2xx. */
async function call(path, { body, method = body === undefined ? 'GET' : 'POST', bearer = token } = {}) {
  const res = await fetch(stack.baseUrl + path, {
    method,
    headers: {
      accept: 'application/fhir+json',
      authorization: `Bearer ${bearer}`,
      ...(body === undefined ? {} : { 'content-type': 'application/fhir+json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  const text = await res.text();
  assert.ok(res.ok, `${method} ${path}: ${res.status} ${text.slice(0, 2000)}`);
  return text ? JSON.parse(text) : undefined;
}

/** Invites a Practitioner (no password: they sign in at the provider); returns the project's memberships. */
async function invite(email) {
  await call(`admin/projects/${projectId}/invite`, {
    body: { resourceType: 'Practitioner', firstName: 'Ext', lastName: 'Ernal', email },
  });
  await waitForMail(stack, email); // the invitation's last step: the membership exists
  const bundle = await call(`fhir/R4/ProjectMembership?project=Project/${projectId}&_count=100`);
  return (bundle.entry ?? []).map((e) => e.resource);
}

/** Starts oidc-provider on a free loopback port with Pinion's two registrations. */
async function startProvider(pinionBase) {
  const port = await freePort();
  const issuer = `http://127.0.0.1:${port}`;
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const jwk = { ...privateKey.export({ format: 'jwk' }), kid: 'k1', alg: 'RS256', use: 'sig' };
  const redirect = [pinionBase + 'auth/external'];
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: 'pinion-post',
        client_secret: 'post-secret-' + randomBytes(8).toString('hex'),
        token_endpoint_auth_method: 'client_secret_post',
        redirect_uris: redirect,
      },
      {
        client_id: 'pinion-basic',
        client_secret: 'basic-secret-' + randomBytes(8).toString('hex'),
        token_endpoint_auth_method: 'client_secret_basic',
        redirect_uris: redirect,
      },
    ],
    jwks: { keys: [jwk] },
    cookies: { keys: [randomBytes(32).toString('hex')] },
    // PKCE for every client, not only public ones: Pinion sends a verifier.
    pkce: { required: () => true },
    claims: { openid: ['sub'], email: ['email', 'email_verified'] },
    // Entra ID, Okta and Google put the e-mail in the ID token, where
    // Pinion (like Medplum) reads it; oidc-provider by default keeps
    // scope claims for userinfo when an access token is issued.
    conformIdTokenClaims: false,
    features: { devInteractions: { enabled: true } },
    ttl: { Interaction: 600, Session: 600, Grant: 600, AccessToken: 600, IdToken: 600, AuthorizationCode: 60 },
    async findAccount(_ctx, sub) {
      const a = accounts.get(sub);
      return a && { accountId: sub, claims: async () => ({ sub, email: a.email, email_verified: a.verified }) };
    },
  });
  const server = createServer(provider.callback());
  await new Promise((ok, fail) => server.once('error', fail).listen(port, '127.0.0.1', ok));
  const clients = Object.fromEntries(
    (await Promise.all(['pinion-post', 'pinion-basic'].map((id) => provider.Client.find(id)))).map((c) => [
      c.clientId,
      c.clientSecret,
    ])
  );
  return { issuer, server, clients };
}

before(async () => {
  stack = await startPinion({ env: { PINION_EGRESS_ALLOW_PRIVATE: 'true' } });
  idp = await startProvider(stack.baseUrl);
  token = await superAdminToken(stack);
  projectId = await createProject(stack, token, 'External sign-in clinic');
  redirectUri = `http://127.0.0.1:${await freePort()}/cb`;
  app = await createClient(stack, token, projectId, { name: 'ext app', redirectUris: [redirectUri] });
  ssoApp = await createClient(stack, token, projectId, { name: 'ext sso app', redirectUris: [redirectUri] });
  domain = `sso-${randomBytes(4).toString('hex')}.example`;

  const endpoints = {
    issuer: idp.issuer,
    authorizeUrl: `${idp.issuer}/auth`,
    tokenUrl: `${idp.issuer}/token`,
    userInfoUrl: `${idp.issuer}/me`,
    jwksUrl: `${idp.issuer}/jwks`,
    usePkce: true,
  };
  await call('fhir/R4/DomainConfiguration', {
    body: {
      resourceType: 'DomainConfiguration',
      domain,
      identityProvider: {
        ...endpoints,
        clientId: 'pinion-post',
        clientSecret: idp.clients['pinion-post'],
        tokenAuthMethod: 'client_secret_post',
      },
    },
  });
  // The client's provider: no jwksUrl, so Pinion reads the issuer's discovery document.
  const sso = await call(`fhir/R4/ClientApplication/${ssoApp.id}`);
  delete endpoints.jwksUrl;
  sso.identityProvider = {
    ...endpoints,
    clientId: 'pinion-basic',
    clientSecret: idp.clients['pinion-basic'],
    tokenAuthMethod: 'client_secret_basic',
    useSubject: true,
  };
  await call(`fhir/R4/ClientApplication/${ssoApp.id}`, { method: 'PUT', body: sso });

  for (const name of ['ada', 'una', 'sub']) {
    const email = `${name}-${randomBytes(3).toString('hex')}@${domain}`;
    const all = await invite(email);
    const pm = await membershipOf(all, email);
    members[name] = { email, membershipId: pm.id, pm };
  }
  // The provider's people: ada (verified), una (the provider has not
  // verified her address), out (verified, another domain), and a person
  // known to the provider by a subject that is sub's membership externalId.
  accounts.set('ada', { email: members.ada.email, verified: true });
  accounts.set('una', { email: members.una.email, verified: false });
  accounts.set('out', { email: `ada@not-${domain}`, verified: true });
  const subject = `okta|00u-${randomBytes(4).toString('hex')}`;
  accounts.set(subject, { email: `renamed-${randomBytes(3).toString('hex')}@elsewhere.example`, verified: true });
  members.sub.subject = subject;
  const pm = { ...members.sub.pm, externalId: subject };
  await call(`fhir/R4/ProjectMembership/${pm.id}`, { method: 'PUT', body: pm });

  // The victim's own account and project; the attacker's project, its
  // client with the attacker's provider, and the victim invited there.
  await inviteUser(stack, token, projectId, victim.email, victim.password);
  attackerProject = await createProject(stack, token, "Attacker's project");
  attackerApp = await createClient(stack, token, attackerProject, { name: 'attacker app', redirectUris: [redirectUri] });
  const evil = await call(`fhir/R4/ClientApplication/${attackerApp.id}`);
  evil.identityProvider = {
    ...endpoints,
    clientId: 'pinion-basic',
    clientSecret: idp.clients['pinion-basic'],
    tokenAuthMethod: 'client_secret_basic',
  };
  await call(`fhir/R4/ClientApplication/${attackerApp.id}`, { method: 'PUT', body: evil });
  await call(`admin/projects/${attackerProject}/invite`, {
    body: { resourceType: 'Practitioner', firstName: 'Vic', lastName: 'Tim', email: victim.email, sendEmail: false },
  });
  // The attacker's provider vouches for the victim's address.
  accounts.set('evil-as-victim', { email: victim.email, verified: true });
});

after(async () => {
  if (idp) {
    const closed = new Promise((ok) => idp.server.close(ok));
    idp.server.closeAllConnections();
    await closed;
  }
  await stack?.stop();
});

/** The membership whose user has this e-mail. */
async function membershipOf(all, email) {
  for (const m of all) {
    const ref = m.user?.reference;
    if (!ref?.startsWith('User/')) continue;
    const user = await call(`fhir/R4/${ref}`);
    if (user.email?.toLowerCase() === email.toLowerCase()) return m;
  }
  assert.fail(`no membership for ${email}`);
}

/**
 * The browser's way from the provider's authorize URL through its login
 * (typing `login`) and consent pages, back to Pinion's /auth/external, and
 * Pinion's answer to that: the Response of /auth/external.
 */
async function throughProvider(browser, authorizeUrl, login) {
  let current = new URL(authorizeUrl);
  let res = await browser.request(current);
  for (let step = 0; step < 10; step++) {
    if (current.href.startsWith(stack.baseUrl + 'auth/external')) {
      return res;
    }
    if (res.status >= 300 && res.status < 400) {
      await res.arrayBuffer();
      current = new URL(res.headers.get('location'), current);
      res = await browser.request(current);
      continue;
    }
    const html = await res.text();
    const forms = parseForms(html);
    assert.ok(res.status === 200 && forms.length > 0, `provider page ${res.status}:\n${html.slice(0, 3000)}\n${browser.trail.join('\n')}`);
    const form = forms[0];
    const body = new URLSearchParams();
    for (const f of form.fields) {
      body.append(f.name, f.name === 'login' ? login : f.type === 'password' ? 'any password' : f.value);
    }
    current = new URL(form.action ?? current.href, current);
    res = await browser.request(current, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body,
    });
  }
  throw new Error(`never came back to Pinion:\n${browser.trail.join('\n')}`);
}

/**
 * Medplum's client's way to the provider (MedplumClient
 * getExternalAuthRedirectUri): the provider's authorize URL with Medplum's
 * JSON state. Pinion passes the state's codeChallenge to the provider as
 * the PKCE verifier, so the provider gets that value's S256 challenge, and
 * Pinion's own code is bound to it as the challenge of the app's verifier.
 */
function externalRequest(authorizeUrl, state, { nonce = state.nonce } = {}) {
  const verifier = b64url(randomBytes(32));
  const st = { codeChallenge: s256(verifier), codeChallengeMethod: 'S256', nonce: b64url(randomBytes(16)), ...state };
  const url = new URL(authorizeUrl);
  url.searchParams.set('response_type', 'code');
  url.searchParams.set('redirect_uri', stack.baseUrl + 'auth/external');
  url.searchParams.set('scope', 'openid email');
  url.searchParams.set('state', JSON.stringify(st));
  url.searchParams.set('nonce', nonce ?? st.nonce);
  url.searchParams.set('code_challenge', s256(st.codeChallenge));
  url.searchParams.set('code_challenge_method', 'S256');
  return { url, verifier };
}

/** Pinion's redirect to the app: its code at /oauth2/token (the app's secret, client_secret_post), then /auth/me. */
async function finish(res, verifier, client) {
  const text = await res.text();
  assert.equal(res.status, 302, `/auth/external answered ${res.status}: ${text.slice(0, 2000)}`);
  const back = new URL(res.headers.get('location'));
  assert.ok(back.href.startsWith(redirectUri + '?'), back.href);
  assert.ok(back.searchParams.get('login'), back.href);
  const tok = await fetch(stack.baseUrl + 'oauth2/token', {
    method: 'POST',
    body: new URLSearchParams({ grant_type: 'authorization_code', code: back.searchParams.get('code'),
      code_verifier: verifier,
      client_id: client.id,
      client_secret: client.secret,
    }),
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  const body = await tok.json();
  assert.equal(tok.status, 200, JSON.stringify(body));
  return call('auth/me', { bearer: body.access_token });
}

/** The OperationOutcome text of a refusal. */
async function refusal(res) {
  const body = await res.json();
  assert.equal(body.resourceType, 'OperationOutcome', JSON.stringify(body));
  return body.issue?.[0]?.details?.text;
}

async function methodUrl(email) {
  const res = await fetch(stack.baseUrl + 'auth/method', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email }),
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  const body = await res.json();
  assert.equal(res.status, 200, JSON.stringify(body));
  assert.equal(body.domain, domain);
  assert.ok(body.authorizeUrl.startsWith(`${idp.issuer}/auth?`), body.authorizeUrl);
  return body.authorizeUrl;
}

test("a domain's provider: /auth/method, the provider's pages, /auth/external, the code, /auth/me", async () => {
  const authorizeUrl = await methodUrl(members.ada.email);
  const { url, verifier } = externalRequest(authorizeUrl, { domain, clientId: app.id, redirectUri });
  const browser = new Browser();
  const res = await throughProvider(browser, url, 'ada');
  // Its login page, then its consent page, each a form the browser posted.
  assert.equal(browser.trail.filter((t) => t.startsWith(`POST ${idp.issuer}/interaction/`)).length, 2, browser.trail.join('\n'));
  const me = await finish(res, verifier, app);
  assert.equal(me.membership.id, members.ada.membershipId, JSON.stringify(me));
  assert.equal(me.project.id, projectId);
});

test("a client's provider with useSubject: the subject is the membership's externalId", async () => {
  const { url, verifier } = externalRequest(`${idp.issuer}/auth?client_id=pinion-basic`, {
    clientId: ssoApp.id,
    redirectUri,
  });
  const res = await throughProvider(new Browser(), url, members.sub.subject);
  const me = await finish(res, verifier, ssoApp);
  assert.equal(me.membership.id, members.sub.membershipId, JSON.stringify(me));
});

test('refused: an address the provider has not verified, one outside the domain, a nonce from another sign-in', async () => {
  const authorizeUrl = await methodUrl(members.una.email);
  const cases = [
    ['una', {}, "External token's email address is not verified"],
    ['out', {}, 'Email address does not match domain'],
    ['ada', { nonce: 'another-sign-in' }, 'Failed to verify code - check your identity provider configuration'],
  ];
  for (const [login, opts, text] of cases) {
    const { url } = externalRequest(authorizeUrl, { domain, clientId: app.id, redirectUri }, opts);
    const res = await throughProvider(new Browser(), url, login);
    assert.equal(res.status, 400, `${login}: ${res.status} ${res.headers.get('location') ?? ''}`);
    assert.equal(await refusal(res), text, login);
  }
});

/** RFC 6238's code of an authenticator secret (base32), stepOffset steps from now. */
function totp(secret, stepOffset = 0) {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
  let bits = '';
  for (const c of secret.replace(/=+$/, '').toUpperCase()) bits += alphabet.indexOf(c).toString(2).padStart(5, '0');
  const key = Buffer.from(bits.match(/.{8}/g).map((b) => parseInt(b, 2)));
  const counter = Buffer.alloc(8);
  counter.writeBigUInt64BE(BigInt(Math.floor(Date.now() / 30_000) + stepOffset));
  const h = createHmac('sha1', key).update(counter).digest();
  const o = h[h.length - 1] & 0xf;
  const n = (((h[o] & 0x7f) << 24) | (h[o + 1] << 16) | (h[o + 2] << 8) | h[o + 3]) % 1_000_000;
  return String(n).padStart(6, '0');
}

/** Waits until the clock is well inside a 30-second step, so codes made now and checked at once agree. */
async function awayFromStepEdge() {
  const deadline = Date.now() + 5_000;
  while (Date.now() % 30_000 < 1_000 || Date.now() % 30_000 > 27_000) {
    assert.ok(Date.now() < deadline);
    await sleep(100);
  }
}

/** A JSON POST without a token; returns {status, body}. */
async function post(path, body, bearer) {
  const res = await fetch(stack.baseUrl + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(bearer ? { authorization: `Bearer ${bearer}` } : {}) },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  return { status: res.status, body: await res.json() };
}

/** Redeems a code of `client` with the PKCE verifier; returns the access token. */
async function redeem(code, verifier, client) {
  const tok = await fetch(stack.baseUrl + 'oauth2/token', {
    method: 'POST',
    body: new URLSearchParams({ grant_type: 'authorization_code', code, code_verifier: verifier,
      ...(client ? { client_id: client.id, client_secret: client.secret } : {}) }),
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  const body = await tok.json();
  assert.equal(tok.status, 200, JSON.stringify(body));
  return body.access_token;
}

test('a forged external sign-in state signs nobody in (issue 52)', async () => {
  // The attacker's browser at the sign-in page for Medplum's CLI, which
  // serves every project, with an address of the domain that has a
  // provider: the page links there, and hands this browser its state.
  const browser = new Browser();
  const cli = new URL(stack.baseUrl + 'oauth2/authorize');
  cli.search = new URLSearchParams({ response_type: 'code', client_id: 'medplum-cli', redirect_uri: 'http://localhost:9615',
    scope: 'openid', state: 'cli', code_challenge: s256('v'.repeat(43)), code_challenge_method: 'S256' }).toString();
  let res = await browser.request(cli);
  const form = parseForms(await res.text()).find((f) => f.fields.some((x) => x.name === 'email'));
  const body = new URLSearchParams();
  for (const f of form.fields) body.append(f.name, f.name === 'email' ? `anyone@${domain}` : f.value);
  res = await browser.request(form.action ? new URL(form.action, cli) : cli, {
    method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', origin: cli.origin }, body });
  const html = await res.text();
  const href = html.match(/href="([^"]*state=[^"]*)"/)?.[1];
  assert.ok(href, html.slice(0, 2000));
  const issued = new URL(href.replace(/&amp;/g, '&').replace(/&#43;/g, '+')).searchParams.get('state');
  let browserValue = 'forged';
  try {
    browserValue = JSON.parse(issued).browser ?? browserValue;
  } catch {
    // an opaque state, as it should be
  }
  // A state naming the attacker's client, the CLI's request and this browser.
  const forged = { clientId: attackerApp.id, authorize: cli.searchParams.toString(), browser: browserValue };
  const { url } = externalRequest(`${idp.issuer}/auth?client_id=pinion-basic`, forged);
  res = await throughProvider(browser, url, 'evil-as-victim');
  assert.equal(res.status, 400, `${res.status} ${res.headers.get('location') ?? ''}\n${browser.trail.join('\n')}`);
  assert.equal(await refusal(res), 'Invalid state');
  // The state the page issues is the server's: nothing in it to read or reuse.
  assert.match(issued, /^[0-9a-f]{64}$/, issued);
});

test("a project's provider reaches that project only, and changes nothing of the account", async () => {
  const { url, verifier } = externalRequest(`${idp.issuer}/auth?client_id=pinion-basic`, { clientId: attackerApp.id, redirectUri });
  const res = await throughProvider(new Browser(), url, 'evil-as-victim');
  assert.equal(res.status, 302);
  const back = new URL(res.headers.get('location'));
  assert.ok(back.href.startsWith(redirectUri + '?'), back.href);
  const bearer = await redeem(back.searchParams.get('code'), verifier, attackerApp);
  const me = await call('auth/me', { bearer });
  assert.equal(me.project.id, attackerProject, JSON.stringify(me.project));
  // Its token is the attacker's project's word, not the person's.
  for (const [method, path] of [['GET', 'auth/mfa/status'], ['POST', 'auth/passkeys/register/begin']]) {
    const r = await fetch(stack.baseUrl + path, { method, headers: { authorization: `Bearer ${bearer}` }, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
    const text = await r.text();
    assert.equal(r.status, 403, `${method} ${path}: ${r.status} ${text.slice(0, 500)}`);
  }
});

test("an external sign-in asks for the person's second factor", async () => {
  const email = `mfa-${randomBytes(3).toString('hex')}@${domain}`;
  await inviteUser(stack, token, projectId, email, 'an mfa password');
  accounts.set('mfa', { email, verified: true });
  // The person enrols an authenticator after a password sign-in.
  const verifier = b64url(randomBytes(32));
  const signIn = await post('auth/login', { email, password: 'an mfa password', codeChallenge: verifier, codeChallengeMethod: 'plain' });
  assert.equal(signIn.status, 200, JSON.stringify(signIn.body));
  const own = await redeem(signIn.body.code, verifier);
  const status = await call('auth/mfa/status', { bearer: own });
  const secret = new URL(status.enrollUri).searchParams.get('secret');
  await awayFromStepEdge();
  const enrol = await post('auth/mfa/enroll', { token: totp(secret) }, own);
  assert.equal(enrol.status, 200, JSON.stringify(enrol.body));

  // Through the domain's provider: no code until the authenticator's.
  const authorizeUrl = await methodUrl(email);
  const ext = externalRequest(authorizeUrl, { domain, clientId: app.id, redirectUri });
  const res = await throughProvider(new Browser(), ext.url, 'mfa');
  assert.equal(res.status, 302);
  const back = new URL(res.headers.get('location'));
  assert.ok(!back.href.startsWith(redirectUri), `a code without the second factor: ${back.href}`);
  const login = back.searchParams.get('login');
  const pending = await fetch(stack.baseUrl + 'auth/login/' + login, { signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
  const owed = await pending.json();
  assert.deepEqual(owed, { login, mfaRequired: true });
  assert.equal((await post('auth/mfa/verify', { login, token: '000000' })).status, 400);
  await awayFromStepEdge();
  const verified = await post('auth/mfa/verify', { login, token: totp(secret, 1) });
  assert.equal(verified.status, 200, JSON.stringify(verified.body));
  const me = await call('auth/me', { bearer: await redeem(verified.body.code, ext.verifier, app) });
  assert.equal(me.project.id, projectId);
});
