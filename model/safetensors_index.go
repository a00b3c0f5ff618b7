package model

// Sharded checkpoints: model.safetensors.index.json and its shards.

import (
	"bytes"
	"io"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
)

// FromSafetensorsIndex reads a sharded checkpoint: the index file (a
// model.safetensors.index.json with its "weight_map") and the header of
// every shard it names, all from fsys, with shard names relative to the
// index's directory. It checks that every mapped tensor is in its shard
// and that no shard holds an unmapped tensor. Shards are read through
// io.ReaderAt when fsys's files provide it, and only their headers are
// read either way, with [FromSafetensors]'s limits.
//
// The index may hold at most 100,000,000 bytes and map at most 1,048,576
// (2^20) tensors, each once; it is decoded as it is read, so a larger
// map is refused at its first entry past the bound. A nil fsys is an
// error of field "fsys".
func FromSafetensorsIndex(fsys fs.FS, index string) (Spec, error) {
	if fsys == nil {
		return Spec{}, gpumem.Errorf("fsys", nil, gpumem.ErrInvalid, "nil file system")
	}
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
	weightMap, err := readIndex(data)
	if err != nil {
		return Spec{}, err
	}
	if len(weightMap) == 0 {
		return Spec{}, gpumem.Errorf("index.weight_map", nil, gpumem.ErrInvalid, "missing or empty")
	}
	shards := map[string][]string{}
	for tensor, shard := range weightMap {
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

// readIndex decodes an index file's weight_map, skipping its other keys.
func readIndex(data []byte) (map[string]string, error) {
	js := newJSONScanner(bytes.NewReader(data), "index")
	var wm map[string]string
	err := js.object("index", "a JSON object", func(key string) error {
		if key != "weight_map" {
			return js.skip(1)
		}
		if wm != nil {
			return gpumem.Errorf("index.weight_map", nil, gpumem.ErrSyntax, "given twice")
		}
		wm = map[string]string{}
		return js.stringMap("index.weight_map", func(tensor, shard string) error {
			if _, ok := wm[tensor]; ok {
				return gpumem.Errorf("index.weight_map["+strconv.Quote(tensor)+"]", shard, gpumem.ErrInvalid, "tensor mapped twice")
			}
			if len(wm) == maxTensors {
				return gpumem.Errorf("index.weight_map", len(wm)+1, gpumem.ErrRange, "more than %d tensors", maxTensors)
			}
			wm[tensor] = shard
			return nil
		})
	})
	if err == nil {
		err = js.end()
	}
	return wm, err
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
	return readSafetensors(f, st.Size(), field)
}
