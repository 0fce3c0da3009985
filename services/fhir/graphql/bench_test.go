package graphql

import (
	"context"
	"testing"
)

// BenchmarkRequestSchemaQuery is the schema query without HTTP: parse,
// validate, bound and answer from the tables.
func BenchmarkRequestSchemaQuery(b *testing.B) {
	if _, err := schema(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Execute(context.Background(), nil, Request{Query: requestSchemaQuery}, DefaultLimits); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkValidateList is the parse, validation and bounds of a list
// query, the part of every request that reads nothing.
func BenchmarkValidateList(b *testing.B) {
	if _, err := schema(); err != nil {
		b.Fatal(err)
	}
	q := Request{Query: `{ __typename }`}
	for b.Loop() {
		if _, err := Execute(context.Background(), nil, q, DefaultLimits); err != nil {
			b.Fatal(err)
		}
	}
}
