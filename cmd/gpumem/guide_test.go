package main

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite the outputs of the documentation's gpumem examples (README.md, cmd/gpumem/README.md, docs/guide) from what the commands print now")

// repoRoot is the checkout's root, from this package's directory.
var repoRoot = filepath.Join("..", "..")

var readmePath = filepath.Join(repoRoot, "README.md")

// docFiles are the documents whose examples the docs tests check: the
// README, this command's manual and every guide chapter.
func docFiles(t *testing.T) []string {
	t.Helper()
	guide, err := filepath.Glob(filepath.Join(repoRoot, "docs", "guide", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(guide)
	return append([]string{readmePath, filepath.Join(repoRoot, "cmd", "gpumem", "README.md")}, guide...)
}

// guideBlock is one example of a document: a ```console block whose first
// line is "$ gpumem ARGS", then the output, in chunks parted by "…"
// lines (lines left out).
type guideBlock struct {
	args   []string
	chunks [][]string
	// from and to are the block's output lines in the file's lines.
	from, to int
}

// guideBlocks reads a document's examples.
func guideBlocks(lines []string) []guideBlock {
	var blocks []guideBlock
	for i := 0; i < len(lines); i++ {
		if lines[i] != "```console" || i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "$ gpumem") {
			continue
		}
		b := guideBlock{args: strings.Fields(strings.TrimPrefix(lines[i+1], "$ gpumem")), from: i + 2}
		j := b.from
		for j < len(lines) && lines[j] != "```" {
			j++
		}
		b.to = j
		chunk := []string{}
		for _, l := range lines[b.from:b.to] {
			if l == "…" {
				b.chunks = append(b.chunks, chunk)
				chunk = []string{}
				continue
			}
			chunk = append(chunk, l)
		}
		b.chunks = append(b.chunks, chunk)
		blocks = append(blocks, b)
		i = j
	}
	return blocks
}

// guideArgs maps the documents' paths (../shared/traces/NAME beside the
// checkout, docs/... in it) to the test's; missing names a shared snapshot
// that is not there.
func guideArgs(args []string) (out []string, missing string) {
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "../shared/traces/"):
			a = filepath.Join(sharedTraces, strings.TrimPrefix(a, "../shared/traces/"))
			if _, err := os.Stat(a); err != nil {
				return nil, a
			}
		case strings.HasPrefix(a, "docs/"):
			a = filepath.Join(repoRoot, a)
		}
		out = append(out, a)
	}
	return out, ""
}

// cmdOutputs runs each command line once however many documents show it.
type cmdOutputs struct {
	mu  sync.Mutex
	out map[string]string
}

func (c *cmdOutputs) get(t *testing.T, args []string) string {
	t.Helper()
	key := strings.Join(args, "\x00")
	c.mu.Lock()
	defer c.mu.Unlock()
	if out, ok := c.out[key]; ok {
		return out
	}
	out, errOut, err := runCmd(t, args...)
	if err != nil {
		t.Fatalf("gpumem %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	if c.out == nil {
		c.out = map[string]string{}
	}
	c.out[key] = out
	return out
}

// The documents' examples print what the documents show: each chunk of a
// block appears in the command's output unbroken and in order
// (-update-docs rewrites the chunks from the output, each from its first
// line to its last as the document has them, a block without "…" whole).
func TestDocsShowWhatTheCommandsPrint(t *testing.T) {
	if raceDetector {
		t.Skip("checked by go test without -race: the examples replay whole snapshots, minutes under the race detector")
	}
	var outputs cmdOutputs
	total := 0
	for _, path := range docFiles(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(data), "\n")
		blocks := guideBlocks(lines)
		total += len(blocks)
		updated := slices.Clone(lines)
		for bi := len(blocks) - 1; bi >= 0; bi-- { // from the end: rewriting keeps earlier lines in place
			b := blocks[bi]
			cmdline := "gpumem " + strings.Join(b.args, " ")
			args, missing := guideArgs(b.args)
			if missing != "" {
				t.Logf("%s: skipping %s: %s not available (../shared beside the checkout)", path, cmdline, missing)
				continue
			}
			out := outputs.get(t, args)
			got := strings.Split(strings.TrimRight(out, "\n"), "\n")
			var body []string
			if len(b.chunks) == 1 { // the whole output
				body = got
				if !slices.Equal(b.chunks[0], got) && !*updateDocs {
					t.Errorf("%s: %s prints, in place of the block:\n%s", path, cmdline, out)
				}
				updated = slices.Concat(updated[:b.from], body, updated[b.to:])
				continue
			}
			at := 0
			for ci, chunk := range b.chunks {
				if ci > 0 {
					body = append(body, "…")
				}
				if len(chunk) == 0 {
					continue
				}
				i := at + slices.Index(got[at:], chunk[0])
				j := -1
				if i >= at {
					if k := slices.Index(got[i:], chunk[len(chunk)-1]); k >= 0 {
						j = i + k
					}
				}
				if i < at || j < 0 {
					t.Errorf("%s: %s: the chunk from %q to %q is not in its output:\n%s", path, cmdline, chunk[0], chunk[len(chunk)-1], out)
					body = append(body, chunk...)
					continue
				}
				if !slices.Equal(chunk, got[i:j+1]) && !*updateDocs {
					t.Errorf("%s: %s prints, in place of the chunk:\n%s", path, cmdline, strings.Join(got[i:j+1], "\n"))
				}
				body = append(body, got[i:j+1]...)
				at = j + 1
			}
			updated = slices.Concat(updated[:b.from], body, updated[b.to:])
		}
		if *updateDocs && !slices.Equal(lines, updated) {
			if err := os.WriteFile(path, []byte(strings.Join(updated, "\n")), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if total < 18 {
		t.Fatalf("%d gpumem examples in the documents, want the 18 or more they hold", total)
	}
}
