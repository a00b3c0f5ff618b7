package model_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestBackboneParams checks the catalog's backbones against the parameter
// counts torchvision publishes in its weights metadata ("num_params",
// torchvision/models/resnet.py ResNet50_Weights and ResNet18_Weights,
// convnext.py ConvNeXt_Tiny_Weights, swin_transformer.py Swin_T_Weights),
// the same modules as transformers' classes of the same configs.
func TestBackboneParams(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		params  int64
		tensors int
	}{
		{"resnet50", 25_557_032, 161},
		{"resnet18", 11_689_512, 62},
		{"convnext_tiny", 28_589_128, 182},
		{"swin_t", 28_288_354, 221},
		{"efficientnet_b0", 5_288_548, 213},
	} {
		s, ok := model.Lookup(c.name)
		require.True(t, ok, c.name)
		require.Equal(t, c.params, s.Params(), c.name)
		require.Len(t, s.Tensors(), c.tensors, c.name)
		require.Equal(t, model.HeadImageCls, s.Head, c.name)
	}
	s, _ := model.Lookup("resnet50")
	ts := s.Tensors()
	require.Equal(t, "resnet.embedder.embedder.convolution.weight", ts[0].Name)
	require.Equal(t, []int64{64, 3, 7, 7}, ts[0].Shape)
	require.Equal(t, "classifier.1.weight", ts[len(ts)-2].Name)
	require.Equal(t, []int64{1000, 2048}, ts[len(ts)-2].Shape)
}

// TestBackboneConfigErrors checks that bad backbone configs name the key.
func TestBackboneConfigErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ cfg, field string }{
		{`{"model_type":"resnet","layer_type":"wide"}`, "config.layer_type"},
		{`{"model_type":"resnet","hidden_sizes":[256,512],"depths":[3,4,6]}`, "config.depths"},
		{`{"model_type":"resnet","hidden_sizes":[250,512]}`, "config.hidden_sizes[0]"},
		{`{"model_type":"resnet","depths":[3,0,6,3]}`, "config.depths[1]"},
		{`{"model_type":"resnet","depths":"3"}`, "config.depths"},
		{`{"model_type":"convnext","num_stages":3}`, "config.num_stages"},
		{`{"model_type":"convnext","layer_scale_init_value":"x"}`, "config.layer_scale_init_value"},
		{`{"model_type":"swin","num_heads":[3,6,12]}`, "config.num_heads"},
		{`{"model_type":"swin","embed_dim":100}`, "config.num_heads[0]"},
		{`{"model_type":"swin","hidden_act":"relu"}`, "config.hidden_act"},
		{`{"model_type":"efficientnet","hidden_dim":1280}`, "config.hidden_dim"},
		{`{"model_type":"efficientnet","strides":[1,2,2]}`, "config.strides"},
		{`{"model_type":"efficientnet","kernel_sizes":[3,3,4,3,5,5,3]}`, "config.kernel_sizes[2]"},
		{`{"model_type":"efficientnet","width_coefficient":-1}`, "config.width_coefficient"},
	} {
		_, err := model.FromHFConfig(strings.NewReader(c.cfg))
		var fe *gpumem.FieldError
		require.ErrorAs(t, err, &fe, c.cfg)
		require.Equal(t, c.field, fe.Field, c.cfg)
	}
	// EfficientNetConfig's defaults are EfficientNet-B7's (width 2.0,
	// depth 3.1, 600 px): torchvision's EfficientNet_B7_Weights
	// "num_params": 66347960 with a 1000-class classifier.
	b7, err := model.FromHFConfig(strings.NewReader(`{"model_type":"efficientnet","architectures":["EfficientNetForImageClassification"],"num_labels":1000}`))
	require.NoError(t, err)
	require.Equal(t, int64(66_347_960), b7.Params())
	require.Equal(t, int64(600), b7.Image.Size)
	// ResNet-18's config read with the defaults it leaves out.
	s, err := model.FromHFConfig(strings.NewReader(`{"model_type":"resnet","layer_type":"basic","hidden_sizes":[64,128,256,512],"depths":[2,2,2,2]}`))
	require.NoError(t, err)
	require.Equal(t, int64(11_689_512-513_000), s.Params()) // no classifier: the base model
}

type backboneCase struct {
	Config struct {
		Arch       string  `json:"arch"`
		Variant    string  `json:"variant"`
		Bottleneck bool    `json:"bottleneck"`
		Stem       int64   `json:"stem"`
		Embed      int64   `json:"embed"`
		Widths     []int64 `json:"widths"`
		Depths     []int64 `json:"depths"`
		Heads      []int64 `json:"heads"`
		Window     int64   `json:"window"`
		Patch      int64   `json:"patch"`
		LayerScale bool    `json:"layer_scale"`
		Image      int64   `json:"image"`
		Batch      int64   `json:"batch"`
		Labels     int64   `json:"labels"`
		DType      string  `json:"dtype"`
		// EfficientNet
		Inputs      []int64 `json:"inputs"`
		Kernels     []int64 `json:"kernels"`
		Strides     []int64 `json:"strides"`
		Expand      []int64 `json:"expand"`
		Top         int64   `json:"top"`
		NoAdjust    []int64 `json:"no_adjust"`
		DropConnect float64 `json:"drop_connect"`
		Dropout     float64 `json:"dropout"`
	} `json:"config"`
	Saved struct {
		CUDA map[string]int64 `json:"cuda"`
	} `json:"saved"`
}

// TestBackboneOracle compares the backbones' saved bytes, part by part,
// with the CPU oracle's (tools/oracle/backbones.py, its "cuda" figures):
// the stem, every block, Swin's patch merging, the final norm, the head
// and the labels, exactly.
func TestBackboneOracle(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../testdata/oracle/backbones.json")
	require.NoError(t, err)
	var f struct {
		Cases []backboneCase `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(data, &f))
	require.GreaterOrEqual(t, len(f.Cases), 16)
	figures := 0
	for i, c := range f.Cases {
		cfg := c.Config
		name := fmt.Sprintf("%d/%s%s/%s", i, cfg.Arch, cfg.Variant, cfg.DType)
		bb := &model.Backbone{Widths: cfg.Widths, Depths: cfg.Depths, Bottleneck: cfg.Bottleneck, LayerScale: cfg.LayerScale}
		s := model.Spec{Family: cfg.Arch, DType: gpumem.FP32, Backbone: bb, Head: model.HeadImageCls, Labels: cfg.Labels,
			Image: model.Image{Size: cfg.Image, Channels: 3, Patch: cfg.Patch}}
		switch cfg.Arch {
		case "resnet":
			bb.Stem = cfg.Stem
		case "convnext":
			bb.Stem = cfg.Widths[0]
		case "efficientnet":
			bb.Stem, bb.Inputs, bb.Kernels, bb.Strides, bb.Expand = cfg.Stem, cfg.Inputs, cfg.Kernels, cfg.Strides, cfg.Expand
			bb.Top, bb.NoAdjust, bb.SERatio = cfg.Top, cfg.NoAdjust, 0.25
			bb.DropPath, bb.HeadDropout = cfg.DropConnect > 0, cfg.Dropout > 0
		case "swin":
			bb.Stem, bb.Heads, bb.Window, bb.MLPRatio, bb.QKVBias = cfg.Embed, cfg.Heads, cfg.Window, 4, true
			bb.Widths = nil
			for j := range cfg.Depths {
				bb.Widths = append(bb.Widths, cfg.Embed<<j)
			}
		}
		dt := gpumem.FP32
		if cfg.DType == "bf16" {
			dt = gpumem.BF16
		}
		a, err := s.Activations(model.Workload{Batch: cfg.Batch, Train: true, DType: dt})
		require.NoError(t, err, name)
		want := c.Saved.CUDA
		check := func(what string, got gpumem.Bytes, key string) {
			t.Helper()
			require.Equal(t, want[key], int64(got), "%s: %s (%s)", name, what, key)
			figures++
		}
		check("stem", a.Embedding, "stem")
		check("final norm", a.FinalNorm, "final_norm")
		check("head", a.Head, "head")
		check("labels", a.TokenIDs, "ids")
		// Each LayerActivations stands for Count blocks of a stage:
		// "stageN.first" (Count 1) is block 0, "stageN" the rest (or
		// all of them), "stageN.merge" Swin's patch merging.
		blocks := 0
		for _, l := range a.Layers {
			var st int
			_, err := fmt.Sscanf(l.Kind, "stage%d", &st)
			require.NoError(t, err, l.Kind)
			switch {
			case strings.HasSuffix(l.Kind, ".merge"):
				check(l.Kind, l.Saved, fmt.Sprintf("s%dmerge", st-1))
			case strings.HasSuffix(l.Kind, ".first"):
				check(l.Kind, l.Saved, fmt.Sprintf("s%db0", st-1))
				blocks++
			default:
				first := int64(0)
				if l.Count < cfg.Depths[st-1] {
					first = 1
				}
				for j := first; j < cfg.Depths[st-1]; j++ {
					check(l.Kind, l.Saved, fmt.Sprintf("s%db%d", st-1, j))
					blocks++
				}
			}
		}
		total := 0
		for _, d := range cfg.Depths {
			total += int(d)
		}
		require.Equal(t, total, blocks, name)
		// Every part the oracle measured is one of those compared.
		var sum int64
		for _, v := range want {
			sum += v
		}
		require.Equal(t, sum, int64(a.Total()-a.Logits), name)
	}
	t.Logf("%d cases, %d figures, all exact", len(f.Cases), figures)
}

// TestBackboneWorkloadErrors checks that what the backbones' model does
// not cover is refused, naming the field.
func TestBackboneWorkloadErrors(t *testing.T) {
	t.Parallel()
	s, _ := model.Lookup("resnet50")
	for _, c := range []struct {
		w     model.Workload
		field string
	}{
		{model.Workload{Batch: 8, Train: true, TensorParallel: 2}, "Workload.TensorParallel"},
		{model.Workload{Batch: 8, Train: true, Dropout: true}, "Workload.Dropout"},
		{model.Workload{Batch: 8, Train: true, Images: 1}, "Workload.Images"},
		{model.Workload{Batch: 0, Train: true}, "Workload.Batch"},
	} {
		_, err := s.Activations(c.w)
		var fe *gpumem.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, c.field, fe.Field)
	}
	sw, _ := model.Lookup("swin_t")
	_, err := sw.Activations(model.Workload{Batch: 8, Train: true, Attention: model.Flash})
	var fe *gpumem.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "Workload.Attention", fe.Field)
	bad := s
	bad.Image.Size = 16
	_, err = bad.Activations(model.Workload{Batch: 8, Train: true})
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "Spec.Image.Size", fe.Field)
}

// TestBackboneScaling checks the shape of the figures: saved bytes grow
// linearly with the batch and with the pixels (ResNet-50 at 224 and 448),
// halve from fp32 to bf16 but for the fp32 BatchNorm statistics and the
// int64 indices, and inference keeps far less than training.
func TestBackboneScaling(t *testing.T) {
	t.Parallel()
	s, _ := model.Lookup("resnet50")
	at := func(batch, size int64, dt gpumem.DType, train bool) model.Activations {
		x := s
		x.Image.Size = size
		a, err := x.Activations(model.Workload{Batch: batch, Train: train, DType: dt})
		require.NoError(t, err)
		return a
	}
	a32, a64 := at(32, 224, gpumem.FP32, true), at(64, 224, gpumem.FP32, true)
	// The blocks' BatchNorm statistics (26,496 channels, 8 bytes each)
	// do not grow with the batch; everything else doubles.
	stats := int64(8 * (26560 - 64))
	require.Equal(t, 2*(int64(a32.LayersTotal())-stats), int64(a64.LayersTotal())-stats)
	big := at(32, 448, gpumem.FP32, true)
	require.InDelta(t, 4.0, float64(big.LayersTotal())/float64(a32.LayersTotal()), 0.01)
	half := at(32, 224, gpumem.BF16, true)
	require.Less(t, float64(half.LayersTotal()), 0.51*float64(a32.LayersTotal()))
	inf := at(32, 224, gpumem.FP32, false)
	require.Zero(t, inf.LayersTotal())
	require.Less(t, float64(inf.Peak()), 0.2*float64(a32.Peak()))
}

// TestBackboneFLOPs checks the forward multiply-adds at 224 px against
// torchvision's weights metadata ("_ops", GFLOPS counted as
// multiply-adds: ResNet-50 4.089, ResNet-18 1.814, ConvNeXt-T 4.456,
// Swin-T 4.491): equal to the published three decimals.
func TestBackboneFLOPs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		gops float64
	}{{"resnet50", 4.089}, {"resnet18", 1.814}, {"convnext_tiny", 4.456}, {"swin_t", 4.491}, {"efficientnet_b0", 0.386}} {
		s, _ := model.Lookup(c.name)
		a, err := s.Activations(model.Workload{Batch: 1, Train: true, DType: gpumem.FP32})
		require.NoError(t, err)
		got := float64(a.FLOPs) / 2 / 1e9
		t.Logf("%s: %.3f GMAC (torchvision %.3f)", c.name, got, c.gops)
		require.InDelta(t, c.gops, got, 0.0005, c.name)
	}
}

// FuzzBackboneActivations: any backbone config that reads, at any image
// size and batch, gives activations or a field error, never a panic or a
// negative figure.
func FuzzBackboneActivations(f *testing.F) {
	for _, name := range []string{"resnet-50", "resnet-18", "convnext-tiny-224", "swin-tiny-patch4-window7-224", "efficientnet-b0"} {
		data, err := os.ReadFile("configs/" + name + ".json")
		require.NoError(f, err)
		f.Add(data, int64(224), int64(64), true)
	}
	f.Add([]byte(`{"model_type":"swin","embed_dim":8,"depths":[1,1,1,1,1,1],"num_heads":[1,1,1,1,1,1],"window_size":1000}`), int64(65536), int64(1<<40), true)
	f.Add([]byte(`{"model_type":"resnet","hidden_sizes":[4,8,16,32,64,128,256,512,1024,2048,4096,8192,16384,32768,65536,131072],"depths":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}`), int64(33), int64(3), false)
	f.Fuzz(func(t *testing.T, data []byte, size, batch int64, train bool) {
		s, err := model.FromHFConfig(strings.NewReader(string(data)))
		if err != nil || s.Backbone == nil {
			return
		}
		s.Image.Size = size
		a, err := s.Activations(model.Workload{Batch: batch, Train: train})
		if err != nil {
			var fe *gpumem.FieldError
			require.ErrorAs(t, err, &fe)
			return
		}
		require.GreaterOrEqual(t, int64(a.Peak()), int64(a.Total()))
		require.GreaterOrEqual(t, int64(a.Total()), int64(0))
		if train {
			require.Positive(t, int64(a.LayersTotal()))
		}
	})
}

// BenchmarkBackboneActivations times the activation model of the
// catalog's backbones (one Workload each).
func BenchmarkBackboneActivations(b *testing.B) {
	var specs []model.Spec
	for _, n := range []string{"resnet50", "convnext_tiny", "swin_t", "efficientnet_b0"} {
		s, ok := model.Lookup(n)
		require.True(b, ok)
		specs = append(specs, s)
	}
	var buf [16]model.LayerActivations
	w := model.Workload{Batch: 64, Train: true}
	b.ReportAllocs()
	for b.Loop() {
		for _, s := range specs {
			if _, err := s.AppendActivations(buf[:0], w); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// TestBackboneComponents: each block of a backbone is one layer of
// Component, across stages (ResNet-50's 16 blocks, ConvNeXt-T's 18 with
// each downsampling layer in its stage's first block, Swin-T's 12 with
// each patch merging in its stage's first block, EfficientNet-B0's 16).
func TestBackboneComponents(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		blocks int
	}{{"resnet50", 16}, {"convnext_tiny", 18}, {"swin_t", 12}, {"efficientnet_b0", 16}} {
		s, _ := model.Lookup(c.name)
		layers := map[int]bool{}
		for _, ts := range s.Tensors() {
			if _, comp, l := model.Component(ts.Name); comp == "layer" {
				layers[l] = true
			}
		}
		require.Len(t, layers, c.blocks, c.name)
	}
	_, comp, l := model.Component("resnet.encoder.stages.2.layers.5.layer.0.convolution.weight")
	require.Equal(t, "layer", comp)
	_, _, l0 := model.Component("resnet.encoder.stages.3.layers.0.layer.0.convolution.weight")
	require.NotEqual(t, l, l0)
	// T5's block.N.layer.M stays block N.
	_, _, t5 := model.Component("encoder.block.3.layer.1.DenseReluDense.wi.weight")
	require.Equal(t, 3, t5)
}
