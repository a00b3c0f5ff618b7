package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// tourExample is one command of a README and the output the README shows
// for it.
type tourExample struct {
	file, line string
	args       []string
	echoStatus bool // the block ends with `echo $?`: stderr and the status follow stdout
	want       string
	outStart   int // the output's first line in the file, from 0
	outLen     int // its number of lines
}

// readmeExamples finds the commands a README shows with their output, in
// the two ways the READMEs write them: a ```sh block holding one gpumem
// command (lines joined by a trailing backslash, optionally followed by
// `echo $?`) directly followed by a plain ``` block with its output, or a
// plain ``` block whose first line is `$ gpumem ...` followed by the
// output. Commands that write files (--chart, --deepspeed), pipe into
// another program or read a file that is not in the repository are
// skipped and counted.
func readmeExamples(t *testing.T, root, file string) (examples []tourExample, skipped int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, file))
	require.NoError(t, err)
	lines := strings.Split(string(b), "\n")
	// blocks: [fence language, first line index, content lines]
	type block struct {
		lang  string
		start int
		body  []string
	}
	var blocks []block
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "```") {
			continue
		}
		bl := block{lang: strings.TrimPrefix(lines[i], "```"), start: i + 1}
		j := i + 1
		for ; j < len(lines) && !strings.HasPrefix(lines[j], "```"); j++ {
			bl.body = append(bl.body, lines[j])
		}
		bl.start = i + 1
		blocks = append(blocks, bl)
		i = j
	}
	for k, bl := range blocks {
		var cmd []string
		var out []string
		outStart := 0
		echo := false
		switch {
		case bl.lang == "sh" && k+1 < len(blocks) && blocks[k+1].lang == "":
			// The output block must follow with only a blank line between.
			gap := blocks[k+1].start - (bl.start + len(bl.body) + 1)
			if gap != 2 {
				continue
			}
			cmd, echo = joinCommand(bl.body)
			out = blocks[k+1].body
			outStart = blocks[k+1].start
		case bl.lang == "" && len(bl.body) > 0 && strings.HasPrefix(bl.body[0], "$ gpumem "):
			// A block may show several commands, each line "$ gpumem ..."
			// followed by its output up to the next "$ " line.
			for i := 0; i < len(bl.body); {
				n := i + 1
				for n <= len(bl.body) && strings.HasSuffix(bl.body[n-1], "\\") {
					n++
				}
				c, _ := joinCommand(bl.body[i:n])
				e := n
				for e < len(bl.body) && !strings.HasPrefix(bl.body[e], "$ ") {
					e++
				}
				if len(c) == 1 {
					ex, ok := tourCommand(root, file, bl.start+i, strings.TrimPrefix(c[0], "$ "), false, bl.body[n:e], bl.start+n)
					if ok {
						examples = append(examples, ex)
					} else {
						skipped++
					}
				}
				i = e
			}
			continue
		default:
			continue
		}
		if len(cmd) != 1 || !strings.HasPrefix(cmd[0], "gpumem ") {
			continue
		}
		ex, ok := tourCommand(root, file, bl.start, cmd[0], echo, out, outStart)
		if ok {
			examples = append(examples, ex)
		} else {
			skipped++
		}
	}
	return examples, skipped
}

// tourCommand makes an example of one command line and the output shown
// for it, or reports false for a command the test cannot run here: one
// that writes files, pipes, uses a shell variable, reads a file that is
// not in the repository, or whose output the README abbreviates ("...").
func tourCommand(root, file string, start int, line string, echo bool, out []string, outStart int) (tourExample, bool) {
	if !strings.HasPrefix(line, "gpumem ") || strings.ContainsAny(line, "|><$#") ||
		strings.Contains(line, "--chart") || strings.Contains(line, "--deepspeed") {
		return tourExample{}, false
	}
	want := strings.Join(out, "\n")
	if strings.Contains(want, "...") || strings.Contains(want, "…") {
		return tourExample{}, false
	}
	args, err := shellWords(strings.TrimPrefix(line, "gpumem "))
	if err != nil {
		return tourExample{}, false
	}
	if testing.Verbose() {
		fmt.Printf("README tour: %s:%d: gpumem %s\n", file, start+1, strings.Join(args, " "))
	}
	for i, a := range args {
		if strings.HasPrefix(a, "-") || !looksLikePath(a) {
			continue
		}
		p := filepath.Join(root, a)
		if _, err := os.Stat(p); err != nil {
			return tourExample{}, false
		}
		args[i] = p
	}
	return tourExample{file: file, line: fmt.Sprint(start + 1), args: args, echoStatus: echo, want: want + "\n", outStart: outStart, outLen: len(out)}, true
}

// joinCommand joins backslash-continued lines into commands and reports
// whether an `echo $?` line follows them.
func joinCommand(body []string) (cmds []string, echo bool) {
	cur := ""
	for _, l := range body {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if l == "echo $?" {
			echo = true
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\")
			continue
		}
		cmds = append(cmds, strings.TrimSpace(cur+l))
		cur = ""
	}
	if cur != "" {
		cmds = append(cmds, strings.TrimSpace(cur))
	}
	return cmds, echo
}

// looksLikePath says whether a command argument names a file.
func looksLikePath(a string) bool {
	if strings.Contains(a, "/") {
		return true
	}
	for _, ext := range []string{".log", ".gguf", ".json", ".jsonl", ".csv", ".txt", ".safetensors", ".yaml"} {
		if strings.HasSuffix(a, ext) {
			return true
		}
	}
	return false
}

// shellWords splits a command line as sh would for the quoting the
// READMEs use: whitespace, double and single quotes.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	in := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '"' || r == '\'':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}

// TestREADMETour runs every command the READMEs show with its output and
// requires the output shown to be what the command prints today, so that
// a change to the model that moves a figure also updates the tour.
func TestREADMETour(t *testing.T) {
	t.Parallel()
	update := os.Getenv("GPUMEM_UPDATE_README") != ""
	total, skippedAll := 0, 0
	for _, file := range []string{"README.md", "cmd/gpumem/README.md"} {
		examples, skipped := readmeExamples(t, "../..", file)
		total += len(examples)
		skippedAll += skipped
		var stale []tourExample
		for _, ex := range examples {
			code, stdout, stderr := runCLI(t, "", ex.args...)
			// What a terminal shows: standard output, then standard
			// error's line, then the status where the README echoes it.
			got := stdout + stderr
			if ex.echoStatus {
				got += fmt.Sprintln(code)
			}
			if got != ex.want {
				if update {
					ex.want = got
					stale = append(stale, ex)
					continue
				}
				t.Errorf("%s:%s: gpumem %s prints\n%s\nthe README shows\n%s(GPUMEM_UPDATE_README=1 go test -run TestREADMETour rewrites the README's outputs)",
					ex.file, ex.line, strings.Join(ex.args, " "), got, ex.want)
			}
		}
		if len(stale) > 0 {
			// Rewrite the outputs from the last up, so that the line
			// numbers of the others hold.
			path := filepath.Join("../..", file)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			lines := strings.Split(string(b), "\n")
			for i := len(stale) - 1; i >= 0; i-- {
				ex := stale[i]
				got := strings.Split(strings.TrimSuffix(ex.want, "\n"), "\n")
				lines = append(lines[:ex.outStart], append(got, lines[ex.outStart+ex.outLen:]...)...)
			}
			require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644))
			t.Logf("%s: %d outputs rewritten", file, len(stale))
		}
	}
	t.Logf("%d README examples checked, %d skipped (they write files, pipe, or read a file not in the repository)", total, skippedAll)
	require.GreaterOrEqual(t, total, 8, "the READMEs' tour examples were not found: has their layout changed?")
}
