package gpumem

import (
	"errors"
	"fmt"
)

// Error categories. Every error returned by gpumem and its packages wraps
// exactly one of these, so callers can branch with [errors.Is] without
// parsing messages.
var (
	// ErrSyntax reports input that is not well formed: a size without
	// digits, a truncated header, a value of the wrong JSON type.
	ErrSyntax = errors.New("invalid syntax")
	// ErrRange reports a value outside the representable or meaningful
	// range: a negative size, a product that overflows int64, a size
	// with more decimal places than [ParseBytes] reads.
	ErrRange = errors.New("value out of range")
	// ErrUnit reports a unit gpumem does not accept, such as bits ("Gb").
	ErrUnit = errors.New("invalid unit")
	// ErrInvalid reports a field whose value is not allowed, such as zero
	// layers or more KV heads than attention heads.
	ErrInvalid = errors.New("invalid value")
	// ErrUnsupported reports input that is well formed but not modelled,
	// such as an unknown model_type without the standard decoder keys.
	ErrUnsupported = errors.New("unsupported")
	// ErrDoesNotFit reports that no configuration within the given limits
	// fits in the given memory.
	ErrDoesNotFit = errors.New("does not fit")
)

// ParseError records a failed parse of a size, a data type or another
// short textual value. It is modelled on [strconv.NumError].
type ParseError struct {
	Func  string // the function that failed, e.g. "ParseBytes"
	Input string // the input as given
	Err   error  // the reason; wraps ErrSyntax, ErrRange or ErrUnit
}

// Error implements the error interface.
func (e *ParseError) Error() string {
	return fmt.Sprintf("gpumem.%s: parsing %q: %v", e.Func, e.Input, e.Err)
}

// Unwrap returns the underlying reason, so that errors.Is(err, ErrUnit)
// and the like work.
func (e *ParseError) Unwrap() error { return e.Err }

// FieldError reports an invalid field of a job, a spec or a file: which
// field, the offending value, and why. Packages use it for every
// validation error so that a scheduler can show the user exactly what to
// change.
type FieldError struct {
	Field string // dotted path of the field, e.g. "Job.Batch" or "config.num_key_value_heads"
	Value any    // the offending value as given
	Err   error  // the reason; wraps one of the Err* categories
}

// Error implements the error interface.
func (e *FieldError) Error() string {
	if b, ok := e.Value.(Bytes); ok {
		// The value as given, exactly: a size in an error must not round.
		return fmt.Sprintf("%s = %s: %v", e.Field, b.Exact(), e.Err)
	}
	return fmt.Sprintf("%s = %v: %v", e.Field, e.Value, e.Err)
}

// Unwrap returns the underlying reason.
func (e *FieldError) Unwrap() error { return e.Err }

// Errorf returns a *FieldError for field and value whose reason wraps the
// category sentinel kind with a formatted detail, for example
//
//	gpumem.Errorf("Job.Batch", -1, gpumem.ErrInvalid, "must be positive")
//
// reads "Job.Batch = -1: invalid value: must be positive".
func Errorf(field string, value any, kind error, format string, args ...any) *FieldError {
	if format == "" {
		return &FieldError{Field: field, Value: value, Err: kind}
	}
	return &FieldError{Field: field, Value: value, Err: fmt.Errorf("%w: "+format, append([]any{kind}, args...)...)}
}
