package main

import (
	"fmt"
	"io"

	"github.com/gpumem/gpumem"
)

func runDevices(args []string, _ io.Reader, out, _ io.Writer) error {
	fs := newFlags("devices", out)
	asJSON := fs.Bool("json", false, "print JSON: {\"devices\": [{\"name\", \"capacity\" (bytes), \"capacity_human\", \"compute_capability\"}]}, as GET /v1/devices")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *asJSON {
		_, err := out.Write(renderDevices())
		return err
	}
	devs := gpumem.Devices()
	width := len("device")
	for _, d := range devs {
		width = max(width, len(d.Name))
	}
	fmt.Fprintf(out, "%-*s  %10s  %12s  %s\n", width, "device", "capacity", "exact", "compute")
	for _, d := range devs {
		cc := d.Compute.String()
		if cc == "" {
			cc = "—"
		}
		fmt.Fprintf(out, "%-*s  %10s  %12s  %s\n", width, d.Name, d.Capacity.String(), d.Capacity.Exact(), cc)
	}
	return nil
}
