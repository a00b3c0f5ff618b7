package leak

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestJSON(t *testing.T) {
	t.Parallel()
	o, ok := ParseOOM(corpusText(t, "llava_3090_exhausted"))
	require.True(t, ok)
	b, err := json.Marshal(o)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	assert.Equal(t, true, m["found"])
	assert.Equal(t, "pytorch", m["framework"])
	assert.EqualValues(t, 0, m["device"])
	assert.EqualValues(t, 2684354560, m["requested"]) // 2.50 GiB
	assert.Nil(t, m["private_pools"])
	assert.Nil(t, m["allowed"])
	assert.Equal(t, []any{}, m["other_processes"])
	assert.Contains(t, m["derived"], "reserved_unallocated")

	b, err = json.Marshal(o.Diagnose())
	require.NoError(t, err)
	m = nil
	require.NoError(t, json.Unmarshal(b, &m))
	assert.Equal(t, "exhausted by this process", m["cause"])
	assert.NotEmpty(t, m["advice"])

	r, err := Analyze(llavaLeak(t), nil)
	require.NoError(t, err)
	b, err = json.Marshal(r)
	require.NoError(t, err)
	m = nil
	require.NoError(t, json.Unmarshal(b, &m))
	assert.EqualValues(t, 9, m["samples"])
	assert.Equal(t, "accelerating leak", m["shape"])
	assert.Equal(t, true, m["leak"])
	assert.Nil(t, m["oom_step"], "no capacity, no forecast")
	assert.EqualValues(t, 1000, m["observed_oom_step"])
	assert.Nil(t, m["bytes_per_hour"])
}

func TestJSONEveryCorpusMessage(t *testing.T) {
	t.Parallel()
	for _, c := range loadCorpus(t) {
		o, _ := ParseOOM(c.text)
		_, err := json.Marshal(o)
		require.NoError(t, err, c.name)
		_, err = json.Marshal(o.Diagnose())
		require.NoError(t, err, c.name)
	}
}

// TestJSONWarning: an allocator warning marshals as "warning": true with
// "found": false, in the library's JSON as in the command's.
func TestJSONWarning(t *testing.T) {
	t.Parallel()
	o, ok := ParseOOM(corpusText(t, "tf_captcha16_bfc"))
	require.False(t, ok)
	require.True(t, o.Warning)
	b, err := json.Marshal(o)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	assert.Equal(t, true, m["warning"])
	assert.Equal(t, false, m["found"])
	o, ok = ParseOOM(corpusText(t, "llava_3090_exhausted"))
	require.True(t, ok)
	b, err = json.Marshal(o)
	require.NoError(t, err)
	m = nil
	require.NoError(t, json.Unmarshal(b, &m))
	assert.Equal(t, false, m["warning"])
}
