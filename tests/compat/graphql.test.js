// FHIR GraphQL through MedplumClient: requestSchema, which Medplum's web
// app runs before every list and resource form, loads Pinion's definitions
// into @medplum/core's schema; graphql() reads, follows references and
// sees only what the caller's project holds.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  getDataType,
  getSearchParameterDetails,
  getSearchParameters,
  isDataTypeLoaded,
} from '@medplum/core';
import { loginClient, startPinion } from './harness.js';

let stack;
let clinic; // { medplum, exchanges }
let other;

async function projectClient(admin, name) {
  const project = await admin.post('admin/Project', { resourceType: 'Project', name });
  const app = await admin.post(`admin/projects/${project.id}/client`, { name: `${name} app` });
  return loginClient(stack.baseUrl, app.id, app.secret);
}

before(async () => {
  stack = await startPinion();
  const { medplum: admin } = await loginClient(stack.baseUrl, stack.superAdmin.clientId, stack.superAdmin.clientSecret);
  clinic = await projectClient(admin, 'Compat GraphQL Clinic');
  other = await projectClient(admin, 'Compat GraphQL Other');
});

after(async () => {
  await stack?.stop();
});

test('requestSchema loads Patient and its search parameters from $graphql', async () => {
  assert.equal(isDataTypeLoaded('Patient'), false, 'Patient must not be loaded before the request');
  await clinic.medplum.requestSchema('Patient');
  const sent = clinic.exchanges.filter((e) => e.url.endsWith('/fhir/R4/$graphql'));
  assert.equal(sent.length, 1);
  assert.equal(sent[0].status, 200);

  assert.ok(isDataTypeLoaded('Patient'));
  const patient = getDataType('Patient');
  assert.equal(patient.elements.name.type[0].code, 'HumanName');
  assert.equal(patient.elements.name.max, Number.POSITIVE_INFINITY);
  assert.deepEqual(
    patient.elements['deceased[x]'].type.map((t) => t.code),
    ['boolean', 'dateTime']
  );
  assert.equal(patient.elements.gender.binding?.valueSet, 'http://hl7.org/fhir/ValueSet/administrative-gender|4.0.1');
  // A backbone element becomes its own type, as from Medplum's definitions.
  const contact = patient.innerTypes.find((t) => t.name === 'PatientContact');
  assert.equal(contact?.elements.name.type[0].code, 'HumanName');

  const params = getSearchParameters('Patient');
  assert.equal(params.name.type, 'string');
  assert.deepEqual(params.organization.target, ['Organization']);
  // The search control builds its columns from the details.
  assert.equal(getSearchParameterDetails('Patient', params.birthdate).type, 'DATE');
});

test('graphql() lists with search arguments, follows references, and stays in the project', async () => {
  const family = `Gql${Date.now().toString(36)}`;
  const org = await clinic.medplum.createResource({ resourceType: 'Organization', name: `${family} Clinic` });
  const pat = await clinic.medplum.createResource({
    resourceType: 'Patient',
    name: [{ family }],
    managingOrganization: { reference: `Organization/${org.id}` },
  });
  const q = `query($name: String) {
    PatientList(name: $name, _count: 5) {
      id
      managingOrganization { resource { ... on Organization { name } } }
    }
  }`;
  const res = await clinic.medplum.graphql(q, undefined, { name: family });
  assert.deepEqual(res, {
    data: { PatientList: [{ id: pat.id, managingOrganization: { resource: { name: `${family} Clinic` } } }] },
  });

  const seen = await other.medplum.graphql(`{ Patient(id: "${pat.id}") { id } PatientList(name: "${family}") { id } }`);
  assert.deepEqual(seen.data, { Patient: null, PatientList: [] });
  assert.equal(seen.errors[0].message, 'Not found');
});
