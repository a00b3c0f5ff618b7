package budget

import "strings"

// String describes the breakdown on one line, for logs and fmt.Println:
// the three levels of the peak and its phase, then every component that is
// not zero, in the order of Components, with the host memory offload
// keeps when there is any:
//
//	device 9.72 GiB (reserved 9.31 GiB, allocated 8.86 GiB) at backward: weights 5.32 GiB, optimizer 26.00 MiB, activations 1.54 GiB, ...
//
// Programs that need a figure read the fields and methods (Allocated,
// Reserved, Device, Required); MarshalJSON and LogValue give every field.
func (b Breakdown) String() string {
	var s strings.Builder
	s.WriteString("device ")
	s.WriteString(b.Device().String())
	s.WriteString(" (reserved ")
	s.WriteString(b.Reserved().String())
	s.WriteString(", allocated ")
	s.WriteString(b.Allocated().String())
	s.WriteString(")")
	if b.Phase != 0 {
		s.WriteString(" at ")
		s.WriteString(b.Phase.String())
	}
	sep := ": "
	for _, c := range b.Components() {
		if c.Bytes == 0 {
			continue
		}
		s.WriteString(sep)
		s.WriteString(c.String())
		sep = ", "
	}
	if b.Host != 0 {
		s.WriteString("; host ")
		s.WriteString(b.Host.String())
	}
	return s.String()
}

// String is the component's JSON name and its size: "weights 5.32 GiB".
func (c Component) String() string { return c.Name + " " + c.Bytes.String() }

// String is Describe: the layout as the plan's ladder names it ("ZeRO-3
// over 32 GPUs", "TP 8 (SP) × DP 2, ZeRO-1", "one GPU").
func (p Parallel) String() string { return p.Describe() }
