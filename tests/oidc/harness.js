// Starts the standalone Pinion binary (bin/pinion, built by `make test-oidc`)
// on a free loopback port with a fresh data directory and a known
// super-admin client, as tests/compat does; it builds nothing. Also: the
// admin calls that set up a project, its clients and a person (plain fetch,
// as the README's walk-through does with curl), and a browser without
// JavaScript that follows an authorization request through Pinion's pages.
//
// The stack itself starts as tests/compat's does (tests/stack.js); that
// suite's harness is not imported: it loads @medplum/core.

import assert from 'node:assert/strict';

import { freePort, startPinion as start, waitForMail } from '../stack.js';

/** Every request the tests make gives up after this long. */
const REQUEST_TIMEOUT_MS = 15_000;

export { freePort };

/**
 * Starts bin/pinion for this suite (tests/stack.js), with the issuer URL
 * the OpenID libraries take.
 * @param {{env?: Record<string, string>}} [opts] - extra PINION_ settings.
 */
export async function startPinion(opts = {}) {
  const stack = await start({ ...opts, name: 'oidc' });
  return { ...stack, issuer: new URL(stack.baseUrl) };
}

/** A JSON request that must answer 2xx; returns the parsed body. */
async function call(url, { token, body, method = body === undefined ? 'GET' : 'POST' } = {}) {
  const headers = { accept: 'application/json' };
  if (token) {
    headers.authorization = `Bearer ${token}`;
  }
  if (body !== undefined) {
    headers['content-type'] = 'application/json';
  }
  const res = await fetch(url, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  const text = await res.text();
  assert.ok(res.ok, `${method} ${url}: ${res.status} ${text.slice(0, 2000)}`);
  return text ? JSON.parse(text) : undefined;
}

/** The super admin's access token (client credentials, client_secret_post). */
export async function superAdminToken(stack) {
  const res = await fetch(stack.baseUrl + 'oauth2/token', {
    method: 'POST',
    body: new URLSearchParams({
      grant_type: 'client_credentials',
      client_id: stack.superAdmin.clientId,
      client_secret: stack.superAdmin.clientSecret,
    }),
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  const body = await res.json();
  assert.equal(res.status, 200, JSON.stringify(body));
  return body.access_token;
}

/** A new project; returns its id. */
export async function createProject(stack, token, name) {
  const p = await call(stack.baseUrl + 'admin/Project', { token, body: { resourceType: 'Project', name } });
  return p.id;
}

/**
 * A ClientApplication in the project (POST /admin/projects/:id/client);
 * `fields` are more ClientApplication fields (redirectUris, jwksUri).
 * Returns {id, secret}.
 */
export async function createClient(stack, token, projectId, fields) {
  const c = await call(stack.baseUrl + `admin/projects/${projectId}/client`, { token, body: fields });
  assert.equal(typeof c.id, 'string');
  return { id: c.id, secret: c.secret };
}

/**
 * Invites a Practitioner into the project and sets their password through
 * the link in the invitation e-mail, as the README's walk-through does.
 */
export async function inviteUser(stack, token, projectId, email, password) {
  await call(stack.baseUrl + `admin/projects/${projectId}/invite`, {
    token,
    body: { resourceType: 'Practitioner', firstName: 'Olive', lastName: 'Idc', email },
  });
  const mail = await waitForMail(stack, email);
  const link = mail.match(/https?:\/\/[^\s"<>]*\/setpassword\/[^\s"<>]*/)?.[0];
  assert.ok(link, `no set-password link in the e-mail to ${email}:\n${mail.slice(0, 2000)}`);
  const [id, secret] = new URL(link).pathname.split('/').slice(-2);
  await call(stack.baseUrl + 'auth/setpassword', { body: { id, secret, password } });
}

/** Decodes the character references html/template writes in attributes. */
function unescapeHtml(s) {
  return s.replace(/&(#x[0-9a-f]+|#[0-9]+|amp|lt|gt|quot|apos|#39);/gi, (_, e) => {
    const l = e.toLowerCase();
    if (l.startsWith('#x')) return String.fromCodePoint(parseInt(l.slice(2), 16));
    if (l.startsWith('#')) return String.fromCodePoint(parseInt(l.slice(1), 10));
    return { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" }[l];
  });
}

function attrs(tag) {
  const out = {};
  for (const m of tag.matchAll(/([a-zA-Z_:][-a-zA-Z0-9_:.]*)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+)))?/g)) {
    out[m[1].toLowerCase()] = unescapeHtml(m[2] ?? m[3] ?? m[4] ?? '');
  }
  return out;
}

/**
 * The forms of an HTML page: their action, method, named fields (inputs
 * other than submit buttons) and submit buttons.
 */
export function parseForms(html) {
  const forms = [];
  for (const m of html.matchAll(/<form\b([^>]*)>([\s\S]*?)<\/form>/gi)) {
    const form = { ...attrs(m[1]), fields: [], buttons: [] };
    for (const t of m[2].matchAll(/<(input|button)\b([^>]*)>/gi)) {
      const a = attrs(t[2]);
      const kind = t[1].toLowerCase();
      const type = (a.type ?? (kind === 'button' ? 'submit' : 'text')).toLowerCase();
      if (type === 'submit' || type === 'image') {
        form.buttons.push(a);
      } else if (a.name) {
        form.fields.push({ name: a.name, type, value: a.value ?? '' });
      }
    }
    forms.push(form);
  }
  return forms;
}

/**
 * A browser without JavaScript: it keeps cookies (one host, so by name),
 * follows redirects by hand and submits the forms of Pinion's pages.
 */
export class Browser {
  constructor() {
    this.cookies = new Map();
    /** Every page and redirect seen, for failure messages. */
    this.trail = [];
  }

  async request(url, init = {}) {
    const headers = new Headers(init.headers);
    if (this.cookies.size) {
      headers.set('cookie', [...this.cookies].map(([k, v]) => `${k}=${v}`).join('; '));
    }
    const res = await fetch(url, { ...init, headers, redirect: 'manual', signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
    for (const c of res.headers.getSetCookie()) {
      const [pair, ...rest] = c.split(';');
      const i = pair.indexOf('=');
      const name = pair.slice(0, i).trim();
      const expired = rest.some((p) => /^\s*max-age\s*=\s*(0|-)/i.test(p));
      if (expired) {
        this.cookies.delete(name);
      } else {
        this.cookies.set(name, pair.slice(i + 1).trim());
      }
    }
    this.trail.push(`${init.method ?? 'GET'} ${url} -> ${res.status} ${res.headers.get('location') ?? ''}`);
    return res;
  }

  /**
   * Opens an authorization URL and goes through the pages until Pinion
   * redirects to `redirectUri`: the sign-in form (filled with the
   * credentials), a consent page (allowed), a project chooser (the first
   * project). Returns the URL the browser was sent back to.
   * @param {URL|string} url
   * @param {string} redirectUri
   * @param {{email: string, password: string}} person
   * @param {(forms: object[], html: string) => ({form: object, fields?: Record<string, string>} | undefined)} [choose]
   *   picks the form to submit on a page the walk does not know (the SMART
   *   patient picker), and fields to set in it.
   */
  async authorize(url, redirectUri, person, choose) {
    let current = new URL(url);
    let res = await this.request(current);
    let signedIn = false;
    for (let step = 0; step < 12; step++) {
      if (res.status >= 300 && res.status < 400) {
        await res.arrayBuffer();
        const loc = new URL(res.headers.get('location'), current);
        if (loc.href.startsWith(redirectUri)) {
          return loc;
        }
        current = loc;
        res = await this.request(current);
        continue;
      }
      const html = await res.text();
      const forms = parseForms(html);
      assert.ok(
        res.status === 200 && forms.length > 0,
        `expected a page with a form or a redirect to ${redirectUri}, got ${res.status}:\n${html.slice(0, 3000)}\n${this.trail.join('\n')}`
      );
      let form = forms.find((f) => f.fields.some((x) => x.type === 'password'));
      const chosen = form ? undefined : choose?.(forms, html);
      const body = new URLSearchParams();
      if (form) {
        assert.ok(!signedIn, `the sign-in page came back after signing in:\n${html.slice(0, 3000)}\n${this.trail.join('\n')}`);
        signedIn = true;
      } else if (chosen) {
        form = chosen.form;
      } else {
        // Consent: the button that allows. Otherwise a chooser: its first form.
        form = forms.find((f) => f.buttons.some((b) => b.name === 'consent' && b.value === 'allow')) ?? forms[0];
      }
      for (const f of form.fields) {
        if (f.type === 'checkbox' || f.type === 'radio') {
          continue;
        }
        const value = chosen?.fields?.[f.name] ?? f.value;
        body.append(f.name, f.type === 'password' ? person.password : f.name === 'email' ? person.email : value);
      }
      const allow = form.buttons.find((b) => b.name === 'consent' && b.value === 'allow') ?? form.buttons.find((b) => b.name);
      if (allow) {
        body.append(allow.name, allow.value ?? '');
      }
      // A form without an action posts to the page's own address.
      current = form.action ? new URL(form.action, current) : current;
      res = await this.request(current, {
        method: (form.method ?? 'get').toUpperCase() === 'POST' ? 'POST' : 'GET',
        headers: { 'content-type': 'application/x-www-form-urlencoded', origin: current.origin },
        body,
      });
    }
    throw new Error(`no redirect to ${redirectUri} after 12 steps:\n${this.trail.join('\n')}`);
  }
}

/**
 * The OAuth error a refusal read through openid-client/oauth4webapi
 * carries: a ResponseBodyError's `error`, or, for a 401 with a
 * WWW-Authenticate challenge (which the libraries raise before reading the
 * body), the challenge's error parameter or the JSON body's.
 * @returns {Promise<{error: string, status: number, description?: string}>}
 */
export async function oauthError(promise) {
  let err;
  try {
    await promise;
  } catch (e) {
    err = e;
  }
  assert.ok(err, 'expected a refusal, got success');
  if (err.code === 'OAUTH_RESPONSE_BODY_ERROR' || err.name === 'ResponseBodyError') {
    return { error: err.error, status: err.status, description: err.error_description };
  }
  if (err.code === 'OAUTH_WWW_AUTHENTICATE_CHALLENGE' || err.name === 'WWWAuthenticateChallengeError') {
    const fromChallenge = err.cause?.find((c) => c.parameters?.error)?.parameters.error;
    let body = {};
    try {
      body = await err.response.clone().json();
    } catch {
      // no JSON body
    }
    return { error: fromChallenge ?? body.error, status: err.status, description: body.error_description };
  }
  throw new Error(`expected an OAuth error response: ${await describeError(err)}`, { cause: err });
}

/**
 * A library error in one line: the OAuth error and description the server
 * sent, the challenge of a 401, or why the library refused a response
 * (an ID token with another alg, say) with the detail it attached.
 */
export async function describeError(err) {
  const parts = [`${err.name}: ${err.message}`];
  if (err.error) {
    parts.push(`error=${err.error} error_description=${err.error_description ?? ''} status=${err.status}`);
  }
  if (err.code === 'OAUTH_WWW_AUTHENTICATE_CHALLENGE') {
    parts.push(`status=${err.status} challenges=${JSON.stringify(err.cause)}`);
    try {
      parts.push(`body=${await err.response.clone().text()}`);
    } catch {
      // body already read
    }
  }
  for (let c = err.cause; c && typeof c === 'object' && !Array.isArray(c); c = c.cause) {
    if (c instanceof Error) {
      parts.push(`cause: ${c.message}`);
    } else {
      parts.push(`cause: ${JSON.stringify(c).slice(0, 1000)}`);
      break;
    }
  }
  return parts.join('; ');
}

/** Awaits a library call; a failure says what the server sent and why the library refused it. */
export async function readable(promise) {
  try {
    return await promise;
  } catch (err) {
    throw new Error(await describeError(err), { cause: err });
  }
}
