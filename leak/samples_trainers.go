package leak

// Formats of particular trainers: MMDetection/MMCV, PyTorch Lightning's GPU
// stats and Ultralytics YOLO rows.

import (
	"math"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
)

// mmdetEpoch reads mmdetection's "Epoch [e][i/n]" and mmengine's
// "Epoch(train) [e][ i/n]".
func mmdetEpoch(line string) (epoch, iter, per int64, ok bool) {
	i := strings.Index(line, "Epoch")
	if i < 0 {
		return 0, 0, 0, false
	}
	j := i + len("Epoch")
	if strings.HasPrefix(line[j:], "(train)") {
		j += len("(train)")
	}
	j = skipSpace(line, j)
	if j >= len(line) || line[j] != '[' {
		return 0, 0, 0, false
	}
	e, j, ok1 := readInt(line, j+1)
	if !ok1 || j+1 >= len(line) || line[j] != ']' || line[j+1] != '[' {
		return 0, 0, 0, false
	}
	it, j, ok2 := readInt(line, j+2)
	if !ok2 || j >= len(line) || line[j] != '/' {
		return 0, 0, 0, false
	}
	n, j, ok3 := readInt(line, j+1)
	if !ok3 || j >= len(line) || line[j] != ']' || e < 1 || n < 1 {
		return 0, 0, 0, false
	}
	return e, it, n, true
}

// mmcvIter reads the iteration of mmcv's IterBasedRunner TextLoggerHook
// line "Iter [1100/40000]\tlr: …, memory: 19873, …" and mmengine's
// "Iter(train) [ 50/40000]" (mmcv/runner/hooks/logger/text.py, v1.x:
// log_str = f'Iter [{log_dict["iter"]}/{runner.max_iters}]\t'; its
// memory: is _get_max_memory, torch.cuda.max_memory_allocated() / (1024
// * 1024): MiB, a running peak of allocated, as in the Epoch lines).
func mmcvIter(line string) (int64, bool) {
	i := strings.Index(line, "Iter")
	if i < 0 || (i > 0 && isIdent(line[i-1])) {
		return 0, false
	}
	j := i + len("Iter")
	if strings.HasPrefix(line[j:], "(train)") {
		j += len("(train)")
	}
	j = skipSpace(line, j)
	if j >= len(line) || line[j] != '[' {
		return 0, false
	}
	it, j, ok := readInt(line, j+1)
	if !ok || j >= len(line) || line[j] != '/' {
		return 0, false
	}
	n, j, ok := readInt(line, j+1)
	if !ok || j >= len(line) || line[j] != ']' || n < 1 {
		return 0, false
	}
	return it, true
}

// lightningGPU is one "gpu_id: N/memory.used (MB)': V" entry of a
// Lightning dict (get_gpu_memory_map, GPUStatsMonitor).
type lightningGPU struct {
	dev int
	num string
}

// lightningGPUs finds the memory.used entries of a Lightning GPU dict
// printed on a line: {'gpu_id: 0/memory.used (MB)': 1234.0, …}.
func lightningGPUs(line string) []lightningGPU {
	const key = "gpu_id: "
	var out []lightningGPU
	for i := 0; ; {
		k := strings.Index(line[i:], key)
		if k < 0 {
			return out
		}
		j := i + k + len(key)
		i = j
		d, e, ok := readInt(line, j)
		rest := line[e:]
		if !ok || d > 1023 || !strings.HasPrefix(rest, "/memory.used (MB)") {
			continue
		}
		e += len("/memory.used (MB)")
		for e < len(line) && (line[e] == '\'' || line[e] == '"' || line[e] == ':' || line[e] == ' ') {
			e++
		}
		st := e
		for e < len(line) && (isDigit(line[e]) || line[e] == '.') {
			e++
		}
		if e > st {
			out = append(out, lightningGPU{dev: int(d), num: line[st:e]})
		}
		i = e
	}
}

// lightningLine emits one sample per GPU of a Lightning GPU dict: Used in
// MiB (nvidia-smi's nounits figures, labelled "MB" by Lightning), Device
// N, with the line's step (a key such as "step" or "epoch" on the line,
// else the carried one).
func (p *sampleParser) lightningLine(line string, n int, gs []lightningGPU) error {
	s := Sample{Line: n}
	unit, rank := "", 0
	p.pairBuf = pairs(line, p.pairBuf)
	for _, q := range p.pairBuf {
		if k, _, ok := resolveKey(q); ok && k.col == ColStep && k.rank > rank {
			if v, err := strconv.ParseInt(q.num, 10, 64); err == nil {
				s.Step, s.Has, unit, rank = v, ColStep, k.stepUnit, k.rank
			}
		}
	}
	if s.Has&ColStep == 0 && p.pendOK {
		s.Step, s.Has, unit = p.pendStep, ColStep, p.pendUnit
	}
	if tm, ok := leadingTime(line); ok {
		s.Time = tm
		s.Has |= ColTime
	}
	for _, g := range gs {
		v := scaleDecimal(g.num, gpumem.MiB, -1)
		if v < 0 || strings.Count(g.num, ".") > 1 || g.num[0] == '.' || g.num[len(g.num)-1] == '.' {
			return gpumem.Errorf(lineField(n), g.num, gpumem.ErrSyntax, "gpu_id: %d/memory.used (MB): want a number", g.dev)
		}
		x := s
		x.Device, x.Used, x.Has = g.dev, v, s.Has|ColUsed
		p.stepUnit = unit
		p.emit(x)
	}
	return nil
}

// yoloRow reads a YOLOv5/YOLOv7/YOLOv8 training row without its header:
// "0/89  5.61G  0.07745  0.0277 …", the epoch over the last epoch, then
// GPU_mem, then the losses and counts. ultralytics/yolov5 train.py (and
// WongKinYiu/yolov7's, ultralytics' trainer) prints GPU_mem as
// f'{torch.cuda.memory_reserved() / 1E9:.3g}G': reserved memory in
// decimal GB, so the bare G here is 10⁹ bytes (unlike the bare G of
// other tools, binary), and the column is Reserved. At least three
// numbers must follow the memory cell.
func yoloRow(t string, n int) (Sample, bool) {
	if !isDigit(t[0]) || strings.IndexByte(t, '/') < 0 || strings.IndexByte(t, '/') > 12 {
		return Sample{}, false
	}
	// The first five blank-separated fields, without allocating.
	var fields [5]string
	nf := 0
	for i := 0; i < len(t) && nf < len(fields); {
		for i < len(t) && (t[i] == ' ' || t[i] == '\t') {
			i++
		}
		j := i
		for j < len(t) && t[j] != ' ' && t[j] != '\t' {
			j++
		}
		if j > i {
			fields[nf] = t[i:j]
			nf++
		}
		i = j
	}
	if nf < len(fields) {
		return Sample{}, false
	}
	ep, tot, ok := strings.Cut(fields[0], "/")
	e, err1 := strconv.ParseInt(ep, 10, 64)
	last, err2 := strconv.ParseInt(tot, 10, 64)
	if !ok || err1 != nil || err2 != nil || e < 0 || e > last+1 {
		return Sample{}, false
	}
	mem := fields[1]
	if len(mem) < 2 || mem[len(mem)-1] != 'G' {
		return Sample{}, false
	}
	v, err := strconv.ParseFloat(mem[:len(mem)-1], 64)
	if err != nil || !(v >= 0) || v > 1e6 {
		return Sample{}, false
	}
	for _, f := range fields[2:5] {
		if _, err := strconv.ParseFloat(f, 64); err != nil {
			return Sample{}, false
		}
	}
	return Sample{Line: n, Step: e, Reserved: gpumem.Bytes(math.Round(v * 1e9)), Has: ColStep | ColReserved}, true
}
