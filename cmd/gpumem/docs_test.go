package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// goFileRef finds the Go file a ```go block is cut from, named on the line
// before the block (as a path or a link).
var goFileRef = regexp.MustCompile("[A-Za-z0-9_./-]+\\.go\\b")

// resolveDocPath resolves a path a document names: relative to the
// document, else to the checkout's root.
func resolveDocPath(doc, ref string) (string, bool) {
	for _, p := range []string{filepath.Join(filepath.Dir(doc), ref), filepath.Join(repoRoot, ref)} {
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
	}
	return "", false
}

// Every Go block of the documents is cut from code the tests compile (an
// example program or an Example function, whose output go test checks):
// the line before the block names the file, and the block's lines appear
// there in a row, each indented by the same tabs.
func TestDocsGoBlocksAreCutFromCompiledCode(t *testing.T) {
	n := 0
	for _, doc := range docFiles(t) {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(data), "\n")
		for i := 0; i < len(lines); i++ {
			if lines[i] != "```go" {
				continue
			}
			j := i + 1
			for j < len(lines) && lines[j] != "```" {
				j++
			}
			block := lines[i+1 : j]
			n++
			// The paragraph before the block names the file: the last .go
			// file it names.
			k := i - 1
			for k >= 0 && strings.TrimSpace(lines[k]) == "" {
				k--
			}
			para := ""
			for ; k >= 0 && strings.TrimSpace(lines[k]) != ""; k-- {
				para = lines[k] + "\n" + para
			}
			refs := goFileRef.FindAllString(para, -1)
			if len(refs) == 0 {
				t.Errorf("%s:%d: the paragraph before a Go block names no .go file it is cut from", doc, i+1)
				i = j
				continue
			}
			src, ok := resolveDocPath(doc, refs[len(refs)-1])
			if !ok {
				t.Errorf("%s:%d: the block's paragraph names %s, which is not in the checkout", doc, i+1, refs[len(refs)-1])
				i = j
				continue
			}
			code, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if !cutFrom(block, strings.Split(string(code), "\n")) {
				t.Errorf("%s:%d: the Go block is not a run of lines of %s (each indented alike there): update the one from the other", doc, i+1, src)
			}
			i = j
		}
	}
	if n < 8 {
		t.Fatalf("%d Go blocks in the documents, want the 8 or more they hold", n)
	}
}

// cutFrom reports whether block's lines appear in a row in code, each
// behind the same run of tabs (blank lines blank), once the tabs every
// line of the block starts with are taken off.
func cutFrom(block, code []string) bool {
	if len(block) == 0 {
		return false
	}
	common := -1
	for _, b := range block {
		if strings.TrimSpace(b) == "" {
			continue
		}
		if n := len(b) - len(strings.TrimLeft(b, "\t")); common < 0 || n < common {
			common = n
		}
	}
	block = slices.Clone(block)
	for i, b := range block {
		if len(b) >= common && common > 0 {
			block[i] = b[common:]
		}
	}
	for i, l := range code {
		indent := l[:len(l)-len(strings.TrimLeft(l, "\t"))]
		if l != indent+block[0] || i+len(block) > len(code) {
			continue
		}
		ok := true
		for k, b := range block {
			c := code[i+k]
			if b == "" && strings.TrimSpace(c) == "" {
				continue
			}
			if c != indent+b {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// markdownLink finds a link's target: [text](target).
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every relative link of the documents (README, the command's manual, the
// guide, the results) names a file or folder of the checkout.
func TestDocsLinksResolve(t *testing.T) {
	results, _ := filepath.Glob(filepath.Join(repoRoot, "docs", "results", "*.md"))
	for _, doc := range append(docFiles(t), results...) {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range markdownLink.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			if _, err := os.Stat(filepath.Join(filepath.Dir(doc), target)); err != nil {
				t.Errorf("%s links to %s, which is not in the checkout", doc, m[1])
			}
		}
	}
}

// The README is a product page of at most 250 lines, and its test command
// is the one CI runs: .ci/run runs the README's command, so the two must
// not drift apart.
func TestREADMEIsShortAndShowsCIsTestCommand(t *testing.T) {
	data, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 250 {
		t.Errorf("README.md has %d lines, want at most 250: move the detail to docs/guide", len(lines))
	}
	ci, err := os.ReadFile(filepath.Join(repoRoot, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	var cmd string
	for _, l := range strings.Split(string(ci), "\n") {
		if strings.HasPrefix(l, "go vet ./... && go test") {
			cmd = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(l), "|| exit"))
		}
	}
	if cmd == "" {
		t.Fatal(".ci/run runs no `go vet ./... && go test …` line")
	}
	if !slices.Contains(lines, "    "+cmd) && !slices.Contains(lines, cmd) {
		t.Errorf("README.md does not show .ci/run's test command %q on a line of its own", cmd)
	}
}

// The command's manual shows the help of every command, and `gpumem help`
// itself, each checked against the command by TestDocsShowWhatTheCommandsPrint.
func TestManualShowsEveryCommandsHelp(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "cmd", "gpumem", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]bool{}
	for _, b := range guideBlocks(strings.Split(string(data), "\n")) {
		shown[strings.Join(b.args, " ")] = true
	}
	want := []string{"help"}
	for _, l := range strings.Split(usageText, "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "gpumem" {
			want = append(want, "help "+f[1])
		}
	}
	for _, w := range want {
		if !shown[w] {
			t.Errorf("cmd/gpumem/README.md has no example of `gpumem %s`", w)
		}
	}
}
