package gpumem_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The documentation promises that every document it cites is in the
// repository. TestDocLinks checks that promise on every Markdown file and
// every Go comment of the module (the nested kube module included):
//
//   - a relative Markdown link ([text](path), [text](path#anchor),
//     [text](#anchor)) names a file or directory of the repository, and its
//     anchor is a heading of the Markdown file it names, slugged as GitHub
//     slugs headings (lower case, punctuation dropped, spaces to hyphens);
//   - a path written in prose or a comment that starts with docs/,
//     testdata/, tools/ or examples/ names a file or directory, and one
//     that starts with a package's directory (model/, budget/, cmd/, ...)
//     and ends in a file's extension names a file, looked up
//     from the citing file's directory and each directory above it up to the
//     repository root (a package's testdata/ is beside its code, the
//     module's at the root); a docs/*.md path with an anchor names a
//     heading of it;
//   - a test, benchmark, example or fuzz function named in prose or a
//     comment (TestREADMEQuickStart, BenchmarkEstimate) is defined in a
//     _test.go file of the repository;
//   - no link or cited path leaves the repository: no absolute path into a
//     machine's home, work or mount directories (absFilePath; a temporary
//     directory is a command's scratch output, not a document), no file://
//     link, no relative link that climbs above the root.
//
// The Markdown files are the root's README.md and every one in a directory
// below it.
//
// Paths of other projects cited with their repository ("vllm ...
// docs/features/quantization/quantized_kvcache.md", "PyTorch's
// tools/autograd/derivatives.yaml") are not files of this repository; externalCitation lists
// each, with the project it belongs to, so that a new one is a decision and
// not an accident.
func TestDocLinks(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	var checked, cited int
	defined := map[string]bool{}
	testNames = map[string]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(name, ".md") && (filepath.Dir(path) != root || name == "README.md"):
			n, c := checkMarkdown(t, root, path)
			checked += n
			cited += c
		case strings.HasSuffix(name, ".go"):
			cited += checkGoComments(t, root, path)
			if strings.HasSuffix(name, "_test.go") {
				data, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				for _, m := range testFunc.FindAllStringSubmatch(string(data), -1) {
					defined[m[1]] = true
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The walk must have found the documentation it is meant to check: a
	// walk that saw nothing would pass silently.
	for name, where := range testNames {
		if !defined[name] {
			t.Errorf("%s: names %s, which no _test.go file defines", where, name)
		}
	}
	t.Logf("%d Markdown links, %d cited paths and %d test, benchmark and example names checked", checked, cited, len(testNames))
	if checked < 30 || cited < 150 {
		t.Errorf("checked %d Markdown links and %d cited paths; want at least 30 and 150 (did the walk find README.md and docs/?)", checked, cited)
	}
}

var (
	testFunc    = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Example|Fuzz)\w*)\(`)
	testName    = regexp.MustCompile(`\b((?:Test|Benchmark|Example|Fuzz)[A-Z_][A-Za-z0-9_]*)`)
	mdLink      = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	mdRefLink   = regexp.MustCompile(`^\s*\[[^\]]+\]:\s*(\S+)`)
	citedPath   = regexp.MustCompile(`(?:^|[\s(\x60"'\[])((?:docs|testdata|tools|examples|model|budget|leak|attention|optimizer|enginelog|cmd|internal|kube)/[A-Za-z0-9_.\-/]*[A-Za-z0-9_](?:#[a-z0-9\-]+)?)`)
	absFilePath = regexp.MustCompile(`(?:^|[\s(\x60"'])(/(?:work|home|root|Users|mnt)/[^\s)\x60"']*)`)
)

// docDirs are the directories whose every cited path is checked; under
// the others (the packages) only paths of files (fileExt) are.
var docDirs = map[string]bool{"docs": true, "testdata": true, "tools": true, "examples": true}

var fileExt = regexp.MustCompile(`\.(go|md|sh|py|jsonl?|txt|gz|csv|ya?ml|mod)$`)

// externalCitation are paths of other projects that the documentation
// cites with their project; they are not looked up in this repository.
var externalCitation = map[string]string{
	"docs/features/quantization/quantized_kvcache.md": "vllm-project/vllm",
	"examples/llama":                                          "NVIDIA/TensorRT-LLM",
	"docs/code-docs/source/memory.rst":                        "deepspeedai/DeepSpeed",
	"docs/source/usage_guides/fsdp.md":                        "huggingface/accelerate",
	"examples/text_to_image":                                  "huggingface/diffusers",
	"examples/text_to_image/train_text_to_image.py":           "huggingface/diffusers",
	"examples/dreambooth":                                     "huggingface/diffusers",
	"examples/dreambooth/train_dreambooth_lora.py":            "huggingface/diffusers",
	"examples/dreambooth/train_dreambooth_lora_flux.py":       "huggingface/diffusers",
	"examples/dreambooth/train_dreambooth_lora_sd3.py":        "huggingface/diffusers",
	"tools/autograd/gen_variable_type.py":                     "pytorch/pytorch",
	"tools/autograd/derivatives.yaml":                         "pytorch/pytorch",
	"docs/gguf.md":                                            "ggml-org/ggml",
	"docs/empirical-vllm-memory-results.md":                   "llm-d-incubation/llm-d-planner",
	"docs/reviews/additonal-templates/qwen-docker-success.md": "guardkit/guardkit",
	"docs/reviews/graphiti-qwen3/run-2.md":                    "guardkit/guardkit",
	"examples/benchmark.py":                                   "casper-hansen/AutoAWQ",
	"examples/huggingface":                                    "linkedin/Liger-Kernel",
}

// checkMarkdown checks the links and cited paths of one Markdown file and
// returns how many links and paths it checked.
func checkMarkdown(t *testing.T, root, path string) (links, cited int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Error(err)
		return 0, 0
	}
	rel, _ := filepath.Rel(root, path)
	dir := filepath.Dir(path)
	fence := false
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(text), "```") {
			fence = !fence
			continue
		}
		where := rel + ":" + strconv.Itoa(line)
		checkAbsolute(t, where, text)
		if fence {
			continue
		}
		var targets []string
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			targets = append(targets, m[1])
		}
		if m := mdRefLink.FindStringSubmatch(text); m != nil {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				if strings.HasPrefix(target, "file:") {
					t.Errorf("%s: link %q points outside the repository", where, target)
				}
				continue
			}
			links++
			file, anchor, _ := strings.Cut(target, "#")
			resolved := path
			if file != "" {
				if strings.HasPrefix(file, "/") {
					t.Errorf("%s: link %q is an absolute path", where, target)
					continue
				}
				resolved = filepath.Join(dir, filepath.FromSlash(file))
				if r, err := filepath.Rel(root, resolved); err != nil || strings.HasPrefix(r, "..") {
					t.Errorf("%s: link %q leaves the repository", where, target)
					continue
				}
				if _, err := os.Stat(resolved); err != nil {
					t.Errorf("%s: link %q: no such file in the repository", where, target)
					continue
				}
			}
			checkAnchor(t, where, target, resolved, anchor)
		}
		cited += checkCited(t, root, dir, where, text)
	}
	return links, cited
}

// checkGoComments checks the paths cited in the comments of one Go file.
func checkGoComments(t *testing.T, root, path string) (cited int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Error(err)
		return 0
	}
	rel, _ := filepath.Rel(root, path)
	dir := filepath.Dir(path)
	for i, text := range strings.Split(string(data), "\n") {
		_, comment, ok := strings.Cut(text, "//")
		if !ok || strings.Contains(text, "://") && !strings.HasPrefix(strings.TrimSpace(text), "//") {
			continue
		}
		where := rel + ":" + strconv.Itoa(i+1)
		checkAbsolute(t, where, comment)
		cited += checkCited(t, root, dir, where, comment)
	}
	return cited
}

// testNames holds the Test, Benchmark, Example and Fuzz functions the
// documentation names, each with the first place that names it.
var testNames map[string]string

// checkCited checks the docs/, testdata/, tools/ and examples/ paths of one
// line of prose, looked up from dir and each directory above it up to root.
func checkCited(t *testing.T, root, dir, where, text string) (cited int) {
	t.Helper()
	for _, m := range testName.FindAllStringSubmatch(text, -1) {
		if _, ok := testNames[m[1]]; !ok {
			testNames[m[1]] = where
		}
	}
	for _, m := range citedPath.FindAllStringSubmatchIndex(text, -1) {
		p := text[m[2]:m[3]]
		// A path inside a URL is the other site's.
		if i := strings.LastIndexAny(text[:m[2]], " \t("); strings.Contains(text[i+1:m[2]], "://") {
			continue
		}
		file, anchor, _ := strings.Cut(p, "#")
		file = strings.TrimRight(file, ".")
		// A name pattern ("testdata/measured/cpu/compile-*.jsonl") is
		// checked for one file it matches.
		glob := ""
		if rest := text[m[3]:]; strings.HasPrefix(rest, "*") || strings.HasPrefix(rest, "-*") {
			glob, _, _ = strings.Cut(rest, "*")
			glob += "*"
		}
		if _, ok := externalCitation[file]; ok {
			continue
		}
		// Under a package's directory only a file is taken for a path:
		// "cmd/gpumem/internal/accuracy.Features" is an identifier and
		// "model/mode/precision" a pattern of names.
		if top, _, _ := strings.Cut(file, "/"); !docDirs[top] && !fileExt.MatchString(file) && glob == "" {
			continue
		}
		cited++
		found := ""
		for d := dir; ; d = filepath.Dir(d) {
			candidate := filepath.Join(d, filepath.FromSlash(file))
			if glob != "" {
				if ms, _ := filepath.Glob(candidate + glob); len(ms) > 0 {
					found = ms[0]
					break
				}
			} else if _, err := os.Stat(candidate); err == nil {
				found = candidate
				break
			}
			if d == root || len(d) <= len(root) {
				break
			}
		}
		if found == "" {
			t.Errorf("%s: cites %q, which is not in the repository", where, file)
			continue
		}
		checkAnchor(t, where, p, found, anchor)
	}
	return cited
}

// checkAbsolute reports absolute file paths of a machine: documents outside
// the repository.
func checkAbsolute(t *testing.T, where, text string) {
	t.Helper()
	for _, m := range absFilePath.FindAllStringSubmatch(text, -1) {
		t.Errorf("%s: names %q, a path outside the repository", where, m[1])
	}
}

// checkAnchor reports an anchor that is not a heading of the Markdown file.
func checkAnchor(t *testing.T, where, target, file, anchor string) {
	t.Helper()
	if anchor == "" || !strings.HasSuffix(file, ".md") {
		return
	}
	anchors, err := headingAnchors(file)
	if err != nil {
		t.Error(err)
		return
	}
	if !anchors[anchor] {
		t.Errorf("%s: %q: %s has no heading with anchor #%s", where, target, filepath.Base(file), anchor)
	}
}

// anchorCache holds headingAnchors' answers by file (one walk, one
// goroutine).
var anchorCache = map[string]map[string]bool{}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown file: the heading's text in lower case, with everything but
// letters, digits, spaces, hyphens and underscores dropped and spaces
// turned into hyphens; a repeated anchor gets -1, -2, ... Explicit <a
// name="..."> and id="..." anchors count too.
func headingAnchors(file string) (map[string]bool, error) {
	if a, ok := anchorCache[file]; ok {
		return a, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	fence := false
	explicit := regexp.MustCompile(`(?:name|id)="([^"]+)"`)
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		for _, m := range explicit.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		if !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(heading) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			anchors[slug+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	anchorCache[file] = anchors
	return anchors, nil
}
