// Package attention models the GPU memory of attention kernels and of the
// KV cache: for one attention call, the bytes its autograd graph keeps for
// backward and the transient peaks of its forward and backward, per
// kernel; for a decoder's cache, the bytes per token and per batch.
//
// This is a first version; see the package documentation at the end of
// the work for what is modelled and how it was checked.
package attention
