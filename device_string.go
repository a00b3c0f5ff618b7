package gpumem

// String describes the device for a person: its name, its capacity and,
// when other processes or the caller's reserve take some, what is free
// ("NVIDIA L4: 21.95 GiB, 13.95 GiB free"). A device without a name is
// "unnamed device". Programs that need a figure read the fields or Free.
func (d Device) String() string {
	name := d.Name
	if name == "" {
		name = "unnamed device"
	}
	s := name + ": " + d.Capacity.String()
	if d.Reserved != 0 || d.Used != 0 {
		s += ", " + d.Free().String() + " free"
	}
	return s
}
