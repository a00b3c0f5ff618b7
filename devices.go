package gpumem

// deviceCatalog lists accelerators with the memory their driver reports.
// Each entry's comment gives the source of its capacity.
var deviceCatalog = [...]catalogEntry{
	// A100 80GB SXM: torch reports total_memory=81251MB (MiB) and OOM
	// messages print "79.35 GiB total capacity".
	{"NVIDIA A100-SXM4-80GB", 81251 * MiB, []string{"a100sxm480gb", "a10080gb", "a10080gbsxm", "a100sxm80gb", "a100"}},
	// H100 80GB HBM3 (SXM5): OOM messages print "79.11 GiB total capacity"
	// (81008 MiB). Placeholder to be replaced by a sourced figure.
	{"NVIDIA H100 80GB HBM3", 81008 * MiB, []string{"h10080gbhbm3", "h100sxm", "h100sxm580gb", "h10080gb", "h100"}},
}
