// Package graphql is the FHIR service's $graphql: Medplum's subset of FHIR
// GraphQL, so that @medplum/core (requestSchema, graphql()) and Medplum's
// web app work unchanged.
//
// The schema is generated once, on first use, from the tables Pinion
// validates and searches with (pkg/fhirschema, pkg/search) and loaded with
// gqlparser, which parses and validates every query. Queries run against a
// Store that the FHIR service fills with its own REST handlers, so each
// node meets the caller's access policy as the REST request would;
// StructureDefinitionList and SearchParameterList are answered from the
// tables themselves (definitions.go). Limits (limits.go) bound the query's
// size, depth, breadth and estimated cost before anything is read, and the
// resources read and the time taken while it runs.
package graphql
