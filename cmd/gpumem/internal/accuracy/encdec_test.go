package accuracy

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCPUEncoderDecoderInference holds the inference rows of the
// encoder–decoders (T5 prefill and generate(), Whisper prefill, eager and
// SDPA) to what their passes hold, which the estimate counts tensor by
// tensor from modeling_t5.py and modeling_whisper.py (model/encdec_held.go):
// each row's estimate is at most 40 KiB below its measurement and never
// above it. What is left is the ids and masks the harness passes (the
// decoder ids, the encoder's attention mask, cache positions), which the
// estimate does not count: 34,824 bytes at most, in the batch-4, 256-token
// T5 prefill. Each tensor those passes hold (a position bias, the previous
// layer's probabilities, the log-mel features, a B·S·h hidden state) is
// 128 KiB or more in the batch-4 or 256-token rows, so dropping one fails
// the test. The rows of transformers v4.47.1 (ids ending /torch1.13 and
// /tf4.47-torch2.6) run that release's code, which the estimate does not
// follow, and are left to misses.tsv.
func TestCPUEncoderDecoderInference(t *testing.T) {
	rows, err := ReadCPU(cpuData, ".")
	require.NoError(t, err)
	set := CompareCPU(rows)
	require.Empty(t, set.Failures)
	re := regexp.MustCompile(`^(t5-small-2l/(prefill|generate)|whisper-small-2l/prefill)/`)
	n := 0
	for _, c := range set.Cases {
		if !re.MatchString(c.ID) || strings.HasSuffix(c.ID, "/torch1.13") || strings.HasSuffix(c.ID, "/tf4.47-torch2.6") {
			continue
		}
		n++
		short := int64(c.Measured) - int64(c.Predicted)
		require.GreaterOrEqual(t, short, int64(0), "%s: estimated %d above the measured %d", c.ID, c.Predicted, c.Measured)
		require.LessOrEqual(t, short, int64(40<<10), "%s: estimated %d, %d bytes below the measured %d", c.ID, c.Predicted, short, c.Measured)
		require.Equal(t, c.MeasuredPhase, c.Phase, c.ID)
	}
	require.Equal(t, 12, n, "T5 prefill and generate, Whisper prefill rows")
}
