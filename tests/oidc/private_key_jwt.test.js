// private_key_jwt client authentication (RFC 7523 §2.2, OIDC Core §9) as
// oauth4webapi does it: the assertion's aud is the issuer identifier
// (RFC 7523 §3 lets the token endpoint accept it), signed RS256 with a key
// the client publishes at its jwksUri, here a server of this test on
// 127.0.0.1 (hence PINION_REST_HOOK_ALLOW_PRIVATE).

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import * as oauth from 'oauth4webapi';
import { createClient, createProject, readable, startPinion, superAdminToken } from './harness.js';

let stack;
let jwks; // the client's key set server
let jwksRequests = 0;
let app;
let privateKey;
const kid = 'oidc-test-key-1';

before(async () => {
  const pair = await crypto.subtle.generateKey(
    { name: 'RSASSA-PKCS1-v1_5', modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: 'SHA-256' },
    true,
    ['sign', 'verify']
  );
  privateKey = pair.privateKey;
  const { kty, n, e } = await crypto.subtle.exportKey('jwk', pair.publicKey);
  const body = JSON.stringify({ keys: [{ kty, n, e, kid, alg: 'RS256', use: 'sig' }] });
  jwks = createServer((req, res) => {
    jwksRequests++;
    res.writeHead(200, { 'content-type': 'application/json' }).end(body);
  });
  await new Promise((ok) => jwks.listen(0, '127.0.0.1', ok));

  stack = await startPinion({ env: { PINION_REST_HOOK_ALLOW_PRIVATE: 'true' } });
  const token = await superAdminToken(stack);
  const projectId = await createProject(stack, token, 'OIDC backend services');
  app = await createClient(stack, token, projectId, {
    name: 'oidc backend service',
    jwksUri: `http://127.0.0.1:${jwks.address().port}/jwks.json`,
  });
});

after(async () => {
  await stack?.stop();
  await new Promise((ok) => (jwks ? jwks.close(ok) : ok()));
});

test("client_credentials with oauth4webapi's PrivateKeyJwt (aud = the issuer) gets a token", async () => {
  const insecure = { [oauth.allowInsecureRequests]: true };
  const as = await oauth.processDiscoveryResponse(stack.issuer, await oauth.discoveryRequest(stack.issuer, insecure));
  const c = { client_id: app.id };

  const sent = [];
  const res = await oauth.clientCredentialsGrantRequest(as, c, oauth.PrivateKeyJwt({ key: privateKey, kid }), new URLSearchParams(), {
    ...insecure,
    [oauth.customFetch]: (url, init) => {
      sent.push(new URLSearchParams(init.body));
      return fetch(url, init);
    },
  });
  // What this test is about: the assertion names the issuer as its audience.
  const assertion = sent[0]?.get('client_assertion');
  assert.ok(assertion, 'no client_assertion sent');
  const claims = JSON.parse(Buffer.from(assertion.split('.')[1], 'base64url').toString());
  assert.equal(claims.aud, as.issuer);
  assert.equal(claims.iss, app.id);
  assert.equal(sent[0].get('client_assertion_type'), 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer');

  const tokens = await readable(oauth.processClientCredentialsResponse(as, c, res));
  assert.equal(typeof tokens.access_token, 'string');
  assert.equal(tokens.token_type.toLowerCase(), 'bearer');
  assert.ok(jwksRequests > 0, "Pinion never fetched the client's jwksUri");
});
