package accuracy

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"path"
	"slices"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
)

// CPU is the source of the rows tools/measure records on the CPU
// (testdata/measured/cpu): whole jobs of transformers' own modeling code
// under torch 2.6 (a subset also under torch 1.13 with transformers
// v4.47.1), their live tensor bytes integrated from the profiler's
// allocator events.
const CPU = "cpu"

// The CPU rows' target: every row within CPUTarget of its measurement,
// none more than CPUMaxUnder below it, and the peak's phase named right.
// Rows that miss it are listed, each with the mechanism believed to
// explain it, in testdata/measured/cpu/misses.tsv; CheckCPU holds the set
// of misses to exactly that list, so a fix must remove its rows from it
// and nothing may start to miss.
const (
	CPUTarget   = 0.03
	CPUMaxUnder = 0.02
)

// CPUPhaseTie is the margin below which two phases of a CPU row peak
// together: when the phase the estimate names peaked within CPUPhaseTie
// bytes of the row's peak, the peak's phase is named right. It is one
// block of the CUDA caching allocator (kMinBlockSize = 512,
// c10/cuda/CUDACachingAllocator.cpp), the granularity of the allocated
// level the estimate predicts, which the CPU's allocator does not round
// (testdata/measured/cpu/README.md, note 2): a CPU row's phases may
// differ by a few bytes of 0-dim scalar tensors that the estimate does
// not model (the AdamW for-loop rows' step peaks 4 bytes above their
// backward), and those bytes cannot order the phases of a CUDA job. Every
// training row's phases differ by 4 bytes or by more than 2 KiB.
const CPUPhaseTie = 512

// CPURow is one line of testdata/measured/cpu/<torch>-<date>.jsonl, as
// tools/measure/measure.py writes it (testdata/measured/cpu/README.md).
// Only the fields the comparison reads are decoded.
type CPURow struct {
	Schema int    `json:"schema"`
	ID     string `json:"id"`
	Status string `json:"status"`
	Error  string `json:"error"`
	Job    Job    `json:"job"`
	Env    struct {
		Device             string `json:"device"`
		Torch              string `json:"torch"`
		Transformers       string `json:"transformers"`
		TransformersCommit string `json:"transformers_commit"`
	} `json:"env"`
	Peak struct {
		// Allocated is the peak of live tensor bytes over the measured
		// window; Phase the phase it falls in (forward, backward, step;
		// prepare, prefill, decode for generate()).
		Allocated int64  `json:"allocated"`
		Phase     string `json:"phase"`
	} `json:"peak"`
	// Phases are the levels of every phase in order, warm-up phases
	// (named warmup-*) included; only each phase's peak is decoded.
	Phases []struct {
		Phase string `json:"phase"`
		Peak  int64  `json:"peak"`
	} `json:"phases"`
	ModelInfo struct {
		ParamBytes          int64 `json:"param_bytes"`
		BufferBytes         int64 `json:"buffer_bytes"`
		InputBytes          int64 `json:"input_bytes"`
		GradBytes           int64 `json:"grad_bytes"`
		OptimizerStateBytes int64 `json:"optimizer_state_bytes"`
	} `json:"model_info"`
	// Checks are the method's checks on the row: the integrated level
	// after the build and after the inputs, and the storages they must
	// equal.
	Checks struct {
		AfterBuild            int64 `json:"after_build"`
		ParamPlusBufferBytes  int64 `json:"param_plus_buffer_bytes"`
		AfterInputs           int64 `json:"after_inputs"`
		ParamBufferInputBytes int64 `json:"param_buffer_input_bytes"`
		// Leftover is the level once the case freed what it made.
		Leftover int64 `json:"leftover"`
	} `json:"checks"`
	File string `json:"-"`
	Line int    `json:"-"`
}

// ReadCPU reads the rows of every <torch>-<date>.jsonl in dir of fsys
// (testdata/measured/cpu), in name order; validation-*.jsonl files hold
// the method's validation, not jobs, and are skipped.
func ReadCPU(fsys fs.FS, dir string) ([]CPURow, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	if _, err := fs.Stat(fsys, dir); err != nil {
		return nil, err
	}
	slices.Sort(names)
	var rows []CPURow
	seen := map[string]string{}
	for _, name := range names {
		if strings.HasPrefix(path.Base(name), "validation-") {
			continue
		}
		f, err := fsys.Open(name)
		if err != nil {
			return nil, err
		}
		err = eachLine(f, func(line int, b []byte) error {
			var r CPURow
			if err := json.Unmarshal(b, &r); err != nil {
				return err
			}
			switch {
			case r.Schema != 1:
				return fmt.Errorf("schema = %d: this reader knows schema 1", r.Schema)
			case r.ID == "":
				return fmt.Errorf("id is empty")
			case seen[r.ID] != "":
				return fmt.Errorf("id %q is also in %s", r.ID, seen[r.ID])
			}
			seen[r.ID] = path.Base(name)
			r.File, r.Line = path.Base(name), line
			rows = append(rows, r)
			return nil
		})
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return rows, nil
}

// CPUSet is the comparison of the CPU rows.
type CPUSet struct {
	Cases    []Case
	Failures []Failure
	// Statuses counts the rows by status (ok, error).
	Statuses map[string]int
	// Torch and Transformers list the versions the rows ran.
	Torch, Transformers []string
}

// CompareCPU estimates every ok CPU row at the allocated level, as a job
// of PyTorch's CPU backend (budget.Job.Backend model.CPU: the CPU's
// dropout and scaled_dot_product_attention kernels, model.CPU cites
// them).
//
// The estimate is the allocated level less the cuBLAS workspaces
// (Breakdown.Workspace for a job without quantized weights): PyTorch
// allocates them from the CUDA caching allocator once per cuBLAS handle
// and stream (aten/src/ATen/cuda/CublasHandlePool.cpp), and a CPU job has
// none. Every other difference between the CPU and CUDA kernels that the
// backend does not model shows in the rows and is listed in misses.tsv
// with its mechanism.
func CompareCPU(rows []CPURow) CPUSet {
	set := CPUSet{Statuses: map[string]int{}}
	for i := range rows {
		r := &rows[i]
		set.Statuses[r.Status]++
		if r.Status != "ok" {
			continue
		}
		if !slices.Contains(set.Torch, r.Env.Torch) {
			set.Torch = append(set.Torch, r.Env.Torch)
		}
		if !slices.Contains(set.Transformers, r.Env.Transformers) {
			set.Transformers = append(set.Transformers, r.Env.Transformers)
		}
		j, err := r.Job.Budget()
		var b budget.Breakdown
		if err == nil {
			// tools/measure's adapter computes PEFT's Linear.forward
			// with lora_dropout 0 on a frozen base: budget.FrozenBaseLoRA,
			// Job.LoRACode's zero value.
			j.Backend = model.CPU
			// The CPU has no mamba_ssm or causal_conv1d kernels:
			// every state-space mixer takes transformers' torch path
			// (MambaMixer.forward calls cuda_kernels_forward only
			// when "cuda" is in the weights' device type, else
			// slow_forward; Mamba2Mixer and Zamba2MambaMixer
			// torch_forward; JambaMambaMixer slow_forward once
			// use_mamba_kernels is off: modeling_mamba.py,
			// modeling_mamba2.py, modeling_jamba.py,
			// modeling_zamba2.py, v4.57.1).
			j.SSMKernel = model.SequentialSSM
			b, err = budget.Estimate(j)
		}
		var phase string
		if err == nil {
			phase, err = cpuPhase(r.Job.Mode, r.Peak.Phase)
		}
		if err == nil && phase != b.Phase.String() && r.tied(b.Phase) {
			phase = b.Phase.String()
		}
		if err == nil && r.Peak.Allocated <= 0 {
			err = fmt.Errorf("peak.allocated = %d: an ok row measures a peak", r.Peak.Allocated)
		}
		if err != nil {
			set.Failures = append(set.Failures, Failure{CPU, r.ID, err})
			continue
		}
		set.Cases = append(set.Cases, Case{Source: CPU, ID: r.ID, Family: j.Model.Spec().Family, GPU: "cpu",
			Label: Allocated, Measured: gpumem.Bytes(r.Peak.Allocated), Predicted: b.Allocated() - b.Workspace,
			Phase: b.Phase.String(), MeasuredPhase: phase,
			// The job's features, and the torch and transformers the row
			// ran (rows of an older stack are compared with an estimate
			// of the reference's code).
			Features: append(Features(&r.Job, Allocated), "torch:"+r.Env.Torch, "transformers:"+r.Env.Transformers)})
	}
	slices.Sort(set.Torch)
	slices.Sort(set.Transformers)
	return set
}

// cpuPhase names a row's peak phase as budget.Phase does. Training's
// phases are forward, backward and step; a prefill is one forward; a
// generate() call prepares (an encoder–decoder runs its encoder), runs the
// prompt and decodes, and budget names the peak of every inference
// candidate of a generation job Decode (budget/estimate.go), so all three
// are "decode".
func cpuPhase(mode, phase string) (string, error) {
	switch {
	case mode == "train" && (phase == "forward" || phase == "backward"):
		return phase, nil
	case mode == "train" && phase == "step":
		return budget.Step.String(), nil
	case mode == "prefill" && phase == "forward":
		return budget.Forward.String(), nil
	case mode == "generate" && (phase == "prepare" || phase == "prefill" || phase == "decode"):
		return budget.Decode.String(), nil
	}
	return "", fmt.Errorf("peak.phase %q: not a phase of a %s job", phase, mode)
}

// tied reports whether the row's phase that the estimate's phase p names
// peaked within CPUPhaseTie bytes of the row's peak (see CPUPhaseTie).
// Warm-up phases are not the measured window and are skipped.
func (r *CPURow) tied(p budget.Phase) bool {
	for _, ph := range r.Phases {
		name, err := cpuPhase(r.Job.Mode, ph.Phase)
		if err == nil && name == p.String() && r.Peak.Allocated-ph.Peak < CPUPhaseTie {
			return true
		}
	}
	return false
}

// CPUMiss says how a CPU case misses the target ("" when it meets it).
func CPUMiss(c Case) string {
	var why []string
	e := c.Err()
	switch {
	case e < -CPUMaxUnder:
		why = append(why, fmt.Sprintf("%.1f%% under", -100*e))
	case math.Abs(e) > CPUTarget:
		why = append(why, fmt.Sprintf("%.1f%% over", 100*e))
	}
	if c.Phase != c.MeasuredPhase {
		why = append(why, fmt.Sprintf("peak in %s, estimated in %s", c.MeasuredPhase, c.Phase))
	}
	return strings.Join(why, "; ")
}

// ReadCPUMisses reads misses.tsv: one row id and the mechanism believed to
// explain its miss a line, separated by a tab; blank lines and lines
// starting with # are comments.
func ReadCPUMisses(fsys fs.FS, name string) (map[string]string, error) {
	data, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, why, ok := strings.Cut(line, "\t")
		id, why = strings.TrimSpace(id), strings.TrimSpace(why)
		switch {
		case !ok || id == "" || why == "":
			return nil, fmt.Errorf("%s:%d: want a row id, a tab and the mechanism", name, i+1)
		case out[id] != "":
			return nil, fmt.Errorf("%s:%d: %s is listed twice", name, i+1, id)
		}
		out[id] = why
	}
	return out, nil
}

// CheckCPU returns what the CPU rows violate, one sentence each: a row that
// could not be estimated, a row that misses the target without being
// listed in misses, a listed row that now meets it (remove it from the
// list), and a listed id no row has.
func CheckCPU(set CPUSet, misses map[string]string) []string {
	var out []string
	for _, f := range set.Failures {
		out = append(out, fmt.Sprintf("cpu %s: not estimated: %v", f.ID, f.Err))
	}
	seen := map[string]bool{}
	for _, c := range set.Cases {
		seen[c.ID] = true
		why, listed := misses[c.ID]
		miss := CPUMiss(c)
		switch {
		case miss != "" && !listed:
			out = append(out, fmt.Sprintf("cpu %s: misses the target (%s): estimated %d bytes, measured %d (%+.2f%%), not listed in misses.tsv",
				c.ID, miss, c.Predicted, c.Measured, 100*c.Err()))
		case miss == "" && listed:
			out = append(out, fmt.Sprintf("cpu %s: now within the target (%+.2f%%, peak in %s): remove it from misses.tsv (%s)",
				c.ID, 100*c.Err(), c.Phase, why))
		}
	}
	ids := make([]string, 0, len(misses))
	for id := range misses {
		if !seen[id] {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		out = append(out, fmt.Sprintf("cpu %s: listed in misses.tsv but no ok row has that id", id))
	}
	return out
}
