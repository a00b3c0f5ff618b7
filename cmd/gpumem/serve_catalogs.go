package main

import (
	"bytes"
	"io"
	"net/http"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// static returns a handler that writes a reply rendered beforehand.
func static(reply []byte) func(io.Writer, *http.Request, []byte) error {
	return func(out io.Writer, _ *http.Request, _ []byte) error {
		_, err := out.Write(reply)
		return err
	}
}

// modelEntry is one model of GET /v1/models.
type modelEntry struct {
	Name   string `json:"name"`
	Family string `json:"family"`
	Params int64  `json:"params"`
	Source string `json:"source,omitempty"`
}

// renderModels renders GET /v1/models: {"models": [...]} in catalog order.
func renderModels() []byte {
	cat := model.Catalog()
	v := struct {
		Models []modelEntry `json:"models"`
	}{make([]modelEntry, 0, len(cat))}
	for _, s := range cat {
		src, _ := model.CatalogSource(s.Name)
		v.Models = append(v.Models, modelEntry{Name: s.Name, Family: s.Family, Params: s.Params(), Source: src})
	}
	var b bytes.Buffer
	writeJSON(&b, v) // strings and integers: cannot fail
	return b.Bytes()
}

// deviceEntry is one GPU of GET /v1/devices.
type deviceEntry struct {
	Name          string `json:"name"`
	Capacity      int64  `json:"capacity"`
	CapacityHuman string `json:"capacity_human"`
	// ComputeCapability is "8.0" for an A100; absent for AMD parts.
	ComputeCapability string `json:"compute_capability,omitempty"`
}

// renderDevices renders GET /v1/devices: {"devices": [...]} in catalog order.
func renderDevices() []byte {
	devs := gpumem.Devices()
	v := struct {
		Devices []deviceEntry `json:"devices"`
	}{make([]deviceEntry, 0, len(devs))}
	for _, d := range devs {
		v.Devices = append(v.Devices, deviceEntry{Name: d.Name, Capacity: int64(d.Capacity), CapacityHuman: d.Capacity.String(),
			ComputeCapability: d.Compute.String()})
	}
	var b bytes.Buffer
	writeJSON(&b, v)
	return b.Bytes()
}
