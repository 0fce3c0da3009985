// Discovery (OpenID Connect Discovery 1.0, RFC 8414) and the client
// credentials grant (RFC 6749 §4.4) through openid-client, whose discovery()
// checks the issuer and whose grant functions check every token response.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import * as client from 'openid-client';
import { createClient, createProject, oauthError, startPinion, superAdminToken } from './harness.js';

let stack;
let app; // a ClientApplication of a project, {id, secret}

before(async () => {
  stack = await startPinion();
  const token = await superAdminToken(stack);
  const projectId = await createProject(stack, token, 'OIDC discovery');
  app = await createClient(stack, token, projectId, { name: 'oidc machine client' });
});

after(async () => {
  await stack?.stop();
});

/** Records each response the library receives, to read its headers. */
function recording(config) {
  const responses = [];
  config[client.customFetch] = async (url, init) => {
    const res = await fetch(url, init);
    responses.push({ url: String(url), res });
    return res;
  };
  return responses;
}

test('discovery() accepts the issuer and its metadata names what the specs require', async () => {
  const config = await client.discovery(stack.issuer, app.id, undefined, client.ClientSecretBasic(app.secret), {
    execute: [client.allowInsecureRequests],
  });
  const md = config.serverMetadata();
  assert.equal(md.issuer, stack.baseUrl);
  assert.equal(md.token_endpoint, stack.baseUrl + 'oauth2/token');
  assert.equal(md.authorization_endpoint, stack.baseUrl + 'oauth2/authorize');
  assert.equal(md.jwks_uri, stack.baseUrl + '.well-known/jwks.json');
  // OIDC Discovery §3: RS256 MUST be among the ID token algorithms.
  assert.ok(md.id_token_signing_alg_values_supported?.includes('RS256'), JSON.stringify(md.id_token_signing_alg_values_supported));
  // RFC 8414 §2: where RFC 7009 revocation and RFC 7662 introspection are served.
  assert.equal(md.revocation_endpoint, stack.baseUrl + 'oauth2/revoke');
  assert.equal(md.introspection_endpoint, stack.baseUrl + 'oauth2/introspect');
  // OIDC Discovery §3: omitted means true, and request_uri is not supported.
  assert.equal(md.request_uri_parameter_supported, false);
  // Each advertised endpoint answers (not 404) where the metadata says.
  for (const name of ['revocation_endpoint', 'introspection_endpoint']) {
    const res = await fetch(md[name], { method: 'POST', body: new URLSearchParams({ token: 'x' }) });
    await res.arrayBuffer();
    assert.notEqual(res.status, 404, `${name} ${md[name]} is not served`);
  }
});

for (const [method, auth] of [
  ['client_secret_basic', (s) => client.ClientSecretBasic(s)],
  ['client_secret_post', (s) => client.ClientSecretPost(s)],
]) {
  test(`clientCredentialsGrant() with ${method}: tokens, Cache-Control: no-store and Pragma: no-cache`, async () => {
    const config = await client.discovery(stack.issuer, app.id, undefined, auth(app.secret), {
      execute: [client.allowInsecureRequests],
    });
    const responses = recording(config);
    const tokens = await client.clientCredentialsGrant(config);
    assert.equal(typeof tokens.access_token, 'string');
    assert.ok(tokens.access_token.length > 0);
    assert.equal(tokens.token_type.toLowerCase(), 'bearer');
    assert.ok(tokens.expiresIn() > 0, 'expires_in');

    const tokenResponses = responses.filter((r) => r.url === stack.baseUrl + 'oauth2/token');
    assert.equal(tokenResponses.length, 1);
    const { res } = tokenResponses[0];
    // RFC 6749 §5.1: MUST.
    assert.match(res.headers.get('cache-control') ?? '', /\bno-store\b/);
    assert.equal(res.headers.get('pragma'), 'no-cache');
  });
}

test('clientCredentialsGrant() with a wrong secret is invalid_client (401)', async () => {
  const config = await client.discovery(stack.issuer, app.id, undefined, client.ClientSecretPost('not-the-secret'), {
    execute: [client.allowInsecureRequests],
  });
  const { error, status } = await oauthError(client.clientCredentialsGrant(config));
  assert.equal(error, 'invalid_client');
  assert.equal(status, 401);
});
