package gpumem_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// installCheck runs tools/installcheck/run.sh, which builds a program in a
// temporary module outside the repository that requires
// github.com/gpumem/gpumem and replaces it with this clone (README.md,
// "Install"), offline, and runs it; args are the script's (a main.go, or
// none for its own minimal program). It skips when go or sh is not on the
// PATH: the recipe cannot be run without them.
func installCheck(t *testing.T, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on the PATH: the install recipe needs it")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("sh is not on the PATH: tools/installcheck/run.sh needs it")
	}
	cmd := exec.Command(sh, append([]string{filepath.Join("tools", "installcheck", "run.sh")}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tools/installcheck/run.sh %s: %v\nstderr:\n%s\nstdout:\n%s", strings.Join(args, " "), err, stderr.String(), out)
	}
	return string(out)
}

const installCheckWant = "installcheck: llama-3-8b generating 512 tokens after 4096 fits an H100: true\n"

// TestInstallCheck checks the README's install recipe: a module outside the
// repository imports budget, model and the root package through a replace
// directive and builds with GOPROXY=off.
func TestInstallCheck(t *testing.T) {
	if got := installCheck(t); got != installCheckWant {
		t.Errorf("installcheck printed %q, want %q", got, installCheckWant)
	}
}

// TestInstallCheckWorkspace checks the README's other recipe: the module
// outside the repository does not mention gpumem in its go.mod, and a
// go.work uses both.
func TestInstallCheckWorkspace(t *testing.T) {
	if got := installCheck(t, "-work"); got != installCheckWant {
		t.Errorf("installcheck -work printed %q, want %q", got, installCheckWant)
	}
}

// readmeQuickStart returns the Go program of README.md's "Go quick start"
// section and the output block that follows it ("prints").
func readmeQuickStart(t *testing.T) (program, output string) {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := strings.ReplaceAll(string(b), "\r\n", "\n")
	_, section, ok := strings.Cut(readme, "\n## Go quick start\n")
	if !ok {
		t.Fatal(`README.md has no "## Go quick start" section`)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	_, rest, ok := strings.Cut(section, "\n```go\n")
	if !ok {
		t.Fatal("README.md's Go quick start has no ```go block")
	}
	program, rest, ok = strings.Cut(rest, "\n```\n")
	if !ok {
		t.Fatal("README.md's Go quick start: the ```go block is not closed")
	}
	_, rest, ok = strings.Cut(rest, "\n```\n")
	if !ok {
		t.Fatal("README.md's Go quick start has no output block after the program")
	}
	output, _, ok = strings.Cut(rest, "```\n")
	if !ok {
		t.Fatal("README.md's Go quick start: the output block is not closed")
	}
	return program + "\n", output
}

// TestREADMEQuickStart compiles the README's Go quick start in a module
// outside the repository and runs it: its output must be the block the
// README prints after it, so the snippet a new user copies works and says
// what the README says.
func TestREADMEQuickStart(t *testing.T) {
	program, want := readmeQuickStart(t)
	if !strings.HasPrefix(program, "package main\n") {
		t.Fatalf("README.md's Go quick start is not a complete program (package main):\n%s", program)
	}
	main := filepath.Join(t.TempDir(), "main.go")
	if err := os.WriteFile(main, []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	got := installCheck(t, main)
	if got != want {
		t.Errorf("README.md's Go quick start printed\n%s\nthe README says\n%s", got, want)
	}
}
