package checks

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/moby/patternmatcher"

	"github.com/pinion-health/pinion/deploy/checks/internal/deployfiles"
)

// stage is one FROM ... AS name section of the Dockerfile.
type stage struct {
	base  string     // the image or stage it starts from, ARGs resolved
	instr [][]string // instructions: keyword (upper case) then its words
}

// has reports whether the stage has an instruction whose words start with
// the given ones.
func (s *stage) has(words ...string) bool {
	for _, in := range s.instr {
		if len(in) >= len(words) && slices.Equal(in[:len(words)], words) {
			return true
		}
	}
	return false
}

// dockerStages parses deploy/docker/Dockerfile: enough of the syntax for
// these checks (continuations, comments, global ARG defaults, FROM ... AS).
// The order of stages is kept under the key "" as the last stage's name.
func dockerStages(t *testing.T) map[string]*stage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), deployfiles.Dockerfile))
	if err != nil {
		t.Fatal(err)
	}
	args := map[string]string{}
	stages := map[string]*stage{}
	var cur *stage
	last := ""
	for _, line := range joinContinuations(string(b)) {
		words := strings.Fields(line)
		if len(words) == 0 || strings.HasPrefix(words[0], "#") {
			continue
		}
		words[0] = strings.ToUpper(words[0])
		switch {
		case words[0] == "ARG" && cur == nil:
			if k, v, ok := strings.Cut(words[1], "="); ok {
				args[k] = v
			}
		case words[0] == "FROM":
			if len(words) != 4 || !strings.EqualFold(words[2], "AS") {
				t.Fatalf("Dockerfile: %q: every stage needs a name (FROM image AS name)", line)
			}
			base := os.Expand(words[1], func(k string) string { return args[k] })
			cur = &stage{base: base}
			stages[words[3]] = cur
			last = words[3]
		case cur != nil:
			cur.instr = append(cur.instr, words)
		}
	}
	stages[""] = &stage{base: last}
	return stages
}

func joinContinuations(s string) []string {
	var out []string
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			if b.Len() == 0 {
				out = append(out, trimmed)
			}
			continue // a comment, alone or inside a continued instruction
		}
		if strings.HasSuffix(trimmed, "\\") {
			b.WriteString(strings.TrimSuffix(trimmed, "\\"))
			b.WriteString(" ")
			continue
		}
		b.WriteString(trimmed)
		out = append(out, b.String())
		b.Reset()
	}
	return out
}

// floatingTags are images that publish no version tags, only digests: the
// one accepted exception to pinning by version, documented in the
// Dockerfile (pin them by digest in your registry mirror).
var floatingTags = map[string]string{
	"gcr.io/distroless/static-debian13:nonroot": "distroless publishes digests, not versions",
}

var versionTag = regexp.MustCompile(`^v?\d+\.\d+`)

// pinned accepts an image reference with a digest or a version tag.
func pinned(image string) error {
	if image == "" {
		return fmt.Errorf("no image")
	}
	if strings.Contains(image, "@sha256:") {
		return nil
	}
	if _, ok := floatingTags[image]; ok {
		return nil
	}
	name := image[strings.LastIndex(image, "/")+1:]
	_, tag, ok := strings.Cut(name, ":")
	if !ok || !versionTag.MatchString(tag) {
		return fmt.Errorf("image %q is not pinned: want a version tag (mongo:8.0.17) or a digest", image)
	}
	return nil
}

func TestPinned(t *testing.T) {
	for _, tc := range []struct {
		image string
		ok    bool
	}{
		{"mongo:8.0.17", true},
		{"nats:2.15.2-alpine", true},
		{"registry:5000/x/y:1.2", true},
		{"golang@sha256:0123", true},
		{"mongo", false},
		{"mongo:latest", false},
		{"nats:alpine", false},
		{"registry:5000/x/y", false},
	} {
		if err := pinned(tc.image); (err == nil) != tc.ok {
			t.Errorf("pinned(%q) = %v", tc.image, err)
		}
	}
}

func TestDockerfile(t *testing.T) {
	stages := dockerStages(t)
	// Base images are pinned.
	for name, s := range stages {
		if name == "" {
			continue
		}
		if _, isStage := stages[s.base]; !isStage {
			if err := pinned(s.base); err != nil {
				t.Errorf("stage %s: %v", name, err)
			}
		}
	}
	// The Go image builds with the Go version the workspace asks for.
	goVersion := goWorkVersion(t)
	build := stages["build"]
	if build == nil {
		t.Fatal("no build stage")
	}
	minor := goVersion[:strings.LastIndex(goVersion, ".")] + "."
	if _, tag, _ := strings.Cut(build.base, ":"); !strings.HasPrefix(tag, minor) {
		t.Errorf("build image %s: want Go %s.x (go.work says go %s)", build.base, strings.TrimSuffix(minor, "."), goVersion)
	}
	if !build.has("ENV", "CGO_ENABLED=0") {
		t.Error("build: CGO_ENABLED=0 missing; the runtime image has no C library")
	}
	// The runtime stage runs as a numeric non-root user, so Kubernetes can
	// verify runAsNonRoot.
	rt := stages["runtime"]
	if rt == nil || !rt.has("USER", "65532:65532") {
		t.Error("runtime stage: want USER 65532:65532")
	}
	// One final stage per binary, each from the runtime stage, running its
	// binary; the default (last) stage is the standalone pinion.
	built := goBuildPackages(t, build)
	for _, bin := range append(slices.Clone(pinionBinaries), "pinion") {
		s := stages[bin]
		if s == nil {
			t.Errorf("no stage %s", bin)
			continue
		}
		if s.base != "runtime" {
			t.Errorf("stage %s starts from %s, want runtime", bin, s.base)
		}
		if !s.has("COPY", "--from=build", "/out/bin/"+bin, "/usr/local/bin/"+bin) {
			t.Errorf("stage %s does not copy its binary", bin)
		}
		if !s.has("ENTRYPOINT", `["/usr/local/bin/`+bin+`"]`) {
			t.Errorf("stage %s: want ENTRYPOINT [\"/usr/local/bin/%s\"]", bin, bin)
		}
		if s.has("USER") {
			t.Errorf("stage %s changes the user", bin)
		}
		if _, ok := built[bin]; !ok {
			t.Errorf("the build stage does not build %s", bin)
		}
	}
	if _, ok := built["pinion-probe"]; !ok {
		t.Error("the build stage does not build pinion-probe")
	}
	if stages[""].base != "pinion" {
		t.Errorf("the default (last) stage is %s, want pinion", stages[""].base)
	}
	// make images builds every final stage.
	if images := sorted(strings.Fields(makeVar(t, "IMAGES"))); !slices.Equal(images, sorted(append([]string{"pinion"}, pinionBinaries...))) {
		t.Errorf("make images builds %v, want every binary's stage", images)
	}
	// The Dockerfile builds what `make build` builds, from the same packages.
	mk := makeBuildPackages(t)
	delete(built, "pinion-probe")
	if fmt.Sprint(mk) != fmt.Sprint(built) {
		t.Errorf("Dockerfile builds %v; make build builds %v", built, mk)
	}
}

// goBuildPackages maps each binary the build stage's go build makes to its
// package, checking that the package is a main package in the repository.
func goBuildPackages(t *testing.T, build *stage) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, in := range build.instr {
		if in[0] != "RUN" {
			continue
		}
		for _, w := range in {
			if !strings.HasPrefix(w, "./") {
				continue
			}
			out[filepath.Base(w)] = w
			checkMainPackage(t, w)
		}
	}
	return out
}

func checkMainPackage(t *testing.T, pkg string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), pkg, "main.go"))
	if err != nil || !regexp.MustCompile(`(?m)^package main$`).Match(b) {
		t.Errorf("%s is not a main package in this repository", pkg)
	}
}

// makeBuildPackages reads the Makefile's build target: binary → package.
func makeBuildPackages(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`-o \$\(BIN\)/(\S+) (\./\S+)`)
	out := map[string]string{}
	inBuild := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "build:") {
			inBuild = true
			continue
		}
		if inBuild && !strings.HasPrefix(line, "\t") {
			break
		}
		if m := re.FindStringSubmatch(line); inBuild && m != nil {
			out[m[1]] = m[2]
		}
	}
	if len(out) == 0 {
		t.Fatal("Makefile: no binaries in the build target")
	}
	return out
}

// makeVar is the value of a Makefile variable (NAME := or ?= value).
func makeVar(t *testing.T, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + `\s*[:?]?=\s*(.*)$`).FindStringSubmatch(readFile(t, filepath.Join(root(t), "Makefile")))
	if m == nil {
		t.Fatalf("Makefile: no %s", name)
	}
	return strings.TrimSpace(m[1])
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

func goWorkVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+\.\d+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.work: no go directive")
	}
	return string(m[1])
}

// The ignore file must keep out local clutter but nothing the build needs:
// every file of every workspace module.
func TestDockerignore(t *testing.T) {
	r := root(t)
	b, err := os.ReadFile(filepath.Join(r, deployfiles.Dockerfile+".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	excluded := func(rel string) bool {
		m, err := pm.MatchesOrParentMatches(rel)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, must := range []string{"go.work", "go.work.sum"} {
		if excluded(must) {
			t.Errorf("%s is excluded from the build context", must)
		}
	}
	modules := regexp.MustCompile(`(?m)^\s+\./(\S+)$`).FindAllStringSubmatch(readFile(t, filepath.Join(r, "go.work")), -1)
	if len(modules) == 0 {
		t.Fatal("go.work: no modules")
	}
	var needed []string
	for _, m := range modules {
		err := filepath.WalkDir(filepath.Join(r, m[1]), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			if !d.IsDir() {
				rel, _ := filepath.Rel(r, path)
				needed = append(needed, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var lost []string
	for _, f := range needed {
		if excluded(f) && !strings.HasSuffix(f, ".test") {
			lost = append(lost, f)
		}
	}
	sort.Strings(lost)
	if len(lost) > 0 {
		t.Errorf("the build context leaves out module files: %v", lost)
	}
	for _, out := range []string{".git/config", "bin/pinion", "data/superadmin.json", "tests/compat/node_modules/x"} {
		if !excluded(out) {
			t.Errorf("%s is in the build context", out)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
