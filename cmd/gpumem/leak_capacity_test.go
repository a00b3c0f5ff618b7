package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLeakPercentNeedsCapacity: a W&B export's percentage column is read
// against the capacity --capacity or --gpu gives; without one its rows
// are skipped and nothing is analysed.
func TestLeakPercentNeedsCapacity(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("_step,system.gpu.0.memoryAllocated\n")
	for i := range 12 {
		b.WriteString(strconv.Itoa(i) + "," + strconv.Itoa(20+5*i))
		b.WriteByte('\n')
	}
	f := filepath.Join(t.TempDir(), "wandb.csv")
	require.NoError(t, os.WriteFile(f, []byte(b.String()), 0o600))
	code, _, stderr := runCLI(t, "", "leak", f)
	assert.Equal(t, exitDoesNotFit, code, stderr)
	assert.Contains(t, stderr, "no memory samples")
	code, out, stderr := runCLI(t, "", "leak", "--capacity", "80GiB", f)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "samples       12")
	assert.Contains(t, out, "leak          true")
}
