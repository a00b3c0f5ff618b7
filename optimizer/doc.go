// Package optimizer sizes the memory that training optimizers keep per
// trainable tensor, from the implementations people run: PyTorch's
// torch.optim (SGD, Adam, AdamW, Adagrad, RMSprop, Adafactor),
// bitsandbytes' 8-bit, 32-bit and paged Adam, AdamW and Lion, Hugging
// Face transformers' Adafactor, lion-pytorch's Lion, timm's and apex's
// LAMB and Keller Jordan's Muon. [Lookup] maps Hugging Face's
// TrainingArguments.optim names ("adamw_torch", "paged_adamw_8bit",
// "adafactor", ...) to them.
//
// # What is modelled
//
// Each optimizer is a small value whose zero value is the framework's
// default and whose doc comment cites the source it follows. It
// implements [Optimizer]:
//
//   - State(t): the persistent state kept for one trainable tensor after
//     the first step, exactly as Σ numel·element_size over the tensors of
//     PyTorch's opt.state[p], including the 4-byte step scalars PyTorch
//     keeps per tensor (on the CPU unless capturable or fused) and
//     bitsandbytes' per-block absmax constants and small-tensor 32-bit
//     fallback;
//   - Transient(ts): the temporaries of one step on top of the state,
//     which depend on the implementation (for loop, foreach, fused);
//   - String: the implementation's name.
//
// [Layout] lists the state tensors behind State (name, elements, dtype,
// [Location]: device, host, or CUDA unified memory for paged optimizers);
// [SharedState] reports state kept once per optimizer (bitsandbytes'
// quantization maps). [Total] adds them up for a trainable set and
// [Describe] returns a per-tensor [Breakdown] split by location.
//
// Only trainable tensors carry state: pass the trainable set (the
// adapters of a LoRA model, the unfrozen parts), never the frozen base.
// PyTorch creates state lazily at the first step for parameters with a
// gradient, so frozen parameters have none. (The one exception read in
// the sources is PyTorch's Adagrad, which creates state in its
// constructor for every parameter it is given.)
//
// # How it was checked
//
// The state layouts were read from the sources named in each type's
// comment: torch/optim/*.py of PyTorch 1.13.1 (Debian's python3-torch)
// and of 2.x; bitsandbytes/optim/optimizer.py at 0.50.x, with the history
// of its block size (2048 until 0.43.x, 256 from 0.44.0, PR #1365);
// transformers' optimization.py; torch/optim/_adafactor.py;
// lion_pytorch/lion_pytorch.py; timm/optim/lamb.py; KellerJordan/Muon
// muon.py. Tests check closed forms (Adam: 2 × parameter bytes + 4 B;
// Adafactor on an n×m matrix: (n+m)·4 B + the RMS scalar; 8-bit Adam
// below and above min_8bit_size), properties (no negative sizes, Total =
// Σ parts, no panics on random shapes), and errors naming the field.
//
// State of SGD (with and without momentum), Adam, AdamW (with and
// without amsgrad), Adagrad, RMSprop (plain; momentum and centered) and
// a transformers-layout reference Adafactor (with and without beta1) is
// compared byte for byte, per tensor and per state key, with PyTorch
// 1.13.1 (Debian's python3-torch, CPU) after one step: on two small
// models (a GPT with a frozen position table, a CNN with 4-D, 3-D and
// 0-D parameters and a frozen one) and on the full parameter lists of
// BERT-large (391 tensors, 335,141,888 parameters) and T5-base (257
// tensors, 222,903,552) on torch's meta device, in fp32 and bf16, where
// the host/device split of the step counters is checked too. All 80
// runs match exactly; the frozen parameters get no state. The script is
// tools/oracle/optimizer_state.py, its output
// testdata/oracle/optimizer_state.json. bitsandbytes, Lion, LAMB, Muon
// and torch ≥ 2.0 behaviour were not run (no GPU or package here): they
// rest on the source reading cited in each type's comment.
//
// # Accuracy
//
// State is exact for the implementations named. Transient is read from
// the code: it counts the tensor-sized temporaries the
// update allocates (and the ones a Python local keeps alive into the next
// tensor's update), neglects vectors of a row or column (except
// transformers' Adafactor's two factors), and treats all
// tensors of a foreach call as one (device, dtype) group, which is exact
// for a model in one dtype on one device and an upper bound otherwise.
// Sizes are raw tensor bytes; the CUDA caching allocator rounds each
// allocation up to 512 bytes, which matters for the many 4-byte step
// scalars of a capturable or fused optimizer (512 B each on the device).
// Whole CPU steps of torch 2.6 (testdata/measured/cpu, tools/measure) check
// it where the step holds the job's peak: the for-loop AdamW, SGD with
// momentum and Nesterov, and transformers' Adafactor, whose rows miss
// exactly as their AdamW siblings do when they miss.
//
// fp32 master weights kept by mixed-precision wrappers (DeepSpeed, apex
// O2) are parameters, not optimizer state: give the optimizer the tensors
// it actually updates (the fp32 copies) and count the 16-bit model
// weights elsewhere.
//
// Not modelled: PyTorch's float64 default dtype (8-byte step scalars),
// the gradient copies that Adam's L2 weight decay, SGD's nesterov or
// maximize=True make in the for-loop paths, DeepSpeed/FSDP sharding of
// the state (the budget package divides by the data-parallel degree),
// and optimizers other than those listed.
package optimizer
