// The authorization code grant with PKCE (RFC 6749 §4.1, RFC 7636, OpenID
// Connect Core §3.1) through openid-client, a browser without JavaScript in
// between: the ID token checked by the library (RS256 signature against the
// JWKS, iss, aud, nonce, exp), refresh (RFC 6749 §6), userinfo, RFC 7009
// revocation and RFC 7662 introspection through oauth4webapi, and the
// refusals a strict client reads: invalid_client, invalid_grant and the
// error a prompt=none request without consent comes back with.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import * as client from 'openid-client';
import * as oauth from 'oauth4webapi';
import {
  Browser,
  createClient,
  createProject,
  freePort,
  inviteUser,
  oauthError,
  readable,
  startPinion,
  superAdminToken,
} from './harness.js';

let stack;
let appBase; // http://127.0.0.1:<port>/, where the apps' redirect URIs are
let redirectUri; // appBase + 'cb'
let person;
let browser; // the person's browser: signed in after the first sign-in
let apps; // {a, b, c}: ClientApplications of the person's project, {id, secret}

const insecure = { [oauth.allowInsecureRequests]: true };

before(async () => {
  stack = await startPinion();
  const token = await superAdminToken(stack);
  const projectId = await createProject(stack, token, 'OIDC clinic');
  // Nothing listens there: the browser stops at the redirect, as an app's
  // callback would receive it.
  appBase = `http://127.0.0.1:${await freePort()}/`;
  redirectUri = appBase + 'cb';
  apps = {
    a: await createClient(stack, token, projectId, { name: 'oidc web app', redirectUris: [redirectUri, appBase + 'other'] }),
    b: await createClient(stack, token, projectId, { name: 'oidc other app', redirectUris: [redirectUri] }),
    c: await createClient(stack, token, projectId, { name: 'oidc app never allowed', redirectUris: [redirectUri] }),
  };
  person = { email: `olive-${Date.now()}@example.com`, password: 'a long password for oidc' };
  await inviteUser(stack, token, projectId, person.email, person.password);
  browser = new Browser();
});

after(async () => {
  await stack?.stop();
});

/**
 * openid-client's configuration for a client, from discovery. ID tokens
 * are RS256 (the OIDC default for id_token_signed_response_alg) and their
 * signatures are checked even from the token endpoint.
 */
async function configFor(app, auth = client.ClientSecretBasic(app.secret)) {
  return client.discovery(stack.issuer, app.id, { id_token_signed_response_alg: 'RS256' }, auth, {
    execute: [client.allowInsecureRequests, client.enableNonRepudiationChecks],
  });
}

/** Sends the browser to /oauth2/authorize for this client; returns where it came back. */
async function signIn(config, extra = {}) {
  const verifier = client.randomPKCECodeVerifier();
  const state = client.randomState();
  const nonce = client.randomNonce();
  const url = client.buildAuthorizationUrl(config, {
    redirect_uri: redirectUri,
    scope: 'openid offline_access',
    code_challenge: await client.calculatePKCECodeChallenge(verifier),
    code_challenge_method: 'S256',
    state,
    nonce,
    ...extra,
  });
  const callback = await browser.authorize(url, appBase, person);
  return { callback, checks: { pkceCodeVerifier: verifier, expectedState: state, expectedNonce: nonce, idTokenExpected: true } };
}

/** A code for app a, redeemed: its tokens. */
async function freshTokens(config) {
  const { callback, checks } = await signIn(config);
  return readable(client.authorizationCodeGrant(config, callback, checks));
}

function jwtHeader(jwt) {
  return JSON.parse(Buffer.from(jwt.split('.')[0], 'base64url').toString());
}

test('authorization code with PKCE S256: openid-client accepts the ID token (RS256 via the JWKS, iss, aud, nonce, exp)', async () => {
  const config = await configFor(apps.a);
  const { callback, checks } = await signIn(config);
  assert.equal(callback.origin + callback.pathname, redirectUri);
  assert.ok(callback.searchParams.get('code'), `no code in ${callback}`);

  const tokens = await readable(client.authorizationCodeGrant(config, callback, checks));
  assert.equal(typeof tokens.access_token, 'string');
  assert.equal(tokens.token_type.toLowerCase(), 'bearer');
  assert.equal(typeof tokens.refresh_token, 'string', 'offline_access gives a refresh token');
  assert.equal(jwtHeader(tokens.id_token).alg, 'RS256');
  const claims = tokens.claims();
  assert.equal(claims.iss, stack.baseUrl);
  assert.ok([claims.aud].flat().includes(apps.a.id), `aud ${JSON.stringify(claims.aud)}`);
  assert.equal(claims.nonce, checks.expectedNonce);
  assert.ok(claims.exp > Date.now() / 1000);
  assert.equal(typeof claims.sub, 'string');
});

test('refreshTokenGrant() and fetchUserInfo()', async () => {
  const config = await configFor(apps.a);
  const tokens = await freshTokens(config);
  const sub = tokens.claims().sub;
  const refreshed = await readable(client.refreshTokenGrant(config, tokens.refresh_token));
  assert.equal(typeof refreshed.access_token, 'string');
  assert.notEqual(refreshed.access_token, tokens.access_token);
  if (refreshed.id_token) {
    assert.equal(refreshed.claims().sub, sub);
  }
  // fetchUserInfo checks the answer's sub against the ID token's.
  const info = await readable(client.fetchUserInfo(config, refreshed.access_token, sub));
  assert.equal(info.sub, sub);
});

test('RFC 7009 revocation of a refresh token (oauth4webapi): a refresh with it is then invalid_grant', async () => {
  const config = await configFor(apps.a);
  const as = config.serverMetadata();
  const tokens = await freshTokens(config);
  const res = await oauth.revocationRequest(as, { client_id: apps.a.id }, oauth.ClientSecretPost(apps.a.secret), tokens.refresh_token, {
    ...insecure,
    additionalParameters: { token_type_hint: 'refresh_token' },
  });
  await readable(oauth.processRevocationResponse(res));

  const { error, status } = await oauthError(client.refreshTokenGrant(config, tokens.refresh_token));
  assert.equal(error, 'invalid_grant');
  assert.equal(status, 400);

  // §2.2: an unknown token is answered 200 too.
  const unknown = await oauth.revocationRequest(as, { client_id: apps.a.id }, oauth.ClientSecretBasic(apps.a.secret), 'no-such-token', insecure);
  await readable(oauth.processRevocationResponse(unknown));
});

test('RFC 7662 introspection (oauth4webapi): active, then inactive once the access token is revoked', async () => {
  const config = await configFor(apps.a);
  const as = config.serverMetadata();
  const c = { client_id: apps.a.id };
  const auth = oauth.ClientSecretBasic(apps.a.secret);
  const tokens = await freshTokens(config);
  const sub = tokens.claims().sub;

  const introspect = async (token) =>
    readable(oauth.processIntrospectionResponse(as, c, await oauth.introspectionRequest(as, c, auth, token, insecure)));

  const live = await introspect(tokens.access_token);
  assert.equal(live.active, true, JSON.stringify(live));
  if (live.sub !== undefined) {
    assert.equal(live.sub, sub);
  }
  if (live.client_id !== undefined) {
    assert.equal(live.client_id, apps.a.id);
  }

  await readable(oauth.processRevocationResponse(
    await oauth.revocationRequest(as, c, auth, tokens.access_token, { ...insecure, additionalParameters: { token_type_hint: 'access_token' } })
  ));
  const dead = await introspect(tokens.access_token);
  assert.equal(dead.active, false, JSON.stringify(dead));

  const junk = await introspect('not-a-token');
  assert.equal(junk.active, false, JSON.stringify(junk));
});

test('code grant with a wrong client secret is invalid_client (401)', async () => {
  const { callback, checks } = await signIn(await configFor(apps.a));
  const wrong = await configFor(apps.a, client.ClientSecretPost('not-the-secret'));
  const { error, status } = await oauthError(client.authorizationCodeGrant(wrong, callback, checks));
  assert.equal(error, 'invalid_client');
  assert.equal(status, 401);
});

test("a code redeemed by another client, with that client's own credentials, is invalid_grant", async () => {
  const { callback, checks } = await signIn(await configFor(apps.a));
  const other = await configFor(apps.b);
  const { error, status } = await oauthError(client.authorizationCodeGrant(other, callback, checks));
  assert.equal(error, 'invalid_grant');
  assert.equal(status, 400);
});

test('a redirect_uri at the token endpoint other than the one sent at authorize is invalid_grant', async () => {
  const config = await configFor(apps.a);
  const { callback, checks } = await signIn(config);
  // openid-client sends the callback URL without its query as redirect_uri:
  // another URI that app a registered too.
  const elsewhere = new URL(callback);
  elsewhere.pathname = '/other';
  const { error, status } = await oauthError(client.authorizationCodeGrant(config, elsewhere, checks));
  assert.equal(error, 'invalid_grant');
  assert.equal(status, 400);
});

test('prompt=none for a client the person never allowed comes back with consent_required or login_required, no code', async () => {
  // The browser is signed in (and has allowed app a).
  await signIn(await configFor(apps.a));

  const config = await configFor(apps.c);
  const state = client.randomState();
  const url = client.buildAuthorizationUrl(config, {
    redirect_uri: redirectUri,
    scope: 'openid offline_access',
    code_challenge: await client.calculatePKCECodeChallenge(client.randomPKCECodeVerifier()),
    code_challenge_method: 'S256',
    state,
    nonce: client.randomNonce(),
    prompt: 'none',
  });
  const res = await browser.request(url);
  const body = await res.text();
  assert.equal(res.status, 302, `prompt=none must redirect, not show a page: ${body.slice(0, 1000)}`);
  const back = new URL(res.headers.get('location'));
  assert.equal(back.origin + back.pathname, redirectUri);
  assert.equal(back.searchParams.get('code'), null, `a code was issued without consent: ${back}`);
  assert.throws(
    () => oauth.validateAuthResponse(config.serverMetadata(), { client_id: apps.c.id }, back.searchParams, state),
    (err) => {
      assert.ok(err instanceof oauth.AuthorizationResponseError, `${err.name}: ${err.message}`);
      assert.ok(['consent_required', 'login_required'].includes(err.error), `error ${err.error}`);
      return true;
    }
  );
});

test("withdrawing a consent ends the client's access tokens as well as its refresh tokens, and nothing else", async () => {
  const b = await configFor(apps.b);
  const tokensB = await freshTokens(b);
  const tokensA = await freshTokens(await configFor(apps.a));
  const me = (token) => fetch(stack.baseUrl + 'auth/me', { headers: { authorization: `Bearer ${token}` } });
  assert.equal((await me(tokensB.access_token)).status, 200);

  // The person withdraws their consent to b, through a's session.
  const res = await fetch(stack.baseUrl + `auth/consents/${apps.b.id}`, {
    method: 'DELETE',
    headers: { authorization: `Bearer ${tokensA.access_token}` },
  });
  assert.equal(res.status, 200, await res.text());

  // b's access token stops at once (the answer waited for the gateway's view).
  const after = await me(tokensB.access_token);
  assert.equal(after.status, 401, await after.text());
  const as = b.serverMetadata();
  const c = { client_id: apps.b.id };
  const info = await readable(oauth.processIntrospectionResponse(as, c,
    await oauth.introspectionRequest(as, c, oauth.ClientSecretBasic(apps.b.secret), tokensB.access_token, insecure)));
  assert.equal(info.active, false, JSON.stringify(info));
  const { error } = await oauthError(client.refreshTokenGrant(b, tokensB.refresh_token));
  assert.equal(error, 'invalid_grant');
  // a's sign-in goes on; b, signed in again after a new consent, works.
  assert.equal((await me(tokensA.access_token)).status, 200);
  const again = await freshTokens(b);
  assert.equal((await me(again.access_token)).status, 200);
  // The new consent does not bring the old sign-in back.
  assert.equal((await me(tokensB.access_token)).status, 401);
  const old = await readable(oauth.processIntrospectionResponse(as, c,
    await oauth.introspectionRequest(as, c, oauth.ClientSecretBasic(apps.b.secret), tokensB.access_token, insecure)));
  assert.equal(old.active, false, JSON.stringify(old));
});
