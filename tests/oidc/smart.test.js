// SMART App Launch 2.x through SMART's own JavaScript client, fhirclient
// (its Node adapter), as an app hosted on loopback runs it: the EHR launch
// (a SmartAppLaunch the practitioner's session created, sent as launch)
// and the standalone launch with launch/patient, where the practitioner
// chooses the patient on Pinion's picker. The browser in between is the
// harness's, without JavaScript. Each token is then used as the app uses
// it: its patient/ scopes reach the patient in context and no other.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import smart from 'fhirclient';
import * as client from 'openid-client';
import { Browser, createClient, createProject, freePort, inviteUser, readable, startPinion, superAdminToken } from './harness.js';

let stack;
let fhirBase; // the iss an EHR gives its apps
let app; // the SMART app: {id, secret}, its server and its base URL
let person; // a practitioner of the project
let personToken; // their access token, from an ordinary sign-in
let patients; // {alice, bob}: Patient ids of the project
let other; // another project's {projectToken}

/** A JSON request with a token; returns {status, body}. */
async function fhir(path, token, body) {
  const res = await fetch(fhirBase + '/' + path, {
    method: body ? 'POST' : 'GET',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/fhir+json' },
    body: body ? JSON.stringify(body) : undefined,
    signal: AbortSignal.timeout(15_000),
  });
  return { status: res.status, body: await res.json() };
}

/** A client's client-credentials token. */
async function clientToken(c) {
  const res = await fetch(stack.baseUrl + 'oauth2/token', {
    method: 'POST',
    body: new URLSearchParams({ grant_type: 'client_credentials', client_id: c.id, client_secret: c.secret }),
  });
  const body = await res.json();
  assert.equal(res.status, 200, JSON.stringify(body));
  return body.access_token;
}

/**
 * The app: /launch starts fhirclient's authorize (iss and launch come in
 * its query, as an EHR sends them), /cb finishes it with ready() and says
 * what the app then knows, reading the patient in context with its token.
 */
async function startApp(scope) {
  const sessions = new Map();
  const storage = {
    get: async (k) => sessions.get(k),
    set: async (k, v) => {
      sessions.set(k, v);
      return v;
    },
    unset: async (k) => sessions.delete(k),
  };
  const port = await freePort();
  const base = `http://127.0.0.1:${port}/`;
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, base);
    try {
      if (url.pathname === '/launch') {
        await smart(req, res, storage).authorize({
          clientId: app.id,
          clientSecret: app.secret,
          scope: url.searchParams.get('scope') ?? scope,
          redirectUri: base + 'cb',
          iss: url.searchParams.get('iss') ?? undefined,
        });
        return;
      }
      if (url.pathname === '/cb') {
        const c = await smart(req, res, storage).ready();
        const patient = c.patient.id ? await c.patient.read() : undefined;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ patient: c.patient.id, encounter: c.encounter.id, tokenResponse: c.state.tokenResponse, read: patient?.id }));
        return;
      }
      res.writeHead(404).end();
    } catch (err) {
      res.writeHead(500, { 'content-type': 'text/plain' });
      res.end(String(err?.stack ?? err));
    }
  });
  await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve));
  return { base, close: () => new Promise((resolve) => server.close(resolve)) };
}

/**
 * Opens the app's launch URL as the EHR would, follows the browser
 * through Pinion's pages, and returns what the app's callback answered
 * ({status, body}), or the callback URL itself when Pinion refused.
 */
async function launch(query, choose) {
  const res = await fetch(appServer.base + 'launch?' + new URLSearchParams(query), { redirect: 'manual' });
  const text = await res.text();
  assert.equal(res.status, 302, `the app's launch did not redirect: ${res.status} ${text}`);
  const authorizeUrl = new URL(res.headers.get('location'));
  assert.equal(authorizeUrl.origin + authorizeUrl.pathname, stack.baseUrl + 'oauth2/authorize');
  const callback = await browser.authorize(authorizeUrl, appServer.base + 'cb', person, choose);
  if (callback.searchParams.has('error')) {
    return { refused: callback };
  }
  const done = await fetch(callback);
  const body = await done.text();
  assert.equal(done.status, 200, `the app's callback failed: ${body}`);
  return JSON.parse(body);
}

let appServer;
let browser;

before(async () => {
  stack = await startPinion();
  fhirBase = stack.baseUrl + 'fhir/R4';
  const token = await superAdminToken(stack);
  const projectId = await createProject(stack, token, 'SMART clinic');
  appServer = await startApp('launch openid fhirUser patient/*.rs');
  app = await createClient(stack, token, projectId, { name: 'SMART growth chart', redirectUris: [appServer.base + 'cb'] });
  // The EHR's own back end, which records the patients.
  const ehr = await clientToken(await createClient(stack, token, projectId, { name: 'EHR back end' }));
  patients = {};
  for (const [key, family, birthDate] of [['alice', 'Quillfeather', '1961-02-03'], ['bob', 'Quillman', '1975-06-07']]) {
    const { status, body } = await fhir('Patient', ehr, { resourceType: 'Patient', name: [{ given: [key], family }], birthDate });
    assert.equal(status, 201, JSON.stringify(body));
    patients[key] = body.id;
  }
  person = { email: `smart-${Date.now()}@example.com`, password: 'a long password for smart' };
  await inviteUser(stack, token, projectId, person.email, person.password);
  browser = new Browser();
  // The practitioner's own token, as the EHR session that creates launches
  // holds it: an ordinary code flow through openid-client.
  const config = await client.discovery(stack.issuer, app.id, undefined, client.ClientSecretBasic(app.secret), {
    execute: [client.allowInsecureRequests],
  });
  const verifier = client.randomPKCECodeVerifier();
  const url = client.buildAuthorizationUrl(config, {
    redirect_uri: appServer.base + 'cb',
    scope: 'openid user/*.cruds',
    code_challenge: await client.calculatePKCECodeChallenge(verifier),
    code_challenge_method: 'S256',
    state: 'ehr',
  });
  const callback = await browser.authorize(url, appServer.base + 'cb', person);
  const tokens = await readable(client.authorizationCodeGrant(config, callback, { pkceCodeVerifier: verifier, expectedState: 'ehr' }));
  personToken = tokens.access_token;

  const otherProject = await createProject(stack, token, 'Another clinic');
  other = { projectToken: await clientToken(await createClient(stack, token, otherProject, { name: 'other EHR' })) };
});

after(async () => {
  await appServer?.close();
  await stack?.stop();
});

/** A SmartAppLaunch created with token. */
async function newLaunch(token, fields) {
  const { status, body } = await fhir('SmartAppLaunch', token, { resourceType: 'SmartAppLaunch', ...fields });
  assert.equal(status, 201, JSON.stringify(body));
  return body.id;
}

test('smart-configuration advertises both launches and their context', async () => {
  const res = await fetch(fhirBase + '/.well-known/smart-configuration');
  const doc = await res.json();
  for (const c of ['launch-ehr', 'launch-standalone', 'context-ehr-patient', 'context-ehr-encounter', 'context-standalone-patient', 'context-banner', 'context-style']) {
    assert.ok(doc.capabilities.includes(c), `${c} missing from ${doc.capabilities}`);
  }
  assert.ok(doc.scopes_supported.includes('launch') && doc.scopes_supported.includes('launch/patient'));
  const styles = await fetch(fhirBase + '/.well-known/smart-styles.json');
  assert.equal(styles.status, 200);
  assert.equal(typeof (await styles.json()).color_background, 'string');
});

test('EHR launch: fhirclient gets the patient and encounter of the launch, and its patient/ scope reaches that patient only', async () => {
  const encounter = await fhir('Encounter', personToken, {
    resourceType: 'Encounter',
    status: 'in-progress',
    class: { code: 'AMB' },
    subject: { reference: `Patient/${patients.alice}` },
  });
  assert.equal(encounter.status, 201, JSON.stringify(encounter.body));
  const id = await newLaunch(personToken, {
    patient: { reference: `Patient/${patients.alice}` },
    encounter: { reference: `Encounter/${encounter.body.id}` },
    fhirContext: [{ reference: `Encounter/${encounter.body.id}` }],
  });
  const got = await launch({ iss: fhirBase, launch: id });
  assert.ok(!got.refused, `refused: ${got.refused}`);
  assert.equal(got.patient, patients.alice);
  assert.equal(got.encounter, encounter.body.id);
  assert.equal(got.read, patients.alice, 'the app could not read the patient in context');
  const t = got.tokenResponse;
  assert.equal(t.need_patient_banner, true);
  assert.deepEqual(t.fhirContext, [{ reference: `Encounter/${encounter.body.id}` }]);
  assert.equal(t.smart_style_url, fhirBase + '/.well-known/smart-styles.json');
  assert.ok(t.scope.split(' ').includes('launch'), t.scope);
  // patient/*.rs on this token: the other patient is out of reach.
  assert.equal((await fhir(`Patient/${patients.alice}`, t.access_token)).status, 200);
  assert.equal((await fhir(`Patient/${patients.bob}`, t.access_token)).status, 404);
  const list = await fhir('Patient', t.access_token);
  assert.deepEqual(list.body.entry.map((e) => e.resource.id), [patients.alice]);
  // Introspection names the patient too (Medplum's field).
  const info = await fetch(stack.baseUrl + 'oauth2/introspect', {
    method: 'POST',
    headers: { authorization: 'Basic ' + Buffer.from(`${app.id}:${app.secret}`).toString('base64') },
    body: new URLSearchParams({ token: t.access_token }),
  });
  assert.equal((await info.json()).patient, patients.alice);

  // Used once: the same launch again is refused.
  const again = await launch({ iss: fhirBase, launch: id });
  assert.equal(again.refused?.searchParams.get('error'), 'invalid_request');
  assert.equal(again.refused.searchParams.get('error_description'), 'Invalid launch');
});

test("EHR launch: another project's launch, a launch by someone else and an unknown one are refused", async () => {
  const elsewhere = await newLaunch(other.projectToken, {});
  const bySomeoneElse = await newLaunch(await clientToken(app), { patient: { reference: `Patient/${patients.bob}` } });
  for (const id of [elsewhere, bySomeoneElse, 'no-such-launch']) {
    const got = await launch({ iss: fhirBase, launch: id });
    assert.equal(got.refused?.searchParams.get('error'), 'invalid_request', `launch ${id}: ${JSON.stringify(got)}`);
    assert.equal(got.refused.searchParams.get('error_description'), 'Invalid launch');
  }
});

test('standalone launch/patient: the practitioner searches the picker, chooses, and the app gets that patient', async () => {
  let searched = false;
  const pick = (forms, html) => {
    const search = forms.find((f) => f.fields.some((x) => x.name === 'patient_name'));
    if (!search) {
      return undefined;
    }
    if (!searched) {
      searched = true;
      return { form: search, fields: { patient_name: 'Quillm' } };
    }
    // After the search only Bob is listed.
    const choices = forms.filter((f) => f.fields.some((x) => x.name === 'patient'));
    assert.deepEqual(
      choices.map((f) => f.fields.find((x) => x.name === 'patient').value),
      [patients.bob],
      `the picker after a search for Quillm:\n${html}`
    );
    return { form: choices[0] };
  };
  const got = await launch({ iss: fhirBase, scope: 'launch/patient openid fhirUser patient/*.rs' }, pick);
  assert.ok(searched, 'the picker was not shown');
  assert.ok(!got.refused, `refused: ${got.refused}`);
  assert.equal(got.patient, patients.bob);
  assert.equal(got.read, patients.bob);
  assert.ok(got.tokenResponse.scope.split(' ').includes('launch/patient'), got.tokenResponse.scope);
  assert.equal((await fhir(`Patient/${patients.alice}`, got.tokenResponse.access_token)).status, 404);
});
