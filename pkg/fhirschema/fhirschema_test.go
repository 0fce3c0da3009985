package fhirschema

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// issue is what a test expects of one OperationOutcome issue.
type issue struct {
	expr, msg string
}

func (i issue) String() string { return i.expr + ": " + i.msg }

// issuesOf unpacks a Validate error, checking it is the product's 400.
func issuesOf(t *testing.T, err error) []issue {
	t.Helper()
	if err == nil {
		return nil
	}
	var fe *fhir.Error
	if !errors.As(err, &fe) {
		t.Fatalf("error %T is not a *fhir.Error: %v", err, err)
	}
	if fe.Status != 400 || fe.Outcome.ResourceType != "OperationOutcome" {
		t.Fatalf("status %d, outcome %q; want 400 OperationOutcome", fe.Status, fe.Outcome.ResourceType)
	}
	if n := len(fe.Outcome.Issue); n == 0 || n > MaxIssues {
		t.Fatalf("%d issues, want 1..%d", n, MaxIssues)
	}
	var out []issue
	for _, is := range fe.Outcome.Issue {
		if is.Severity != "error" || is.Code != "invalid" || is.Details == nil || len(is.Expression) != 1 {
			t.Fatalf("malformed issue %+v", is)
		}
		out = append(out, issue{is.Expression[0], is.Details.Text})
	}
	return out
}

const (
	patientJSON = benchPatient

	observationJSON = `{"resourceType": "Observation", "id": "obs-1", "status": "final",
		"code": {"coding": [{"system": "http://loinc.org", "code": "29463-7", "display": "Body weight"}]},
		"subject": {"reference": "Patient/0b5a7a1c"},
		"effectiveDateTime": "2024-05-01T10:20:30+02:00",
		"valueQuantity": {"value": 72.5, "unit": "kg", "system": "http://unitsofmeasure.org", "code": "kg"},
		"referenceRange": [{"low": {"value": 60, "unit": "kg"}, "high": {"value": 80, "unit": "kg"}}],
		"component": [{"code": {"text": "note"}, "valueString": "fasting"}]}`

	bundleJSON = `{"resourceType": "Bundle", "type": "transaction",
		"entry": [
			{"fullUrl": "urn:uuid:61ebe359-bfdc-4613-8bf2-c5e300945f0a",
			 "resource": {"resourceType": "Patient", "name": [{"family": "Smith"}]},
			 "request": {"method": "POST", "url": "Patient"}},
			{"resource": {"resourceType": "Observation", "status": "preliminary", "code": {"text": "weight"},
			              "subject": {"reference": "urn:uuid:61ebe359-bfdc-4613-8bf2-c5e300945f0a"}},
			 "request": {"method": "POST", "url": "Observation"},
			 "link": [{"relation": "self", "url": "https://example.org/Observation/1"}]},
			{"resource": {"resourceType": "Bundle", "type": "collection",
			              "entry": [{"resource": {"resourceType": "Practitioner", "active": true}}]},
			 "request": {"method": "POST", "url": "Bundle"},
			 "response": {"status": "201 Created", "outcome": {"resourceType": "OperationOutcome",
			              "issue": [{"severity": "information", "code": "informational"}]}}}
		]}`

	questionnaireJSON = `{"resourceType": "Questionnaire", "status": "active", "title": "Intake",
		"item": [{"linkId": "1", "type": "group", "text": "About you",
			"item": [{"linkId": "1.1", "type": "string", "text": "Name", "required": true},
			         {"linkId": "1.2", "type": "group",
			          "item": [{"linkId": "1.2.1", "type": "choice",
			                    "answerOption": [{"valueCoding": {"code": "y"}}, {"valueString": "n"}],
			                    "enableWhen": [{"question": "1.1", "operator": "exists", "answerBoolean": true}]}]}]}]}`

	projectMembershipJSON = `{"resourceType": "ProjectMembership", "id": "pm-1",
		"meta": {"project": "p-1", "compartment": [{"reference": "Project/p-1"}]},
		"project": {"reference": "Project/p-1"}, "user": {"reference": "User/u-1", "display": "a@example.com"},
		"profile": {"reference": "Practitioner/pr-1"}, "admin": true, "active": true, "externalId": "ext-1",
		"accessPolicy": {"reference": "AccessPolicy/ap-1"},
		"access": [{"policy": {"reference": "AccessPolicy/ap-2"},
		            "parameter": [{"name": "patient", "valueReference": {"reference": "Patient/1"}},
		                          {"name": "status", "valueString": "active"}]}]}`

	accessPolicyJSON = `{"resourceType": "AccessPolicy", "name": "Patients only",
		"compartment": {"reference": "%patient"},
		"resource": [{"resourceType": "Patient", "criteria": "Patient?_id=%patient.id",
		              "interaction": ["read", "search"], "hiddenFields": ["address"], "readonlyFields": ["name"],
		              "writeConstraint": [{"language": "text/fhirpath", "expression": "%before.exists() implies %after.id = %before.id"}]},
		             {"resourceType": "Task", "criteria": "Task?status=%status", "readonly": true}],
		"ipAccessRule": [{"name": "office", "value": "192.168.0.0/24", "action": "allow"}]}`

	botJSON = `{"resourceType": "Bot", "name": "Hello", "description": "Says hello",
		"runtimeVersion": "vmcontext", "timeout": 10, "identifier": [{"system": "https://example.org/bots", "value": "hello"}],
		"sourceCode": {"contentType": "text/typescript", "url": "Binary/b-1", "title": "index.ts"},
		"executableCode": {"contentType": "application/javascript", "url": "Binary/b-2", "title": "index.js"},
		"auditEventTrigger": "on-error", "auditEventDestination": ["resource"]}`

	projectJSON = `{"resourceType": "Project", "name": "Acme", "strictMode": true, "superAdmin": false,
		"owner": {"reference": "User/u-1"}, "features": ["bots", "email"],
		"setting": [{"name": "color", "valueString": "blue"}, {"name": "max", "valueInteger": 3}],
		"secret": [{"name": "apiKey", "valueString": "s3cr3t"}],
		"defaultProfile": [{"resourceType": "Patient", "profile": ["http://example.org/StructureDefinition/p"]}],
		"exportedResourceType": ["Bot", "Questionnaire"]}`

	userJSON = `{"resourceType": "User", "firstName": "Alice", "lastName": "Smith", "email": "alice@example.com",
		"emailVerified": true, "passwordHash": "$argon2id$v=19$m=65536,t=3,p=4$abc$def",
		"project": {"reference": "Project/p-1"}, "mfaRequired": false, "mfaMethod": ["totp"]}`

	clientApplicationJSON = `{"resourceType": "ClientApplication", "name": "Backend", "status": "active",
		"secret": "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0",
		"redirectUri": "https://app.example.com/callback", "redirectUris": ["https://app.example.com/callback"],
		"pkceOptional": false, "launchIdentifierSystems": [{"resourceType": "Patient", "system": "https://example.org/mrn"}],
		"identityProvider": {"authorizeUrl": "https://idp.example.com/authorize", "tokenUrl": "https://idp.example.com/token",
		                     "userInfoUrl": "https://idp.example.com/userinfo", "clientId": "x", "clientSecret": "y"}}`
)

func TestValidateAcceptsValidResources(t *testing.T) {
	cases := []struct {
		name string
		doc  string
	}{
		{"patient", patientJSON},
		{"observation with valueQuantity", observationJSON},
		{"bundle with nested entries and resources", bundleJSON},
		{"questionnaire with nested items (contentReference)", questionnaireJSON},
		{"project membership", projectMembershipJSON},
		{"access policy", accessPolicyJSON},
		{"bot", botJSON},
		{"project", projectJSON},
		{"user", userJSON},
		{"client application", clientApplicationJSON},
		{"only a resource type", `{"resourceType": "Patient"}`},
		{"login", `{"resourceType": "Login", "authMethod": "password", "authTime": "2024-05-01T10:20:30Z",
			"user": {"reference": "User/u-1"}, "membership": {"reference": "ProjectMembership/pm-1"},
			"scope": "openid", "granted": true, "revoked": false, "codeChallengeMethod": "S256"}`},
		{"primitive extensions, with nulls in aligned arrays", `{"resourceType": "Patient",
			"birthDate": "1970-03-30", "_birthDate": {"id": "bd", "extension": [{"url": "http://example.org/time", "valueTime": "14:35:45"}]},
			"_gender": {"extension": [{"url": "http://hl7.org/fhir/StructureDefinition/data-absent-reason", "valueCode": "unknown"}]},
			"name": [{"given": ["Alice", null, "Beth"], "_given": [null, {"extension": [{"url": "http://example.org/x", "valueString": "B."}]}, null]}]}`},
		{"contained resources and extensions", `{"resourceType": "Patient",
			"contained": [{"resourceType": "Organization", "id": "org1", "name": "Acme"},
			              {"resourceType": "Practitioner", "id": "pr1", "name": [{"family": "Who"}]}],
			"managingOrganization": {"reference": "#org1"},
			"extension": [{"url": "http://example.org/nested", "extension": [
				{"url": "a", "valueInteger": -7}, {"url": "b", "valueDecimal": 1.50}, {"url": "c", "valuePositiveInt": 3},
				{"url": "d", "valueUnsignedInt": 0}, {"url": "e", "valueBase64Binary": "aGVsbG8="},
				{"url": "f", "valueInstant": "2024-01-01T00:00:00.000Z"}, {"url": "g", "valueUuid": "urn:uuid:61ebe359-bfdc-4613-8bf2-c5e300945f0a"},
				{"url": "h", "valueOid": "urn:oid:1.2.3"}, {"url": "i", "valueDate": "2024"}, {"url": "j", "valueDateTime": "2024-02"}]}],
			"modifierExtension": [{"url": "http://example.org/m", "valueBoolean": false}]}`},
		{"parameters with resource and parts", `{"resourceType": "Parameters", "parameter": [
			{"name": "resource", "resource": {"resourceType": "Patient", "active": true}},
			{"name": "nested", "part": [{"name": "a", "valueString": "x"}, {"name": "b", "part": [{"name": "c", "valueInteger": 1}]}]}]}`},
		{"narrative", `{"resourceType": "Patient", "text": {"status": "generated", "div": "<div xmlns=\"http://www.w3.org/1999/xhtml\">Hi</div>"}}`},
		{"medplum meta", `{"resourceType": "Patient", "meta": {"versionId": "1", "lastUpdated": "2024-05-01T10:20:30Z",
			"project": "p-1", "author": {"reference": "Practitioner/1"}, "account": {"reference": "Organization/1"},
			"compartment": [{"reference": "Project/p-1"}], "tag": [{"system": "http://example.org", "code": "t"}],
			"profile": ["http://example.org/StructureDefinition/x"]}}`},
		{"medplum resource types in a resource-types binding", `{"resourceType": "SearchParameter",
			"url": "https://example.org/SearchParameter/bot-name", "name": "name", "status": "active",
			"description": "Bot name", "code": "name", "base": ["Bot", "Patient"], "type": "string", "expression": "Bot.name"}`},
		{"integers of every kind", `{"resourceType": "Patient", "multipleBirthInteger": 2147483647,
			"telecom": [{"system": "phone", "value": "1", "rank": 1}], "photo": [{"size": 0}]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := decode(t, tc.doc)
			for _, strict := range []bool{false, true} {
				if err := Validate(res, Options{Strict: strict}); err != nil {
					t.Errorf("strict=%v: %v\n%s", strict, err, err.(*fhir.Error).JSON())
				}
			}
		})
	}
}

func TestValidateRejects(t *testing.T) {
	long := strings.Repeat("a", 65)
	cases := []struct {
		name string
		doc  string
		want []issue
	}{
		// Resource type.
		{"missing resourceType", `{"id": "x"}`,
			[]issue{{"resourceType", "Missing resource type"}}},
		{"unknown resourceType, one issue only", `{"resourceType": "Patientt", "foo": 1, "name": 5}`,
			[]issue{{"resourceType", "Unknown resource type"}}},
		{"abstract resourceType", `{"resourceType": "DomainResource"}`,
			[]issue{{"resourceType", "Unknown resource type"}}},
		{"datatype as resourceType", `{"resourceType": "HumanName"}`,
			[]issue{{"resourceType", "Unknown resource type"}}},
		{"resourceType not a string", `{"resourceType": 7}`,
			[]issue{{"resourceType", "Invalid JSON type: expected string, but got number"}}},

		// Unknown properties.
		{"unknown property", `{"resourceType": "Patient", "foo": "bar"}`,
			[]issue{{"Patient.foo", `Invalid additional property "foo"`}}},
		{"unknown nested property", `{"resourceType": "Patient", "name": [{"family": "x", "middle": "y"}]}`,
			[]issue{{"Patient.name[0].middle", `Invalid additional property "middle"`}}},
		{"bad choice suffix", `{"resourceType": "Observation", "status": "final", "code": {"text": "x"}, "valueFoo": 1}`,
			[]issue{{"Observation.valueFoo", `Invalid additional property "valueFoo"`}}},
		{"choice suffix in the wrong case", `{"resourceType": "Patient", "deceasedboolean": true}`,
			[]issue{{"Patient.deceasedboolean", `Invalid additional property "deceasedboolean"`}}},
		{"bare choice name", `{"resourceType": "Patient", "deceased": true}`,
			[]issue{{"Patient.deceased", `Invalid additional property "deceased"`}}},
		{"two choices of one element", `{"resourceType": "Patient", "deceasedBoolean": true, "deceasedDateTime": "2020"}`,
			[]issue{{"Patient.deceased[x]", `Duplicate choice of type property "deceased[x]"`}}},
		{"primitive extension of a complex element", `{"resourceType": "Patient", "_name": [{"id": "x"}]}`,
			[]issue{{"Patient._name", `Invalid additional property "_name"`}}},
		{"primitive extension of an unknown element", `{"resourceType": "Patient", "_foo": {"id": "x"}}`,
			[]issue{{"Patient._foo", `Invalid additional property "_foo"`}}},
		{"primitive extension of another choice type", `{"resourceType": "Patient", "deceasedBoolean": true, "_deceasedDateTime": {"id": "x"}}`,
			[]issue{{"Patient.deceased[x]", `Type of primitive extension does not match the type of property "deceased[x]"`}}},
		{"resourceType inside a datatype", `{"resourceType": "Patient", "name": [{"resourceType": "HumanName"}]}`,
			[]issue{{"Patient.name[0].resourceType", `Invalid additional property "resourceType"`}}},

		// JSON kinds.
		{"number for string", `{"resourceType": "Patient", "birthDate": 19700101}`,
			[]issue{{"Patient.birthDate", "Invalid JSON type: expected string, but got number"}}},
		{"object for code", `{"resourceType": "Patient", "gender": {"code": "male"}}`,
			[]issue{{"Patient.gender", "Invalid JSON type: expected string, but got object"}}},
		{"string for boolean", `{"resourceType": "Patient", "active": "true"}`,
			[]issue{{"Patient.active", "Invalid JSON type: expected boolean, but got string"}}},
		{"string for number", `{"resourceType": "Patient", "multipleBirthInteger": "2"}`,
			[]issue{{"Patient.multipleBirthInteger", "Invalid JSON type: expected number, but got string"}}},
		{"string for object", `{"resourceType": "Patient", "maritalStatus": "M"}`,
			[]issue{{"Patient.maritalStatus", "Invalid JSON type: expected object, but got string"}}},
		{"boolean for object in array", `{"resourceType": "Patient", "name": [true]}`,
			[]issue{{"Patient.name[0]", "Invalid JSON type: expected object, but got boolean"}}},
		{"array in an array of objects", `{"resourceType": "Patient", "name": [[{"family": "x"}]]}`,
			[]issue{{"Patient.name[0]", "Invalid JSON type: expected object, but got array"}}},
		{"array in an array of primitives", `{"resourceType": "Patient", "name": [{"given": [["a"]]}]}`,
			[]issue{{"Patient.name[0].given[0]", "Invalid JSON type: expected string, but got array"}}},
		{"fractional integer", `{"resourceType": "Patient", "multipleBirthInteger": 1.5}`,
			[]issue{{"Patient.multipleBirthInteger", "Expected number to be an integer"}}},
		{"integer outside int32", `{"resourceType": "Patient", "multipleBirthInteger": 2147483648}`,
			[]issue{{"Patient.multipleBirthInteger", "Expected number to be a 32-bit integer"}}},
		{"integer written as a decimal", `{"resourceType": "Patient", "multipleBirthInteger": 2.0}`,
			[]issue{{"Patient.multipleBirthInteger", "Invalid integer format"}}},
		{"integer with an exponent", `{"resourceType": "Patient", "multipleBirthInteger": 1e2}`,
			[]issue{{"Patient.multipleBirthInteger", "Invalid integer format"}}},
		{"positiveInt zero", `{"resourceType": "Patient", "telecom": [{"value": "1", "rank": 0}]}`,
			[]issue{{"Patient.telecom[0].rank", "Expected number to be positive"}}},
		{"unsignedInt negative", `{"resourceType": "Patient", "photo": [{"size": -1}]}`,
			[]issue{{"Patient.photo[0].size", "Expected number to be non-negative"}}},
		{"decimal out of range", `{"resourceType": "Observation", "status": "final", "code": {"text": "x"}, "valueQuantity": {"value": 1e400}}`,
			[]issue{{"Observation.valueQuantity.value", "Invalid numeric value"}}},

		// Arrays and single values.
		{"array for a single value", `{"resourceType": "Patient", "gender": ["male"]}`,
			[]issue{{"Patient.gender", "Expected single value for property"}}},
		{"single value for an array", `{"resourceType": "Patient", "name": {"family": "x"}}`,
			[]issue{{"Patient.name", "Expected array of values for property"}}},
		{"single primitive for an array", `{"resourceType": "Patient", "name": [{"given": "Alice"}]}`,
			[]issue{{"Patient.name[0].given", "Expected array of values for property"}}},
		{"modifierExtension as an object", `{"resourceType": "Patient", "modifierExtension": {"url": "http://x", "valueString": "y"}}`,
			[]issue{{"Patient.modifierExtension", "Expected array of values for property"}}},
		{"meta.tag as an object", `{"resourceType": "Patient", "meta": {"tag": {"code": "x"}}}`,
			[]issue{{"Patient.meta.tag", "Expected array of values for property"}}},

		// Formats.
		{"bad date", `{"resourceType": "Patient", "birthDate": "1990-13-01"}`,
			[]issue{{"Patient.birthDate", "Invalid date format"}}},
		{"dateTime without a time zone", `{"resourceType": "Patient", "deceasedDateTime": "2020-01-01T10:00:00"}`,
			[]issue{{"Patient.deceasedDateTime", "Invalid dateTime format"}}},
		{"instant without a time", `{"resourceType": "Patient", "meta": {"lastUpdated": "2020-01-01"}}`,
			[]issue{{"Patient.meta.lastUpdated", "Invalid instant format"}}},
		{"bad resource id", `{"resourceType": "Patient", "id": "has space"}`,
			[]issue{{"Patient.id", "Invalid id format"}}},
		{"resource id too long", `{"resourceType": "Patient", "id": "` + long + `"}`,
			[]issue{{"Patient.id", "Invalid id format"}}},
		{"bad meta.versionId", `{"resourceType": "Patient", "meta": {"versionId": "a/b"}}`,
			[]issue{{"Patient.meta.versionId", "Invalid id format"}}},
		{"code with a trailing space", `{"resourceType": "Patient", "gender": "male "}`,
			[]issue{{"Patient.gender", "Invalid code format"}}},
		{"uri with a space", `{"resourceType": "Patient", "implicitRules": "http://a b"}`,
			[]issue{{"Patient.implicitRules", "Invalid uri format"}}},
		{"bad uuid", `{"resourceType": "Patient", "extension": [{"url": "http://x", "valueUuid": "61ebe359"}]}`,
			[]issue{{"Patient.extension[0].valueUuid", "Invalid uuid format"}}},
		{"bad base64", `{"resourceType": "Patient", "photo": [{"data": "abc"}]}`,
			[]issue{{"Patient.photo[0].data", "Invalid base64Binary format"}}},
		{"bad time", `{"resourceType": "Patient", "extension": [{"url": "http://x", "valueTime": "25:00:00"}]}`,
			[]issue{{"Patient.extension[0].valueTime", "Invalid time format"}}},
		{"form feed in a string", "{\"resourceType\": \"Patient\", \"name\": [{\"family\": \"a\\fb\"}]}",
			[]issue{{"Patient.name[0].family", "Invalid string format"}}},

		// Empty and null values.
		{"empty string", `{"resourceType": "Patient", "name": [{"family": ""}]}`,
			[]issue{{"Patient.name[0].family", "Invalid empty value"}}},
		{"blank string", `{"resourceType": "Patient", "name": [{"family": "  \t"}]}`,
			[]issue{{"Patient.name[0].family", "String must contain non-whitespace content"}}},
		{"empty object", `{"resourceType": "Patient", "maritalStatus": {}}`,
			[]issue{{"Patient.maritalStatus", "Invalid empty value"}}},
		{"empty array", `{"resourceType": "Patient", "name": []}`,
			[]issue{{"Patient.name", "Invalid empty value"}}},
		{"empty object in an array", `{"resourceType": "Patient", "name": [{}]}`,
			[]issue{{"Patient.name[0]", "Invalid empty value"}}},
		{"null value", `{"resourceType": "Patient", "gender": null}`,
			[]issue{{"Patient.gender", "Invalid null value"}}},
		{"null in an array without extensions", `{"resourceType": "Patient", "name": [{"given": ["a", null]}]}`,
			[]issue{{"Patient.name[0].given[1]", "Invalid null value"}}},
		{"null in an array of objects", `{"resourceType": "Patient", "name": [null]}`,
			[]issue{{"Patient.name[0]", "Invalid null value"}}},
		{"null value and null extension at one index", `{"resourceType": "Patient", "name": [{"given": ["a", null], "_given": [null, null]}]}`,
			[]issue{{"Patient.name[0].given[1]", "Invalid null value"}, {"Patient.name[0]._given[1]", "Invalid null value"}}},

		// Required elements.
		{"required element of a resource", `{"resourceType": "Observation", "code": {"text": "x"}}`,
			[]issue{{"Observation.status", "Missing required property"}}},
		{"required elements of a backbone element", `{"resourceType": "Patient", "link": [{"id": "l1"}]}`,
			[]issue{{"Patient.link[0].other", "Missing required property"}, {"Patient.link[0].type", "Missing required property"}}},
		{"required element of a datatype (extension url)", `{"resourceType": "Patient", "extension": [{"valueString": "x"}]}`,
			[]issue{{"Patient.extension[0].url", "Missing required property"}}},
		{"required element deep in a contentReference", `{"resourceType": "Questionnaire", "status": "active",
			"item": [{"linkId": "1", "type": "group", "item": [{"linkId": "1.1", "type": "group", "item": [{"type": "string"}]}]}]}`,
			[]issue{{"Questionnaire.item[0].item[0].item[0].linkId", "Missing required property"}}},
		{"required choice element", `{"resourceType": "Project", "setting": [{"name": "a"}]}`,
			[]issue{{"Project.setting[0].value[x]", "Missing required property"}}},
		{"required elements of a project membership", `{"resourceType": "ProjectMembership", "project": {"reference": "Project/1"}}`,
			[]issue{{"ProjectMembership.user", "Missing required property"}, {"ProjectMembership.profile", "Missing required property"}}},
		{"required element of an access policy resource", `{"resourceType": "AccessPolicy", "resource": [{"criteria": "Patient?"}]}`,
			[]issue{{"AccessPolicy.resource[0].resourceType", "Missing required property"}}},
		{"required elements of a user", `{"resourceType": "User", "email": "a@example.com"}`,
			[]issue{{"User.firstName", "Missing required property"}, {"User.lastName", "Missing required property"}}},

		// Primitive extensions.
		{"primitive extension not an object", `{"resourceType": "Patient", "_birthDate": "x"}`,
			[]issue{{"Patient._birthDate", "Invalid JSON type: expected object, but got string"}}},
		{"unknown property in a primitive extension", `{"resourceType": "Patient", "birthDate": "2000", "_birthDate": {"foo": 1}}`,
			[]issue{{"Patient._birthDate.foo", `Invalid additional property "foo"`}}},
		{"empty primitive extension", `{"resourceType": "Patient", "_birthDate": {}}`,
			[]issue{{"Patient._birthDate", "Invalid empty value"}}},
		{"primitive extension object for an array", `{"resourceType": "Patient", "name": [{"given": ["a"], "_given": {"id": "x"}}]}`,
			[]issue{{"Patient.name[0]._given", "Expected array of values for property"}}},
		{"primitive extension array for a single value", `{"resourceType": "Patient", "_gender": [{"id": "x"}]}`,
			[]issue{{"Patient._gender", "Expected single value for property"}}},
		{"primitive extension arrays of different lengths", `{"resourceType": "Patient", "name": [{"given": ["a", "b"], "_given": [{"id": "x"}]}]}`,
			[]issue{{"Patient.name[0]._given", `Expected 2 values to match property "given"`}}},
		{"extension in a primitive extension without url", `{"resourceType": "Patient", "_active": {"extension": [{"valueString": "x"}]}}`,
			[]issue{{"Patient._active.extension[0].url", "Missing required property"}}},

		// Nested and contained resources.
		{"contained resource of unknown type", `{"resourceType": "Patient", "contained": [{"resourceType": "Foo", "id": "1"}]}`,
			[]issue{{"Patient.contained[0].resourceType", "Unknown resource type"}}},
		{"contained resource without type", `{"resourceType": "Patient", "contained": [{"id": "1"}]}`,
			[]issue{{"Patient.contained[0].resourceType", "Missing resource type"}}},
		{"contained resource checked by its own type", `{"resourceType": "Patient", "contained": [{"resourceType": "Organization", "id": "o", "gender": "male"}]}`,
			[]issue{{"Patient.contained[0].gender", `Invalid additional property "gender"`}}},
		{"contained resource with a bad id", `{"resourceType": "Patient", "contained": [{"resourceType": "Organization", "id": "#o"}]}`,
			[]issue{{"Patient.contained[0].id", "Invalid id format"}}},
		{"bundle entry resource", `{"resourceType": "Bundle", "type": "batch", "entry": [{"resource": {"resourceType": "Patient"}},
			{"resource": {"resourceType": "Observation", "code": {"text": "x"}}}]}`,
			[]issue{{"Bundle.entry[1].resource.status", "Missing required property"}}},
		{"bundle entry resource not an object", `{"resourceType": "Bundle", "type": "batch", "entry": [{"resource": "Patient/1"}]}`,
			[]issue{{"Bundle.entry[0].resource", "Invalid JSON type: expected object, but got string"}}},
		{"bundle entry link (contentReference)", `{"resourceType": "Bundle", "type": "batch", "entry": [{"link": [{"url": "x"}]}]}`,
			[]issue{{"Bundle.entry[0].link[0].relation", "Missing required property"}}},
		{"bundle response outcome of another type", `{"resourceType": "Bundle", "type": "batch-response",
			"entry": [{"response": {"status": "200", "outcome": {"resourceType": "Patient"}}}]}`,
			[]issue{{"Bundle.entry[0].response.outcome.resourceType", "Invalid resource type: expected OperationOutcome, but got Patient"}}},
		{"parameters resource", `{"resourceType": "Parameters", "parameter": [{"name": "a", "part": [{"name": "b", "resource": {"resourceType": "Patient", "foo": 1}}]}]}`,
			[]issue{{"Parameters.parameter[0].part[0].resource.foo", `Invalid additional property "foo"`}}},

		// Medplum's resources.
		{"access policy interaction not an array", `{"resourceType": "AccessPolicy", "resource": [{"resourceType": "Patient", "interaction": "read"}]}`,
			[]issue{{"AccessPolicy.resource[0].interaction", "Expected array of values for property"}}},
		{"project membership with a string reference", `{"resourceType": "ProjectMembership", "project": "Project/1",
			"user": {"reference": "User/1"}, "profile": {"reference": "Patient/1"}}`,
			[]issue{{"ProjectMembership.project", "Invalid JSON type: expected object, but got string"}}},
		{"bot timeout as a string", `{"resourceType": "Bot", "name": "b", "timeout": "10"}`,
			[]issue{{"Bot.timeout", "Invalid JSON type: expected number, but got string"}}},
		{"client application unknown field", `{"resourceType": "ClientApplication", "name": "c", "clientSecret": "x"}`,
			[]issue{{"ClientApplication.clientSecret", `Invalid additional property "clientSecret"`}}},

		// Order: schema order, required after present, unknown last.
		{"several issues in schema order", `{"resourceType": "Patient", "zzz": 1, "aaa": 2, "birthDate": "x", "id": "#", "link": [{"type": "seealso"}], "active": 1}`,
			[]issue{
				{"Patient.id", "Invalid id format"},
				{"Patient.active", "Invalid JSON type: expected boolean, but got number"},
				{"Patient.birthDate", "Invalid date format"},
				{"Patient.link[0].other", "Missing required property"},
				{"Patient.aaa", `Invalid additional property "aaa"`},
				{"Patient.zzz", `Invalid additional property "zzz"`},
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := decode(t, tc.doc)
			for _, strict := range []bool{false, true} {
				got := issuesOf(t, Validate(res, Options{Strict: strict}))
				if !slices.Equal(got, tc.want) {
					t.Errorf("strict=%v:\n got %v\nwant %v", strict, got, tc.want)
				}
			}
		})
	}
}

// Strict mode adds what Medplum checks only for strictMode projects: the
// codes of required bindings and a max cardinality below the JSON shape's.
func TestStrictOnlyChecks(t *testing.T) {
	cases := []struct {
		name string
		doc  string
		want []issue
	}{
		{"code outside a required value set", `{"resourceType": "Patient", "gender": "enby"}`,
			[]issue{{"Patient.gender", `Value "enby" did not satisfy terminology binding http://hl7.org/fhir/ValueSet/administrative-gender|4.0.1`}}},
		{"observation status", `{"resourceType": "Observation", "status": "done", "code": {"text": "x"}}`,
			[]issue{{"Observation.status", `Value "done" did not satisfy terminology binding http://hl7.org/fhir/ValueSet/observation-status|4.0.1`}}},
		{"code in a backbone array", `{"resourceType": "AccessPolicy", "resource": [{"resourceType": "Patient", "interaction": ["read", "fly"]}]}`,
			[]issue{{"AccessPolicy.resource[0].interaction[1]", `Value "fly" did not satisfy terminology binding https://medplum.com/fhir/ValueSet/access-poliicy-interactions`}}},
		{"project feature", `{"resourceType": "Project", "name": "p", "features": ["bots", "teleport"]}`,
			[]issue{{"Project.features[1]", `Value "teleport" did not satisfy terminology binding https://medplum.com/fhir/ValueSet/project-feature`}}},
		{"bot runtime", `{"resourceType": "Bot", "name": "b", "runtimeVersion": "node"}`,
			[]issue{{"Bot.runtimeVersion", `Value "node" did not satisfy terminology binding https://medplum.com/fhir/ValueSet/bot-runtime-version|4.0.1`}}},
		{"unknown resource type in a resource-types binding", `{"resourceType": "Project", "exportedResourceType": ["Patients"]}`,
			[]issue{{"Project.exportedResourceType[0]", `Value "Patients" did not satisfy terminology binding http://hl7.org/fhir/ValueSet/resource-types`}}},
		{"bundle type in a nested bundle", `{"resourceType": "Bundle", "type": "batch", "entry": [{"resource": {"resourceType": "Bundle", "type": "pile"}}]}`,
			[]issue{{"Bundle.entry[0].resource.type", `Value "pile" did not satisfy terminology binding http://hl7.org/fhir/ValueSet/bundle-type|4.0.1`}}},
		{"codeable concept outside a required value set", `{"resourceType": "Condition", "subject": {"reference": "Patient/1"},
			"clinicalStatus": {"coding": [{"system": "http://terminology.hl7.org/CodeSystem/condition-clinical", "code": "gone"}]}}`,
			[]issue{{"Condition.clinicalStatus", `Value {"coding":[{"code":"gone","system":"http://terminology.hl7.org/CodeSystem/condition-clinical"}]} did not satisfy terminology binding http://hl7.org/fhir/ValueSet/condition-clinical|4.0.1`}}},
		{"codeable concept with a code from another system", `{"resourceType": "Condition", "subject": {"reference": "Patient/1"},
			"clinicalStatus": {"coding": [{"system": "http://example.org", "code": "active"}]}}`,
			[]issue{{"Condition.clinicalStatus", `Value {"coding":[{"code":"active","system":"http://example.org"}]} did not satisfy terminology binding http://hl7.org/fhir/ValueSet/condition-clinical|4.0.1`}}},
		{"simple quantity with a comparator", `{"resourceType": "Observation", "status": "final", "code": {"text": "x"},
			"referenceRange": [{"low": {"value": 1, "comparator": "<"}}]}`,
			[]issue{{"Observation.referenceRange[0].low.comparator", "Invalid number of values: expected 0..0, but found 1"}}},
		{"extension on a narrative div", `{"resourceType": "Patient", "text": {"status": "generated", "div": "<div>x</div>",
			"_div": {"extension": [{"url": "http://x", "valueString": "y"}]}}}`,
			[]issue{{"Patient.text._div.extension", "Invalid number of values: expected 0..0, but found 1"}}},
		{"extension with neither value nor extensions", `{"resourceType": "Patient", "extension": [{"url": "http://x"}]}`,
			[]issue{{"Patient.extension[0]", "Constraint ext-1 not met: Must have either extensions or value[x], not both"}}},
		{"extension with both value and extensions", `{"resourceType": "Patient", "extension": [{"url": "http://x", "valueString": "a",
			"extension": [{"url": "b", "valueString": "c"}]}]}`,
			[]issue{{"Patient.extension[0]", "Constraint ext-1 not met: Must have either extensions or value[x], not both"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := decode(t, tc.doc)
			if err := Validate(res, Options{}); err != nil {
				t.Errorf("without Strict: %v", err)
			}
			got := issuesOf(t, Validate(res, Options{Strict: true}))
			if !slices.Equal(got, tc.want) {
				t.Errorf("with Strict:\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestValidateCapsIssues(t *testing.T) {
	res := map[string]any{"resourceType": "Patient"}
	for i := range 50 {
		res[fmt.Sprintf("x%02d", i)] = i
	}
	got := issuesOf(t, Validate(res, Options{}))
	if len(got) != MaxIssues {
		t.Fatalf("%d issues, want %d", len(got), MaxIssues)
	}
	if got[0].expr != "Patient.x00" || got[MaxIssues-1].expr != fmt.Sprintf("Patient.x%02d", MaxIssues-1) {
		t.Errorf("issues not the first %d in order: %v", MaxIssues, got)
	}
}

func TestValidateIsDeterministic(t *testing.T) {
	doc := `{"resourceType": "Patient", "b": 1, "a": 2, "c": 3, "gender": 1, "name": [{"given": [1, 2], "x": 1, "y": 2}],
		"contact": [{"gender": "x y", "z": 1}, {}], "telecom": [{"rank": 0, "system": 5}]}`
	res := decode(t, doc)
	first := Validate(res, Options{Strict: true}).(*fhir.Error).JSON()
	for range 50 {
		again := Validate(res, Options{Strict: true}).(*fhir.Error).JSON()
		if string(again) != string(first) {
			t.Fatalf("outcome changed between runs:\n%s\n%s", first, again)
		}
	}
}

func TestValidateAcceptsFloat64Numbers(t *testing.T) {
	var res map[string]any
	doc := `{"resourceType": "Observation", "status": "final", "code": {"text": "x"}, "valueQuantity": {"value": 1.5},
		"component": [{"code": {"text": "n"}, "valueInteger": 3}]}`
	if err := json.Unmarshal([]byte(doc), &res); err != nil {
		t.Fatal(err)
	}
	if err := Validate(res, Options{Strict: true}); err != nil {
		t.Fatalf("float64 numbers: %v", err)
	}
	res["component"].([]any)[0].(map[string]any)["valueInteger"] = 3.5
	got := issuesOf(t, Validate(res, Options{}))
	want := []issue{{"Observation.component[0].valueInteger", "Expected number to be an integer"}}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestValidateProgrammaticValues(t *testing.T) {
	cases := []struct {
		name string
		res  map[string]any
		want []issue
	}{
		{"nil resource", nil, []issue{{"resourceType", "Missing resource type"}}},
		{"NaN literal", map[string]any{"resourceType": "Patient", "multipleBirthInteger": json.Number("NaN")},
			[]issue{{"Patient.multipleBirthInteger", "Invalid numeric value"}}},
		{"hex literal", map[string]any{"resourceType": "Patient", "multipleBirthInteger": json.Number("0x1p4")},
			[]issue{{"Patient.multipleBirthInteger", "Invalid integer format"}}},
		{"Go int", map[string]any{"resourceType": "Patient", "multipleBirthInteger": 3}, nil},
		{"Go struct value", map[string]any{"resourceType": "Patient", "active": struct{}{}},
			[]issue{{"Patient.active", "Invalid JSON type: expected boolean, but got object"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := issuesOf(t, Validate(tc.res, Options{}))
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestValidateDepthLimit(t *testing.T) {
	// Extensions nest without bound in FHIR; a map built in code can even
	// contain itself. Neither may overflow the stack.
	ext := map[string]any{"url": "x", "valueString": "leaf"}
	for range 300 {
		ext = map[string]any{"url": "x", "extension": []any{ext}}
	}
	got := issuesOf(t, Validate(map[string]any{"resourceType": "Patient", "extension": []any{ext}}, Options{}))
	if len(got) != 1 || got[0].msg != "Maximum nesting depth exceeded" {
		t.Errorf("deep nesting: %v", got)
	}

	loop := map[string]any{"url": "x"}
	loop["extension"] = []any{loop}
	got = issuesOf(t, Validate(map[string]any{"resourceType": "Patient", "extension": []any{loop}}, Options{Strict: true}))
	if len(got) != 1 || got[0].msg != "Maximum nesting depth exceeded" {
		t.Errorf("cyclic map: %v", got)
	}
}

func TestValidateConcurrently(t *testing.T) {
	valid, invalid := decode(t, bundleJSON), decode(t, `{"resourceType": "Patient", "gender": "enby", "foo": 1}`)
	done := make(chan error)
	for range 8 {
		go func() {
			for range 200 {
				if err := Validate(valid, Options{Strict: true}); err != nil {
					done <- err
					return
				}
				if err := Validate(invalid, Options{Strict: true}); len(err.(*fhir.Error).Outcome.Issue) != 2 {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

func TestResourceTypes(t *testing.T) {
	for _, rt := range []string{"Patient", "Observation", "Bundle", "Questionnaire", "Parameters", "Binary",
		"Project", "ProjectMembership", "User", "Bot", "ClientApplication", "AccessPolicy", "Login", "JsonWebKey"} {
		if !IsResourceType(rt) {
			t.Errorf("IsResourceType(%q) = false", rt)
		}
	}
	for _, rt := range []string{"", "patient", "Resource", "DomainResource", "HumanName", "Patient.contact",
		"ViewDefinition", "MetadataResource", "IdentityProvider", "string"} {
		if IsResourceType(rt) {
			t.Errorf("IsResourceType(%q) = true", rt)
		}
	}
	list := ResourceTypes()
	if !slices.IsSorted(list) || len(list) < 170 || !slices.Contains(list, "ProjectMembership") {
		t.Errorf("ResourceTypes: %d, sorted %v", len(list), slices.IsSorted(list))
	}
	for _, rt := range list {
		if !IsResourceType(rt) {
			t.Errorf("listed %q is not a resource type", rt)
		}
	}
	list[0] = "Mutated"
	if ResourceTypes()[0] == "Mutated" {
		t.Error("ResourceTypes shares its slice with the caller")
	}
}

func TestSchemaTable(t *testing.T) {
	if n := len(schemaText); n > 1<<20 {
		t.Errorf("schema.txt is %d bytes; keep it under 1 MiB", n)
	}
	s := tables()
	for name, typ := range s.types {
		if typ.format != nil {
			if _, err := regexp.Compile("^(?:" + typ.format.pattern + ")$"); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		if typ.kind != kindPrimitive && len(typ.props) == 0 {
			t.Errorf("%s has no properties", name)
		}
	}
	// Content references resolve to the backbone they name.
	q := s.types["Questionnaire.item"]
	if q == nil || q.props["item"] == nil || q.props["item"].typ != q {
		t.Error("Questionnaire.item.item does not refer back to Questionnaire.item")
	}
	if p := s.types["Parameters.parameter"]; p == nil || p.props["part"].typ != p || p.props["resource"].typ != nil {
		t.Error("Parameters.parameter.part/resource are not linked")
	}
	// Every binding the table names has codes.
	for _, typ := range s.types {
		for _, el := range typ.elements {
			if el.bindingURL != "" && (el.binding == nil || len(el.binding.codes) == 0) {
				t.Errorf("%s.%s: binding %s without codes", typ.name, el.name, el.bindingURL)
			}
		}
	}
}

func TestParseRejectsBrokenTables(t *testing.T) {
	for _, text := range []string{
		"complex A\n\tx 0..1 Missing\n",
		"complex A\n\tx 0..1\n",
		"complex A\n\tx one..1 string\n",
		"\tx 0..1 string\n",
		"widget A\n",
		"complex A\ncomplex A\n",
		"complex A\n\tx 0..1 string binding=http://nowhere\n",
	} {
		if _, err := parse(text); err == nil {
			t.Errorf("parse(%q) succeeded", text)
		}
	}
}

func BenchmarkParseSchema(b *testing.B) {
	for b.Loop() {
		if _, err := parse(schemaText); err != nil {
			b.Fatal(err)
		}
	}
}
