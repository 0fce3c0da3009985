// Project administration through MedplumClient, as a project admin (not the
// super admin): project details, client applications with access policies,
// Medplum's ClientApplication/$rotate-secret, bots, project secrets reaching
// bots as event.secrets, sites.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { last, loginClient, newClient, rejectsWithOutcome, startPinion } from './harness.js';

let stack;
let project;
let admin; // a client application made a project admin
let member; // a plain client application of the project

before(async () => {
  stack = await startPinion();
  const su = await loginClient(stack.baseUrl, stack.superAdmin.clientId, stack.superAdmin.clientSecret);
  project = await su.medplum.post('admin/Project', { resourceType: 'Project', name: 'Compat Admin' });
  const adminApp = await su.medplum.post(`admin/projects/${project.id}/client`, { name: 'admin app' });
  const membership = await su.medplum.searchOne('ProjectMembership', { profile: `ClientApplication/${adminApp.id}` });
  await su.medplum.patch(`admin/projects/${project.id}/members/${membership.id}`, [
    { op: 'replace', path: '/admin', value: true },
  ]);
  admin = await loginClient(stack.baseUrl, adminApp.id, adminApp.secret);
  const memberApp = await su.medplum.post(`admin/projects/${project.id}/client`, { name: 'member app' });
  member = await loginClient(stack.baseUrl, memberApp.id, memberApp.secret);
});

after(async () => {
  await stack?.stop();
});

test("get('admin/projects/<id>') is the project's details for its admins, 403 for other members", async () => {
  const details = await admin.medplum.get(`admin/projects/${project.id}`);
  assert.equal(details.project.id, project.id);
  assert.equal(details.project.name, 'Compat Admin');
  await rejectsWithOutcome(member.medplum.get(`admin/projects/${project.id}`, { cache: 'no-cache' }), { status: 403 });
});

test("a project admin's post('admin/projects/<id>/client') with an access policy signs in under that policy", async () => {
  const policy = await admin.medplum.createResource({
    resourceType: 'AccessPolicy',
    name: 'patients only',
    resource: [{ resourceType: 'Patient' }],
  });
  const app = await admin.medplum.post(`admin/projects/${project.id}/client`, {
    name: 'limited app',
    description: 'patients only',
    redirectUri: 'https://app.example.com/callback',
    accessPolicy: { reference: `AccessPolicy/${policy.id}` },
  });
  assert.equal(last(admin.exchanges).status, 201);
  assert.equal(app.description, 'patients only');
  assert.equal(app.secret.length, 64);

  const members = await admin.medplum.searchResources('ProjectMembership', { 'profile-type': 'ClientApplication' });
  const mine = members.find((m) => m.profile.reference === `ClientApplication/${app.id}`);
  assert.equal(mine?.accessPolicy?.reference, `AccessPolicy/${policy.id}`);

  const limited = await loginClient(stack.baseUrl, app.id, app.secret);
  const patient = await limited.medplum.createResource({ resourceType: 'Patient', name: [{ family: 'Limited' }] });
  assert.equal(patient.meta.project, project.id);
  await rejectsWithOutcome(limited.medplum.createResource({ resourceType: 'Observation', status: 'final', code: { text: 'x' } }), {
    status: 403,
  });
  // The project's admins read the secret, as Medplum's web app shows it;
  // a member who is no admin does not.
  const read = await admin.medplum.readResource('ClientApplication', app.id);
  assert.equal(read.secret, app.secret);
  const seen = await member.medplum.readResource('ClientApplication', app.id);
  assert.equal(seen.secret, undefined);

  await rejectsWithOutcome(admin.medplum.post(`admin/projects/${project.id}/client`, { description: 'no name' }), {
    status: 400,
    text: 'Client name is required',
    expression: 'name',
  });
});

test("post(fhirUrl('ClientApplication', id, '$rotate-secret')) rotates with the current secret and retires the old one", async () => {
  const app = await admin.medplum.post(`admin/projects/${project.id}/client`, { name: 'rotating app' });
  const url = admin.medplum.fhirUrl('ClientApplication', app.id, '$rotate-secret');
  const rotated = await admin.medplum.post(url, {
    resourceType: 'Parameters',
    parameter: [{ name: 'secret', valueString: app.secret }],
  });
  assert.equal(rotated.resourceType, 'ClientApplication');
  assert.notEqual(rotated.secret, app.secret);

  // Both secrets sign in during the grace period.
  await loginClient(stack.baseUrl, app.id, rotated.secret);
  await loginClient(stack.baseUrl, app.id, app.secret);

  // Retiring the old one ends it now.
  await admin.medplum.post(url, { resourceType: 'Parameters', parameter: [{ name: 'retiringSecret', valueString: app.secret }] });
  await assert.rejects(newClient(stack.baseUrl).medplum.startClientLogin(app.id, app.secret));
  await loginClient(stack.baseUrl, app.id, rotated.secret);

  await rejectsWithOutcome(
    admin.medplum.post(url, { resourceType: 'Parameters', parameter: [{ name: 'secret', valueString: app.secret }] }),
    { status: 400, text: 'Provided secret does not match client' }
  );
  await rejectsWithOutcome(member.medplum.post(url, { resourceType: 'Parameters', parameter: [] }), { status: 403 });
});

test("post('admin/projects/<id>/secrets') reaches a project admin's bot as event.secrets; members never read them", async () => {
  const saved = await admin.medplum.post(`admin/projects/${project.id}/secrets`, [
    { name: 'API_KEY', valueString: 'compat-secret-value' },
    { name: 'RETRIES', valueInteger: 3 },
  ]);
  assert.equal(saved.resourceType, 'Project');
  const details = await admin.medplum.get(`admin/projects/${project.id}`, { cache: 'no-cache' });
  assert.deepEqual(
    details.project.secret.map((s) => s.name),
    ['API_KEY', 'RETRIES']
  );

  const bot = await admin.medplum.post(`admin/projects/${project.id}/bot`, { name: 'secret reader', runtimeVersion: 'vmcontext' });
  assert.equal(last(admin.exchanges).status, 201);
  await admin.medplum.post(admin.medplum.fhirUrl('Bot', bot.id, '$deploy'), {
    filename: 'reader.ts',
    code: `export async function handler(medplum: unknown, event: { secrets: Record<string, { valueString?: string; valueInteger?: number }> }) {
  return { key: event.secrets.API_KEY.valueString, retries: event.secrets.RETRIES.valueInteger };
}`,
  });
  const out = await member.medplum.executeBot(bot.id, {}, 'application/json');
  assert.deepEqual(out, { key: 'compat-secret-value', retries: 3 });

  await rejectsWithOutcome(member.medplum.readResource('Project', project.id), { status: 403 });
  await rejectsWithOutcome(admin.medplum.post(`admin/projects/${project.id}/secrets`, [{ name: 'X', valueString: 5 }]), {
    status: 400,
    expression: '[0].valueString',
  });
});

test("post('admin/projects/<id>/sites') replaces the project's sites", async () => {
  const saved = await admin.medplum.post(`admin/projects/${project.id}/sites`, [
    { name: 'portal', domain: ['portal.example.com'] },
  ]);
  assert.deepEqual(saved.site, [{ name: 'portal', domain: ['portal.example.com'] }]);
  const details = await admin.medplum.get(`admin/projects/${project.id}`, { cache: 'no-cache' });
  assert.equal(details.project.site[0].domain[0], 'portal.example.com');
});
