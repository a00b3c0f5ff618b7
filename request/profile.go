package request

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
)

// ProfileSchema is the version of the profile file calibrate writes.
const ProfileSchema = 1

// profile is the overhead profile calibrate writes and --profile reads:
// the budget.Overhead terms a fleet's own measurements fitted. A zero
// field means the default (budget.Overhead's zero values).
type Profile struct {
	// Schema is ProfileSchema.
	Schema int `json:"schema"`
	// Context is budget.Overhead.Context in bytes (0: the default for
	// the job's device and CUDA).
	Context int64 `json:"context"`
	// Fragmentation is budget.Overhead.Fragmentation (0: the default,
	// negative: none; at most 10).
	Fragmentation float64 `json:"fragmentation"`
	// Workspace (bytes) and Workspaces are budget.Overhead's cuBLAS
	// workspace terms; calibrate does not fit them (0: PyTorch's
	// defaults), a user may set them by hand.
	Workspace  int64 `json:"workspace"`
	Workspaces int   `json:"workspaces"`
	// Fit says where the profile came from; it is informational.
	Fit *ProfileFit `json:"fit,omitempty"`
}

// ProfileFit records the fit a profile came from.
type ProfileFit struct {
	Rows   []string     `json:"rows"`
	N      int          `json:"n"`
	Before []LevelError `json:"before"`
	After  []LevelError `json:"after"`
}

// LevelError is the relative error of the estimates at one level:
// (estimated − measured) / measured over the rows that measure it.
type LevelError struct {
	Level  string  `json:"level"`
	N      int     `json:"n"`
	Median float64 `json:"median"` // median of the signed errors
	Worst  float64 `json:"worst"`  // the error of largest magnitude, signed
}

// apply sets the profile's non-zero terms on o.
func (p *Profile) Apply(o *budget.Overhead) {
	if p.Context != 0 {
		o.Context = gpumem.Bytes(p.Context)
	}
	if p.Fragmentation != 0 {
		o.Fragmentation = p.Fragmentation
	}
	if p.Workspace != 0 {
		o.Workspace = gpumem.Bytes(p.Workspace)
	}
	if p.Workspaces != 0 {
		o.Workspaces = p.Workspaces
	}
}

// check validates a profile, naming the field.
func (p *Profile) Check() error {
	switch {
	case p.Schema != ProfileSchema:
		return fmt.Errorf("field \"schema\" = %d: want %d", p.Schema, ProfileSchema)
	case p.Context < 0:
		return fmt.Errorf("field \"context\" = %d: must not be negative (0: the default context)", p.Context)
	case math.IsNaN(p.Fragmentation) || math.IsInf(p.Fragmentation, 0) || p.Fragmentation > 10:
		return fmt.Errorf("field \"fragmentation\" = %v: want a finite fraction at most 10 (0: the default, negative: none)", p.Fragmentation)
	case p.Workspace < 0:
		return fmt.Errorf("field \"workspace\" = %d: must not be negative (0: PyTorch's default)", p.Workspace)
	case p.Workspaces < 0:
		return fmt.Errorf("field \"workspaces\" = %d: must not be negative (0: PyTorch's default)", p.Workspaces)
	}
	return nil
}

// ParseProfile decodes and validates a profile file's bytes; unknown
// fields are refused, so that a misspelt one is not silently ignored.
func ParseProfile(b []byte) (Profile, error) {
	var p Profile
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			// Named as the profile's key, not the Go type's field.
			return p, fmt.Errorf("profile.%s: want %s, got %s", te.Field, jsonKind(te.Type.String()), te.Value)
		}
		return p, errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	if d.More() {
		return p, errors.New("more than one JSON value")
	}
	return p, p.Check()
}

// ReadProfile reads the profile file name (the --profile flag).
func ReadProfile(name string) (Profile, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return Profile{}, fmt.Errorf("%w: --profile %q: %v", ErrUsage, name, err)
	}
	p, err := ParseProfile(b)
	if err != nil {
		return p, fmt.Errorf("%w: --profile %q: %v", ErrUsage, name, err)
	}
	return p, nil
}
