package main

import (
	"bytes"
	"encoding/json"
	"go/parser"
	"go/token"
	"image/png"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/request"
)

// TestExitCodes checks the exit status of every subcommand: 0 fits or
// done, 1 does not fit (or no OOM message), 2 bad flags or input.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing.log")
	tests := []struct {
		name  string
		stdin string
		args  []string
		code  int
		err   string // a part of standard error; "" when it must be empty
	}{
		{"estimate fits", "", []string{"estimate", "--model", "gpt2", "--train", "--seq", "1024", "--memory", "80GiB"}, exitOK, ""},
		{"estimate without a device", "", []string{"estimate", "--model", "gpt2", "--infer", "--seq", "1024"}, exitOK, ""},
		{"estimate beyond the context", "", []string{"estimate", "--model", "gpt2", "--infer", "--seq", "2048"}, exitOK, "warning: 2048 tokens per sequence"},
		{"estimate zero memory", "", []string{"estimate", "--model", "llama-3-8b", "--train", "--memory", "0"}, exitBadInput, `--memory "0"`},
		{"estimate empty gpu", "", []string{"estimate", "--model", "llama-3-8b", "--train", "--gpu", ""}, exitBadInput, `--gpu ""`},
		{"estimate does not fit", "", []string{"estimate", "--model", "llama-3-8b", "--train", "--gpu", "rtx4090"}, exitDoesNotFit, "does not fit on NVIDIA GeForce RTX 4090"},
		{"estimate --json does not fit", "", []string{"estimate", "--model", "llama-3-8b", "--train", "--gpu", "rtx4090", "--json"}, exitDoesNotFit, "does not fit"},
		{"estimate bad value", "", []string{"estimate", "--model", "gpt2", "--train", "--seq", "0"}, exitBadInput, "--seq 0"},
		{"estimate unknown model", "", []string{"estimate", "--model", "gpt-9", "--train"}, exitBadInput, `--model "gpt-9"`},
		{"estimate cuda", "", []string{"estimate", "--model", "gpt2", "--train", "--seq", "1024", "--gpu", "v100", "--cuda", "11.2"}, exitOK, ""},
		{"estimate cuda wheel tag", "", []string{"estimate", "--model", "gpt2", "--train", "--seq", "1024", "--cuda", "cu121", "--lazy-loading=false"}, exitOK, ""},
		{"estimate bad cuda", "", []string{"estimate", "--model", "gpt2", "--train", "--cuda", "twelve"}, exitBadInput, `--cuda "twelve"`},
		{"estimate cuda before the gpu", "", []string{"estimate", "--model", "gpt2", "--train", "--gpu", "h100", "--cuda", "11.2"}, exitBadInput, "--cuda 11.2"},
		{"estimate lazy before 11.7", "", []string{"estimate", "--model", "gpt2", "--train", "--cuda", "11.2", "--lazy-loading"}, exitBadInput, "--lazy-loading"},
		{"estimate lazy not a bool", "", []string{"estimate", "--model", "gpt2", "--train", "--lazy-loading=maybe"}, exitBadInput, "--lazy-loading"},
		{"plan maximize", "", []string{"plan", "--model", "gpt2", "--infer", "--seq", "1024", "--memory", "8GiB", "--maximize", "batch"}, exitOK, ""},
		{"plan bad maximize", "", []string{"plan", "--model", "gpt2", "--infer", "--memory", "8GiB", "--maximize", "tokens"}, exitBadInput, `--maximize "tokens"`},
		{"plan maximize seq without max-seq", "", []string{"plan", "--model", "gpt2", "--infer", "--memory", "8GiB", "--maximize", "seq"}, exitBadInput, "--max-seq"},
		{"plan fits", "", []string{"plan", "--model", "gpt2", "--infer", "--seq", "1024", "--memory", "8GiB"}, exitOK, ""},
		{"plan does not fit", "", []string{"plan", "--model", "llama-3-8b", "--train", "--gpu", "rtx4090", "--allow", "none"}, exitDoesNotFit, "does not fit"},
		{"plan without a device", "", []string{"plan", "--model", "gpt2", "--infer"}, exitBadInput, "--gpu NAME or --memory SIZE"},
		{"inspect", "", []string{"inspect", "--model", "gpt2"}, exitOK, ""},
		{"inspect the catalog", "", []string{"inspect", "--model", "list"}, exitOK, ""},
		{"estimate the catalog", "", []string{"estimate", "--model", "list", "--train"}, exitOK, ""},
		{"inspect missing file", "", []string{"inspect", "--gguf", missing}, exitBadInput, "--gguf"},
		{"oom", oomMessage, []string{"oom"}, exitOK, ""},
		{"oom without a message", "all is well\n", []string{"oom"}, exitDoesNotFit, "no out-of-memory message"},
		{"oom missing file", "", []string{"oom", missing}, exitBadInput, "missing.log"},
		{"oom two files", "", []string{"oom", "a", "b"}, exitBadInput, "at most one FILE"},
		{"leak", "", []string{"leak", "--capacity", "24GiB", leakLog}, exitOK, ""},
		{"leak bad capacity", "", []string{"leak", "--capacity", "lots", leakLog}, exitBadInput, "--capacity"},
		{"leak unknown gpu", "", []string{"leak", "--gpu", "a99", leakLog}, exitBadInput, `--gpu "a99"`},
		{"devices", "", []string{"devices"}, exitOK, ""},
		{"devices argument", "", []string{"devices", "h100"}, exitBadInput, `unexpected argument "h100"`},
		{"serve bad address", "", []string{"serve", "--addr", "127.0.0.1:99999"}, exitBadInput, "--addr"},
		{"no command", "", nil, exitBadInput, "usage: gpumem COMMAND"},
		{"unknown command", "", []string{"estmate"}, exitBadInput, `unknown command "estmate"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, _, stderr := runCLI(t, tc.stdin, tc.args...)
			assert.Equal(t, tc.code, code, "gpumem %v: stderr %s", tc.args, stderr)
			if tc.err == "" {
				assert.Empty(t, stderr)
			} else {
				assert.Contains(t, stderr, tc.err)
			}
		})
	}
}

// TestHelp checks that the command and each subcommand print their help,
// with examples, on standard output and exit 0.
func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		code, out, stderr := runCLI(t, "", args...)
		assert.Equal(t, exitOK, code, args)
		assert.Empty(t, stderr, args)
		assert.Contains(t, out, "usage: gpumem COMMAND", args)
		assert.Contains(t, out, "exit status: 0 fits", args)
	}
	for _, c := range commands() {
		for _, args := range [][]string{{c.name, "-h"}, {c.name, "--help"}, {"help", c.name}} {
			code, out, stderr := runCLI(t, "", args...)
			assert.Equal(t, exitOK, code, args)
			assert.Empty(t, stderr, args)
			assert.True(t, strings.HasPrefix(out, "usage: gpumem "+c.name), "%v: %s", args, out)
			assert.Contains(t, out, "\nexamples:\n  gpumem "+c.name, args)
			assert.Contains(t, out, "\n  --json\n", args)
			assert.Contains(t, out, "\nexit status: 0 ", args)
		}
	}
}

// TestFlagErrors checks that a bad flag is named as typed, with its
// value, and that the flag package's own errors read the same way.
func TestFlagErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"estimate", "--model", "gpt2", "--train", "--batch", "x"}, `--batch "x": want an integer`},
		{[]string{"estimate", "--model", "gpt2", "--train", "--batch", "-3"}, "--batch -3: invalid value"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--grad-accum", "-1"}, "--grad-accum -1"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--bacth", "4"}, "unknown flag --bacth"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--batch"}, "--batch needs a value"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--attention", "xformers"}, `--attention "xformers"`},
		{[]string{"estimate", "--model", "mamba-130m", "--train", "--ssm-kernel", "pscan"}, `--ssm-kernel "pscan"`},
		{[]string{"estimate", "--model", "gpt2", "--train", "--checkpointing", "some"}, `--checkpointing "some"`},
		{[]string{"estimate", "--model", "gpt2", "--train", "--zero", "5"}, "--zero 5"},
		{[]string{"estimate", "--model", "gpt2", "--train", "4"}, `unexpected argument "4"`},
		{[]string{"estimate", "--model", "gpt2", "--train", "--lora-rank", "-8"}, "--lora-rank -8: must not be negative"},
		{[]string{"inspect", "--model", "gpt2", "--lora-rank", "-8"}, "--lora-rank -8: must not be negative"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--lora-targets", "c_attn"}, "--lora-targets c_attn: give --lora-rank"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--lora-code", "litgpt"}, "--lora-code litgpt: give --lora-rank or --qlora too"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--lora-dropout", "0.05"}, "--lora-dropout 0.05: give --lora-rank or --qlora too"},
		{[]string{"estimate", "--model", "llama-3.2-1b", "--train", "--lora-rank", "8", "--lora-dropout", "1"}, "--lora-dropout 1: want a probability in [0, 1)"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--lora-rank", "8", "--lora-code", "axolotl"}, "--lora-code \"axolotl\": want peft, torchtune or litgpt"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--lora-rank", "8", "--lora-targets", "q_proj"}, "--lora-targets [q_proj]: invalid value: no linear layer"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--lora-rank", "8", "--lora-targets", "c_attn,"}, `--lora-targets "c_attn,": an empty module name`},
		{[]string{"plan", "--model", "gpt2", "--infer", "--memory", "8GiB", "--allow", "warp-drive"}, `--allow "warp-drive"`},
		{[]string{"plan", "--model", "gpt2", "--infer", "--memory", "8GiB", "--headroom", "1.5"}, `--headroom "1.5"`},
		{[]string{"inspect", "--model", "gpt2", "--optimizer", "nope"}, `--optimizer "nope"`},
		{[]string{"leak", "--capacity", "24Gb", "-"}, `--capacity: gpumem.ParseBytes: parsing "24Gb"`},
		{[]string{"estimate", "--model", "gpt2", "--train", "--optimizer-impl", "simd"}, `--optimizer-impl "simd": want foreach, for-loop or fused`},
		{[]string{"estimate", "--model", "gpt2", "--train", "--optimizer", "lion", "--optimizer-impl", "fused"}, "--optimizer-impl fused: lion_pytorch.Lion has no choice"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--optimizer", "sgd", "--momentum", "NaN"}, "--momentum NaN: want a finite factor"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--optimizer", "sgd", "--nesterov"}, "--nesterov: Nesterov momentum needs a momentum"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--optimizer", "rmsprop", "--momentum", "0.9", "--nesterov"}, "--nesterov: torch.optim.RMSprop has no Nesterov"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--momentum", "0.9"}, "--momentum: torch.optim.AdamW takes no momentum"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--optimizer-in-backward", "--grad-accum", "4"}, "--optimizer-in-backward true: invalid value: a step inside backward cannot accumulate"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--optimizer-in-backward", "--gpus", "2"}, "--optimizer-in-backward true: unsupported: modelled for one GPU"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--optimizer", "none", "--optimizer-in-backward"}, "--optimizer-in-backward: --optimizer none: no step runs"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--frozen", "--qlora"}, "--frozen: every parameter is frozen, LoRA adapters too"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--frozen", "--lora-rank", "8"}, "--frozen: every parameter is frozen, LoRA adapters too"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--optimizer", "none", "--frozen"}, "--frozen: every parameter is frozen, so --optimizer none has nothing to step"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--head", "token-cls", "--loss", "chunked"}, "--loss chunked:8: unsupported: the chunked loss replaces a causal language model's head; gpt2 with a token-cls head has none"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--frozen", "--optimizer", "adamw"}, "--frozen: every parameter is frozen, so --optimizer adamw has nothing to step"},
		{[]string{"estimate", "--model", "gpt2", "--infer", "--frozen"}, "--frozen: an inference job runs no backward pass"},
		{[]string{"estimate", "--model", "gpt2", "--infer", "--optimizer-in-backward"}, "--optimizer-in-backward: an inference job"},
		{[]string{"plan", "--model", "gpt2", "--infer", "--memory", "8GiB", "--momentum", "0.9"}, "--momentum: an inference job"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--checkpointing", "selective", "--offload-activations"}, "--offload-activations true: invalid value: torchtune offloads with full activation checkpointing"},
		{[]string{"estimate", "--model", "gpt2", "--infer", "--offload-activations"}, "--offload-activations: an inference job"},
		{[]string{"serve", "--max-body", "0"}, `--max-body "0"`},
		{[]string{"oom", "--json=maybe"}, `--json "maybe": want true or false`},
	}
	for _, tc := range tests {
		code, _, stderr := runCLI(t, "", tc.args...)
		assert.Equal(t, exitBadInput, code, tc.args)
		assert.Contains(t, stderr, tc.want, tc.args)
		assert.NotContains(t, stderr, "Job.", tc.args)
	}
}

// TestFlagsAfterArguments checks that flags may follow the FILE argument,
// and that "--" ends the flags.
func TestFlagsAfterArguments(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "oom.txt")
	require.NoError(t, os.WriteFile(p, []byte(oomMessage), 0o600))
	code, out, stderr := runCLI(t, "", "oom", p, "--json")
	require.Equal(t, exitOK, code, stderr)
	assert.True(t, json.Valid([]byte(out)), out)
	code, _, stderr = runCLI(t, "", "oom", "--", "--json")
	assert.Equal(t, exitBadInput, code)
	assert.Contains(t, stderr, "--json", "after --, --json is a file name")
}

// TestJSONEverywhere checks that every subcommand prints one JSON
// document with --json, with the keys cmd/gpumem/README.md documents.
func TestJSONEverywhere(t *testing.T) {
	t.Parallel()
	tests := []struct {
		stdin string
		args  []string
		code  int
		keys  []string
	}{
		{"", []string{"inspect", "--model", "gpt2"}, exitOK, []string{"name", "params", "weights_bytes", "bytes_by_dtype", "parts"}},
		{"", []string{"estimate", "--model", "gpt2", "--train", "--gpu", "h100"}, exitOK,
			[]string{"allocated_peak", "reserved_peak", "device_peak", "phase", "components", "device", "free", "fits", "shortfall"}},
		{"", []string{"estimate", "--model", "llama-3-8b", "--train", "--gpu", "rtx4090"}, exitDoesNotFit,
			[]string{"device_peak", "fits", "shortfall"}},
		{"", []string{"plan", "--model", "gpt2", "--infer", "--memory", "8GiB"}, exitOK, []string{"fits", "batch", "need", "ladder"}},
		{"", []string{"plan", "--model", "llama-3-8b", "--train", "--gpu", "rtx4090", "--allow", "none"}, exitDoesNotFit,
			[]string{"fits", "shortfall", "hints", "ladder", "error"}},
		{oomMessage, []string{"oom"}, exitOK, []string{"found", "requested", "cause", "advice"}},
		{"", []string{"leak", "--capacity", "24GiB", leakLog}, exitOK, []string{"samples", "shape", "leak", "oom_step"}},
		{"", []string{"devices"}, exitOK, []string{"devices"}},
		{"", []string{"accuracy", "--data", "../../testdata"}, exitOK, []string{"groups", "cases", "ooms", "failures", "violations"}},
	}
	for _, tc := range tests {
		code, out, stderr := runCLI(t, tc.stdin, append(tc.args, "--json")...)
		require.Equal(t, tc.code, code, "%v: %s", tc.args, stderr)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &m), "%v: %s", tc.args, out)
		for _, k := range tc.keys {
			assert.Contains(t, m, k, tc.args)
		}
	}
	var fits struct{ Fits bool }
	_, out, _ := runCLI(t, "", "estimate", "--model", "llama-3-8b", "--train", "--gpu", "rtx4090", "--json")
	require.NoError(t, json.Unmarshal([]byte(out), &fits))
	assert.False(t, fits.Fits)
}

// TestDevicesJSONMatchesService checks that gpumem devices --json prints
// the bytes of GET /v1/devices.
func TestDevicesJSONMatchesService(t *testing.T) {
	t.Parallel()
	code, out, _ := runCLI(t, "", "devices", "--json")
	require.Equal(t, exitOK, code)
	assert.Equal(t, string(renderDevices()), out)
	var d struct {
		Devices []struct {
			Name     string `json:"name"`
			Capacity int64  `json:"capacity"`
		} `json:"devices"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &d))
	require.Len(t, d.Devices, len(gpumem.Devices()))
	h100, ok := gpumem.LookupDevice("h100")
	require.True(t, ok)
	found := false
	for _, e := range d.Devices {
		found = found || (e.Name == h100.Name && e.Capacity == int64(h100.Capacity))
	}
	assert.True(t, found, "the H100 with its capacity in bytes")
}

func TestServeAnnounce(t *testing.T) {
	t.Parallel()
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 43210}
	var out, errOut bytes.Buffer
	require.NoError(t, announce(&out, &errOut, addr, true))
	assert.JSONEq(t, `{"addr": "127.0.0.1:43210", "url": "http://127.0.0.1:43210"}`, out.String())
	assert.Empty(t, errOut.String())
	out.Reset()
	require.NoError(t, announce(&out, &errOut, addr, false))
	assert.Empty(t, out.String())
	assert.Equal(t, "gpumem serve: listening on http://127.0.0.1:43210\n", errOut.String())
}

// TestChart renders charts and checks that each is a PNG of
// chartWidth × chartHeight pixels that shows the free-memory line.
func TestChart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"estimate batch", []string{"estimate", "--model", "llama-3-8b", "--train", "--batch", "4", "--seq", "4096", "--attention", "flash",
			"--checkpointing", "full", "--optimizer", "adamw8bit", "--precision", "bf16", "--gpu", "h100"}, exitOK},
		{"estimate seq", []string{"estimate", "--model", "llama-3-8b", "--train", "--batch", "4", "--gpu", "h100", "--chart-x", "seq"}, exitDoesNotFit},
		{"estimate kv cache", []string{"estimate", "--model", "llama-2-7b", "--infer", "--generate", "512", "--batch", "8", "--gpu", "a100-80gb", "--json"}, exitOK},
		{"plan", []string{"plan", "--model", "llava-1.5-7b", "--train", "--batch", "4", "--images", "1", "--attention", "flash", "--gpu", "rtx 3090",
			"--target-batch", "32", "--allow", "adamw8bit,bf16,offload,lora"}, exitOK},
		{"plan does not fit", []string{"plan", "--model", "llava-1.5-7b", "--train", "--batch", "4", "--gpu", "rtx 3090"}, exitDoesNotFit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".png")
			code, _, stderr := runCLI(t, "", append(tc.args, "--chart", p)...)
			require.Equal(t, tc.code, code, stderr)
			f, err := os.Open(p)
			require.NoError(t, err)
			defer f.Close()
			img, err := png.Decode(f)
			require.NoError(t, err)
			assert.Equal(t, chartWidth, img.Bounds().Dx())
			assert.Equal(t, chartHeight, img.Bounds().Dy())
			red := 0 // pixels of the free-memory line's colour
			for y := 0; y < chartHeight; y++ {
				for x := 0; x < chartWidth; x++ {
					r, g, b, _ := img.At(x, y).RGBA()
					if r>>8 == 0xc0 && g>>8 == 0 && b>>8 == 0 {
						red++
					}
				}
			}
			assert.Greater(t, red, 500, "the dashed free-memory line")
		})
	}
}

func TestChartBadFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	job := []string{"estimate", "--model", "gpt2", "--train"}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--chart", filepath.Join(dir, "a.jpg")}, `--chart "` + filepath.Join(dir, "a.jpg") + `": want a file name ending in .png`},
		{[]string{"--chart", filepath.Join(dir, "a.png"), "--chart-x", "tokens"}, `--chart-x "tokens": want batch or seq`},
		{[]string{"--chart-x", "seq"}, "--chart-x seq: give --chart FILE.png too"},
		{[]string{"--chart", filepath.Join(dir, "no", "such", "dir.png")}, "--chart"},
	}
	for _, tc := range tests {
		code, _, stderr := runCLI(t, "", append(job, tc.args...)...)
		assert.Equal(t, exitBadInput, code, tc.args)
		assert.Contains(t, stderr, tc.want, tc.args)
	}
	code, _, stderr := runCLI(t, "", "plan", "--model", "gpt2", "--infer", "--memory", "8GiB", "--chart", "x.svg")
	assert.Equal(t, exitBadInput, code)
	assert.Contains(t, stderr, `--chart "x.svg"`)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "no chart is written when a flag is bad")
}

// TestSweep checks the chart's data: the largest batch it reports fits
// and the next does not, the job's own batch is drawn, and the
// components at each point sum to the device peak.
func TestSweep(t *testing.T) {
	t.Parallel()
	jf := request.Flags{ModelFlags: request.ModelFlags{Name: "llama-2-7b"}, Infer: true, Generate: 512, Batch: 8, Seq: 1024,
		Accum: 1, Attn: "sdpa", Ckpt: "none", Opt: "adamw", GPUs: 1, GPU: "a100-80gb"}
	j, dev, err := jf.Job()
	require.NoError(t, err)
	for _, axis := range []string{"batch", "seq"} {
		s, err := sweep(j, axis, dev, request.DefaultHeadroom(dev.Free()))
		require.NoError(t, err, axis)
		require.Positive(t, s.fitMax, axis)
		need := func(x int) budget.Breakdown {
			n, err := budget.Estimate(at(j, axis, x))
			require.NoError(t, err)
			return n
		}
		_, ok := budget.FitsWithHeadroom(need(s.fitMax), dev)
		assert.True(t, ok, "%s %d fits", axis, s.fitMax)
		_, ok = budget.FitsWithHeadroom(need(s.fitMax+1), dev)
		assert.False(t, ok, "%s %d does not fit", axis, s.fitMax+1)
		assert.Contains(t, s.xs, s.x0, axis)
		assert.Contains(t, s.xs, s.fitMax+1, axis)
		assert.LessOrEqual(t, len(s.xs), chartPoints+8, axis)
		for i, n := range s.needs {
			var sum gpumem.Bytes
			for _, c := range n.Components() {
				sum += c.Bytes
			}
			assert.Equal(t, n.Device(), sum, "%s %d", axis, s.xs[i])
			if i > 0 {
				assert.GreaterOrEqual(t, n.Device(), s.needs[i-1].Device(), "%s: never decreases", axis)
			}
		}
	}
}

// TestPlotOnlyInCommand checks that no package outside cmd/ imports
// gonum.org/v1/plot: the library's packages import the standard library
// and gonum's numerics only, so that a scheduler importing budget does
// not compile a plotting library.
func TestPlotOnlyInCommand(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == filepath.Join(root, "cmd") || path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return nil // a file that does not parse fails its own package's build
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, "gonum.org/v1/plot") {
				t.Errorf("%s imports %s: only cmd/ may", path, p)
			}
		}
		return nil
	})
	require.NoError(t, err)
}

// TestPlanMaximize: plan --max-seq makes the changes that lengthen the
// sequence (issue 18: Llama-3.1-8B QLoRA on a 40 GB A100 reached 3,217
// tokens without checkpointing, 13,307 with it), and --maximize none
// keeps the fewest changes.
func TestPlanMaximize(t *testing.T) {
	t.Parallel()
	args := []string{"plan", "--model", "llama-3.1-8b", "--train", "--qlora", "--lora-rank", "16", "--gpu", "a100-40gb", "--max-seq", "32768", "--json"}
	var p, q struct {
		SeqLen        int    `json:"seq_len"`
		Checkpointing string `json:"checkpointing"`
		Objective     string `json:"objective"`
		Ladder        []struct {
			Change    string `json:"change"`
			MaxSeqLen int    `json:"max_seq_len"`
			Applied   bool   `json:"applied"`
		} `json:"ladder"`
	}
	code, out, stderr := runCLI(t, "", args...)
	require.Equal(t, exitOK, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(out), &p))
	code, out, stderr = runCLI(t, "", append(args, "--maximize", "none")...)
	require.Equal(t, exitOK, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(out), &q))
	assert.Equal(t, "max-seq", p.Objective)
	assert.Equal(t, "fit", q.Objective)
	assert.Equal(t, "full", p.Checkpointing)
	assert.Equal(t, "none", q.Checkpointing)
	assert.Greater(t, p.SeqLen, 3*q.SeqLen)
	require.Len(t, p.Ladder, 2)
	assert.Equal(t, q.SeqLen, p.Ladder[0].MaxSeqLen, "the job as given reaches what --maximize none answers")
	assert.Equal(t, p.SeqLen, p.Ladder[1].MaxSeqLen)
	assert.True(t, p.Ladder[1].Applied)
	assert.Zero(t, q.Ladder[1].MaxSeqLen)
	code, text, _ := runCLI(t, "", args[:len(args)-1]...)
	require.Equal(t, exitOK, code)
	assert.Contains(t, text, "longest seq")
	assert.Contains(t, text, "objective: the longest sequence")
}

// TestEstimateCUDAContext: --cuda and --lazy-loading size the context
// (a V100 under CUDA 11.2 loads every kernel: 1341 MiB), and the text
// says what it was sized for.
func TestEstimateCUDAContext(t *testing.T) {
	t.Parallel()
	context := func(args ...string) int64 {
		t.Helper()
		code, out, stderr := runCLI(t, "", append(append([]string{"estimate", "--model", "bert-large", "--train", "--seq", "512"}, args...), "--json")...)
		require.Equal(t, exitOK, code, stderr)
		var e struct {
			Components map[string]int64 `json:"components"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &e))
		return e.Components["context"]
	}
	assert.Equal(t, int64(426*gpumem.MiB), context())
	assert.Equal(t, int64(1341*gpumem.MiB), context("--gpu", "v100", "--cuda", "11.2"))
	assert.Equal(t, int64(616*gpumem.MiB), context("--gpu", "h100", "--lazy-loading=false"))
	assert.Equal(t, int64(256*gpumem.MiB), context("--gpu", "rtx3090"))
	_, text, _ := runCLI(t, "", "estimate", "--model", "bert-large", "--train", "--gpu", "v100", "--cuda", "11.2")
	assert.Contains(t, text, "CUDA context for compute capability 7.0, CUDA 11.2, eager module loading")
}
