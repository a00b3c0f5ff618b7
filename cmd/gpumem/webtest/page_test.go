package webtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

var shots = flag.String("shots", "", "also write the desktop and phone screenshots to this directory (the README's are ../doc)")

// The job the test sets: a LoRA fine-tune that fits on an A100 80GB.
const (
	testModel = "llama-3.1-8b"
	testGPU   = "NVIDIA A100-SXM4-80GB"
	logGPU    = "NVIDIA GeForce RTX 4090"
)

// oomMessage is PyTorch 2.2+'s out-of-memory message.
const oomMessage = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity of 23.69 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process has 22.56 GiB memory in use. Of the allocated memory 20.10 GiB is allocated by PyTorch, and 1.90 GiB is reserved by PyTorch but unallocated."

// memoryLog is a training log whose allocated memory grows by 0.25 GiB
// a step, with a little noise.
func memoryLog() string {
	var b strings.Builder
	noise := []float64{0, 0.03, -0.02, 0.01, 0.04, -0.03, 0.02, 0, -0.01, 0.03, 0.01, -0.02}
	for i := range 24 {
		fmt.Fprintf(&b, "step %d | loss %.3f | memory allocated %.2f GiB\n", (i+1)*50, 2.5-float64(i)*0.02, 12+float64(i)*0.25+noise[i%len(noise)])
	}
	return b.String()
}

// writeSafetensors writes a small qwen3 checkpoint in bf16 (header and
// zero data) to file: the tensors of its config, whose per-head norm
// gives the head size, so that the header alone gives the model.
func writeSafetensors(t *testing.T, file string) {
	t.Helper()
	spec, err := model.FromHFConfig(strings.NewReader(`{"model_type": "qwen3", "hidden_size": 256, "intermediate_size": 688,
		"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 32, "vocab_size": 1000,
		"torch_dtype": "bfloat16"}`))
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	for _, ts := range spec.Tensors() {
		n := int64(2)
		for _, d := range ts.Shape {
			n *= d
		}
		h[ts.Name] = map[string]any{"dtype": "BF16", "shape": ts.Shape, "data_offsets": []int64{off, off + n}}
		off += n
	}
	js, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	b = append(b, js...)
	if err := os.WriteFile(file, append(b, make([]byte, off)...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeGGUF writes a small llama GGUF v3 file to file, its weights in
// F16 and zero, with a tokenizer vocabulary (a string array) and scores
// (a float array) as real files carry them, and returns where its header
// (metadata and tensor infos) ends.
func writeGGUF(t *testing.T, file string) int {
	t.Helper()
	const layers, hidden, heads, kvHeads, ffn, vocab = 2, 256, 4, 2, 512, 512
	type tensor struct {
		name string
		ne   []uint64
		typ  uint32 // 0 F32, 1 F16
	}
	ts := []tensor{{"token_embd.weight", []uint64{hidden, vocab}, 1}, {"output_norm.weight", []uint64{hidden}, 0},
		{"output.weight", []uint64{hidden, vocab}, 1}}
	kv := uint64(kvHeads * hidden / heads)
	for i := range layers {
		p := fmt.Sprintf("blk.%d.", i)
		ts = append(ts, tensor{p + "attn_norm.weight", []uint64{hidden}, 0}, tensor{p + "attn_q.weight", []uint64{hidden, hidden}, 1},
			tensor{p + "attn_k.weight", []uint64{hidden, kv}, 1}, tensor{p + "attn_v.weight", []uint64{hidden, kv}, 1},
			tensor{p + "attn_output.weight", []uint64{hidden, hidden}, 1}, tensor{p + "ffn_norm.weight", []uint64{hidden}, 0},
			tensor{p + "ffn_gate.weight", []uint64{hidden, ffn}, 1}, tensor{p + "ffn_up.weight", []uint64{hidden, ffn}, 1},
			tensor{p + "ffn_down.weight", []uint64{ffn, hidden}, 1})
	}
	var b []byte
	u32 := func(v uint32) { b = binary.LittleEndian.AppendUint32(b, v) }
	u64 := func(v uint64) { b = binary.LittleEndian.AppendUint64(b, v) }
	str := func(s string) { u64(uint64(len(s))); b = append(b, s...) }
	u32(0x46554747) // "GGUF"
	u32(3)
	u64(uint64(len(ts)))
	u64(10)
	for _, kv := range []struct {
		k string
		v uint32
	}{{"llama.block_count", layers}, {"llama.embedding_length", hidden}, {"llama.feed_forward_length", ffn},
		{"llama.attention.head_count", heads}, {"llama.attention.head_count_kv", kvHeads}, {"llama.context_length", 4096}} {
		str(kv.k)
		u32(4) // uint32
		u32(kv.v)
	}
	str("general.architecture")
	u32(8)
	str("llama")
	str("general.name")
	u32(8)
	str("tiny-llama")
	str("tokenizer.ggml.tokens")
	u32(9) // array
	u32(8) // of strings
	u64(vocab)
	for i := range vocab {
		str(fmt.Sprintf("<tok%d>", i))
	}
	str("tokenizer.ggml.scores")
	u32(9)
	u32(6) // of float32
	u64(vocab)
	b = append(b, make([]byte, 4*vocab)...)
	const align = 32
	var off uint64
	for _, tn := range ts {
		str(tn.name)
		u32(uint32(len(tn.ne)))
		n := uint64(4)
		if tn.typ == 1 {
			n = 2
		}
		for _, d := range tn.ne {
			u64(d)
			n *= d
		}
		u32(tn.typ)
		u64(off)
		off += (n + align - 1) / align * align
	}
	end := len(b)
	for len(b)%align != 0 {
		b = append(b, 0)
	}
	b = append(b, make([]byte, off)...)
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return end
}

// group3 writes n with a comma every three digits, as the page does
// (toLocaleString("en-US")).
func group3(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// chromium finds the browser, or skips: the test runs where chromium is
// installed (.ci/run checks before it starts the test).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on PATH (apt-get install chromium)")
	return ""
}

// build builds the gpumem binary of this checkout (the root module, with
// its own go.sum) into dir.
func build(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "gpumem")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/gpumem")
	cmd.Dir = filepath.Join("..", "..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// serve starts gpumem serve on a free port and returns its URL; the
// service is stopped when the test ends.
func serve(t *testing.T, bin string, flags ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--addr", "127.0.0.1:0", "--json"}, flags...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	})
	var a struct{ URL string }
	if err := json.NewDecoder(stdout).Decode(&a); err != nil || a.URL == "" {
		t.Fatalf("gpumem serve --json: %q, %v", a.URL, err)
	}
	return a.URL
}

// gpumemJSON runs the gpumem command line given as a shell command (the
// page's "Copy as CLI" text) with --json in dir, with bin as gpumem, and
// decodes its output. Exit status 1 (does not fit) still prints the JSON.
func gpumemJSON(t *testing.T, bin, dir, command string) map[string]any {
	t.Helper()
	out := shell(t, bin, dir, command+" --json")
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("%s --json: %v\n%s", command, err, out)
	}
	return m
}

// shell runs command with sh in dir, gpumem being bin.
func shell(t *testing.T, bin, dir, command string) []byte {
	t.Helper()
	if !strings.HasPrefix(command, "gpumem ") {
		t.Fatalf("the page's command %q does not start with gpumem", command)
	}
	cmd := exec.Command("sh", "-c", command)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		t.Fatalf("%s: %v\n%s%s", command, err, out, stderr.Bytes())
	}
	return out
}

// problems collects what must not happen on the page: console errors,
// uncaught exceptions, browser log errors (a CSP violation, a failed
// load) and requests to any other host.
type problems struct {
	mu    sync.Mutex
	list  []string
	hosts map[string]bool // the services the page may ask
}

// allow adds a service's host:port to those the page may ask.
func (p *problems) allow(host string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hosts == nil {
		p.hosts = map[string]bool{}
	}
	p.hosts[host] = true
}

func (p *problems) allowed(host string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hosts[host]
}

func (p *problems) add(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.list = append(p.list, fmt.Sprintf(format, args...))
}

func (p *problems) check(t *testing.T, when string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.list {
		t.Errorf("%s: %s", when, s)
	}
	p.list = nil
}

// answered422 matches the browser's log line for a 422 reply of
// /v1/oom or /v1/leak: the page sends what is pasted to both and shows
// the one that answers, so one of them says "nothing of mine here".
var answered422 = regexp.MustCompile(`^log network: Failed to load resource: the server responded with a status of 422 \(Unprocessable Entity\) http://[^/]+/v1/(oom|leak)$`)

// refused413 matches the browser's log lines for the 413 replies of a
// body over --max-body.
var refused413 = regexp.MustCompile(`^log network: Failed to load resource: the server responded with a status of 413 \(Request Entity Too Large\) http://[^/]+/v1/(oom|leak)$`)

// drop removes the problems that match re.
func (p *problems) drop(re *regexp.Regexp) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.list = slices.DeleteFunc(p.list, re.MatchString)
}

// watch subscribes to the events problems collects. The browser must
// have started (the subscriptions are made here, in one goroutine; the
// loops that read them run in their own).
func watch(ctx context.Context, p *problems) {
	console := chromedp.Events(ctx, runtime.ConsoleAPICalled)
	exceptions := chromedp.Events(ctx, runtime.ExceptionThrown)
	logs := chromedp.Events(ctx, log.EntryAdded)
	requests := chromedp.Events(ctx, network.RequestWillBeSent)
	go func() {
		for ev, err := range console {
			if err != nil {
				return
			}
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				p.add("console.%s: %s", ev.Type, strings.Join(args, " "))
			}
		}
	}()
	go func() {
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			p.add("exception: %s", (&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
		}
	}()
	go func() {
		for ev, err := range logs {
			if err != nil {
				return
			}
			if ev.Entry.Level == log.EntryLevelError {
				p.add("log %s: %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
			}
		}
	}()
	go func() {
		for ev, err := range requests {
			if err != nil {
				return
			}
			u, perr := url.Parse(ev.Request.URL)
			if perr != nil || (!p.allowed(u.Host) && u.Scheme != "data" && u.Scheme != "about") {
				p.add("request to another host: %s", ev.Request.URL)
			}
		}
	}()
}

// enable turns on the log and network domains, whose events watch reads.
func enable() chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		if _, err := cdp.Call(ctx, t, log.Enable, cdp.Empty{}); err != nil {
			return chromedp.Void{}, err
		}
		_, err := cdp.Call(ctx, t, network.Enable, network.EnableParams{})
		return chromedp.Void{}, err
	}
}

// js runs a script in the page and decodes its result into T.
func js[T any](t *testing.T, ctx context.Context, script string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](script))
	if err != nil {
		t.Fatalf("%.200s: %v", script, err)
	}
	return v
}

// wait polls until the page's expression is truthy. The only bound is
// go test's -timeout: a page that never gets there fails the run, a
// slow machine does not.
func wait(t *testing.T, ctx context.Context, expr string) {
	t.Helper()
	for tries := 0; ; tries++ {
		_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(0)))
		// A navigation replaces the page's JavaScript context while the
		// poll starts: poll again in the new one.
		if err != nil && strings.Contains(err.Error(), "Cannot find context with specified id") && tries < 20 {
			continue
		}
		if err != nil {
			t.Fatalf("waiting for %s: %v", expr, err)
		}
		return
	}
}

// set sets a form control as a person would: its value, then the input
// and change events.
func set(t *testing.T, ctx context.Context, id, value string) {
	t.Helper()
	v, _ := json.Marshal(value)
	ok := js[bool](t, ctx, fmt.Sprintf(`(() => { const e = document.getElementById(%q); if (!e) return false;
		e.value = %s; e.dispatchEvent(new Event("input", {bubbles: true})); e.dispatchEvent(new Event("change", {bubbles: true}));
		return e.value === %s; })()`, id, v, v))
	if !ok {
		t.Fatalf("could not set #%s to %q", id, value)
	}
}

func click(t *testing.T, ctx context.Context, id string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID(id))); err != nil {
		t.Fatalf("click #%s: %v", id, err)
	}
}

// shown is what the estimate section shows.
type shown struct {
	Device, Reserved, Allocated int64
	DeviceText                  string
	Phase, Fit                  string
	Shortfall                   *int64
	Components                  map[string]int64
	Bars                        map[string]int64 // each bar's segments summed
	CLI, Href                   string
}

const readEstimate = `(() => {
	const b = (id) => { const e = document.getElementById(id); return e ? Number(e.dataset.bytes) : null; };
	const comps = {};
	for (const tr of document.querySelectorAll("#est-table tbody tr[data-component]")) comps[tr.dataset.component] = Number(tr.querySelector("[data-bytes]").dataset.bytes);
	const bars = {};
	for (const g of document.querySelectorAll("#est-bars g[data-level]")) bars[g.dataset.level] = [...g.querySelectorAll("rect")].reduce((s, r) => s + Number(r.dataset.bytes), 0);
	return { Device: b("est-device"), Reserved: b("est-reserved"), Allocated: b("est-allocated"),
		DeviceText: document.getElementById("est-device").textContent,
		Phase: document.getElementById("est-phase").textContent, Fit: document.getElementById("est-fit").textContent,
		Shortfall: b("est-shortfall"), Components: comps, Bars: bars,
		CLI: document.getElementById("est-cli").textContent, Href: location.href };
})()`

func num(t *testing.T, m map[string]any, k string) int64 {
	t.Helper()
	f, ok := m[k].(float64)
	if !ok {
		t.Fatalf("%s: not a number in %v", k, m)
	}
	return int64(f)
}

// checkEstimate compares the page's estimate with the command line's
// (the command the page gives) and the library's formatting.
func checkEstimate(t *testing.T, s shown, cli map[string]any) {
	t.Helper()
	if s.Device != num(t, cli, "device_peak") || s.Reserved != num(t, cli, "reserved_peak") || s.Allocated != num(t, cli, "allocated_peak") {
		t.Errorf("page: device %d reserved %d allocated %d; %s: %v %v %v", s.Device, s.Reserved, s.Allocated, s.CLI,
			cli["device_peak"], cli["reserved_peak"], cli["allocated_peak"])
	}
	if s.DeviceText != gpumem.Bytes(s.Device).String() {
		t.Errorf("page shows %q for %d bytes; gpumem.Bytes.String says %q", s.DeviceText, s.Device, gpumem.Bytes(s.Device).String())
	}
	if s.Phase != cli["phase"] {
		t.Errorf("phase %q, CLI %q", s.Phase, cli["phase"])
	}
	fits := cli["fits"] == true
	if (s.Fit == "Fits") != fits {
		t.Errorf("page says %q, CLI fits = %v", s.Fit, fits)
	}
	if !fits && (s.Shortfall == nil || *s.Shortfall != num(t, cli, "shortfall")) {
		t.Errorf("shortfall %v, CLI %v", s.Shortfall, cli["shortfall"])
	}
	comps, _ := cli["components"].(map[string]any)
	for k, v := range comps {
		if f := int64(v.(float64)); f != s.Components[k] {
			t.Errorf("component %s: page %d, CLI %d", k, s.Components[k], f)
		}
	}
	// The stacked bars add up to the three levels.
	for level, want := range map[string]int64{"allocated": s.Allocated, "reserved": s.Reserved, "device": s.Device} {
		if s.Bars[level] != want {
			t.Errorf("the %s bar's segments sum to %d, the level is %d", level, s.Bars[level], want)
		}
	}
}

func TestPage(t *testing.T) {
	chrome := chromium(t)
	dir := t.TempDir()
	bin := build(t, dir)
	base := serve(t, bin)
	host := strings.TrimPrefix(base, "http://")

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chrome), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(filepath.Join(dir, "profile")), chromedp.WindowSize(1280, 900),
	}
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(ctx, enable()); err != nil { // starts the browser
		t.Fatal(err)
	}
	var p problems
	p.allow(host)
	watch(ctx, &p)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900), chromedp.Navigate(base+"/")); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, `document.body.dataset.ready === "true"`)
	p.check(t, "loading the page")

	// Every form control has a label.
	if unlabelled := js[[]string](t, ctx, `[...document.querySelectorAll("input, select, textarea")].filter((e) => e.type !== "hidden" && e.labels.length === 0 && !e.getAttribute("aria-label")).map((e) => e.id || e.name)`); len(unlabelled) > 0 {
		t.Errorf("controls without a label: %v", unlabelled)
	}

	t.Run("estimate", func(t *testing.T) {
		set(t, ctx, "model", testModel)
		set(t, ctx, "mode", "train")
		set(t, ctx, "finetune", "lora")
		set(t, ctx, "lora_rank", "16")
		set(t, ctx, "batch", "2")
		set(t, ctx, "seq", "1024")
		set(t, ctx, "gpu", testGPU)
		// The form shows the fields of the mode and source chosen only.
		shownNow := js[[]string](t, ctx, `["generate", "config", "ckpt-file", "optimizer", "lora_rank", "model"].filter((id) => document.getElementById(id).getClientRects().length > 0)`)
		if !slices.Equal(shownNow, []string{"optimizer", "lora_rank", "model"}) {
			t.Errorf("a training job from the catalog shows %v, want optimizer, lora_rank and model", shownNow)
		}
		click(t, ctx, "run")
		wait(t, ctx, `document.getElementById("est-device") && document.getElementById("est-cli").textContent.includes("--batch 2")`)
		s := js[shown](t, ctx, readEstimate)
		want := "gpumem estimate --model " + testModel + " --train --batch 2 --seq 1024 --lora-rank 16 --gpu 'NVIDIA A100-SXM4-80GB'"
		if s.CLI != want {
			t.Errorf("the page's command line:\n%s\nwant\n%s", s.CLI, want)
		}
		checkEstimate(t, s, gpumemJSON(t, bin, dir, s.CLI))
		if s.Fit != "Fits" {
			t.Errorf("a LoRA fine-tune of an 8B model at batch 2 does not fit on %s: %+v", testGPU, s)
		}

		// The link reproduces the page: a new load of it shows the same.
		if err := chromedp.Do(ctx, chromedp.Navigate("about:blank"), chromedp.Navigate(s.Href)); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, `document.body.dataset.ready === "true" && document.getElementById("est-device")`)
		again := js[shown](t, ctx, readEstimate)
		if again.Device != s.Device || again.CLI != s.CLI || again.Href != s.Href {
			t.Errorf("the shared link %s shows %+v, not %+v", s.Href, again, s)
		}
		p.check(t, "estimate")
	})

	t.Run("runtimes and layouts", func(t *testing.T) {
		// The serving runtimes (choosing one makes the job inference)
		// and a sharded layout, each as its command line says.
		for _, c := range []struct{ set [][2]string }{
			{[][2]string{{"runtime", "vllm"}}},
			{[][2]string{{"runtime", "llama.cpp"}}},
			{[][2]string{{"runtime", ""}, {"mode", "train"}, {"finetune", "full"}, {"gpus", "8"}, {"layout", "zero3"}}},
		} {
			for _, kv := range c.set {
				set(t, ctx, kv[0], kv[1])
			}
			before := js[string](t, ctx, `document.getElementById("est-cli").textContent`)
			click(t, ctx, "run")
			wait(t, ctx, fmt.Sprintf(`document.getElementById("est-cli").textContent !== %q`, before))
			s := js[shown](t, ctx, readEstimate)
			checkEstimate(t, s, gpumemJSON(t, bin, dir, s.CLI))
			t.Logf("%s: %s on the device", s.CLI, s.DeviceText)
		}
		for _, want := range []string{"--gpus 8 --zero 3"} {
			if cli := js[string](t, ctx, `document.getElementById("est-cli").textContent`); !strings.Contains(cli, want) {
				t.Errorf("the command line %q has no %s", cli, want)
			}
		}
		set(t, ctx, "gpus", "1")
		set(t, ctx, "layout", "")
		set(t, ctx, "finetune", "lora")
		click(t, ctx, "run")
		wait(t, ctx, `document.getElementById("est-cli").textContent === "gpumem estimate --model `+testModel+` --train --batch 2 --seq 1024 --lora-rank 16 --gpu 'NVIDIA A100-SXM4-80GB'"`)
		p.check(t, "runtimes and layouts")
	})

	t.Run("checkpoints", func(t *testing.T) {
		// A checkpoint chosen in the file input: the page reads its
		// header only and sends it; the figures are those of
		// --safetensors and --gguf (a GGUF inference job runs on
		// llama.cpp by default, as with --gguf).
		st, gg := filepath.Join(dir, "tiny-qwen3.safetensors"), filepath.Join(dir, "tiny-llama.gguf")
		writeSafetensors(t, st)
		headerEnd := writeGGUF(t, gg)
		for _, c := range []struct{ file, mode, flag string }{{st, "train", "--safetensors"}, {gg, "infer", "--gguf"}} {
			name := filepath.Base(c.file)
			set(t, ctx, "mode", c.mode)
			if err := chromedp.Do(ctx, chromedp.SetUploadFiles(chromedp.ID("ckpt-file"), []string{c.file})); err != nil {
				t.Fatal(err)
			}
			wait(t, ctx, fmt.Sprintf(`document.getElementById("ckpt-status").textContent.startsWith(%q)`, name+": read the"))
			status := js[string](t, ctx, `document.getElementById("ckpt-status").textContent`)
			set(t, ctx, "gpu", logGPU)
			click(t, ctx, "run")
			wait(t, ctx, fmt.Sprintf(`document.getElementById("est-cli").textContent.startsWith(%q)`, "gpumem estimate "+c.flag+" "+name))
			s := js[shown](t, ctx, readEstimate)
			cli := gpumemJSON(t, bin, dir, s.CLI)
			checkEstimate(t, s, cli)
			if u, err := url.Parse(s.Href); err != nil || !strings.Contains(u.Fragment, "file="+name) || len(u.Fragment) > 300 {
				t.Errorf("the link should name the checkpoint, not carry its header: %s", s.Href)
			}
			if c.flag == "--gguf" {
				// The page sent the header up to the end of the tensor
				// infos, and said so.
				if want := fmt.Sprintf("read the %s-byte header", group3(headerEnd)); !strings.Contains(status, want) {
					t.Errorf("GGUF: the page says %q, want %q", status, want)
				}
				if cli["llamacpp"] == nil {
					t.Errorf("a GGUF inference job is not estimated on llama.cpp: %v", cli)
				}
			}
		}
		// The link of a checkpoint's job, opened afresh, asks for the
		// file rather than showing another model.
		href := js[string](t, ctx, `location.href`)
		if err := chromedp.Do(ctx, chromedp.Navigate("about:blank"), chromedp.Navigate(href)); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, `document.body.dataset.ready === "true" && !document.getElementById("est-error").hidden`)
		if got := js[[]string](t, ctx, `[document.getElementById("ckpt-status").textContent, document.getElementById("est-error").textContent,
				String(document.getElementById("est-result").hidden)]`); !strings.Contains(got[0], "tiny-llama.gguf: choose that file") ||
			!strings.Contains(got[1], "choose a .safetensors or .gguf file") || got[2] != "true" {
			t.Errorf("a checkpoint's link opened afresh shows %q", got)
		}
		// Back to the catalog model and the LoRA job.
		set(t, ctx, "mode", "train")
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`input[name=source][value=catalog]`))); err != nil {
			t.Fatal(err)
		}
		set(t, ctx, "model", testModel)
		set(t, ctx, "finetune", "lora")
		set(t, ctx, "lora_rank", "16")
		set(t, ctx, "gpu", testGPU)
		click(t, ctx, "run")
		wait(t, ctx, `document.getElementById("est-cli").textContent === "gpumem estimate --model `+testModel+` --train --batch 2 --seq 1024 --lora-rank 16 --gpu 'NVIDIA A100-SXM4-80GB'"`)
		p.check(t, "checkpoints")
	})

	t.Run("what-if", func(t *testing.T) {
		// The batch slider, by keyboard: End is its largest value
		// (2^10), Home its smallest, each arrow a step of 2^0.05.
		if err := chromedp.Do(ctx, chromedp.Focus(chromedp.ID("batch-slider")), chromedp.KeyEvent(kb.End)); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, `document.getElementById("est-cli").textContent.includes("--batch 1024 ")`)
		s := js[shown](t, ctx, readEstimate)
		checkEstimate(t, s, gpumemJSON(t, bin, dir, s.CLI))
		if s.Fit == "Fits" {
			t.Errorf("batch 1024 fits: %+v", s)
		}
		keys := kb.Home + strings.Repeat(kb.ArrowRight, 40) // 2^2
		if err := chromedp.Do(ctx, chromedp.KeyEvent(keys)); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, `document.getElementById("est-cli").textContent.includes("--batch 4 ")`)
		if got := js[string](t, ctx, `document.getElementById("batch").value + " " + document.getElementById("batch-out").textContent + " " + document.getElementById("batch-slider").getAttribute("aria-valuetext")`); got != "4 4 batch 4" {
			t.Errorf("after the slider: field, output, aria-valuetext = %q", got)
		}
		s = js[shown](t, ctx, readEstimate)
		checkEstimate(t, s, gpumemJSON(t, bin, dir, s.CLI))

		// The largest values that fit, marked on the sliders, are the
		// planner's with nothing else changed.
		wait(t, ctx, `document.getElementById("batch-largest").textContent.includes("at 1024 tokens") && document.getElementById("seq-largest").textContent.includes("at batch 4")`)
		// Each mark's command line is plan's, nothing allowed to change.
		cmds := js[[]string](t, ctx, `[document.getElementById("batch-cli").textContent, document.getElementById("seq-cli").textContent]`)
		job := "gpumem plan --model " + testModel + " --train"
		if !strings.HasPrefix(cmds[0], job) || !strings.HasSuffix(cmds[0], " --allow none --maximize batch") ||
			!strings.HasPrefix(cmds[1], job) || !strings.Contains(cmds[1], " --allow none --maximize seq --max-seq 131072 --min-batch 4 --max-batch 4") {
			t.Errorf("the marks' command lines: %q", cmds)
		}
		maxBatch := num(t, gpumemJSON(t, bin, dir, cmds[0]), "batch")
		maxSeq := num(t, gpumemJSON(t, bin, dir, cmds[1]), "seq_len")
		type mark struct {
			Value  int64
			Hidden bool
			Frac   float64
		}
		read := func(f string) mark {
			return js[mark](t, ctx, fmt.Sprintf(`(() => { const m = document.getElementById(%q), tr = m.parentElement;
				return { Value: Number(document.getElementById(%q).dataset.value), Hidden: m.hidden,
					Frac: (m.getBoundingClientRect().left + 7 - tr.getBoundingClientRect().left - 8) / (tr.getBoundingClientRect().width - 16) }; })()`,
				f+"-mark", f+"-largest"))
		}
		b, q := read("batch"), read("seq")
		if b.Value != maxBatch || q.Value != maxSeq {
			t.Errorf("largest batch %d, sequence %d marked; the planner's: %d, %d", b.Value, q.Value, maxBatch, maxSeq)
		}
		if b.Hidden || math.Abs(b.Frac-math.Log2(float64(maxBatch))/10) > 0.02 {
			t.Errorf("the batch mark is at %.3f of the track (hidden %v), want %.3f", b.Frac, b.Hidden, math.Log2(float64(maxBatch))/10)
		}
		if q.Hidden || math.Abs(q.Frac-(math.Log2(float64(maxSeq))-7)/10) > 0.02 {
			t.Errorf("the sequence mark is at %.3f of the track (hidden %v), want %.3f", q.Frac, q.Hidden, (math.Log2(float64(maxSeq))-7)/10)
		}
		p.check(t, "what-if")
	})

	t.Run("limits", func(t *testing.T) {
		// The service's limits apply to the page's requests: a log
		// longer than --max-body is refused, and the page says why.
		small := serve(t, bin, "--max-body", "4KiB")
		p.allow(strings.TrimPrefix(small, "http://"))
		if err := chromedp.Do(ctx, chromedp.Navigate(small+"/")); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, `document.body.dataset.ready === "true"`)
		set(t, ctx, "log", strings.Repeat(memoryLog(), 8))
		click(t, ctx, "diag-run")
		wait(t, ctx, `!document.getElementById("diag-error").hidden`)
		msg := js[string](t, ctx, `document.getElementById("diag-error").textContent`)
		if !strings.Contains(msg, "larger than 4096 bytes (gpumem serve --max-body)") {
			t.Errorf("a log over --max-body: the page says %q", msg)
		}
		p.drop(refused413)
		p.check(t, "limits")
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"/#"+url.Values{"model": {testModel}, "mode": {"train"}, "batch": {"8"}, "seq": {"1024"},
			"lora_rank": {"16"}, "gpu": {testGPU}}.Encode())); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, `document.body.dataset.ready === "true" && document.getElementById("est-device")`)
	})

	t.Run("plan", func(t *testing.T) {
		// A full fine-tune does not fit; the planner makes it fit.
		set(t, ctx, "finetune", "full")
		set(t, ctx, "batch", "4")
		click(t, ctx, "run")
		wait(t, ctx, `document.getElementById("est-cli").textContent === "gpumem estimate --model `+testModel+` --train --batch 4 --seq 1024 --gpu 'NVIDIA A100-SXM4-80GB'"`)
		s := js[shown](t, ctx, readEstimate)
		checkEstimate(t, s, gpumemJSON(t, bin, dir, s.CLI))
		if s.Fit == "Fits" {
			t.Fatalf("a full fine-tune of an 8B model fits on %s", testGPU)
		}
		set(t, ctx, "allow", "full,adamw8bit,lora")
		click(t, ctx, "plan-run")
		wait(t, ctx, `document.getElementById("plan-fit") && document.getElementById("plan-cli").textContent.includes("--allow")`)
		type rung struct {
			Change  string
			Peak    int64
			Applied bool
		}
		type planShown struct {
			Fit     string
			Peak    int64
			Ladder  []rung
			Configs map[string]string
			CLI     string
		}
		ps := js[planShown](t, ctx, `(() => ({ Fit: document.getElementById("plan-fit").textContent,
			Peak: Number(document.getElementById("plan-device").dataset.bytes),
			Ladder: [...document.querySelectorAll("#plan-ladder tbody tr")].map((tr) => ({ Change: tr.cells[1].textContent,
				Peak: Number(tr.cells[2].querySelector("[data-bytes]").dataset.bytes), Applied: tr.cells[0].textContent === "*" })),
			Configs: Object.fromEntries([...document.querySelectorAll("#plan-configs pre")].map((e) => [e.id, e.textContent])),
			CLI: document.getElementById("plan-cli").textContent }))()`)
		cli := gpumemJSON(t, bin, dir, ps.CLI)
		if ps.Fit != "Fits" || cli["fits"] != true || ps.Peak != num(t, cli, "device_peak") {
			t.Errorf("plan: page %q %d; %s: fits %v, %v", ps.Fit, ps.Peak, ps.CLI, cli["fits"], cli["device_peak"])
		}
		ladder, _ := cli["ladder"].([]any)
		if len(ladder) != len(ps.Ladder) || len(ladder) < 2 {
			t.Fatalf("ladder: page %d rungs, CLI %d", len(ps.Ladder), len(ladder))
		}
		for i, r := range ladder {
			m := r.(map[string]any)
			if g := ps.Ladder[i]; g.Change != m["change"] || g.Peak != num(t, m, "device_peak") || g.Applied != (m["applied"] == true) {
				t.Errorf("rung %d: page %+v, CLI %v", i, g, m)
			}
		}
		// The configurations are what plan writes: the files of
		// --deepspeed and --accelerate (written by the --json run above
		// in dir), the lines of --hf-args and --megatron.
		if !strings.Contains(ps.CLI, "--deepspeed ds_config.json") || !strings.Contains(ps.CLI, "--hf-args") {
			t.Errorf("the plan's command line has no config flags: %s", ps.CLI)
		}
		for id, file := range map[string]string{"cfg-deepspeed": "ds_config.json", "cfg-accelerate": "accelerate_config.yaml"} {
			if !strings.Contains(ps.CLI, file) {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil || string(b) != ps.Configs[id] {
				t.Errorf("%s: the page shows\n%s\nplan wrote (%v)\n%s", file, ps.Configs[id], err, b)
			}
		}
		text := string(shell(t, bin, dir, ps.CLI))
		// The ladder reads as plan prints it: each row of the page, its
		// cells joined by one space, is a line of plan's table with its
		// runs of spaces made one.
		rows := js[[]string](t, ctx, `[...document.querySelectorAll("#plan-ladder tbody tr")].map((tr) => [...tr.cells].map((c) => c.textContent).join(" ").trim())`)
		lines := map[string]bool{}
		for _, l := range strings.Split(text, "\n") {
			lines[strings.Join(strings.Fields(l), " ")] = true
		}
		for _, r := range rows {
			if !lines[r] {
				t.Errorf("the page's rung %q is not a line of plan's ladder:\n%s", r, text)
			}
		}
		for id, prefix := range map[string]string{"cfg-training_arguments": "TrainingArguments: ", "cfg-megatron": "Megatron-LM: "} {
			if !strings.Contains(text, prefix+ps.Configs[id]+"\n") || ps.Configs[id] == "" {
				t.Errorf("%s: the page shows %q; plan printed\n%s", id, ps.Configs[id], text)
			}
		}
		p.check(t, "plan")
	})

	t.Run("diagnose", func(t *testing.T) {
		set(t, ctx, "log", oomMessage)
		click(t, ctx, "diag-run")
		wait(t, ctx, `!document.getElementById("oom-result").hidden && document.getElementById("oom-reason")`)
		if err := os.WriteFile(filepath.Join(dir, "message.txt"), []byte(oomMessage), 0o644); err != nil {
			t.Fatal(err)
		}
		oomCLI := js[string](t, ctx, `document.getElementById("oom-cli").textContent`)
		cli := gpumemJSON(t, bin, dir, oomCLI)
		type oomShown struct {
			Reason     string
			Requested  int64
			Advice     int
			LeakHidden bool
		}
		o := js[oomShown](t, ctx, `({ Reason: document.getElementById("oom-reason").textContent,
			Requested: Number(document.getElementById("oom-requested").dataset.bytes),
			Advice: document.querySelectorAll("#oom-advice li").length, LeakHidden: document.getElementById("leak-result").hidden })`)
		advice, _ := cli["advice"].([]any)
		if o.Reason != cli["reason"] || o.Requested != num(t, cli, "requested") || o.Advice != len(advice) || o.Advice == 0 {
			t.Errorf("OOM: page %+v; %s: %v %v, %d advice", o, oomCLI, cli["reason"], cli["requested"], len(advice))
		}
		if !o.LeakHidden {
			t.Error("a lone OOM message shows a memory chart")
		}

		logText := memoryLog()
		set(t, ctx, "log", logText)
		set(t, ctx, "log-gpu", logGPU)
		click(t, ctx, "diag-run")
		wait(t, ctx, `!document.getElementById("leak-result").hidden && document.querySelectorAll("#leak-chart circle").length >= 2`)
		if err := os.WriteFile(filepath.Join(dir, "log.txt"), []byte(logText), 0o644); err != nil {
			t.Fatal(err)
		}
		leakCLI := js[string](t, ctx, `document.getElementById("leak-cli").textContent`)
		cli = gpumemJSON(t, bin, dir, leakCLI)
		type leakShown struct {
			Shape   string
			Points  int
			Trend   bool
			OOM     float64
			HasOOM  bool
			OOMHide bool
		}
		l := js[leakShown](t, ctx, `(() => { const o = document.querySelector("#leak-chart [data-oom]");
			return { Shape: document.getElementById("leak-shape").textContent, Points: document.querySelectorAll("#leak-chart circle").length,
				Trend: !!document.querySelector("#leak-chart [data-trend]"), OOM: o ? Number(o.dataset.oom) : 0, HasOOM: !!o,
				OOMHide: document.getElementById("oom-result").hidden }; })()`)
		if l.Shape != cli["shape"] || int64(l.Points) != num(t, cli, "samples") || !l.Trend {
			t.Errorf("log: page %+v; %s: %v, %v samples", l, leakCLI, cli["shape"], cli["samples"])
		}
		if step, ok := cli["oom_step"].(float64); !ok || !l.HasOOM || l.OOM != step {
			t.Errorf("forecast OOM: page %v (%v), %s: %v", l.OOM, l.HasOOM, leakCLI, cli)
		}
		if !l.OOMHide {
			t.Error("a memory log without an OOM message shows an OOM diagnosis")
		}
		p.drop(answered422)
		p.check(t, "diagnose")
	})

	t.Run("contrast", func(t *testing.T) {
		// Every visible text, SVG labels included, against its
		// background: at least 4.5:1, 3:1 for large text (WCAG 2 AA).
		low := js[[]string](t, ctx, contrastScript)
		for _, l := range low {
			t.Errorf("low contrast: %s", l)
		}
	})

	t.Run("screenshots", func(t *testing.T) {
		// Back to the LoRA job that fits, for the pictures.
		set(t, ctx, "finetune", "lora")
		set(t, ctx, "batch", "8")
		click(t, ctx, "run")
		wait(t, ctx, `document.getElementById("est-cli").textContent.includes("--batch 8 ") && document.getElementById("seq-largest").textContent.includes("at batch 8")`)
		out := *shots
		if out == "" {
			out = t.TempDir()
		}
		desktop, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		// A phone: 390 CSS pixels wide. The page must not scroll sideways,
		// and the bars are redrawn for the width.
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2))); err != nil {
			t.Fatal(err)
		}
		wait(t, ctx, `document.getElementById("est-bars").viewBox.baseVal.width < 500`)
		if w := js[[]int](t, ctx, `[document.documentElement.scrollWidth, window.innerWidth]`); w[0] > w[1] {
			t.Errorf("on a phone the page is %d px wide in a %d px window", w[0], w[1])
		}
		if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`document.getElementById("est-result").scrollIntoView()`)); err != nil {
			t.Fatal(err)
		}
		phone, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		for name, b := range map[string][]byte{"web-desktop.png": desktop, "web-phone.png": phone} {
			if !bytes.HasPrefix(b, []byte("\x89PNG")) {
				t.Errorf("%s is not a PNG", name)
			}
			if err := os.WriteFile(filepath.Join(out, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		p.check(t, "screenshots")
	})
}

// contrastScript lists the visible texts whose contrast with their
// background is below WCAG 2's AA minimum, by the WCAG formula of
// relative luminance.
const contrastScript = `(() => {
	const rgb = (c) => { const m = c.match(/[\d.]+/g); if (!m) return null; return { r: +m[0], g: +m[1], b: +m[2], a: m.length > 3 ? +m[3] : 1 }; };
	const lum = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
		return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
	const background = (e) => {
		for (let n = e; n && n.nodeType === 1; n = n.parentElement) {
			const c = rgb(getComputedStyle(n).backgroundColor);
			if (c && c.a > 0.5) return c;
			if (n.tagName.toLowerCase() === "svg") return rgb(getComputedStyle(n).backgroundColor) || { r: 255, g: 255, b: 255 };
		}
		return { r: 255, g: 255, b: 255 };
	};
	const low = [];
	for (const e of document.querySelectorAll("body *")) {
		const own = [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
		if (!own || !e.getClientRects().length) continue;
		const st = getComputedStyle(e);
		if (st.visibility === "hidden" || e.closest("[hidden]") || e.closest(".skip") || e.closest(".visually-hidden")) continue;
		const svgText = e instanceof SVGElement;
		const fg = rgb(svgText ? st.fill : st.color), bg = background(e);
		const l1 = lum(fg), l2 = lum(bg);
		const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
		const size = parseFloat(st.fontSize), bold = +st.fontWeight >= 700;
		const min = size >= 24 || (bold && size >= 18.66) ? 3 : 4.5;
		if (ratio < min) low.push(e.tagName + (e.id ? "#" + e.id : "") + " " + JSON.stringify(e.textContent.trim().slice(0, 40)) + ": " + ratio.toFixed(2) + " < " + min);
	}
	return low;
})()`
