package gpumem_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The design document's own rules (docs/design.md §15): it stays short
// enough to read, every decision record it (or a comment in the code)
// links exists and no record is orphaned, every invariant label its index
// lists is stated in the package the index names, next to a file that
// exists, and every Go name it quotes is one the code still has.

const (
	designPath   = "docs/design.md"
	decisionsDir = "docs/decisions"
	// designMaxLines is the length the design document must stay within:
	// the design only, with measurements in the decision records and
	// tests found by name.
	designMaxLines = 800
)

// recordLink matches a link to a decision record, relative to docs/ or to
// the repository root: (decisions/2026-12-03-tightest-page.md) or
// docs/decisions/2026-12-03-tightest-page.md.
var recordLink = regexp.MustCompile(`(?:docs/)?decisions/(\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md)`)

func readDesign(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(designPath)
	if err != nil {
		t.Fatalf("reading the design document: %v", err)
	}
	return string(b)
}

func TestDesignDocumentStaysWithinItsLength(t *testing.T) {
	doc := readDesign(t)
	n := strings.Count(doc, "\n")
	if !strings.HasSuffix(doc, "\n") && doc != "" {
		n++
	}
	if n > designMaxLines {
		t.Errorf("%s has %d lines, more than %d: move measurements to a dated record in %s and details to the package docs", designPath, n, designMaxLines, decisionsDir)
	}
}

func TestDecisionRecordsLinkedFromTheDesignAndTheCodeExist(t *testing.T) {
	records, err := filepath.Glob(filepath.Join(decisionsDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	exists := map[string]bool{}
	for _, r := range records {
		exists[filepath.Base(r)] = true
	}
	linked := map[string]string{} // record → where a link to it was found

	design := readDesign(t)
	designLinks := recordLink.FindAllStringSubmatch(design, -1)
	if len(designLinks) == 0 {
		t.Fatalf("%s links no decision record", designPath)
	}
	for _, m := range designLinks {
		linked[m[1]] = designPath
	}
	// Records link each other, and code comments link the record that
	// holds the numbers behind a rule.
	for _, r := range records {
		b, err := os.ReadFile(r)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range recordLink.FindAllStringSubmatch(string(b), -1) {
			if _, ok := linked[m[1]]; !ok {
				linked[m[1]] = r
			}
		}
	}
	err = filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range recordLink.FindAllStringSubmatch(string(b), -1) {
			if _, ok := linked[m[1]]; !ok {
				linked[m[1]] = path
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	for rec, where := range linked {
		if !exists[rec] {
			t.Errorf("%s links %s/%s, which does not exist", where, decisionsDir, rec)
		}
	}
	for rec := range exists {
		if !strings.Contains(design, "decisions/"+rec) {
			t.Errorf("%s/%s is linked from no named rule in %s", decisionsDir, rec, designPath)
		}
	}
}

func TestDecisionRecordsCarryTheirDateAndStatus(t *testing.T) {
	records, err := filepath.Glob(filepath.Join(decisionsDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range records {
		b, err := os.ReadFile(r)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		date := filepath.Base(r)[:len("2006-01-02")]
		if !strings.HasPrefix(text, "# ") {
			t.Errorf("%s: the first line is not a title", r)
		}
		if !strings.Contains(text, "**Date:** "+date) {
			t.Errorf("%s: no **Date:** %s line (the date its name gives)", r, date)
		}
		for _, section := range []string{"**Status:**", "## Summary", "## Context", "## Decision", "## Numbers"} {
			if !strings.Contains(text, section) {
				t.Errorf("%s: no %s", r, section)
			}
		}
	}
}

// indexRow matches a row of the design's invariant index:
// | PL34 | `internal/pool` | what it says | `internal/pool/room.go` |
var indexRow = regexp.MustCompile("^\\| ([A-Z]{1,2}[0-9]+) \\| `([^`]+)` \\| .+ \\| `([^`]+)` \\|$")

func TestInvariantIndexNamesLabelsTheCodeStates(t *testing.T) {
	doc := readDesign(t)
	i := strings.Index(doc, "## 15. Index of invariants")
	if i < 0 {
		t.Fatalf("%s has no §15 index of invariants", designPath)
	}
	sources := map[string]string{} // package dir → its non-test Go source
	source := func(dir string) string {
		if s, ok := sources[dir]; ok {
			return s
		}
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		var sb strings.Builder
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			sb.Write(b)
		}
		sources[dir] = sb.String()
		return sources[dir]
	}
	rows := 0
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(doc[i:]))
	for sc.Scan() {
		m := indexRow.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		rows++
		label, pkg, file := m[1], m[2], m[3]
		if seen[pkg+" "+label] {
			t.Errorf("index: %s of %s is listed twice", label, pkg)
		}
		seen[pkg+" "+label] = true
		if fi, err := os.Stat(pkg); err != nil || !fi.IsDir() {
			t.Errorf("index: %s names package %s, which is no folder", label, pkg)
			continue
		}
		if !regexp.MustCompile(`\b` + label + `\b`).MatchString(source(pkg)) {
			t.Errorf("index: %s is not stated in package %s", label, pkg)
		}
		if _, err := os.Stat(file); err != nil {
			t.Errorf("index: %s is checked in %s, which does not exist", label, file)
		}
	}
	if rows == 0 {
		t.Fatalf("%s: the index of invariants lists no label", designPath)
	}
}

// codeWords returns every identifier-like word of the module's Go files.
func codeWords(t *testing.T) map[string]bool {
	t.Helper()
	words := map[string]bool{}
	word := regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && strings.HasPrefix(name, ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, w := range word.FindAll(b, -1) {
			words[string(w)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return words
}

func TestDesignQuotesNamesTheCodeHas(t *testing.T) {
	doc := readDesign(t)
	words := codeWords(t)
	quoted := regexp.MustCompile("`([^`]+)`")
	ident := regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	missing := map[string]bool{}
	for _, m := range quoted.FindAllStringSubmatch(doc, -1) {
		q := m[1]
		// Paths, files and flags are not Go names.
		if strings.Contains(q, "/") || strings.HasPrefix(q, "-") || strings.HasSuffix(q, ".go") || strings.HasSuffix(q, ".md") {
			continue
		}
		for _, w := range ident.FindAllString(q, -1) {
			if !words[w] {
				missing[w] = true
			}
		}
	}
	for w := range missing {
		t.Errorf("%s quotes %s, which no Go file of the module has: rename it as the code did", designPath, w)
	}
}
