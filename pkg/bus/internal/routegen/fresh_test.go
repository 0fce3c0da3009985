package main

import (
	"os"
	"testing"
)

// routes_gen.go is what the services declare today (make check-generated
// says the same, with git).
func TestGeneratedTableIsFresh(t *testing.T) {
	routes, err := Collect("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	want, err := Render(routes)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../routes_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatal("pkg/bus/routes_gen.go is stale: run go generate ./bus/ in pkg (or make generate)")
	}
}
