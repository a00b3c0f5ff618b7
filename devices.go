package gpumem

// deviceCatalog lists accelerators with the memory their driver reports to
// a process: cuDeviceTotalMem / cudaMemGetInfo's total, which is what
// torch.cuda.get_device_properties(i).total_memory returns (printed by
// torch as "total_memory=NMB", where MB means MiB, rounded down) and what
// PyTorch's out-of-memory message calls "total capacity" (in GiB, rounded
// to 0.01). nvidia-smi's memory.total is larger: it also counts memory the
// driver keeps for itself; where a source gave it, the comment records it.
//
// The figure depends a little on the driver version, ECC mode and
// platform: the same A100-SXM4-80GB has reported 81251 MiB under older
// drivers, 81158 MiB under R555 and 81051 MiB under a CUDA 12.8 driver; a
// T4 between 14930 and 15109 MiB. Newer drivers keep more, so each entry
// records one sourced figure, preferring a recent driver's and, among
// those, the lower, so that an estimate made against the catalog errs
// towards "does not fit"; it says where the figure is from. Treat the
// catalog as good to about 0.5%; callers who know their device's exact
// total should use it instead.
//
// Sources are quoted as seen. "deviceQuery" is the CUDA sample's "Total
// amount of global memory: N MBytes (B bytes)" line, an exact byte count;
// the catalog keeps whole MiB (rounded down), as torch prints it.
// Ultralytics logs print "CUDA:0 (name, NMiB)" with total_memory in MiB
// rounded to the nearest, which the catalog takes as is. Where only
// an out-of-memory message was found, the capacity is its GiB figure
// converted to MiB and rounded to the nearest MiB (so within ±5 MiB of the
// true total).
//
// Keys are normalized names (see normalizeDevice): the nvidia-smi or
// rocm-smi name, then short forms. A short form that names a family with
// several memory sizes or form factors belongs to exactly one entry, the
// part clouds most commonly rent:
//
//	v100  → Tesla V100-SXM2-16GB     a100 → NVIDIA A100-SXM4-80GB
//	h100  → NVIDIA H100 80GB HBM3 (SXM5)
//	a100-40gb → NVIDIA A100-SXM4-40GB  a100-pcie → NVIDIA A100 80GB PCIe
//	v100-32gb → Tesla V100-SXM2-32GB   v100-pcie → Tesla V100-PCIE-16GB
//
// No key appears in two entries (devices_test.go checks).
//
// Each NVIDIA entry ends with its compute capability, from NVIDIA's table
// (https://developer.nvidia.com/cuda-gpus, "CUDA GPU Compute Capability")
// and, where a torch log is quoted below, its "major=, minor=" fields:
// 7.0 Volta, 7.5 Turing, 8.0 A100/A30/A800, 8.6 the other Ampere parts,
// 8.9 Ada, 9.0 Hopper, 10.0 B200, 12.0 the GeForce RTX 50 series. AMD
// entries leave it zero (ROCm reports a gfx target instead).
var deviceCatalog = [...]catalogEntry{
	// ---- Volta ----

	// V100 SXM2 16 GB. Ultralytics: "CUDA:1 (Tesla V100-SXM2-16GB,
	// 16161MiB)" (ultralytics/ultralytics#14124; rounded to the nearest
	// MiB), and torch: "_CudaDeviceProperties(name='Tesla V100-SXM2-16GB',
	// major=7, minor=0, total_memory=16160MB, multi_processor_count=80)"
	// (rounded down), seen in many public tutorial logs such as YOLOv5's
	// "Setup complete. Using torch 1.8.0+cu101 ..." (found by exact-string
	// search; repositories not identified). nvidia-smi: "Tesla
	// V100-SXM2... 0MiB / 16160MiB" (huggingface/text-generation-inference#533):
	// on Volta the two totals agree to the MiB.
	{"Tesla V100-SXM2-16GB", 16160 * MiB, []string{"v100sxm216gb", "v100sxm16gb", "v10016gbsxm2", "v10016gb", "v100sxm2", "v100"}, ComputeCapability{7, 0}},
	// V100 SXM2 32 GB. OOM message "(GPU 3; 31.74 GiB total capacity; ...)"
	// on an 8×V100 machine (haotian-liu/LLaVA#812) and "31.74 GiB total
	// capacity" on a "V100 32GB" (liucongg/ChatGLM-Finetuning#73):
	// 31.74 GiB = 32501.76 MiB → 32502 MiB (OOM-derived).
	{"Tesla V100-SXM2-32GB", 32502 * MiB, []string{"v100sxm232gb", "v100sxm32gb", "v10032gbsxm2", "v10032gb"}, ComputeCapability{7, 0}},
	// V100 PCIe 16 GB. torch: "_CudaDeviceProperties(name='Tesla
	// V100-PCIE-16GB', major=7, minor=0, total_memory=16160MB,
	// multi_processor_count=80)" (HPC-centre job example found by
	// exact-string search; repository not identified).
	{"Tesla V100-PCIE-16GB", 16160 * MiB, []string{"v100pcie16gb", "v10016gbpcie", "v100pcie"}, ComputeCapability{7, 0}},
	// V100 PCIe 32 GB. torch: "_CudaDeviceProperties(name='Tesla
	// V100-PCIE-32GB', major=7, minor=0, total_memory=32510MB,
	// multi_processor_count=80)" (Chinese PyTorch notes found by
	// exact-string search; repository not identified).
	{"Tesla V100-PCIE-32GB", 32510 * MiB, []string{"v100pcie32gb", "v10032gbpcie"}, ComputeCapability{7, 0}},

	// ---- Turing ----

	// T4 16 GB. deviceQuery on AWS g4dn, driver 535 (CUDA 12.2):
	// 'Device 0: "Tesla T4" ... Total amount of global memory: 14931
	// MBytes (15655829504 bytes)' (bottlerocket-os/bottlerocket#3798) =
	// 14930.56 MiB → 14930 MiB; a torch log elsewhere shows
	// "total_memory=14930MB" too. Google Colab's T4 reports more,
	// 15102–15109 MiB ("total_memory=15109MB", logs found by exact-string
	// search). nvidia-smi: 15360 MiB (modal-labs/modal-client#2797).
	{"Tesla T4", 14930 * MiB, []string{"t4", "t416gb"}, ComputeCapability{7, 5}},

	// ---- Ampere ----

	// A10 24 GB (Lambda Cloud "a10"). OOM message "GPU 0 has a total
	// capacty of 21.99 GiB" (zai-org/CogVLM#236, on a Lambda a10
	// instance): 21.99 GiB = 22517.76 → 22518 MiB (OOM-derived; the thread
	// also mentions an H100, the message is the a10's by its size).
	// nvidia-smi: 23028 MiB ("A10: 23028MiB", modal-labs/modal-client#2797).
	{"NVIDIA A10", 22518 * MiB, []string{"a10", "a1024gb"}, ComputeCapability{8, 6}},
	// A10G 24 GB (AWS g5). torch: "_CudaDeviceProperties(name='NVIDIA
	// A10G', major=8, minor=6, total_memory=22587MB,
	// multi_processor_count=80, ...)" (TorchCodec tutorial "Accelerated
	// video decoding on GPUs with CUDA and NVDEC", meta-pytorch/torchcodec
	// docs, basic_cuda_example).
	{"NVIDIA A10G", 22587 * MiB, []string{"a10g", "a10g24gb"}, ComputeCapability{8, 6}},
	// A30 24 GB. OOM message "GPU 0 has a total capacty of 23.53 GiB ...
	// only 24G in A30" (google/RB-Modulation#5): 23.53 GiB = 24094.72 →
	// 24095 MiB (OOM-derived).
	{"NVIDIA A30", 24095 * MiB, []string{"a30", "a3024gb"}, ComputeCapability{8, 0}},
	// A40 48 GB. deviceQuery, driver 550 (CUDA 12.4): 'Device 0: "NVIDIA
	// A40" ... 45403 MBytes (47608692736 bytes)'; nvidia-smi 46068MiB
	// (thamada/nvidia-smi gls/A40x10_deviceQuery.py, gls/A40x10_smi.py).
	{"NVIDIA A40", 45403 * MiB, []string{"a40", "a4048gb"}, ComputeCapability{8, 6}},
	// A100 SXM4 40 GB. deviceQuery on AWS p4d, driver 535 (CUDA 12.2):
	// 'Device 2: "NVIDIA A100-SXM4-40GB" ... Total amount of global
	// memory: 40339 MBytes (42298834944 bytes)'
	// (bottlerocket-os/bottlerocket#3873). nvidia-smi: "598MiB /
	// 40960MiB" (bottlerocket-os/bottlerocket-core-kit#834).
	{"NVIDIA A100-SXM4-40GB", 40339 * MiB, []string{"a100sxm440gb", "a100sxm40gb", "a10040gbsxm4", "a10040gbsxm", "a10040gb"}, ComputeCapability{8, 0}},
	// A100 PCIe 40 GB. Ultralytics on torch 2.4.1+cu118: "CUDA:0 (NVIDIA
	// A100-PCIE-40GB, 40385MiB)"; a second machine on torch 1.13 shows
	// 40536MiB (ultralytics/ultralytics#18492). torch 1.9 elsewhere:
	// "_CudaDeviceProperties(name='NVIDIA A100-PCIE-40GB', major=8, minor=0,
	// total_memory=40326MB, multi_processor_count=108)" (UPPMAX Bianca
	// course page "GPUs", found by exact-string search; repository not
	// identified).
	{"NVIDIA A100-PCIE-40GB", 40385 * MiB, []string{"a100pcie40gb", "a10040gbpcie"}, ComputeCapability{8, 0}},
	// A100 PCIe 80 GB. mixbench-cuda, driver CUDA 12.3: "Device: NVIDIA
	// A100 80GB PCIe ... Total global mem: 81049 MB" (ekondis/mixbench#47;
	// mixbench prints totalGlobalMem in MiB).
	{"NVIDIA A100 80GB PCIe", 81049 * MiB, []string{"a10080gbpcie", "a100pcie80gb", "a100pcie"}, ComputeCapability{8, 0}},
	// A100 SXM4 80 GB. Ultralytics on torch 2.9.1+cu128, CUDA 12.8, Linux
	// (Dec 2025): "CUDA:0 (NVIDIA A100-SXM4-80GB, 81051MiB)"
	// (ultralytics/ultralytics#22877). Under driver 555.42.02 (CUDA 12.5),
	// deviceQuery shows 'Device 0: "NVIDIA A100-SXM4-80GB" ... 81158 MBytes
	// (85100068864 bytes)' and nvidia-smi "1MiB / 81920MiB"
	// (thamada/nvidia-smi gls/A100SXMx4_deviceQuery.py,
	// gls/A100SXMx4_smi.py); older drivers report 81251 MiB ("79.35 GiB
	// total capacity", widely quoted in OOM messages).
	{"NVIDIA A100-SXM4-80GB", 81051 * MiB, []string{"a100sxm480gb", "a100sxm80gb", "a10080gbsxm4", "a10080gbsxm", "a10080gb", "a100sxm4", "a100sxm", "a100"}, ComputeCapability{8, 0}},
	// A800 SXM4 80 GB (the A100 variant sold in China). Estimated, not
	// measured: nvidia-smi prints "34447MiB / 81920MiB" for "NVIDIA
	// A800-SXM4-80GB" (dexmal/dexbotic#41), the same total as the
	// A100-SXM4-80GB, whose CUDA total under a current driver is 81051 MiB
	// (above); the same silicon and memory are assumed to report the same.
	{"NVIDIA A800-SXM4-80GB", 81051 * MiB, []string{"a800sxm480gb", "a800sxm80gb", "a80080gb", "a800"}, ComputeCapability{8, 0}},
	// RTX A6000 48 GB. Ultralytics, CUDA 12.4, Linux: "CUDA:0 (NVIDIA RTX
	// A6000, 48670MiB)" (ultralytics/ultralytics#19084). torch elsewhere:
	// "_CudaDeviceProperties(name='NVIDIA RTX A6000', major=8, minor=6,
	// total_memory=48676MB, multi_processor_count=84)" (pytorch/ao
	// torchao/prototype/hqq/README.md).
	{"NVIDIA RTX A6000", 48670 * MiB, []string{"rtxa6000", "a6000"}, ComputeCapability{8, 6}},
	// GeForce RTX 3090 24 GB. deviceQuery, driver 560.35.03 (CUDA 12.6):
	// 'Device 0: "NVIDIA GeForce RTX 3090" ... 24154 MBytes (25327697920
	// bytes)'; nvidia-smi "2MiB / 24576MiB" (thamada/nvidia-smi
	// gls/RTX3090_deviceQuery.py, gls/RTX3090_smi.py). On a desktop the
	// display also takes memory from this total.
	{"NVIDIA GeForce RTX 3090", 24154 * MiB, []string{"rtx3090", "3090"}, ComputeCapability{8, 6}},

	// ---- Ada Lovelace ----

	// L4 24 GB. deviceQuery, driver 550.90.07 (CUDA 12.4): 'Device 0:
	// "NVIDIA L4" ... 22478 MBytes (23570219008 bytes)'; nvidia-smi "1MiB /
	// 23034MiB" (thamada/nvidia-smi gls/L4_deviceQuery.py, gls/L4_smi.py).
	// An AWS g6 deviceQuery under driver 12.2 shows 22491 MBytes
	// (23583784960 bytes) (bottlerocket-os/bottlerocket-kernel-kit#139).
	{"NVIDIA L4", 22478 * MiB, []string{"l4", "l424gb"}, ComputeCapability{8, 9}},
	// L40 48 GB. OOM message "GPU 0 has a total capacity of 44.40 GiB"
	// (QwenLM/Qwen3-VL#2097, "OutOfMemoryError in single L40 GPU"):
	// 44.40 GiB = 45465.6 → 45466 MiB (OOM-derived).
	{"NVIDIA L40", 45466 * MiB, []string{"l40", "l4048gb"}, ComputeCapability{8, 9}},
	// L40S 48 GB. deviceQuery, driver 550.127.05 (CUDA 12.4): 'Device 0:
	// "NVIDIA L40S" ... 45589 MBytes (47803596800 bytes)'; nvidia-smi "1MiB
	// / 46068MiB" (thamada/nvidia-smi gls/L40S_deviceQuery.py,
	// gls/L40S_smi.py).
	{"NVIDIA L40S", 45589 * MiB, []string{"l40s", "l40s48gb"}, ComputeCapability{8, 9}},
	// RTX 6000 Ada 48 GB (ECC off). deviceQuery, driver 550.127.05: 'Device
	// 0: "NVIDIA RTX 6000 Ada Generation" ... 48640 MBytes (51002867712
	// bytes)'; nvidia-smi "2MiB / 49140MiB" (thamada/nvidia-smi
	// gls/RTX6000Ada_x8_deviceQuery.py, gls/RTX6000Ada_x8_smi.py). With ECC
	// on, nvidia-smi shows 46068MiB and torch "44.43 GiB"
	// (DINGYANB/MTVCrafter#21).
	{"NVIDIA RTX 6000 Ada Generation", 48640 * MiB, []string{"rtx6000adageneration", "rtx6000ada", "6000ada"}, ComputeCapability{8, 9}},
	// RTX 4000 Ada 20 GB. deviceQuery, driver 550.90.07: 'Device 0:
	// "NVIDIA RTX 4000 Ada Generation" ... 20147 MBytes (21125267456 bytes)';
	// nvidia-smi "2MiB / 20475MiB" (thamada/nvidia-smi
	// gls/RTX4000Ada_deviceQuery.py, gls/RTX4000Ada_smi.py).
	{"NVIDIA RTX 4000 Ada Generation", 20147 * MiB, []string{"rtx4000adageneration", "rtx4000ada", "4000ada"}, ComputeCapability{8, 9}},
	// RTX 2000 Ada 16 GB. deviceQuery, driver 550.54.15 (CUDA 12.4):
	// 'Device 0: "NVIDIA RTX 2000 Ada Generation" ... 16076 MBytes
	// (16856776704 bytes)'; nvidia-smi "1MiB / 16380MiB"
	// (thamada/nvidia-smi gls/RTX2000Ada_deviceQuery.py, gls/RTX2000Ada_smi.py).
	{"NVIDIA RTX 2000 Ada Generation", 16076 * MiB, []string{"rtx2000adageneration", "rtx2000ada", "2000ada"}, ComputeCapability{8, 9}},
	// GeForce RTX 4090 24 GB. deviceQuery, driver 550.127.05 (CUDA 12.4):
	// 'Device 0: "NVIDIA GeForce RTX 4090" ... 24210 MBytes (25386352640
	// bytes)'; nvidia-smi
	// "2MiB / 24564MiB" (thamada/nvidia-smi gls/RTX4090_deviceQuery.py,
	// gls/RTX4090_smi.py). A display attached takes memory from this total.
	{"NVIDIA GeForce RTX 4090", 24210 * MiB, []string{"rtx4090", "4090"}, ComputeCapability{8, 9}},

	// ---- Hopper ----

	// H100 PCIe 80 GB. torch 2.0.1: "_CudaDeviceProperties(name='NVIDIA
	// H100 PCIe', major=9, minor=0, total_memory=81008MB,
	// multi_processor_count=114)" (found by exact-string search; repository
	// not identified). An OOM on an "H100" prints "GPU 0 has a total
	// capacity of 79.11 GiB" (= 81008.6 MiB; vllm-project/vllm#27508),
	// consistent with it.
	{"NVIDIA H100 PCIe", 81008 * MiB, []string{"h100pcie", "h100pcie80gb", "h10080gbpcie"}, ComputeCapability{9, 0}},
	// H100 SXM5 80 GB, which nvidia-smi names "NVIDIA H100 80GB HBM3".
	// deviceQuery, driver 565.57.01 (CUDA 12.7): 'Device 0: "NVIDIA H100
	// 80GB HBM3" ... 81106 MBytes (85045477376 bytes)'; nvidia-smi "1MiB /
	// 81559MiB" (thamada/nvidia-smi gls/H100SXMx8_deviceQuery.py,
	// gls/H100SXMx8_smi.py). Logs found by exact-string search (sources
	// not identified, so not preferred) show torch printing 81082–81090
	// MiB under other drivers ("total_memory=81089MB", torch 2.7 / CUDA
	// 12.8). The placeholder this replaces, 81008 MiB, is the H100 PCIe's
	// figure.
	{"NVIDIA H100 80GB HBM3", 81106 * MiB, []string{"h10080gbhbm3", "h100sxm580gb", "h100sxm80gb", "h10080gbsxm", "h100sxm5", "h100sxm", "h10080gb", "h100"}, ComputeCapability{9, 0}},
	// H100 NVL 94 GB. deviceQuery, driver 550.54.14 (CUDA 12.4): 'Device 0:
	// "NVIDIA H100 NVL" ... 95235 MBytes (99861594112 bytes)'; nvidia-smi
	// "0MiB / 95830MiB" (thamada/nvidia-smi gls/H100NVLx2_deviceQuery.py,
	// gls/H100NVLx2_smi.py).
	{"NVIDIA H100 NVL", 95235 * MiB, []string{"h100nvl", "h100nvl94gb", "h10094gb"}, ComputeCapability{9, 0}},
	// H200 141 GB (SXM). torch on Modal: "_CudaDeviceProperties(name='NVIDIA
	// H200', major=9, minor=0, total_memory=143156MB,
	// multi_processor_count=132, ...)" (ai-bot-pro/achatbot
	// deploy/modal/src/llm/vllm/vlm/skywork_r1v.py, a comment).
	{"NVIDIA H200", 143156 * MiB, []string{"h200", "h200sxm", "h200141gb", "h200141gbhbm3e", "h200sxm141gb"}, ComputeCapability{9, 0}},
	// GH200 Grace Hopper, 96 GB HBM3 GPU memory. OOM message "GPU 0 has a
	// total capacity of 94.88 GiB" with nvidia-smi showing 97871 MiB
	// (Lightning-AI/litgpt#1892): 94.88 GiB = 97157.12 → 97157 MiB
	// (OOM-derived). The 480 GB in the name counts the Grace CPU's LPDDR5X,
	// which CUDA does not report as device memory.
	{"NVIDIA GH200 480GB", 97157 * MiB, []string{"gh200480gb", "gh20096gb", "gh200"}, ComputeCapability{9, 0}},

	// ---- Blackwell ----

	// B200 180 GB. torch on Modal: "_CudaDeviceProperties(name='NVIDIA
	// B200', major=10, minor=0, total_memory=182642MB,
	// multi_processor_count=148, ...)" (ai-bot-pro/achatbot
	// deploy/modal/src/llm/vllm/vlm/skywork_r1v.py, a comment); a device
	// query prints "Total Global Memory: 178.35 GB" (GiB; pytorch/ao#4002).
	{"NVIDIA B200", 182642 * MiB, []string{"b200", "b200180gb"}, ComputeCapability{10, 0}},
	// GeForce RTX 5090 32 GB. deviceQuery, driver CUDA 12.8: 'Device 2:
	// "NVIDIA GeForce RTX 5090" ... 32117 MBytes (33677180928 bytes)'
	// (aikitoria/open-gpu-kernel-modules#1); another card shows 32120
	// MBytes (33680457728 bytes) (NVIDIA/nccl#1637), as does Ultralytics,
	// "CUDA:0 (NVIDIA GeForce RTX 5090, 32120MiB)"
	// (ultralytics/ultralytics#19833).
	{"NVIDIA GeForce RTX 5090", 32117 * MiB, []string{"rtx5090", "5090"}, ComputeCapability{12, 0}},

	// ---- AMD CDNA (ROCm reports per GCD) ----

	// MI250X, one GCD as ROCm presents it (the module has two, 64 GB each).
	// torch (ROCm): "_CudaDeviceProperties(name='AMD Instinct MI250X',
	// major=9, minor=0, gcnArchName='gfx90a:sramecc+:xnack-',
	// total_memory=65520MB, multi_processor_count=110)" (LUMI PyTorch
	// container guide), and the same 65520MB for "AMD Instinct
	// MI250X/MI250" elsewhere (both found by exact-string search;
	// repositories not identified).
	{"AMD Instinct MI250X", 65520 * MiB, []string{"mi250x", "mi250xmi250", "mi250x64gb"}, ComputeCapability{}},
	// MI300X 192 GB. hipGetDeviceProperties: "[GPU 0] AMD Instinct MI300X
	// ... 196592: Total Global Memory (MB)"; rocminfo pool "Size:
	// 201310208(0xbffc000) KB" = 196592 MiB (thamada/nvidia-smi
	// gls/MI300X_x4_deviceQuery.py, gls/MI300X_x4_rocminfo.py).
	{"AMD Instinct MI300X", 196592 * MiB, []string{"mi300x", "mi300x192gb"}, ComputeCapability{}},
}
