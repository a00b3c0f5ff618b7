// Package accuracy compares gpumem's estimates with memory that was
// measured on real GPUs, and holds them to the project's accuracy gate.
//
// It reads two data sets of the repository's testdata folder:
//
//   - testdata/measured/*.jsonl: the rows tools/calibrate records on a GPU
//     (schema 1, testdata/measured/README.md), each with its job, its
//     environment and its peaks at the three levels (allocated, reserved,
//     device), or the OOM it ran into;
//   - testdata/published/jobs.jsonl: the published figures of
//     testdata/published/peaks.jsonl whose job the source states, written
//     in the harness's job vocabulary ([Job]) with a line on how each
//     field was read;
//   - testdata/measured/cpu/*.jsonl: whole jobs of transformers' modeling
//     code that tools/measure ran on the CPU under torch 2.6 (and a
//     subset under torch 1.13 with transformers v4.47.1), each with its
//     job in the same vocabulary and the peak of its live tensor bytes
//     ([CPURow]).
//
// The CPU rows are a source of their own ([CPU]): [CompareCPU] estimates
// them at the allocated level less the cuBLAS workspaces a CPU job does
// not have, and [CheckCPU] holds them to a tighter target (within 3%, at
// most 2% under, the peak's phase named right) with a ratchet: the rows
// that miss it must be exactly those testdata/measured/cpu/misses.tsv
// lists, each with the mechanism believed to explain it.
//
// [Compare] estimates every row and figure with budget.Estimate, at the
// level it measures; [Summarize] groups the errors (median and worst
// absolute relative error, the fraction under-estimated) by source, key
// and level; [Check] applies the gate of the calibration issue: no
// allocated estimate more than 5% below its measurement, no measured
// level's median error above 10%, every OOM row predicted not to fit,
// every row estimable. The accuracy tests and `gpumem accuracy` are both
// built on it.
//
// The package is internal: its job vocabulary is the harness's, which may
// change with the harness. A scheduler that wants to fit gpumem to its
// own measurements uses budget.Calibrate.
package accuracy
