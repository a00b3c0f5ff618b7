package gpumem

import "github.com/gpumem/gpumem/internal/checked"

// Blockwise describes the quantization constants that bitsandbytes keeps
// beside 4-bit (NF4, FP4) weights, which [DType.Size] does not count.
//
// Source: bitsandbytes functional.py quantize_4bit (commit 8b3c0f3):
// the packed data is a uint8 tensor of (n+1)//2 bytes; absmax is one fp32
// per block of blocksize elements (default 64); code is a fresh 16-entry
// fp32 table per tensor (get_4bit_type). With compress_statistics
// (Hugging Face's bnb_4bit_use_double_quant) absmax is shifted by its mean
// (a 0-dim fp32 offset) and re-quantized with quantize_blockwise at
// blocksize 256 to one uint8 per block, plus one fp32 absmax per 256
// blocks; its 256-entry dynamic code table is cached once per device and
// shared by all tensors, so it is not counted per tensor. This is the
// QLoRA paper's 8/64 + 32/(64·256) ≈ 0.127 bits per parameter (Dettmers
// et al. 2023, §2), plus the small per-tensor terms.
type Blockwise struct {
	// Block is the number of elements per absmax constant. Zero means 64,
	// bitsandbytes' default; it accepts 64, 128, ..., 4096.
	Block int64
	// Nested enables double quantization of the absmax constants.
	Nested bool
}

// Bitsandbytes 4-bit constants (functional.py quantize_4bit).
const (
	bnbDefaultBlock  = 64  // blocksize default
	bnbNestedBlock   = 256 // quantize_blockwise(absmax, blocksize=256)
	bnbCodeBytes     = 16 * 4
	bnbOffsetBytes   = 4
	bnbAbsmaxBytes   = 4
	bnbQAbsmaxBytes  = 1
	bnbMaxBlock      = 4096
	bnbMinBlockPower = 64
)

// Constants returns the bytes of the quantization constants of one tensor
// of n elements: absmax (fp32 per block, or uint8 per block plus fp32 per
// 256 blocks and an fp32 offset when nested) and the 16-entry code table.
func (q Blockwise) Constants(n int64) (Bytes, error) {
	block := q.Block
	if block == 0 {
		block = bnbDefaultBlock
	}
	if block < bnbMinBlockPower || block > bnbMaxBlock || block&(block-1) != 0 {
		return 0, Errorf("Blockwise.Block", q.Block, ErrInvalid, "bitsandbytes accepts 64, 128, 256, 512, 1024, 2048 or 4096")
	}
	if n < 0 {
		return 0, Errorf("elements", n, ErrRange, "negative count")
	}
	blocks, _ := checked.CeilDiv(n, block)
	var b int64
	if q.Nested {
		outer, _ := checked.CeilDiv(blocks, bnbNestedBlock)
		b = blocks*bnbQAbsmaxBytes + outer*bnbAbsmaxBytes + bnbOffsetBytes
	} else {
		b = blocks * bnbAbsmaxBytes
	}
	return Bytes(b + bnbCodeBytes), nil
}
