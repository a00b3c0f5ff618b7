package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOOMWarning: TensorFlow's BFC "this is not a failure" line (a real
// one, leak/testdata/oom/tfwarn_tf43546_freedbycount.txt) is printed as a
// warning, not an out-of-memory error, and exits 1 like input without a
// message; a failure next to it wins and exits 0.
func TestOOMWarning(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../leak/testdata/oom/tfwarn_tf43546_freedbycount.txt")
	require.NoError(t, err)
	_, warn, ok := strings.Cut(string(data), "\n---\n")
	require.True(t, ok)

	code, out, stderr := runCLI(t, warn, "oom")
	assert.Equal(t, exitDoesNotFit, code)
	assert.Contains(t, out, "kind  ")
	assert.Contains(t, out, "warning, not an out-of-memory error")
	assert.Contains(t, out, "1.11 GiB")
	assert.Equal(t, "gpumem oom: a warning, not an out-of-memory error: tensorflow's allocator could not get 1.11 GiB at once and went on (\"this is not a failure\")\n", stderr)

	code, out, _ = runCLI(t, warn, "oom", "--json")
	assert.Equal(t, exitDoesNotFit, code)
	var j map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &j))
	assert.Equal(t, true, j["warning"])
	assert.Equal(t, false, j["found"])
	assert.Equal(t, "warning, not an out-of-memory error", j["cause"])
	assert.EqualValues(t, 1191853425, j["requested"]) // 1.11 GiB = ceil(1.11 × 2^30) bytes

	// A failure after the warning: the failure is diagnosed, exit 0.
	code, out, _ = runCLI(t, warn+oomMessage, "oom", "--json")
	assert.Equal(t, exitOK, code)
	j = nil
	require.NoError(t, json.Unmarshal([]byte(out), &j))
	assert.Equal(t, false, j["warning"])
	assert.Equal(t, true, j["found"])
	assert.Equal(t, "pytorch", j["framework"])

	// No message at all: unchanged.
	code, _, stderr = runCLI(t, "all is well\n", "oom")
	assert.Equal(t, exitDoesNotFit, code)
	assert.Contains(t, stderr, "no out-of-memory message found")
}
