package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
)

// maxSafetensorsHeader is the reference parser's MAX_HEADER_SIZE
// (huggingface/safetensors safetensors/src/tensor.rs): a header above it
// is rejected before anything is allocated.
const maxSafetensorsHeader = 100_000_000

// safetensorsDTypes are the dtype names of the safetensors format (rust
// enum Dtype in safetensors/src/tensor.rs).
var safetensorsDTypes = map[string]gpumem.DType{
	"BOOL": gpumem.BOOL, "U8": gpumem.UINT8, "I8": gpumem.INT8, "I16": gpumem.INT16, "U16": gpumem.UINT16,
	"F16": gpumem.FP16, "BF16": gpumem.BF16, "I32": gpumem.INT32, "U32": gpumem.UINT32, "F32": gpumem.FP32,
	"F64": gpumem.FP64, "I64": gpumem.INT64, "U64": gpumem.UINT64, "C64": gpumem.C64,
	"F8_E5M2": gpumem.FP8E5M2, "F8_E4M3": gpumem.FP8E4M3, "F8_E8M0": gpumem.FP8E8M0,
	"F8_E4M3FNUZ": gpumem.FP8E4M3FNUZ, "F8_E5M2FNUZ": gpumem.FP8E5M2FNUZ,
	"F6_E2M3": gpumem.FP6E2M3, "F6_E3M2": gpumem.FP6E3M2, "F4": gpumem.FP4,
}

// stTensor is one header entry with its byte range.
type stTensor struct {
	t          gpumem.Tensor
	begin, end int64
}

// FromSafetensors reads the header of a .safetensors file of size bytes
// and returns its exact inventory: every tensor's name, shape and dtype
// (Spec.Inventory), with shape facts inferred from the names where they
// follow Hugging Face conventions (see [InferSpec]).
//
// Only the first 8 + N bytes are read, N being the header length, which
// must not exceed 100,000,000 (the reference parser's cap) or the file.
// Every tensor's data_offsets must hold exactly dtype × shape bytes, and
// the tensors must tile the data buffer without holes or overlaps up to
// the end of the file, as the reference parser requires.
func FromSafetensors(r io.ReaderAt, size int64) (Spec, error) {
	if size < 0 {
		return Spec{}, gpumem.Errorf("safetensors.size", size, gpumem.ErrInvalid, "negative file size")
	}
	ts, _, err := readSafetensors(io.NewSectionReader(r, 0, size), size, "safetensors")
	if err != nil {
		return Spec{}, err
	}
	inv := make([]gpumem.Tensor, len(ts))
	for i, t := range ts {
		inv[i] = t.t
	}
	s := InferSpec(inv)
	if s.Family == "" {
		s.Family = "safetensors"
	}
	return s, nil
}

// readSafetensors parses a safetensors header from r, the start of a
// file of size bytes. field prefixes error fields ("safetensors",
// "shard(model-00001-of-00002.safetensors)").
func readSafetensors(r io.Reader, size int64, field string) ([]stTensor, map[string]string, error) {
	var lenBuf [8]byte
	if size < 8 {
		return nil, nil, gpumem.Errorf(field+".header_length", size, gpumem.ErrSyntax, "file of %d bytes is shorter than the 8-byte header length", size)
	}
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return nil, nil, gpumem.Errorf(field+".header_length", nil, gpumem.ErrSyntax, "reading: %v", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > maxSafetensorsHeader {
		return nil, nil, gpumem.Errorf(field+".header_length", n, gpumem.ErrRange, "exceeds the %d-byte cap", maxSafetensorsHeader)
	}
	if int64(n) > size-8 {
		return nil, nil, gpumem.Errorf(field+".header_length", n, gpumem.ErrSyntax, "beyond the end of the %d-byte file", size)
	}
	header := make([]byte, n)
	if _, err := io.ReadFull(r, header); err != nil {
		return nil, nil, gpumem.Errorf(field+".header", nil, gpumem.ErrSyntax, "reading %d bytes: %v", n, err)
	}
	if len(header) == 0 || header[0] != '{' {
		return nil, nil, gpumem.Errorf(field+".header", truncate(string(header)), gpumem.ErrSyntax, "does not start with '{'")
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(bytes.TrimRight(header, " ")))
	if err := dec.Decode(&raw); err != nil {
		return nil, nil, gpumem.Errorf(field+".header", truncate(string(header)), gpumem.ErrSyntax, "not a JSON object: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, gpumem.Errorf(field+".header", truncate(string(header)), gpumem.ErrSyntax, "data after the JSON object")
	}
	var meta map[string]string
	if m, ok := raw["__metadata__"]; ok {
		if err := json.Unmarshal(m, &meta); err != nil {
			return nil, nil, gpumem.Errorf(field+".__metadata__", truncate(string(m)), gpumem.ErrSyntax, "not a string-to-string map")
		}
		delete(raw, "__metadata__")
	}
	if len(raw) > maxTensors {
		return nil, nil, gpumem.Errorf(field+".header", len(raw), gpumem.ErrRange, "more than %d tensors", maxTensors)
	}
	ts := make([]stTensor, 0, len(raw))
	for name, msg := range raw {
		t, err := parseSTEntry(field, name, msg)
		if err != nil {
			return nil, nil, err
		}
		ts = append(ts, t)
	}
	// The reference parser sorts by offsets and requires the tensors to
	// tile [0, buffer length) exactly.
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].begin != ts[j].begin {
			return ts[i].begin < ts[j].begin
		}
		if ts[i].end != ts[j].end {
			return ts[i].end < ts[j].end
		}
		return ts[i].t.Name < ts[j].t.Name
	})
	var at int64
	for _, t := range ts {
		if t.begin != at {
			return nil, nil, gpumem.Errorf(field+"["+strconv.Quote(t.t.Name)+"].data_offsets", []int64{t.begin, t.end}, gpumem.ErrInvalid,
				"starts at %d, want %d: the buffer has a hole or an overlap", t.begin, at)
		}
		at = t.end
	}
	if data := size - 8 - int64(n); at != data {
		return nil, nil, gpumem.Errorf(field+".data_offsets", at, gpumem.ErrInvalid,
			"tensors end at byte %d of a %d-byte data buffer", at, data)
	}
	return ts, meta, nil
}

func parseSTEntry(field, name string, msg json.RawMessage) (stTensor, error) {
	f := field + "[" + strconv.Quote(name) + "]"
	var e struct {
		DType   *string `json:"dtype"`
		Shape   []int64 `json:"shape"`
		Offsets []int64 `json:"data_offsets"`
	}
	if err := json.Unmarshal(msg, &e); err != nil {
		return stTensor{}, gpumem.Errorf(f, truncate(string(msg)), gpumem.ErrSyntax, "not a tensor entry: %v", err)
	}
	if e.DType == nil {
		return stTensor{}, gpumem.Errorf(f+".dtype", nil, gpumem.ErrSyntax, "missing")
	}
	dt, ok := safetensorsDTypes[*e.DType]
	if !ok {
		return stTensor{}, gpumem.Errorf(f+".dtype", *e.DType, gpumem.ErrUnsupported, "not a safetensors dtype")
	}
	if e.Shape == nil {
		if !bytes.Contains(msg, []byte(`"shape"`)) {
			return stTensor{}, gpumem.Errorf(f+".shape", nil, gpumem.ErrSyntax, "missing")
		}
		e.Shape = []int64{}
	}
	if len(e.Offsets) != 2 {
		return stTensor{}, gpumem.Errorf(f+".data_offsets", e.Offsets, gpumem.ErrSyntax, "want [begin, end]")
	}
	begin, end := e.Offsets[0], e.Offsets[1]
	if begin < 0 || end < begin {
		return stTensor{}, gpumem.Errorf(f+".data_offsets", e.Offsets, gpumem.ErrInvalid, "want 0 <= begin <= end")
	}
	t := gpumem.Tensor{Name: name, Shape: e.Shape, DType: dt}
	elems, err := t.Elems()
	if err != nil {
		return stTensor{}, gpumem.Errorf(f+".shape", e.Shape, gpumem.ErrInvalid, "%v", err)
	}
	if be, _ := dt.Block(); be > 1 && elems%be != 0 {
		// safetensors: n_elements × bitsize must be whole bytes.
		return stTensor{}, gpumem.Errorf(f+".shape", e.Shape, gpumem.ErrInvalid, "%d elements of %s are not a whole number of bytes", elems, *e.DType)
	}
	want, err := dt.Size(elems)
	if err != nil {
		return stTensor{}, gpumem.Errorf(f+".shape", e.Shape, gpumem.ErrRange, "%v", err)
	}
	if end-begin != int64(want) {
		return stTensor{}, gpumem.Errorf(f+".data_offsets", e.Offsets, gpumem.ErrInvalid,
			"hold %d bytes, but %s %v takes %d", end-begin, *e.DType, e.Shape, int64(want))
	}
	return stTensor{t: t, begin: begin, end: end}, nil
}

// FromSafetensorsIndex reads a sharded checkpoint: the index file (a
// model.safetensors.index.json with its "weight_map") and the header of
// every shard it names, all from fsys, with shard names relative to the
// index's directory. It checks that every mapped tensor is in its shard
// and that no shard holds an unmapped tensor. Shards are read through
// io.ReaderAt when fsys's files provide it, and only their headers are
// read either way.
func FromSafetensorsIndex(fsys fs.FS, index string) (Spec, error) {
	f, err := fsys.Open(index)
	if err != nil {
		return Spec{}, gpumem.Errorf("index", index, gpumem.ErrInvalid, "%v", err)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxSafetensorsHeader+1))
	f.Close()
	if err != nil {
		return Spec{}, gpumem.Errorf("index", index, gpumem.ErrSyntax, "reading: %v", err)
	}
	if len(data) > maxSafetensorsHeader {
		return Spec{}, gpumem.Errorf("index", index, gpumem.ErrRange, "larger than %d bytes", maxSafetensorsHeader)
	}
	var idx struct {
		Metadata  map[string]any    `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		return Spec{}, gpumem.Errorf("index", truncate(string(data)), gpumem.ErrSyntax, "not a safetensors index: %v", err)
	}
	if len(idx.WeightMap) == 0 {
		return Spec{}, gpumem.Errorf("index.weight_map", nil, gpumem.ErrInvalid, "missing or empty")
	}
	if len(idx.WeightMap) > maxTensors {
		return Spec{}, gpumem.Errorf("index.weight_map", len(idx.WeightMap), gpumem.ErrRange, "more than %d tensors", maxTensors)
	}
	shards := map[string][]string{}
	for tensor, shard := range idx.WeightMap {
		shards[shard] = append(shards[shard], tensor)
	}
	names := make([]string, 0, len(shards))
	for s := range shards {
		names = append(names, s)
	}
	sort.Strings(names)
	dir := path.Dir(index)
	var inv []gpumem.Tensor
	for _, shard := range names {
		field := "index.weight_map[" + strconv.Quote(shard) + "]"
		p := path.Join(dir, shard)
		if strings.Contains(shard, "/") || strings.Contains(shard, `\`) || !fs.ValidPath(p) {
			return Spec{}, gpumem.Errorf(field, shard, gpumem.ErrInvalid, "shard must be a file name beside the index")
		}
		ts, err := readShard(fsys, p, "shard("+shard+")")
		if err != nil {
			return Spec{}, err
		}
		mapped := map[string]bool{}
		for _, tn := range shards[shard] {
			mapped[tn] = true
		}
		for _, t := range ts {
			if !mapped[t.t.Name] {
				return Spec{}, gpumem.Errorf("shard("+shard+")["+strconv.Quote(t.t.Name)+"]", shard, gpumem.ErrInvalid, "tensor not mapped to this shard by the index")
			}
			delete(mapped, t.t.Name)
			inv = append(inv, t.t)
		}
		for tn := range mapped {
			return Spec{}, gpumem.Errorf("index.weight_map["+strconv.Quote(tn)+"]", shard, gpumem.ErrInvalid, "tensor not found in its shard")
		}
	}
	s := InferSpec(inv)
	if s.Family == "" {
		s.Family = "safetensors"
	}
	return s, nil
}

func readShard(fsys fs.FS, p, field string) ([]stTensor, error) {
	f, err := fsys.Open(p)
	if err != nil {
		return nil, gpumem.Errorf(field, p, gpumem.ErrInvalid, "%v", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, gpumem.Errorf(field, p, gpumem.ErrInvalid, "%v", err)
	}
	ts, _, err := readSafetensors(f, st.Size(), field)
	return ts, err
}

// InferSpec returns a Spec whose Inventory is inv, with the shape facts
// that Hugging Face and GGUF tensor names reveal: the family whose
// checkpoint names they are (see [GuessFamily]), layers (highest layer
// index + 1), vocabulary and hidden size (from the token embedding),
// feed-forward size, routed experts, tied embeddings (no separate output
// head) and the dominant dtype. Heads and head size cannot be told apart
// from projection shapes alone; they are filled only where a per-head
// norm (qwen3, gemma3 q_norm) gives the head size. Take them from a
// config when one exists.
func InferSpec(inv []gpumem.Tensor) Spec {
	s := Spec{Inventory: inv}
	byDType := map[gpumem.DType]int64{}
	experts := map[int64]bool{}
	hasHead := false
	var qRows, kRows, qNorm, stacked int64
	for _, t := range inv {
		if n, err := t.Bytes(); err == nil {
			byDType[t.DType] += int64(n)
		}
		if l, ok := layerIndex(t.Name); ok && int64(l)+1 > s.Layers {
			s.Layers = int64(l) + 1
		}
		if e, ok := expertIndex(t.Name); ok && len(experts) <= maxTensors {
			experts[e] = true
		}
		name := t.Name
		switch {
		case len(t.Shape) == 2 && s.Vocab == 0 && hasSuffixAny(name, "embed_tokens.weight", "wte.weight",
			"word_embeddings.weight", "embed_in.weight", "token_embd.weight", "shared.weight", "token_embedding.weight"):
			// GGUF stores token_embd as [vocab, hidden] after reversal too.
			s.Vocab, s.Hidden = t.Shape[0], t.Shape[1]
		case hasSuffixAny(name, "lm_head.weight", "embed_out.weight", "proj_out.weight") || name == "output.weight":
			hasHead = true
		}
		if strings.Contains(name, "_exps.") && len(t.Shape) == 3 && t.Shape[0] > stacked {
			// GGUF stacks a layer's experts in one [experts, out, in] tensor.
			stacked = t.Shape[0]
		}
		if l, ok := layerIndex(name); ok && l == 0 && len(t.Shape) == 1 && hasSuffixAny(name, "self_attn.q_norm.weight", "attn_q_norm.weight") {
			qNorm = t.Shape[0]
		}
		if l, ok := layerIndex(name); ok && l == 0 && len(t.Shape) == 2 {
			switch {
			case hasSuffixAny(name, "self_attn.q_proj.weight", "attn_q.weight"):
				qRows = t.Shape[0]
			case hasSuffixAny(name, "self_attn.k_proj.weight", "attn_k.weight"):
				kRows = t.Shape[0]
			case hasSuffixAny(name, "mlp.up_proj.weight", "mlp.c_fc.weight", ".fc1.weight", "dense_h_to_4h.weight", "ffn_up.weight", "intermediate.dense.weight"):
				if s.Intermediate == 0 {
					s.Intermediate = t.Shape[0]
					if strings.HasSuffix(name, "c_fc.weight") && t.Shape[0] == s.Hidden {
						s.Intermediate = t.Shape[1] // GPT-2 Conv1D [in, out]
					}
				}
			}
		}
	}
	if s.Vocab > 0 {
		s.TiedEmbeddings = !hasHead
	}
	if qNorm > 0 && qRows > 0 && kRows > 0 && qRows%qNorm == 0 && kRows%qNorm == 0 {
		s.HeadDim, s.Heads, s.KVHeads = qNorm, qRows/qNorm, kRows/qNorm
	}
	s.MoE.Experts = max(int64(len(experts)), stacked)
	s.Family = GuessFamily(inv)
	var best int64 = -1
	for d, b := range byDType {
		if b > best || (b == best && d < s.DType) {
			s.DType, best = d, b
		}
	}
	return s
}

func hasSuffixAny(s string, suffixes ...string) bool {
	for _, x := range suffixes {
		if strings.HasSuffix(s, x) {
			return true
		}
	}
	return false
}

// expertIndex finds N in "...experts.N..." (HF per-expert tensors).
func expertIndex(name string) (int64, bool) {
	i := strings.Index(name, ".experts.")
	if i < 0 {
		return 0, false
	}
	rest := name[i+len(".experts."):]
	seg, _, _ := strings.Cut(rest, ".")
	if seg == "" || len(seg) > 9 || strings.Trim(seg, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(seg, 10, 64)
	return n, err == nil
}

// GuessFamily returns the Hugging Face model_type whose checkpoint tensor
// names inv carries ("llama" for model.layers.N.self_attn.q_proj with
// mlp.gate_proj, "gpt2" for transformer.h.N.attn.c_attn, ...), or "" when
// the names match none. Llama-style names shared by several families
// (mistral, qwen2 without biases, gemma) read as "llama"; the layouts are
// the same.
func GuessFamily(inv []gpumem.Tensor) string {
	has := func(sub string) bool {
		for _, t := range inv {
			if strings.Contains(t.Name, sub) {
				return true
			}
		}
		return false
	}
	switch {
	case has("vision_tower.") && has("multi_modal_projector.linear_"):
		return "llava"
	case has("vision_tower.") && has("mm_input_projection_weight"):
		return "gemma3"
	case has("kv_a_proj_with_mqa"):
		if has("e_score_correction_bias") {
			return "deepseek_v3"
		}
		return "deepseek_v2"
	case has("block_sparse_moe.experts."):
		return "mixtral"
	case has("mlp.shared_expert_gate"):
		return "qwen2_moe"
	case has("mlp.experts.") && has("self_attn.q_norm"):
		return "qwen3_moe"
	case has("self_attn.qkv_proj") && has("mlp.gate_up_proj"):
		return "phi3"
	case has("self_attn.dense") && has("final_layernorm"):
		return "phi"
	case has("pre_feedforward_layernorm") && has("self_attn.q_norm"):
		return "gemma3_text"
	case has("pre_feedforward_layernorm"):
		return "gemma2"
	case has("self_attn.q_norm") && has("mlp.gate_proj"):
		return "qwen3"
	case has("self_attn.q_proj.bias") && has("mlp.gate_proj") && !has("self_attn.o_proj.bias"):
		return "qwen2"
	case has("model.layers.") && has("mlp.gate_proj"):
		return "llama"
	case has("transformer.h.") && has("attn.c_attn"):
		if has("transformer.h.0.attn.c_attn.weight") && cAttnIsLinear(inv) {
			return "gpt_bigcode"
		}
		return "gpt2"
	case has("transformer.word_embeddings") && has("query_key_value"):
		return "falcon"
	case has("gpt_neox."):
		return "gpt_neox"
	case has("model.decoder.embed_positions") && has("self_attn_layer_norm") && !has("encoder"):
		return "opt"
	case has("model.encoder.conv1"):
		return "whisper"
	case has("encoder.block.") && has("shared.weight"):
		return "t5"
	case has("bert.embeddings"):
		return "bert"
	case has("roberta.embeddings"):
		return "roberta"
	case has("vit.embeddings"):
		return "vit"
	case has("text_model.") && has("vision_model.") && has("logit_scale"):
		return "clip"
	case has("vision_model.embeddings.class_embedding"):
		return "clip_vision_model"
	case has("vision_model.embeddings.patch_embedding") && has("vision_model.encoder.layers."):
		return "siglip_vision_model"
	case has("transformer_blocks.") && has("norm1.linear") && has("patch_embed.text_proj"):
		return "cogvideox"
	}
	return ""
}

// cAttnIsLinear tells GPTBigCode's nn.Linear c_attn ([out, in], out >
// in) from GPT-2's Conv1D ([in, 3·in]).
func cAttnIsLinear(inv []gpumem.Tensor) bool {
	for _, t := range inv {
		if strings.HasSuffix(t.Name, "h.0.attn.c_attn.weight") && len(t.Shape) == 2 {
			return t.Shape[0] > t.Shape[1]
		}
	}
	return false
}
