// The FHIR resource API through MedplumClient, as a project's client
// application: create, read, update, patch, delete, search, history,
// conditional create and update, $validate, batch and transaction (also the
// client's auto-batching), binary uploads and downloads, and the errors an
// app sees.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  ClientStorage,
  MedplumClient,
  MemoryStorage,
  OperationOutcomeError,
  getReferenceString,
  isGone,
  isNotFound,
  isOk,
  normalizeOperationOutcome,
} from '@medplum/core';
import { last, loginClient, rejectsWithOutcome, startPinion } from './harness.js';

let stack;
let clinic; // { project, app, medplum, exchanges }: the project the tests work in
let other; // a second project, to check isolation

/** A family name no other test uses, so searches see only their own data. */
let seq = 0;
function family(tag) {
  return `${tag}${Date.now().toString(36)}${(seq++).toString(36)}`;
}

async function projectWithClient(admin, name) {
  const project = await admin.post('admin/Project', { resourceType: 'Project', name });
  const app = await admin.post(`admin/projects/${project.id}/client`, { name: `${name} app` });
  const c = await loginClient(stack.baseUrl, app.id, app.secret);
  return { project, app, ...c };
}

before(async () => {
  stack = await startPinion();
  const { medplum: admin } = await loginClient(stack.baseUrl, stack.superAdmin.clientId, stack.superAdmin.clientSecret);
  clinic = await projectWithClient(admin, 'Compat FHIR Clinic');
  other = await projectWithClient(admin, 'Compat Other Clinic');
});

after(async () => {
  await stack?.stop();
});

test('createResource returns the stored Patient (201) and readResource reads it back', async () => {
  const { medplum, exchanges, project } = clinic;
  const fam = family('Create');
  const created = await medplum.createResource({
    resourceType: 'Patient',
    name: [{ given: ['Alice'], family: fam }],
    birthDate: '1990-01-02',
  });

  assert.deepEqual([last(exchanges).method, last(exchanges).status], ['POST', 201]);
  assert.match(last(exchanges).contentType, /^application\/fhir\+json/);
  assert.equal(created.resourceType, 'Patient');
  assert.equal(typeof created.id, 'string');
  assert.equal(created.name[0].family, fam);
  assert.equal(created.birthDate, '1990-01-02');
  assert.equal(typeof created.meta.versionId, 'string');
  assert.ok(!Number.isNaN(Date.parse(created.meta.lastUpdated)), created.meta.lastUpdated);
  assert.equal(created.meta.project, project.id);
  assert.equal(created.meta.author?.reference, getReferenceString(clinic.app));

  const read = await medplum.readResource('Patient', created.id);
  assert.equal(last(exchanges).status, 200);
  assert.deepEqual(read, created);

  const byRef = await medplum.readReference({ reference: `Patient/${created.id}` });
  assert.deepEqual(byRef, created);
});

test('updateResource stores a new version', async () => {
  const { medplum, exchanges } = clinic;
  const created = await medplum.createResource({ resourceType: 'Patient', name: [{ family: family('Update') }] });

  const updated = await medplum.updateResource({ ...created, gender: 'female', active: true });
  assert.deepEqual([last(exchanges).method, last(exchanges).status], ['PUT', 200]);
  assert.equal(updated.id, created.id);
  assert.equal(updated.gender, 'female');
  assert.equal(updated.active, true);
  assert.notEqual(updated.meta.versionId, created.meta.versionId);
  assert.ok(Date.parse(updated.meta.lastUpdated) >= Date.parse(created.meta.lastUpdated));

  const read = await medplum.readResource('Patient', created.id);
  assert.equal(read.gender, 'female');
  assert.equal(read.meta.versionId, updated.meta.versionId);

  // Sending it back unchanged makes no new version.
  const again = await medplum.updateResource(read);
  assert.equal(last(exchanges).status, 200);
  assert.equal(again.meta.versionId, updated.meta.versionId);
  assert.equal((await medplum.readHistory('Patient', created.id)).entry.length, 2);
});

test('updateResource with a stale If-Match is a 412', async () => {
  const { medplum, exchanges } = clinic;
  const created = await medplum.createResource({ resourceType: 'Patient', name: [{ family: family('IfMatch') }] });
  await medplum.updateResource({ ...created, gender: 'male' });

  await rejectsWithOutcome(
    medplum.updateResource({ ...created, gender: 'other' }, { headers: { 'If-Match': `W/"${created.meta.versionId}"` } }),
    { status: 412, id: 'precondition-failed' }
  );
  assert.equal(last(exchanges).status, 412);
  assert.equal((await medplum.readResource('Patient', created.id)).gender, 'male');
});

test('patchResource applies JSON Patch operations', async () => {
  const { medplum, exchanges } = clinic;
  const fam = family('Patch');
  const created = await medplum.createResource({
    resourceType: 'Patient',
    name: [{ given: ['Bob'], family: fam }],
    telecom: [{ system: 'email', value: 'bob@example.com' }],
  });

  const patched = await medplum.patchResource('Patient', created.id, [
    { op: 'test', path: '/name/0/family', value: fam },
    { op: 'replace', path: '/name/0/given/0', value: 'Robert' },
    { op: 'add', path: '/birthDate', value: '1980-05-06' },
    { op: 'add', path: '/name/0/given/-', value: 'J' },
    { op: 'remove', path: '/telecom' },
  ]);
  assert.deepEqual([last(exchanges).method, last(exchanges).status], ['PATCH', 200]);
  assert.equal(patched.id, created.id);
  assert.deepEqual(patched.name[0].given, ['Robert', 'J']);
  assert.equal(patched.birthDate, '1980-05-06');
  assert.equal(patched.telecom, undefined);
  assert.notEqual(patched.meta.versionId, created.meta.versionId);

  const read = await medplum.readResource('Patient', created.id);
  assert.deepEqual(read.name[0].given, ['Robert', 'J']);
});

test('patchResource with a failing test op is a 400 and changes nothing', async () => {
  const { medplum, exchanges } = clinic;
  const created = await medplum.createResource({ resourceType: 'Patient', name: [{ family: family('PatchTest') }] });
  await rejectsWithOutcome(
    medplum.patchResource('Patient', created.id, [
      { op: 'test', path: '/name/0/family', value: 'Someone Else' },
      { op: 'add', path: '/gender', value: 'male' },
    ]),
    { status: 400 }
  );
  assert.equal(last(exchanges).status, 400);
  const read = await medplum.readResource('Patient', created.id);
  assert.equal(read.gender, undefined);
  assert.equal(read.meta.versionId, created.meta.versionId);
});

test('deleteResource, then readResource rejects with gone (410)', async () => {
  const { medplum, exchanges } = clinic;
  const created = await medplum.createResource({ resourceType: 'Patient', name: [{ family: family('Delete') }] });

  await medplum.deleteResource('Patient', created.id);
  assert.deepEqual([last(exchanges).method, last(exchanges).status], ['DELETE', 200]);

  const outcome = await rejectsWithOutcome(medplum.readResource('Patient', created.id), {
    status: 410,
    id: 'gone',
    code: 'deleted',
    text: 'Gone',
  });
  assert.ok(isGone(outcome));
  assert.equal(last(exchanges).status, 410);
});

test('readResource of an unknown id rejects with not-found (404)', async () => {
  const { medplum, exchanges } = clinic;
  const outcome = await rejectsWithOutcome(medplum.readResource('Patient', '00000000-0000-4000-8000-000000000000'), {
    status: 404,
    id: 'not-found',
    code: 'not-found',
    text: 'Not found',
  });
  assert.ok(isNotFound(outcome));
  assert.equal(last(exchanges).status, 404);
  assert.match(last(exchanges).contentType, /json/);
});

test('createResource of an invalid resource is a 400 naming the path', async () => {
  const { medplum, exchanges } = clinic;
  const fam = family('Invalid');
  await rejectsWithOutcome(medplum.createResource({ resourceType: 'Patient', name: [{ family: fam }], gender: 'robot' }), {
    status: 400,
    code: 'invalid',
    expression: 'Patient.gender',
  });
  assert.equal(last(exchanges).status, 400);

  await rejectsWithOutcome(medplum.createResource({ resourceType: 'Patient', name: [{ family: fam }], colour: 'blue' }), {
    status: 400,
    code: 'invalid',
    text: /colour/,
    expression: 'Patient.colour',
  });

  // Nothing was written.
  assert.deepEqual([...(await medplum.searchResources('Patient', { family: fam }))], []);
});

test('searchResources (query object and string) and searchOne', async () => {
  const { medplum, exchanges } = clinic;
  const fam = family('Search');
  const alice = await medplum.createResource({ resourceType: 'Patient', name: [{ given: ['Alice'], family: fam }] });
  const bob = await medplum.createResource({ resourceType: 'Patient', name: [{ given: ['Bob'], family: fam }] });

  const both = await medplum.searchResources('Patient', { family: fam, _sort: '_lastUpdated' });
  assert.equal(last(exchanges).status, 200);
  assert.deepEqual(
    both.map((p) => p.id),
    [alice.id, bob.id]
  );
  assert.equal(both.bundle.resourceType, 'Bundle');
  assert.equal(both.bundle.type, 'searchset');

  const onlyBob = await medplum.searchResources('Patient', `family=${fam}&given=Bob`);
  assert.deepEqual(
    onlyBob.map((p) => p.id),
    [bob.id]
  );

  const one = await medplum.searchOne('Patient', { family: fam, given: 'alice' });
  assert.equal(one?.id, alice.id);
  assert.match(new URL(last(exchanges).url).search, /_count=1/);

  assert.equal(await medplum.searchOne('Patient', { family: fam, given: 'nobody' }), undefined);
  assert.deepEqual([...(await medplum.searchResources('Patient', `family=${fam}-none`))], []);
});

test('search with _summary=count and _total=accurate reports totals', async () => {
  const { medplum } = clinic;
  const fam = family('Total');
  for (let i = 0; i < 4; i++) {
    await medplum.createResource({ resourceType: 'Patient', name: [{ given: [`T${i}`], family: fam }] });
  }
  const counted = await medplum.search('Patient', { family: fam, _summary: 'count' });
  assert.equal(counted.type, 'searchset');
  assert.equal(counted.total, 4);
  assert.equal(counted.entry?.length ?? 0, 0);

  const page = await medplum.search('Patient', { family: fam, _total: 'accurate', _count: 2 });
  assert.equal(page.total, 4);
  assert.equal(page.entry.length, 2);
  assert.ok(page.link.some((l) => l.relation === 'next'), 'no next link');
  assert.ok(page.link.some((l) => l.relation === 'self'), 'no self link');
});

test('searchResources with an unknown parameter is a 400 naming it', async () => {
  await rejectsWithOutcome(clinic.medplum.searchResources('Patient', { 'no-such-param': 'x' }), {
    status: 400,
    code: 'invalid',
    expression: 'no-such-param',
  });
});

test('searchResourcePages walks every page by the next links', async () => {
  const { medplum, exchanges } = clinic;
  const fam = family('Pages');
  const ids = [];
  for (let i = 0; i < 7; i++) {
    ids.push((await medplum.createResource({ resourceType: 'Patient', name: [{ given: [`P${i}`], family: fam }] })).id);
  }

  const before = exchanges.length;
  const pages = [];
  for await (const page of medplum.searchResourcePages('Patient', { family: fam, _count: 3 })) {
    pages.push(page.map((p) => p.id));
  }
  assert.deepEqual(
    pages.map((p) => p.length),
    [3, 3, 1]
  );
  assert.deepEqual(pages.flat().sort(), [...ids].sort());
  const searches = exchanges.slice(before);
  assert.equal(searches.length, 3);
  assert.ok(searches.every((e) => e.method === 'GET' && e.status === 200));
});

test('readHistory lists every version newest first; readVersion reads an old one', async () => {
  const { medplum, exchanges } = clinic;
  const v1 = await medplum.createResource({ resourceType: 'Patient', name: [{ given: ['Hist'], family: family('History') }] });
  const v2 = await medplum.updateResource({ ...v1, gender: 'unknown' });
  const v3 = await medplum.patchResource('Patient', v1.id, [{ op: 'add', path: '/birthDate', value: '2001-02-03' }]);

  const history = await medplum.readHistory('Patient', v1.id);
  assert.equal(last(exchanges).status, 200);
  assert.equal(history.resourceType, 'Bundle');
  assert.equal(history.type, 'history');
  assert.deepEqual(
    history.entry.map((e) => e.resource.meta.versionId),
    [v3.meta.versionId, v2.meta.versionId, v1.meta.versionId]
  );
  assert.ok(history.entry.every((e) => e.resource.id === v1.id));

  const old = await medplum.readVersion('Patient', v1.id, v1.meta.versionId);
  assert.equal(last(exchanges).status, 200);
  assert.deepEqual(old, v1);
  assert.equal(old.gender, undefined);

  const mid = await medplum.readVersion('Patient', v1.id, v2.meta.versionId);
  assert.equal(mid.gender, 'unknown');
  assert.equal(mid.birthDate, undefined);

  await rejectsWithOutcome(medplum.readVersion('Patient', v1.id, '00000000-0000-4000-8000-000000000000'), {
    status: 404,
    id: 'not-found',
  });
});

test("another project's token cannot read, search, update or delete the first project's Patient", async () => {
  const fam = family('Isolated');
  const mine = await clinic.medplum.createResource({ resourceType: 'Patient', name: [{ family: fam }] });

  const theirs = other.medplum;
  const outcome = await rejectsWithOutcome(theirs.readResource('Patient', mine.id), {
    status: 404,
    id: 'not-found',
  });
  assert.ok(isNotFound(outcome));
  assert.equal(last(other.exchanges).status, 404);

  assert.deepEqual([...(await theirs.searchResources('Patient', { family: fam }))], []);
  assert.deepEqual([...(await theirs.searchResources('Patient', { _id: mine.id }))], []);

  await assert.rejects(theirs.updateResource({ ...mine, gender: 'male' }), (err) => {
    const status = last(other.exchanges).status;
    assert.ok(status === 404 || status === 403, `update answered ${status}: ${JSON.stringify(normalizeOperationOutcome(err))}`);
    return true;
  });
  await rejectsWithOutcome(theirs.deleteResource('Patient', mine.id), { status: 404, id: 'not-found' });

  // Untouched for its owner.
  const still = await clinic.medplum.readResource('Patient', mine.id);
  assert.equal(still.meta.versionId, mine.meta.versionId);
});

test('readResource and search of an unknown resource type are a 400, not a 404', async () => {
  const { medplum, exchanges } = clinic;
  const outcome = await rejectsWithOutcome(medplum.readResource('Foo', 'x'), {
    status: 400,
    code: 'invalid',
    text: 'Unknown resource type: Foo',
  });
  assert.ok(!isNotFound(outcome), 'reads as "no such resource"');
  assert.deepEqual([last(exchanges).method, new URL(last(exchanges).url).pathname, last(exchanges).status], ['GET', '/fhir/R4/Foo/x', 400]);
  await rejectsWithOutcome(medplum.search('Foo'), { status: 400, text: 'Unknown resource type: Foo' });
});

test('createResourceIfNoneExist creates once (201), then returns the match (200); several matches are a 412', async () => {
  const { medplum, exchanges } = clinic;
  const value = family('ine');
  const patient = { resourceType: 'Patient', identifier: [{ system: 'http://compat.example/ine', value }] };
  const query = `identifier=http://compat.example/ine|${value}`;

  const first = await medplum.createResourceIfNoneExist(patient, query);
  assert.deepEqual([last(exchanges).method, last(exchanges).status], ['POST', 201]);
  assert.equal(typeof first.id, 'string');
  const again = await medplum.createResourceIfNoneExist({ ...patient, active: true }, query);
  assert.deepEqual([last(exchanges).method, last(exchanges).status], ['POST', 200]);
  assert.deepEqual(again, first, 'the existing resource, unchanged');
  assert.equal((await medplum.searchResources('Patient', { identifier: `http://compat.example/ine|${value}` })).length, 1);

  // A second resource with the identifier makes the condition ambiguous.
  await medplum.createResource(patient);
  await rejectsWithOutcome(medplum.createResourceIfNoneExist(patient, query), { status: 412, id: 'multiple-matches' });
  assert.equal(last(exchanges).status, 412);

  await rejectsWithOutcome(medplum.createResourceIfNoneExist(patient, 'colour=blue'), {
    status: 400,
    text: 'Unknown search parameter: colour',
    expression: 'colour',
  });
});

test('upsertResource creates (201), then updates the match (200); no criteria is a 400, several matches a 412', async () => {
  const { medplum, exchanges } = clinic;
  const value = family('ups');
  const identifier = [{ system: 'http://compat.example/ups', value }];
  const query = { identifier: `http://compat.example/ups|${value}` };

  const created = await medplum.upsertResource({ resourceType: 'Patient', identifier }, query);
  assert.deepEqual([last(exchanges).method, last(exchanges).status], ['PUT', 201]);
  assert.equal(new URL(last(exchanges).url).search, `?identifier=${encodeURIComponent(query.identifier)}`);

  const updated = await medplum.upsertResource({ resourceType: 'Patient', identifier, gender: 'other' }, query);
  assert.deepEqual([last(exchanges).method, last(exchanges).status], ['PUT', 200]);
  assert.equal(updated.id, created.id);
  assert.equal(updated.gender, 'other');
  assert.notEqual(updated.meta.versionId, created.meta.versionId);
  assert.equal((await medplum.readResource('Patient', created.id)).gender, 'other');

  await rejectsWithOutcome(medplum.upsertResource({ resourceType: 'Patient', id: 'not-the-match', identifier }, query), {
    status: 400,
    expression: 'id',
  });
  await rejectsWithOutcome(medplum.upsertResource({ resourceType: 'Patient' }, {}), {
    status: 400,
    text: 'A conditional operation needs search parameters',
  });
  await medplum.createResource({ resourceType: 'Patient', identifier });
  await rejectsWithOutcome(medplum.upsertResource({ resourceType: 'Patient', identifier }, query), {
    status: 412,
    id: 'multiple-matches',
  });
});

test('validateResource: a valid resource resolves with an ok outcome, an invalid one rejects (400); nothing is stored', async () => {
  const { medplum, exchanges } = clinic;
  const fam = family('Validate');
  const outcome = await medplum.validateResource({ resourceType: 'Patient', name: [{ family: fam }], gender: 'female' });
  assert.deepEqual([last(exchanges).method, new URL(last(exchanges).url).pathname, last(exchanges).status], [
    'POST',
    '/fhir/R4/Patient/$validate',
    200,
  ]);
  assert.equal(outcome.resourceType, 'OperationOutcome');
  assert.ok(isOk(outcome), JSON.stringify(outcome));

  await rejectsWithOutcome(medplum.validateResource({ resourceType: 'Patient', name: [{ family: fam }], gender: 'robot' }), {
    status: 400,
    code: 'invalid',
    expression: 'Patient.gender',
  });
  assert.deepEqual([...(await medplum.searchResources('Patient', { family: fam }))], []);
});

test('executeBatch: a batch answers every entry in order, failures as outcomes', async () => {
  const { medplum, exchanges } = clinic;
  const fam = family('Batch');
  const existing = await medplum.createResource({ resourceType: 'Patient', name: [{ family: fam }] });
  const result = await medplum.executeBatch({
    resourceType: 'Bundle',
    type: 'batch',
    entry: [
      { request: { method: 'GET', url: `Patient/${existing.id}` } },
      { resource: { resourceType: 'Patient', name: [{ family: fam }] }, request: { method: 'POST', url: 'Patient' } },
      { resource: { resourceType: 'Patient', gender: 'robot' }, request: { method: 'POST', url: 'Patient' } },
      { request: { method: 'GET', url: 'Patient/00000000-0000-4000-8000-000000000000' } },
      { request: { method: 'GET', url: `Patient?family=${fam}&_count=1&_total=accurate` } },
    ],
  });
  assert.deepEqual([last(exchanges).method, new URL(last(exchanges).url).pathname, last(exchanges).status], ['POST', '/fhir/R4', 200]);
  assert.equal(result.resourceType, 'Bundle');
  assert.equal(result.type, 'batch-response');
  const statuses = result.entry.map((e) => e.response.status.split(' ')[0]);
  assert.deepEqual(statuses, ['200', '201', '400', '404', '200']);
  assert.equal(result.entry[0].resource.id, existing.id);
  assert.equal(result.entry[1].resource.name[0].family, fam);
  assert.ok(result.entry[2].response.outcome.issue[0].expression.includes('Patient.gender'));
  assert.equal(result.entry[3].response.outcome.id, 'not-found');
  assert.equal(result.entry[4].resource.type, 'searchset');
  assert.equal(result.entry[4].resource.total, 2, 'the POST in the batch ran before the search');

  await rejectsWithOutcome(medplum.executeBatch({ resourceType: 'Patient' }), { status: 400, text: 'Not a bundle' });
});

test('executeBatch: a transaction resolves urn:uuid references, and one failing entry undoes the others', async () => {
  const { medplum } = clinic;
  const fam = family('Tx');
  const patientUrl = 'urn:uuid:7f0e0a9c-1d6b-4c1e-9d0e-5b7f8f0c0a01';
  const result = await medplum.executeBatch({
    resourceType: 'Bundle',
    type: 'transaction',
    entry: [
      { fullUrl: patientUrl, resource: { resourceType: 'Patient', name: [{ family: fam }] }, request: { method: 'POST', url: 'Patient' } },
      {
        resource: { resourceType: 'Observation', status: 'final', code: { text: 'weight' }, subject: { reference: patientUrl } },
        request: { method: 'POST', url: 'Observation' },
      },
    ],
  });
  assert.equal(result.type, 'transaction-response');
  assert.deepEqual(
    result.entry.map((e) => e.response.status.split(' ')[0]),
    ['201', '201']
  );
  const [patient, observation] = result.entry.map((e) => e.resource);
  assert.equal(observation.subject.reference, `Patient/${patient.id}`);
  assert.equal((await medplum.readResource('Observation', observation.id)).subject.reference, `Patient/${patient.id}`);

  const undone = family('TxUndone');
  await rejectsWithOutcome(
    medplum.executeBatch({
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        { resource: { resourceType: 'Patient', name: [{ family: undone }] }, request: { method: 'POST', url: 'Patient' } },
        { resource: { resourceType: 'Patient', gender: 'robot' }, request: { method: 'POST', url: 'Patient' } },
      ],
    }),
    { status: 400, expression: 'Patient.gender' }
  );
  assert.deepEqual([...(await medplum.searchResources('Patient', { family: undone }))], []);
});

test('a client with autoBatchTime sends concurrent reads as one batch and settles each read', async () => {
  const { app } = clinic;
  const seen = [];
  const medplum = new MedplumClient({
    baseUrl: stack.baseUrl,
    storage: new ClientStorage(new MemoryStorage()),
    autoBatchTime: 20,
    fetch: async (url, init) => {
      const res = await fetch(url, init);
      seen.push([init?.method ?? 'GET', new URL(url).pathname, res.status]);
      return res;
    },
  });
  // The client runs the batch from a timer; if the server refused it, the
  // rejection would be unhandled and the reads would never settle.
  const unhandled = [];
  const onUnhandled = (reason) => unhandled.push(reason);
  process.on('unhandledRejection', onUnhandled);
  try {
    await medplum.startClientLogin(app.id, app.secret);
    const a = await clinic.medplum.createResource({ resourceType: 'Patient', name: [{ family: family('AutoA') }] });
    const b = await clinic.medplum.createResource({ resourceType: 'Patient', name: [{ family: family('AutoB') }] });

    const before = seen.length;
    const [ra, rb] = await Promise.all([medplum.readResource('Patient', a.id), medplum.readResource('Patient', b.id)]);
    assert.deepEqual([ra.id, rb.id], [a.id, b.id]);
    assert.deepEqual(seen.slice(before), [['POST', '/fhir/R4', 200]]);

    // One failing read in the batch rejects only its own promise.
    const m = seen.length;
    const results = await Promise.allSettled([
      medplum.readResource('Patient', a.id, { cache: 'no-cache' }),
      medplum.readResource('Patient', '00000000-0000-4000-8000-000000000000'),
    ]);
    assert.equal(results[0].status, 'fulfilled');
    assert.equal(results[0].value.id, a.id);
    assert.equal(results[1].status, 'rejected');
    assert.ok(results[1].reason instanceof OperationOutcomeError);
    assert.equal(normalizeOperationOutcome(results[1].reason).id, 'not-found');
    assert.deepEqual(seen.slice(m), [['POST', '/fhir/R4', 200]]);

    // A lone read goes as a plain GET.
    const n = seen.length;
    await medplum.readResource('Patient', b.id, { cache: 'no-cache' });
    assert.deepEqual(seen.slice(n), [['GET', `/fhir/R4/Patient/${b.id}`, 200]]);
  } finally {
    process.removeListener('unhandledRejection', onUnhandled);
  }
  assert.deepEqual(unhandled, []);
});

test('createBinary uploads raw content (201) with a url; download() gives the content back, readResource the JSON', async () => {
  const { medplum, exchanges } = clinic;
  const binary = await medplum.createBinary({ data: 'hello binary', contentType: 'text/plain', filename: 'h.txt' });
  const ex = last(exchanges);
  assert.deepEqual([ex.method, new URL(ex.url).pathname + new URL(ex.url).search, ex.status], ['POST', '/fhir/R4/Binary?_filename=h.txt', 201]);
  assert.equal(binary.resourceType, 'Binary');
  assert.equal(binary.contentType, 'text/plain');
  // As Medplum answers: a short-lived signed URL under /storage/ that loads without a token.
  assert.match(binary.url, new RegExp(`^https?://[^/]+/storage/${binary.id}/[^?]+\\?Expires=\\d+&Signature=`));
  const anonymous = await fetch(binary.url);
  assert.equal(anonymous.status, 200);
  assert.equal(await anonymous.text(), 'hello binary');

  const blob = await medplum.download(binary.url);
  assert.match(last(exchanges).contentType, /^text\/plain/);
  assert.equal(await blob.text(), 'hello binary');

  // The same URL still gives FHIR JSON to a FHIR read.
  const read = await medplum.readResource('Binary', binary.id);
  assert.match(last(exchanges).contentType, /^application\/fhir\+json/);
  assert.equal(Buffer.from(read.data, 'base64').toString(), 'hello binary');

  // Bytes that are not text survive the round trip.
  const bytes = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0xff]);
  const png = await medplum.createBinary({ data: bytes, contentType: 'image/png' });
  const back = await medplum.download(png.url);
  assert.deepEqual(new Uint8Array(await back.arrayBuffer()), bytes);
  assert.equal(back.type, 'image/png');
});

test('createAttachment links its Binary; a Binary created as FHIR JSON downloads as its content', async () => {
  const { medplum, exchanges } = clinic;
  const attachment = await medplum.createAttachment({ data: 'hello attach', contentType: 'text/plain', filename: 'a.txt' });
  assert.equal(last(exchanges).status, 201);
  assert.equal(attachment.contentType, 'text/plain');
  assert.equal(attachment.title, 'a.txt');
  assert.match(attachment.url ?? '', /\/storage\//);
  assert.equal(await (await medplum.download(attachment.url)).text(), 'hello attach');

  const json = await medplum.createResource({
    resourceType: 'Binary',
    contentType: 'text/plain',
    data: Buffer.from('hello json binary').toString('base64'),
  });
  const blob = await medplum.download(`Binary/${json.id}`);
  assert.deepEqual([last(exchanges).method, last(exchanges).status], ['GET', 200]);
  assert.match(last(exchanges).contentType, /^text\/plain/);
  assert.equal(await blob.text(), 'hello json binary');
});
