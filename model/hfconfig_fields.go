package model

// Reading config.json values: the typed accessors of a decoded config and
// the error collector that names the offending key.

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"

	"github.com/gpumem/gpumem"
)

// config reads typed values from one JSON object of a config.
type config struct {
	m    map[string]any
	path string
}

func (c *config) field(key string) string { return c.path + "." + key }

// lookup returns the first present, non-null key of keys.
func (c *config) lookup(keys ...string) (string, any, bool) {
	for _, k := range keys {
		if v, ok := c.m[k]; ok && v != nil {
			return k, v, true
		}
	}
	return keys[0], nil, false
}

// has reports whether any of keys is present and not null.
func (c *config) has(keys ...string) bool {
	_, _, ok := c.lookup(keys...)
	return ok
}

// intv reads a non-negative integer under the first present key of keys,
// or returns def when none is present. def < 0 means required.
func (c *config) intv(def int64, keys ...string) (int64, error) {
	k, v, ok := c.lookup(keys...)
	if !ok {
		if def < 0 {
			return 0, gpumem.Errorf(c.field(k), nil, gpumem.ErrInvalid, "missing, and %s has no default", c.family())
		}
		return def, nil
	}
	return toInt(c.field(k), v)
}

// toInt reads a non-negative integer JSON value (4096 or 4096.0) no
// larger than 2^40, naming field in errors.
func toInt(field string, v any) (int64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, gpumem.Errorf(field, v, gpumem.ErrSyntax, "not a number")
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(string(n), 64)
		switch {
		case ferr != nil && !errors.Is(ferr, strconv.ErrRange):
			return 0, gpumem.Errorf(field, string(n), gpumem.ErrSyntax, "not a number")
		case math.IsInf(f, 0) || math.Abs(f) > maxDim:
			return 0, gpumem.Errorf(field, string(n), gpumem.ErrRange, "exceeds 2^40")
		case f != math.Trunc(f):
			return 0, gpumem.Errorf(field, string(n), gpumem.ErrInvalid, "not an integer")
		}
		i = int64(f)
	}
	if i < 0 {
		return 0, gpumem.Errorf(field, i, gpumem.ErrInvalid, "must not be negative")
	}
	if i > maxDim {
		return 0, gpumem.Errorf(field, i, gpumem.ErrRange, "exceeds 2^40")
	}
	return i, nil
}

// posv is intv for a value that must be positive.
func (c *config) posv(def int64, keys ...string) (int64, error) {
	v, err := c.intv(def, keys...)
	if err == nil && v == 0 {
		k, _, _ := c.lookup(keys...)
		return 0, gpumem.Errorf(c.field(k), 0, gpumem.ErrInvalid, "must be positive")
	}
	return v, err
}

func (c *config) boolv(def bool, keys ...string) (bool, error) {
	k, v, ok := c.lookup(keys...)
	if !ok {
		return def, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, gpumem.Errorf(c.field(k), v, gpumem.ErrSyntax, "not a boolean")
	}
	return b, nil
}

func (c *config) str(key, def string) (string, error) {
	v, ok := c.m[key]
	if !ok || v == nil {
		return def, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", gpumem.Errorf(c.field(key), v, gpumem.ErrSyntax, "not a string")
	}
	return s, nil
}

func (c *config) sub(key string) (*config, bool, error) {
	v, ok := c.m[key]
	if !ok || v == nil {
		return &config{m: map[string]any{}, path: c.field(key)}, false, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, false, gpumem.Errorf(c.field(key), v, gpumem.ErrSyntax, "not an object")
	}
	return &config{m: m, path: c.field(key)}, true, nil
}

func (c *config) family() string {
	s, _ := c.m["model_type"].(string)
	if s == "" {
		return "this config"
	}
	return s
}

// dtype reads "dtype", then "torch_dtype" (transformers PR #39782), or
// returns def. "auto" and absent mean def.
func (c *config) dtype(def gpumem.DType) (gpumem.DType, error) {
	k, v, ok := c.lookup("dtype", "torch_dtype")
	if !ok {
		return def, nil
	}
	s, ok := v.(string)
	if !ok {
		return 0, gpumem.Errorf(c.field(k), v, gpumem.ErrSyntax, "not a string")
	}
	if s == "auto" {
		return def, nil
	}
	d, err := gpumem.ParseDType(s)
	if err != nil {
		return 0, &gpumem.FieldError{Field: c.field(k), Value: s, Err: err}
	}
	return d, nil
}

// errs accumulates the first error of a sequence of reads.
type errs struct{ err error }

func (e *errs) i(v int64, err error) int64 {
	if e.err == nil && err != nil {
		e.err = err
	}
	return v
}

func (e *errs) b(v bool, err error) bool {
	if e.err == nil && err != nil {
		e.err = err
	}
	return v
}

func (e *errs) s(v string, err error) string {
	if e.err == nil && err != nil {
		e.err = err
	}
	return v
}
