// Bots through MedplumClient: create one with post('admin/projects/<id>/bot'),
// deploy JavaScript and TypeScript with post(fhirUrl('Bot', id, '$deploy')),
// run it with executeBot(id | identifier, input, contentType) for each of the
// five input types, and with GET; the bot's own medplum client; the errors an
// app sees.
//
// Bots are created and deployed by the super admin (creating or deploying
// one takes a project admin: Pinion, unlike Medplum, lets no ordinary member
// change a bot's code) and run by the project's own ClientApplication, as an
// app would.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { ContentType, Hl7Message, OperationOutcomeError, normalizeOperationOutcome } from '@medplum/core';
import { last, loginClient, rejectsWithOutcome, startPinion } from './harness.js';

const BOTS = 'https://example.com/bots';

let stack;
let admin; // the super admin's client
let clinic; // { project, medplum, exchanges }: the project's ClientApplication
let other; // a second project with a bot of the same identifier
let echo; // the echo bot of the first test

/** What the echo bot reads from an HL7 input. The same function runs in the
 * bot (on the server's HL7 object) and here (on @medplum/core's Hl7Message),
 * so the test checks that the two agree. */
function probeHl7(msg) {
  const msh = msg.getSegment('MSH');
  const pid = msg.getSegment('PID');
  return {
    text: msg.toString(),
    messageType: msh.getField(9).getComponent(1),
    triggerEvent: msh.getField(9).getComponent(2),
    controlId: msh.getField(10).toString(),
    version: msh.getField(12).toString(),
    family: pid.getField(5).getComponent(1),
    given: pid.getComponent(5, 2),
    mrn: pid.getComponent(3, 1),
    segments: msg.getAll('PID').length + msg.getAll('EVN').length,
    evn: msg.get('EVN').get(1).toString(),
  };
}

const ECHO = `
const probeHl7 = ${probeHl7.toString()};
exports.handler = async function (medplum, event) {
  const { contentType, input } = event;
  if (contentType === 'x-application/hl7-v2+er7') {
    return { contentType, hl7: probeHl7(input) };
  }
  return { contentType, input };
};
`;

const ADT = [
  'MSH|^~\\&|ADT1|GOOD HEALTH HOSPITAL|GHH LAB|GOOD HEALTH HOSPITAL|198808181126|SECURITY|ADT^A01^ADT_A01|MSG00001|P|2.5.1',
  'EVN|A01|200708181123',
  'PID|1||PATID1234^^^GOOD HEALTH HOSPITAL^MR||EVERYMAN^ADAM^A^III||19610615|M',
].join('\r');

/** Creates a bot and deploys code as the super admin. */
async function deployBot(name, code, filename, extra = {}) {
  const bot = await admin.medplum.post(`admin/projects/${clinic.project.id}/bot`, { name, ...extra });
  const outcome = await admin.medplum.post(admin.medplum.fhirUrl('Bot', bot.id, '$deploy'), { code, filename });
  assert.equal(outcome.id, 'ok', JSON.stringify(outcome));
  return bot;
}

before(async () => {
  stack = await startPinion();
  admin = await loginClient(stack.baseUrl, stack.superAdmin.clientId, stack.superAdmin.clientSecret);
  const projectWithClient = async (name) => {
    const project = await admin.medplum.post('admin/Project', { resourceType: 'Project', name });
    const app = await admin.medplum.post(`admin/projects/${project.id}/client`, { name: `${name} app` });
    return { project, ...(await loginClient(stack.baseUrl, app.id, app.secret)) };
  };
  clinic = await projectWithClient('Compat Bots');
  other = await projectWithClient('Compat Other Bots');
});

after(async () => {
  await stack?.stop();
});

test("post('admin/projects/<id>/bot') creates the Bot (201) and its membership; $deploy takes JavaScript", async () => {
  const { medplum, exchanges, project } = clinic;
  echo = await admin.medplum.post(`admin/projects/${project.id}/bot`, {
    name: 'echo',
    description: 'returns what it was given',
    identifier: [{ system: BOTS, value: 'echo' }],
  });
  assert.equal(last(admin.exchanges).status, 201);
  assert.equal(echo.resourceType, 'Bot');
  assert.equal(echo.name, 'echo');
  assert.equal(echo.description, 'returns what it was given');
  assert.deepEqual(echo.identifier, [{ system: BOTS, value: 'echo' }]);
  assert.equal(echo.meta.project, project.id);

  // The bot's membership, so it acts under its own identity (memberships are
  // for admins to read).
  const [membership] = await admin.medplum.searchResources('ProjectMembership', { profile: `Bot/${echo.id}` });
  assert.equal(membership?.profile.reference, `Bot/${echo.id}`, 'no membership for the bot');
  assert.equal(membership.project.reference, `Project/${project.id}`);

  // The project's ordinary client may run the bot, not change its code.
  await rejectsWithOutcome(medplum.post(medplum.fhirUrl('Bot', echo.id, '$deploy'), { code: ECHO, filename: 'echo.js' }), {
    status: 403,
    text: 'Only project administrators can change Bot resources',
  });
  const outcome = await admin.medplum.post(admin.medplum.fhirUrl('Bot', echo.id, '$deploy'), { code: ECHO, filename: 'echo.js' });
  assert.deepEqual([last(admin.exchanges).method, last(admin.exchanges).status], ['POST', 200]);
  assert.equal(outcome.resourceType, 'OperationOutcome');
  assert.equal(outcome.id, 'ok');

  await rejectsWithOutcome(admin.medplum.post(`admin/projects/${project.id}/bot`, { description: 'no name' }), {
    status: 400,
    text: 'Bot name is required',
    expression: 'name',
  });
});

// The five input types of docs/API.md, as an app passes them to executeBot. The
// client sends strings as they are and JSON.stringify()s every other object:
// form input must be a string (a URLSearchParams object would go as "{}"),
// and an Hl7Message must be sent as msg.toString() (it has no toJSON, so the
// object would go as JSON and the server rightly refuses it as HL7).
const hl7 = Hl7Message.parse(ADT);
const inputs = [
  { contentType: ContentType.TEXT, body: 'hello, bot', want: 'hello, bot' },
  { contentType: ContentType.JSON, body: { n: 1, list: ['a'], nested: { ok: true } }, want: { n: 1, list: ['a'], nested: { ok: true } } },
  {
    contentType: ContentType.FORM_URL_ENCODED,
    body: new URLSearchParams({ name: 'Ada Lovelace', tag: 'a&b=c' }).toString(),
    want: { name: 'Ada Lovelace', tag: 'a&b=c' },
  },
  {
    contentType: ContentType.FHIR_JSON,
    body: { resourceType: 'Patient', name: [{ given: ['Fhir'], family: 'Input' }] },
    want: { resourceType: 'Patient', name: [{ given: ['Fhir'], family: 'Input' }] },
  },
  { contentType: ContentType.HL7_V2, body: hl7.toString(), want: undefined /* see below */ },
];

for (const by of ['id', 'identifier']) {
  test(`executeBot by ${by} with each content type: text, JSON, form, FHIR JSON, HL7 v2`, async () => {
    assert.ok(echo, 'needs the bot creation test');
    const { medplum, exchanges } = clinic;
    const target = by === 'id' ? echo.id : { system: BOTS, value: 'echo' };
    const path = by === 'id' ? `/fhir/R4/Bot/${echo.id}/$execute` : '/fhir/R4/Bot/$execute';
    for (const { contentType, body, want } of inputs) {
      const result = await medplum.executeBot(target, body, contentType);
      const ex = last(exchanges);
      assert.deepEqual([ex.method, new URL(ex.url).pathname, ex.status], ['POST', path, 200], contentType);
      if (by === 'identifier') {
        assert.equal(new URL(ex.url).searchParams.get('identifier'), `${BOTS}|echo`);
      }
      assert.match(ex.contentType, /^application\/json/, contentType);
      assert.equal(result.contentType, contentType);
      if (contentType === ContentType.HL7_V2) {
        // The bot got a parsed message that reads like @medplum/core's Hl7Message.
        assert.deepEqual(result.hl7, probeHl7(hl7));
        assert.equal(result.hl7.family, 'EVERYMAN');
        assert.equal(result.hl7.triggerEvent, 'A01');
      } else {
        assert.deepEqual(result.input, want, contentType);
      }
    }
  });
}

test('executeBot with HL7 v2 returns the ACK a TypeScript bot builds with event.input.buildAck()', async () => {
  const { medplum, exchanges } = clinic;
  // Written as a Medplum bot is: imports from @medplum/core, types, ES module export.
  const bot = await deployBot(
    'ack',
    `import { BotEvent, Hl7Message, MedplumClient } from '@medplum/core';

export async function handler(_medplum: MedplumClient, event: BotEvent<Hl7Message>): Promise<Hl7Message> {
  return event.input.buildAck();
}
`,
    'ack.ts'
  );

  const text = await medplum.executeBot(bot.id, hl7.toString(), ContentType.HL7_V2);
  assert.equal(last(exchanges).status, 200);
  assert.match(last(exchanges).contentType, /^x-application\/hl7-v2\+er7/);
  assert.equal(typeof text, 'string', 'the client returns a non-JSON answer as text');

  const ack = Hl7Message.parse(text);
  const want = hl7.buildAck();
  assert.equal(ack.getAckType(), 'AA');
  assert.equal(ack.getSegment('MSA').toString(), want.getSegment('MSA').toString()); // MSA|AA|MSG00001|OK
  const [got, exp] = [ack.getSegment('MSH'), want.getSegment('MSH')];
  // Sender and receiver swapped, type ACK^A01^ACK, same version; MSH-7 (time)
  // and MSH-10 (a new control id) differ by design.
  for (const f of [3, 4, 5, 6, 9, 11, 12]) {
    assert.equal(got.getField(f).toString(), exp.getField(f).toString(), `MSH-${f}`);
  }
  assert.equal(got.getField(3).toString(), 'GHH LAB');
  assert.equal(got.getField(9).toString(), 'ACK^A01^ACK');
});

test('a TypeScript bot with @medplum/core helpers runs after $deploy; a syntax error is a 400 with line and column', async () => {
  const { medplum, exchanges } = clinic;
  const bot = await deployBot(
    'typescript',
    `import { BotEvent, MedplumClient, getReferenceString } from '@medplum/core';
import { Patient } from '@medplum/fhirtypes';

interface Input {
  patient: Patient;
  factor: number;
}

export async function handler(_medplum: MedplumClient, event: BotEvent<Input>): Promise<Record<string, unknown>> {
  const { patient, factor } = event.input;
  const scaled: number = (patient.multipleBirthInteger ?? 1) * factor;
  return { ref: getReferenceString(patient), scaled };
}
`,
    'typed.ts'
  );
  const result = await medplum.executeBot(
    bot.id,
    { patient: { resourceType: 'Patient', id: 'p1', multipleBirthInteger: 2 }, factor: 21 },
    ContentType.JSON
  );
  assert.deepEqual(result, { ref: 'Patient/p1', scaled: 42 });

  const broken = await admin.medplum.post(`admin/projects/${clinic.project.id}/bot`, { name: 'broken' });
  const outcome = await rejectsWithOutcome(
    admin.medplum.post(admin.medplum.fhirUrl('Bot', broken.id, '$deploy'), {
      code: 'export async function handler(medplum: unknown {\n  return 1;\n}\n',
      filename: 'broken.ts',
    }),
    { status: 400, code: 'invalid', text: /^Syntax error at line 1, column \d+ of broken\.ts/ }
  );
  assert.equal(last(admin.exchanges).status, 400);
  assert.match(outcome.issue[0].expression?.[0] ?? '', /^broken\.ts:1:\d+$/);

  // Never deployed: nothing to run.
  await rejectsWithOutcome(medplum.executeBot(broken.id, 'x', ContentType.TEXT), { status: 400, text: 'No executable code' });
});

test('GET $execute: the query parameters are the input (the client has no GET form of executeBot)', async () => {
  assert.ok(echo, 'needs the bot creation test');
  const { medplum, exchanges } = clinic;
  const byId = await medplum.get(medplum.fhirUrl('Bot', echo.id, '$execute') + '?a=1&b=two%20words');
  assert.deepEqual([last(exchanges).method, last(exchanges).status], ['GET', 200]);
  assert.deepEqual(byId.input, { a: '1', b: 'two words' });

  const url = medplum.fhirUrl('Bot', '$execute');
  url.searchParams.set('identifier', `${BOTS}|echo`);
  url.searchParams.set('a', '2');
  const byIdentifier = await medplum.get(url);
  assert.deepEqual([last(exchanges).method, last(exchanges).status], ['GET', 200]);
  assert.deepEqual(byIdentifier.input, { a: '2' }, 'identifier is not part of the input');
});

test('a bot uses its own medplum client: createResource, readResource, searchResources', async () => {
  const { medplum } = clinic;
  const bot = await deployBot(
    'crud',
    `export async function handler(medplum, event) {
  const family = event.input.family;
  const created = await medplum.createResource({ resourceType: 'Patient', name: [{ given: ['Bot'], family }] });
  const read = await medplum.readResource('Patient', created.id);
  const found = await medplum.searchResources('Patient', { family });
  console.log('created', created.id);
  return { created, read, found: found.map((p) => p.id) };
}`,
    'crud.mjs'
  );
  const family = `Botmade${Date.now().toString(36)}`;
  const result = await medplum.executeBot(bot.id, { family }, ContentType.JSON);

  assert.equal(result.created.resourceType, 'Patient');
  assert.equal(result.created.name[0].family, family);
  assert.deepEqual(result.read, result.created);
  assert.deepEqual(result.found, [result.created.id]);
  // Written by the bot, in the caller's project, and visible to the caller.
  assert.equal(result.created.meta.author.reference, `Bot/${bot.id}`);
  assert.equal(result.created.meta.project, clinic.project.id);
  const mine = await medplum.searchOne('Patient', { family });
  assert.equal(mine?.id, result.created.id);
});

test('a bot that throws rejects executeBot with an OperationOutcomeError carrying its message (400)', async () => {
  const { medplum, exchanges } = clinic;
  const bot = await deployBot('thrower', `exports.handler = async () => { throw new Error('boom from the bot'); };`, 'throw.js');
  const err = await medplum.executeBot(bot.id, 'x', ContentType.TEXT).then(
    () => assert.fail('a throwing bot succeeded'),
    (e) => e
  );
  assert.ok(err instanceof OperationOutcomeError, `${err?.name}: ${err?.message}`);
  assert.equal(err.message, 'boom from the bot');
  assert.equal(normalizeOperationOutcome(err).issue[0].code, 'invalid');
  assert.equal(last(exchanges).status, 400);
});

test('executeBot of a bot that does not exist, or of another project, is a 404; a shared identifier is 412', async () => {
  const { medplum, exchanges } = clinic;
  await rejectsWithOutcome(medplum.executeBot(randomUUID(), 'x', ContentType.TEXT), { status: 404, id: 'not-found' });
  assert.equal(last(exchanges).status, 404);
  await rejectsWithOutcome(medplum.executeBot({ system: BOTS, value: 'no-such-bot' }, 'x', ContentType.TEXT), {
    status: 404,
    id: 'not-found',
  });

  // A bot in the other project, with the same identifier as the echo bot.
  assert.ok(echo, 'needs the bot creation test');
  const theirs = await admin.medplum.post(`admin/projects/${other.project.id}/bot`, {
    name: 'their echo',
    identifier: [{ system: BOTS, value: 'echo' }],
  });
  await admin.medplum.post(admin.medplum.fhirUrl('Bot', theirs.id, '$deploy'), {
    code: `exports.handler = async () => 'theirs';`,
    filename: 'theirs.js',
  });
  await rejectsWithOutcome(medplum.executeBot(theirs.id, 'x', ContentType.TEXT), { status: 404, id: 'not-found' });
  // By identifier each project finds its own bot.
  assert.equal((await medplum.executeBot({ system: BOTS, value: 'echo' }, 'x', ContentType.TEXT)).input, 'x');
  assert.equal(await other.medplum.executeBot({ system: BOTS, value: 'echo' }, 'x', ContentType.TEXT), 'theirs');

  // Two bots of one project with one identifier: refused, not picked at random.
  for (const name of ['twin 1', 'twin 2']) {
    await admin.medplum.post(`admin/projects/${clinic.project.id}/bot`, { name, identifier: [{ system: BOTS, value: 'twin' }] });
  }
  await rejectsWithOutcome(medplum.executeBot({ system: BOTS, value: 'twin' }, 'x', ContentType.TEXT), {
    status: 412,
    id: 'multiple-matches',
  });
});

test("the web app's bot editor: Save (createAttachment twice, patchResource), Deploy (post without a body), Execute", async () => {
  const { medplum } = admin;
  const bot = await medplum.post(`admin/projects/${clinic.project.id}/bot`, { name: 'edited', description: '' });
  // Save, as BotEditor.tsx does it: the TypeScript source and what the
  // editor compiled it to (CommonJS for a vmcontext bot).
  const sourceCode = await medplum.createAttachment({
    data: 'export async function handler(medplum: any, event: any) { return { saved: event.input.name[0].family }; }',
    filename: 'index.ts',
    contentType: ContentType.TYPESCRIPT,
  });
  const executableCode = await medplum.createAttachment({
    data: '"use strict";\nexports.handler = async function (medplum, event) { return { saved: event.input.name[0].family }; };\n',
    filename: 'index.cjs',
    contentType: ContentType.JAVASCRIPT,
  });
  await medplum.patchResource('Bot', bot.id, [
    { op: 'add', path: '/sourceCode', value: sourceCode },
    { op: 'add', path: '/executableCode', value: executableCode },
  ]);
  // Deploy and Execute.
  const outcome = await medplum.post(medplum.fhirUrl('Bot', bot.id, '$deploy'));
  assert.equal(outcome.id, 'ok', JSON.stringify(outcome));
  const result = await medplum.post(
    medplum.fhirUrl('Bot', bot.id, '$execute'),
    { resourceType: 'Patient', name: [{ given: ['Alice'], family: 'Smith' }] },
    ContentType.FHIR_JSON
  );
  assert.deepEqual(result, { saved: 'Smith' });
  // The source reads back as the editor reads it: the Binary by id.
  const saved = await medplum.readResource('Bot', bot.id);
  const binaryId = saved.sourceCode.url.split('/').find((part) => /^[0-9a-f-]{36}$/.test(part));
  const blob = await medplum.download(medplum.fhirUrl('Binary', binaryId));
  assert.match(await blob.text(), /export async function handler/);

  // A member who is no admin deploys nothing.
  await rejectsWithOutcome(clinic.medplum.post(clinic.medplum.fhirUrl('Bot', bot.id, '$deploy')), { status: 403 });
});
