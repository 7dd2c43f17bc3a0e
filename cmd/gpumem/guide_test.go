package main

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var updateGuide = flag.Bool("update-guide", false, "rewrite the outputs in docs/guide/answers.md from what the commands print now")

// guidePath is the guide chapter whose examples guideBlocks checks.
var guidePath = filepath.Join("..", "..", "docs", "guide", "answers.md")

// guideBlock is one example of the guide: a ```console block whose first
// line is "$ gpumem ARGS", then the output, in chunks parted by "…"
// lines (lines left out).
type guideBlock struct {
	args   []string
	chunks [][]string
	// from and to are the block's output lines in the file's lines.
	from, to int
}

// guideBlocks reads the guide's examples.
func guideBlocks(t *testing.T, lines []string) []guideBlock {
	t.Helper()
	var blocks []guideBlock
	for i := 0; i < len(lines); i++ {
		if lines[i] != "```console" || i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "$ gpumem ") {
			continue
		}
		b := guideBlock{args: strings.Fields(strings.TrimPrefix(lines[i+1], "$ gpumem ")), from: i + 2}
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

// guideArgs maps the guide's paths (../shared/traces/NAME beside the
// checkout, docs/guide/NAME in it) to the test's; ok is false when a
// shared snapshot is not there.
func guideArgs(args []string) (out []string, missing string) {
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "../shared/traces/"):
			a = filepath.Join(sharedTraces, strings.TrimPrefix(a, "../shared/traces/"))
			if _, err := os.Stat(a); err != nil {
				return nil, a
			}
		case strings.HasPrefix(a, "docs/guide/"):
			a = filepath.Join("..", "..", a)
		}
		out = append(out, a)
	}
	return out, ""
}

// The guide's examples print what the guide shows: each chunk of a block
// appears in the command's output unbroken and in order (-update-guide
// rewrites the chunks from the output, each from its first line to its
// last as the guide has them, a block without "…" whole).
func TestGuideAnswersShowWhatTheCommandsPrint(t *testing.T) {
	data, err := os.ReadFile(guidePath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	blocks := guideBlocks(t, lines)
	if len(blocks) < 6 {
		t.Fatalf("%d examples in %s, want the guide's 6 or more", len(blocks), guidePath)
	}
	updated := slices.Clone(lines)
	for bi := len(blocks) - 1; bi >= 0; bi-- { // from the end: rewriting keeps earlier lines in place
		b := blocks[bi]
		args, missing := guideArgs(b.args)
		if missing != "" {
			t.Logf("skipping gpumem %s: %s not available (../shared beside the checkout)", strings.Join(b.args, " "), missing)
			continue
		}
		out, errOut, err := runCmd(t, args...)
		if err != nil {
			t.Fatalf("gpumem %s: %v\n%s", strings.Join(b.args, " "), err, errOut)
		}
		got := strings.Split(strings.TrimRight(out, "\n"), "\n")
		var body []string
		at := 0
		for ci, chunk := range b.chunks {
			if ci > 0 {
				body = append(body, "…")
			}
			if len(chunk) == 0 {
				continue
			}
			if len(b.chunks) == 1 {
				body = append(body, got...)
				if !slices.Equal(chunk, got) && !*updateGuide {
					t.Errorf("gpumem %s prints, in place of the guide's block:\n%s", strings.Join(b.args, " "), out)
				}
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
				t.Errorf("gpumem %s: the guide's chunk from %q to %q is not in its output:\n%s", strings.Join(b.args, " "), chunk[0], chunk[len(chunk)-1], out)
				body = append(body, chunk...)
				continue
			}
			if !slices.Equal(chunk, got[i:j+1]) && !*updateGuide {
				t.Errorf("gpumem %s prints, in place of the guide's chunk:\n%s", strings.Join(b.args, " "), strings.Join(got[i:j+1], "\n"))
			}
			body = append(body, got[i:j+1]...)
			at = j + 1
		}
		updated = slices.Concat(updated[:b.from], body, updated[b.to:])
	}
	if *updateGuide {
		if err := os.WriteFile(guidePath, []byte(strings.Join(updated, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
