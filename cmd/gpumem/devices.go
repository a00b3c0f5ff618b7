package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/gpumem/gpumem"
)

func runDevices(args []string, _ io.Reader, out, _ io.Writer) error {
	fs := newFlags("devices", out)
	asJSON := fs.Bool("json", false, "print JSON: {\"devices\": [{\"name\", \"capacity\" (bytes), \"capacity_human\"}]}, as GET /v1/devices")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *asJSON {
		_, err := out.Write(renderDevices())
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "device\tcapacity\t exact\t")
	for _, d := range gpumem.Devices() {
		fmt.Fprintf(tw, "%s\t%s\t %s\t\n", d.Name, d.Capacity.Human(), d.Capacity)
	}
	return tw.Flush()
}
