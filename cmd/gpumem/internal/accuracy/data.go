package accuracy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/gpumem/gpumem"
)

// Row is one line of testdata/measured/<gpu>-<date>.jsonl, as
// tools/calibrate writes it (schema 1; testdata/measured/README.md).
// Only the fields the comparison reads are decoded.
type Row struct {
	Schema   int    `json:"schema"`
	ID       string `json:"id"`
	Status   string `json:"status"`
	Error    string `json:"error"`
	OOMPhase string `json:"oom_phase"`
	Job      Job    `json:"job"`
	Env      Env    `json:"env"`
	Peak     *Peak  `json:"peak"`
	// File is the file the row was read from, and Line its line.
	File string `json:"-"`
	Line int    `json:"-"`
}

// Env is the environment a row was measured in.
type Env struct {
	GPU               string `json:"gpu"`
	GPUTotalMemory    int64  `json:"gpu_total_memory"`
	ComputeCapability string `json:"compute_capability"`
	Torch             string `json:"torch"`
	Transformers      string `json:"transformers"`
	Driver            string `json:"driver"`
	CUDA              string `json:"cuda"`
	// ModuleLoading is CUDA_MODULE_LOADING as the process saw it (null:
	// unset).
	ModuleLoading string `json:"CUDA_MODULE_LOADING"`
}

// StatedEnv is the environment a published figure was measured in, as
// far as the source states it: what sets the CUDA context the device
// level counts.
type StatedEnv struct {
	// GPU is a name gpumem.LookupDevice knows.
	GPU string `json:"gpu"`
	// CUDA is the CUDA version (budget.ParseCUDAVersion).
	CUDA string `json:"cuda"`
	// ModuleLoading is lazy, eager, or empty for PyTorch's default under
	// that CUDA.
	ModuleLoading string `json:"module_loading"`
}

// UnmarshalJSON decodes an environment, refusing fields it does not
// have.
func (e *StatedEnv) UnmarshalJSON(b []byte) error {
	type plain StatedEnv
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode((*plain)(e)); err != nil {
		return fmt.Errorf("env: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// Peak is a row's maximum over its phases at the three levels; nil
// fields were not measured.
type Peak struct {
	Allocated *int64 `json:"allocated"`
	Reserved  *int64 `json:"reserved"`
	Device    *int64 `json:"device"`
}

// Stated is one line of testdata/published/jobs.jsonl: a figure of
// testdata/published/peaks.jsonl whose job the source states fully
// enough to estimate, in the harness's job vocabulary.
type Stated struct {
	// ID is the figure's id in peaks.jsonl.
	ID string `json:"id"`
	// Label is the level the figure measures: allocated, reserved or
	// device, or kv_cache for the size of an engine's KV cache, or
	// weights for the memory its loaded weights take. It must
	// agree with the figure's metric.
	Label string `json:"label"`
	Job   Job    `json:"job"`
	// Env, when given, is the environment the figure was measured in:
	// the GPU, CUDA and module loading that choose the CUDA context of
	// the device level (budget.DefaultContext). Without it the estimate
	// takes the defaults of an unnamed device under a current CUDA.
	Env *StatedEnv `json:"env"`
	// Unmodelled, when set, says what memory the measured window holds
	// that the estimate does not model; such a case is reported but not
	// held to the 5% margin.
	Unmodelled string `json:"unmodelled"`
	// How says how the job's fields were read from the source.
	How string `json:"how"`

	// From peaks.jsonl.
	Value  int64  `json:"-"`
	Metric string `json:"-"`
	GPU    string `json:"-"`
	Line   int    `json:"-"`
}

// published is the part of a peaks.jsonl line the comparison reads.
type published struct {
	ID     string `json:"id"`
	Metric string `json:"metric"`
	Value  int64  `json:"value_bytes"`
	GPU    string `json:"gpu"`
}

// ReadMeasured reads every *.jsonl file in dir of fsys (testdata/measured),
// in name order. A missing dir is an error; an empty one gives no rows.
func ReadMeasured(fsys fs.FS, dir string) ([]Row, error) {
	if _, err := fs.Stat(fsys, dir); err != nil {
		return nil, err
	}
	names, err := fs.Glob(fsys, path.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var rows []Row
	for _, name := range names {
		f, err := fsys.Open(name)
		if err != nil {
			return nil, err
		}
		err = eachLine(f, func(line int, b []byte) error {
			var r Row
			if err := json.Unmarshal(b, &r); err != nil {
				return err
			}
			if r.Schema != 1 {
				return fmt.Errorf("schema = %d: this reader knows schema 1", r.Schema)
			}
			if r.ID == "" {
				return fmt.Errorf("id is empty")
			}
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

// ReadPublished reads jobs.jsonl and joins each line with its figure in
// peaks.jsonl, both in dir of fsys (testdata/published).
func ReadPublished(fsys fs.FS, dir string) ([]Stated, error) {
	figures := map[string]published{}
	f, err := fsys.Open(path.Join(dir, "peaks.jsonl"))
	if err != nil {
		return nil, err
	}
	err = eachLine(f, func(_ int, b []byte) error {
		var p published
		if err := json.Unmarshal(b, &p); err != nil {
			return err
		}
		figures[p.ID] = p
		return nil
	})
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("peaks.jsonl: %w", err)
	}
	f, err = fsys.Open(path.Join(dir, "jobs.jsonl"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Stated
	seen := map[string]bool{}
	err = eachLine(f, func(line int, b []byte) error {
		var s Stated
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		p, ok := figures[s.ID]
		switch {
		case !ok:
			return fmt.Errorf("id %q is not in peaks.jsonl", s.ID)
		case seen[s.ID]:
			return fmt.Errorf("id %q is stated twice", s.ID)
		}
		seen[s.ID] = true
		if s.Env != nil && s.Env.GPU != "" {
			if _, ok := gpumem.LookupDevice(s.Env.GPU); !ok {
				return fmt.Errorf("%s: env.gpu %q is not in gpumem's catalog", s.ID, s.Env.GPU)
			}
		}
		if want := labelOf(p.Metric); want != "" && want != s.Label || want == "" && !isLabel(s.Label) {
			return fmt.Errorf("%s: label %q does not match the figure's metric %q", s.ID, s.Label, p.Metric)
		}
		s.Value, s.Metric, s.GPU, s.Line = p.Value, p.Metric, p.GPU, line
		out = append(out, s)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("jobs.jsonl: %w", err)
	}
	return out, nil
}

// labelOf returns the level a peaks.jsonl metric measures, or "" for
// metrics that need a stated label (other: ...).
func labelOf(metric string) string {
	switch metric {
	case "max_memory_allocated":
		return Allocated
	case "max_memory_reserved":
		return Reserved
	case "nvidia_smi":
		return Device
	case "kv_cache":
		return KVCache
	case "weights":
		return Weights
	}
	return ""
}

func isLabel(s string) bool { return s == Allocated || s == Reserved || s == Device }

// eachLine calls fn with each non-blank line of r and its number.
func eachLine(r io.Reader, fn func(line int, b []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	n := 0
	for sc.Scan() {
		n++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if err := fn(n, b); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
	}
	return sc.Err()
}
