package main

import (
	"bytes"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem/request"
)

// readmeTable is one row of a Markdown table of cmd/gpumem/README.md: its
// first cell (what the row documents) and the heading of the section it
// is in.
type readmeTable struct {
	section, first string
}

// readmeRows returns every table row of cmd/gpumem/README.md, header rows
// and rules included (they document nothing, so they match nothing), with
// the section each is in. Rows inside code blocks are skipped.
func readmeRows(t *testing.T) []readmeTable {
	t.Helper()
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	var rows []readmeTable
	section, code := "", false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "```"):
			code = !code
		case code:
		case strings.HasPrefix(line, "#"):
			section = strings.TrimSpace(strings.TrimLeft(line, "#"))
		case strings.HasPrefix(line, "|"):
			cells := strings.Split(line, "|")
			if len(cells) > 2 {
				rows = append(rows, readmeTable{section, cells[1]})
			}
		}
	}
	require.NotEmpty(t, rows, "cmd/gpumem/README.md has tables")
	return rows
}

// commandFlags returns the flags the command registers, as its -h prints
// them: writeHelp walks the FlagSet the command builds (VisitAll), so
// these are exactly the flags the command accepts.
func commandFlags(t *testing.T, name string) []string {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run([]string{name, "-h"}, strings.NewReader(""), &out, &errOut)
	require.Equal(t, 0, code, "gpumem %s -h: %s", name, errOut.String())
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^  --([a-z0-9][a-z0-9-]*)`).FindAllStringSubmatch(out.String(), -1) {
		flags = append(flags, m[1])
	}
	return flags
}

// flagDocumented reports whether a table row's first cell names --name
// (`--name`, `--name VALUE`, `--name=...`), not a longer flag that starts
// with it (--chart is not --chart-x).
func flagDocumented(rows []readmeTable, name string) bool {
	re := regexp.MustCompile("`--" + regexp.QuoteMeta(name) + "(?:[^a-z0-9-]|$)")
	for _, r := range rows {
		if re.MatchString(r.first) {
			return true
		}
	}
	return false
}

// fieldDocumented reports whether a table row of the section reads
// `field` in its first cell.
func fieldDocumented(rows []readmeTable, section, field string) bool {
	for _, r := range rows {
		if r.section == section && strings.Contains(r.first, "`"+field+"`") {
			return true
		}
	}
	return false
}

// TestREADMEDocumentsEveryFlag fails when a flag that gpumem estimate or
// gpumem plan registers has no row of its own in a table of
// cmd/gpumem/README.md: a flag added to the command must be documented
// where users look for it.
func TestREADMEDocumentsEveryFlag(t *testing.T) {
	rows := readmeRows(t)
	for _, cmd := range []string{"estimate", "plan"} {
		flags := commandFlags(t, cmd)
		// Both commands register the job's flags (request.Flags): dozens.
		require.Greater(t, len(flags), 50, "gpumem %s -h lists its flags", cmd)
		var missing []string
		for _, f := range flags {
			if !flagDocumented(rows, f) {
				missing = append(missing, "--"+f)
			}
		}
		require.Empty(t, missing, "gpumem %s registers flags that no table row of cmd/gpumem/README.md documents", cmd)
	}
}

// TestREADMEFlagMatch checks the matcher itself: a flag is found only
// where a row names it whole.
func TestREADMEFlagMatch(t *testing.T) {
	rows := []readmeTable{{"s", " `--chart-x batch\\|seq` "}, {"s", " `--tp T`, `--sp` "}, {"s", " `--loss chunked`, `chunked:N` "}}
	require.True(t, flagDocumented(rows, "chart-x"))
	require.False(t, flagDocumented(rows, "chart"), "--chart-x does not document --chart")
	require.True(t, flagDocumented(rows, "sp"))
	require.True(t, flagDocumented(rows, "loss"))
	require.False(t, flagDocumented(rows, "lo"))
	require.False(t, fieldDocumented(rows, "other", "tp"))
}

// requestFields returns the JSON names of the exported fields of a
// request type, the fields of an embedded struct left to that struct's
// own section.
func requestFields(typ reflect.Type) []string {
	var names []string
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		if !f.IsExported() || f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// TestREADMEDocumentsEveryRequestField fails when an exported JSON field
// of a request type of gpumem serve has no row in the table of its
// endpoint's section of cmd/gpumem/README.md.
func TestREADMEDocumentsEveryRequestField(t *testing.T) {
	rows := readmeRows(t)
	for _, c := range []struct {
		section string
		typ     reflect.Type
	}{
		{"POST /v1/estimate", reflect.TypeOf(request.Estimate{})},
		{"POST /v1/plan", reflect.TypeOf(request.Plan{})},
		{"POST /v1/pipeline", reflect.TypeOf(request.Pipeline{})},
		{"POST /v1/oom", reflect.TypeOf(request.OOM{})},
		{"POST /v1/leak", reflect.TypeOf(request.Leak{})},
	} {
		fields := requestFields(c.typ)
		require.NotEmpty(t, fields, c.typ.String())
		var missing []string
		for _, f := range fields {
			if !fieldDocumented(rows, c.section, f) {
				missing = append(missing, f)
			}
		}
		require.Empty(t, missing, "%s has JSON fields that the table of README section %q does not document", c.typ, c.section)
	}
	// Plan embeds Estimate: its fields are documented with the estimate's.
	_, ok := reflect.TypeOf(request.Plan{}).FieldByName("Estimate")
	require.True(t, ok, "request.Plan embeds request.Estimate")
}
